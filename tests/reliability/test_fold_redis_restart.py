"""Folded model updates (service/usecases/folds.py) when Redis restarts in the middle of a
fold: the test's own ``redis-server`` (append-only file fsync'ed on every write,
``tests.servers.RedisServer``) is SIGKILLed and started again on its files at one step
of a fold, the fold paused there by a hook in the store's transaction (no timing):

- **before the read**: the fold listed the pending deltas, its transaction has not read;
- **before the commit**: it read the shared part and the deltas and computed the fold;
- **down at the commit**: as before the commit, but Redis comes back only after the
  commit failed;
- **after the commit**: the fold's commit was acknowledged.

Each accepted reward is in the model exactly once afterwards (the ``shared`` part equals
the rewards applied one by one in a random order, to 1e-9) and no delta is left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from bandit_core.hybrid_linucb import HybridSharedState
from service.policies import build_policy, spec_of
from service.settings import Settings
from service.storage.base import StoreUnavailableError
from service.usecases.events import DELTA_PREFIX, EventState, PendingEvent, event_key
from tests.servers import RedisServer
from tests.service.conftest import API_KEY, running
from tests.service.test_folds import NAME, SPEC, Served, assert_close, decisions, served_rows

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]

REWARDS = 60
STEPS = ["before-read", "before-commit", "down-at-commit", "after-commit"]


async def _shared(store: Any) -> HybridSharedState | None:
    data = (await store.read(NAME, ["shared"], {}))["shared"].data
    return None if data is None else HybridSharedState.from_bytes(data)


async def _one_by_one(app: Any, events: list[str], served: dict[str, Served]) -> HybridSharedState:
    """The rewards of ``events`` as their stored events hold them (all must be rewarded),
    applied one by one in a random order to a fresh engine, on the rows ``served``."""
    store = app.state.use_cases.store
    stored = await store.read(NAME, [event_key(e) for e in events], {})
    rewarded = []
    for event_id in events:
        data = stored[event_key(event_id)].data
        assert data is not None
        event = PendingEvent.from_json(data)
        assert event.state is EventState.REWARDED and event.reward is not None
        rewarded.append((*served[event_id], event.reward))
    policy = build_policy(spec_of((await app.state.use_cases.cache.load(NAME))[0].info))
    for i in np.random.default_rng(5).permutation(len(rewarded)):
        policy.update(*rewarded[i])
    return HybridSharedState.from_bytes(policy.export_parts(["shared"])["shared"])


async def _fold_once_up(app: Any, timeout: float = 60.0) -> int:
    """``Folds.fold`` of the policy, retried while the store is unavailable (the
    connections to the restarted server are found broken on first use)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await app.state.use_cases.folds.fold(NAME)
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("step", STEPS)
async def test_redis_restarted_mid_fold_loses_nothing_and_applies_nothing_twice(
    make_settings: Callable[..., Settings], private_redis: RedisServer, step: str
) -> None:
    settings = make_settings(api_keys=[API_KEY], fold_check_seconds=3600.0, fold_max_deltas=100_000)
    async with running(settings) as (app, http, _):
        r = await http.put(f"/policies/{NAME}", json={**SPEC, "model_update_interval": 3600.0})
        assert r.status_code == 200, r.text
        events = await decisions(http, REWARDS)
        served = await served_rows(app.state.use_cases.store, NAME, events)
        values = np.random.default_rng(17).uniform(-1.0, 1.0, REWARDS)
        for event_id, value in zip(events, values, strict=True):
            r = await http.post("/reward", json={"event_id": event_id, "reward": float(value)})
            assert r.status_code == 200 and r.json()["applied"], r.text
        store = app.state.use_cases.store
        assert len(await store.keys(NAME, [DELTA_PREFIX])) == REWARDS
        before = await _shared(store)

        transact = store.transact
        hooked: list[str] = []

        def restart() -> None:
            private_redis.kill()
            private_redis.start()

        async def paused(policy: str, keys: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            def computed_then(values: dict[str, bytes | None]) -> Any:
                writes = fn(values)
                if not hooked:
                    hooked.append(step)
                    if step == "before-commit":
                        restart()
                    elif step == "down-at-commit":
                        private_redis.kill()
                return writes

            if step == "before-read" and not hooked:
                hooked.append(step)
                restart()
            out = await transact(policy, keys, computed_then, *args, **kwargs)
            if step == "after-commit" and hooked == [step]:
                hooked.append("restarted")
                restart()
            return out

        store.transact = paused
        try:
            if step == "down-at-commit":
                with pytest.raises(StoreUnavailableError):
                    await app.state.use_cases.folds.fold(NAME)
                assert hooked == [step]
                private_redis.start()
                # the failed commit wrote nothing: every delta is pending, the model as it was
                assert await _shared(store) == before
                assert len(await store.keys(NAME, [DELTA_PREFIX])) == REWARDS
                app.state.use_cases.cache.forget(NAME)
            first = await _fold_once_up(app)
        finally:
            store.transact = transact
        assert hooked[0] == step
        # a fold that found its connection broken is redone; the one that commits takes all
        folded = first + await _fold_once_up(app)
        assert folded == REWARDS
        assert await store.keys(NAME, [DELTA_PREFIX]) == []
        shared = await _shared(store)
        want = await _one_by_one(app, events, served)
        assert want.n == REWARDS
        assert_close(shared, want)
        assert await _fold_once_up(app) == 0
