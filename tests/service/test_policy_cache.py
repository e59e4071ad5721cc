"""The process's cached policies (service/usecases/policy_cache.py): one runtime per
policy, however many loads build it at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.service.conftest import POLICY, running

pytestmark = pytest.mark.anyio


# On Redis every load awaits its read, so concurrent loads interleave; the in-process
# store's read never yields, so there the loads run one after the other.
@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_concurrent_loads_of_an_uncached_policy_share_one_runtime(
    make_settings: Any,
) -> None:
    """Loads that all start before any has cached the policy (a decision and the
    periodic gauges, say) return the one runtime left cached: decisions served by it
    and by a runtime built later would restart the policy's rng stream."""
    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        cache = app.state.use_cases.cache
        cache.forget("p")
        loaded = await asyncio.gather(*(cache.load("p") for _ in range(4)))
        cached = cache.cached("p")
        assert cached is not None
        assert all(runtime is cached for runtime, _, _ in loaded)
        r = await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.0]})
        assert r.status_code == 200 and cache.cached("p") is cached  # served by it
