"""Redis unreachable: /recommend serves from this process's cached model flagged
``degraded`` (and still logs the decision), /reward answers 503 with Retry-After and
changes nothing, /readyz reports the store. A private redis-server is stopped for it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import RedisServer
from tests.service.conftest import POLICY, running

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", persist=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_redis_down(make_settings: Any, private_redis: RedisServer) -> None:
    async with running(make_settings(redis_url=private_redis.url, redis_retry_after_seconds=7)) as (
        app,
        http,
        _,
    ):
        await http.put("/policies/p", json=POLICY)
        warm = (await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})).json()
        assert warm["degraded"] is False
        private_redis.stop()

        r = await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
        assert r.status_code == 200 and r.json()["degraded"] is True
        assert r.json()["arm_id"] in {"a", "b", "c"}
        assert (
            await http.post("/recommend", json={"policy": "other", "context": [1]})
        ).status_code == 503

        r = await http.post("/reward", json={"event_id": warm["event_id"], "reward": 1.0})
        assert r.status_code == 503 and r.headers["retry-after"] == "7"

        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["state_store"] == "unavailable" and ready.json()["event_log"] == "ok"

        use_cases = app.state.use_cases
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        decisions, rewards = await asyncio.to_thread(use_cases.event_log.count, "p")
        assert (decisions, rewards) == (2, 0)
        degraded = [e.decision.degraded for e in use_cases.event_log.iter_events("p")]
        assert degraded == [False, True]
        assert "bandit_degraded_decisions_total" in (await http.get("/metrics")).text


async def test_redis_down_under_coalesced_load(
    make_settings: Any, private_redis: RedisServer
) -> None:
    """A batch of coalesced /recommend while Redis is down: every decision of it comes
    from the cached model flagged degraded and is logged; nothing is stored."""
    async with running(make_settings(redis_url=private_redis.url)) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
        private_redis.stop()
        answers = await asyncio.gather(
            *(
                http.post("/recommend", json={"policy": "p", "context": [1, 0, k / 8]})
                for k in range(8)
            )
        )
        assert [r.status_code for r in answers] == [200] * 8
        assert all(r.json()["degraded"] for r in answers)
        use_cases = app.state.use_cases
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        degraded = [e.decision.degraded for e in use_cases.event_log.iter_events("p")]
        assert sorted(degraded) == [False] + [True] * 8
