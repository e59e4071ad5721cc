"""Relearning a model from the log when the engine changes (service/usecases/retrain.py,
docs/personalizer.md "Relearning from the log"): the old model serves while the new one
is trained in a worker; after the switch the model equals the one ``bandit rebuild``
replays from the last ``retrain_days`` of the log under the new settings, rewards that
came during the retrain or after it for events served before it included; a reset in
between wins."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pytest

from bandit_core.state import unpack
from bandit_core.storefront import Storefront
from service.storage.memory_store import InProcessStateStore
from service.usecases.finalizations import RELEARNED_KEY
from service.usecases.models import PART_PREFIXES
from service.usecases.rebuild import rebuild_policy
from tests.service.conftest import running, wait_for
from tests.service.personalizer.test_learning import personalizer_body

pytestmark = pytest.mark.anyio

SPEC: dict[str, Any] = {
    "algorithm": "hybrid_linucb",
    "params": {"alpha": 0.0, "context_dim": 0},
    "features": {"bits": 6, "interactions": []},
    "reward_range": [-1, 1],
    "epsilon": 0.3,
    "reward_wait_seconds": 1.0,
    "retrain_days": 2,
}
INTERACTIONS = {**SPEC, "features": {"bits": 6, "interactions": [["*", "*"]]}}
LOOP = "/loops/shop/personalizer/v1.0"


async def rank(http: Any, r: Any) -> tuple[str, str]:
    ranked = await http.post(f"{LOOP}/rank", json=personalizer_body(r))
    assert ranked.status_code == 201, ranked.text
    return ranked.json()["eventId"], ranked.json()["rewardActionId"]


async def reward(http: Any, event_id: str, value: float) -> None:
    answer = await http.post(f"{LOOP}/events/{event_id}/reward", json={"value": value})
    assert answer.status_code == 204, answer.text


async def serve(http: Any, rounds: list[Any], rng: np.random.Generator) -> int:
    for r in rounds:
        event_id, arm = await rank(http, r)
        await reward(http, event_id, float(rng.random() < r.mu[r.item_ids.index(arm)]))
    return len(rounds)


async def retrain_state(http: Any) -> dict[str, Any]:
    body = (await http.get("/policies/shop/model/properties")).json()
    assert body["retrain"] is not None, body
    return body["retrain"]


def part_arrays(parts: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    return {k: unpack(v)[2] for k, v in parts.items() if v is not None}


@dataclass(frozen=True)
class Rebuilt:
    """The stored model's parts, those ``bandit rebuild`` makes of the log, and how many
    rewards the rebuild learned."""

    live: dict[str, dict[str, np.ndarray]]
    expected: dict[str, dict[str, np.ndarray]]
    rewards: int


async def rebuild_of_log(use_cases: Any) -> Rebuilt:
    live = await use_cases.store.read("shop", await use_cases.store.keys("shop", PART_PREFIXES), {})
    rebuilt = InProcessStateStore()
    report = await rebuild_policy(
        use_cases.event_log, rebuilt, "shop", learning=use_cases.retrains.learning
    )
    expected = await rebuilt.read("shop", list(live), {})
    return Rebuilt(
        part_arrays({k: v.data for k, v in live.items()}),
        part_arrays({k: v.data for k, v in expected.items()}),
        report.rewards,
    )


def assert_close_parts(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys() and got
    for part, arrays in got.items():
        for field, value in arrays.items():
            np.testing.assert_allclose(value, want[part][field], rtol=1e-9, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded", "redis_postgres"])
async def test_relearned_model_is_the_rebuild_of_the_window_and_loses_no_reward(
    make_settings: Any,
) -> None:
    rng = np.random.default_rng(4)
    rounds = list(Storefront().rounds(700, replace_at=None, rng=rng))
    async with running(make_settings()) as (app, http, _):
        use_cases = app.state.use_cases
        assert (await http.put("/policies/shop", json=SPEC)).status_code == 200
        served = await serve(http, rounds[:400], rng)
        await wait_for(lambda: use_cases.event_log.count("shop") == (served, served), 30)
        # ranked before the change, rewarded after the switch
        held = [await rank(http, r) for r in rounds[400:420]]
        old = (await http.get("/policies/shop")).json()
        changed = await http.put("/policies/shop", json=INTERACTIONS)
        assert changed.status_code == 200, changed.text
        started = await retrain_state(http)
        assert started["state"] == "running"
        # the old config and model serve meanwhile, and decisions go on
        during = 0
        deadline = time.monotonic() + 180
        while True:
            # config and record switch in one transaction: read the config first
            revision = (await http.get("/policies/shop")).json()["revision"]
            if (await retrain_state(http))["state"] != "running":
                break
            assert time.monotonic() < deadline, "the retrain did not finish in 180 s"
            assert revision == old["revision"]
            if during < 200:
                during += await serve(http, rounds[420 + during : 421 + during], rng)
            else:
                await asyncio.sleep(0.1)
        assert during > 0
        done = await retrain_state(http)
        assert done["state"] == "done", done
        info = (await http.get("/policies/shop")).json()
        assert info["features"]["interactions"] == [["*", "*"]]
        assert info["reset_at"] == pytest.approx(done["since"])
        assert info["retrained_from"] == old["reset_at"]
        assert done["events"] >= served
        for event_id, arm in held:  # learned from the log, not lost
            await reward(http, event_id, 1.0)
        await serve(http, rounds[620:700], rng)
        total = served + len(held) + during + 80
        await wait_for(lambda: use_cases.event_log.count("shop") == (total, total), 30)
        # the reconciliation after the old events' wait brings the held rewards in
        await asyncio.wait_for(use_cases.retrains.wait(), timeout=60)
        rebuilt = await rebuild_of_log(use_cases)
        assert rebuilt.rewards == total
        assert_close_parts(rebuilt.live, rebuilt.expected)
        history = (await http.get("/policies/shop/history")).json()["records"]
        (retrained,) = [r for r in history if r["action"] == "retrain"]
        assert retrained["after"]["features"]["interactions"] == [["*", "*"]]
        assert retrained["before"]["features"]["interactions"] == []
        assert retrained["detail"]["events"] == done["events"]


@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_reset_during_the_retrain_wins(make_settings: Any) -> None:
    rng = np.random.default_rng(5)
    rounds = list(Storefront().rounds(60, replace_at=None, rng=rng))
    async with running(make_settings()) as (app, http, _):
        use_cases = app.state.use_cases
        assert (await http.put("/policies/shop", json=SPEC)).status_code == 200
        served = await serve(http, rounds, rng)
        await wait_for(lambda: use_cases.event_log.count("shop") == (served, served), 30)
        retrains = use_cases.retrains
        release = concurrent.futures.Future[None]()
        submit = retrains._workers.submit

        def held_submit(fn: Any, *args: Any) -> concurrent.futures.Future[Any]:
            out: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def settle(done: concurrent.futures.Future[Any]) -> None:
                error = done.exception()
                if error is None:
                    out.set_result(done.result())
                else:
                    out.set_exception(error)

            def go(_: Any) -> None:
                submit(fn, *args).add_done_callback(settle)

            release.add_done_callback(go)
            return out

        retrains._workers.submit = held_submit
        assert (await http.put("/policies/shop", json=INTERACTIONS)).status_code == 200
        assert (await retrain_state(http))["state"] == "running"
        reset = await http.post("/policies/shop/reset")
        assert reset.status_code == 200, reset.text
        release.set_result(None)
        await asyncio.wait_for(retrains.wait(), timeout=60)
        state = await retrain_state(http)
        assert state["state"] == "superseded", state
        info = (await http.get("/policies/shop")).json()
        assert info["features"]["interactions"] == []  # the reset kept the serving config
        assert info["reset_at"] == reset.json()["reset_at"]
        assert time.time() - info["reset_at"] < 60


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_rewards_left_for_the_relearned_model_are_learned_after_a_restart(
    make_settings: Any,
) -> None:
    """Rewards of the old model's events applied after the switch wait in the store for
    the reconciliation; a process that stops before it runs leaves them there, and the
    next process's check learns them from the log."""
    rng = np.random.default_rng(6)
    rounds = list(Storefront().rounds(130, replace_at=None, rng=rng))
    # a wait the held events outlive the retrain with, rewarded explicitly after it
    spec = {**SPEC, "reward_wait_seconds": 15.0}
    settings = make_settings(retrain_check_seconds=0.2)
    async with running(settings) as (app, http, _):
        use_cases = app.state.use_cases
        retrains = use_cases.retrains
        never = asyncio.Event()

        async def stopped_before_reconciling(name: str) -> bool:
            await never.wait()  # the process stops first (cancelled at shutdown)
            return False

        retrains.reconcile = stopped_before_reconciling
        assert (await http.put("/policies/shop", json=spec)).status_code == 200
        served = await serve(http, rounds[:100], rng)
        await wait_for(lambda: use_cases.event_log.count("shop") == (served, served), 30)
        held = [await rank(http, r) for r in rounds[100:130]]
        changed = {**spec, "features": INTERACTIONS["features"]}
        assert (await http.put("/policies/shop", json=changed)).status_code == 200
        deadline = time.monotonic() + 60
        while (await retrain_state(http))["state"] == "running":
            assert time.monotonic() < deadline, "the retrain did not finish in 60 s"
            await asyncio.sleep(0.05)
        assert (await retrain_state(http))["state"] == "done"
        for event_id, _arm in held:
            await reward(http, event_id, 1.0)
        total = served + len(held)
        await wait_for(lambda: use_cases.event_log.count("shop") == (total, total), 30)
        before = await rebuild_of_log(use_cases)
        assert before.rewards == total
        with pytest.raises(AssertionError):  # the held rewards are not in the model yet
            assert_close_parts(before.live, before.expected)
        marked = await use_cases.store.read("shop", [RELEARNED_KEY], {})
        assert sorted(orjson.loads(marked[RELEARNED_KEY].data)) == sorted(e for e, _ in held)
    async with running(settings) as (app, http, _):
        use_cases = app.state.use_cases
        deadline = time.monotonic() + 60  # the held events' wait (15 s) comes first
        while not (await use_cases.retrains.status("shop")).reconciled:
            assert time.monotonic() < deadline, "not reconciled within 60 s"
            await asyncio.sleep(0.1)
        after = await rebuild_of_log(use_cases)
        assert after.rewards == total
        assert_close_parts(after.live, after.expected)
        marked = await use_cases.store.read("shop", [RELEARNED_KEY], {})
        assert marked[RELEARNED_KEY].data in (None, b"[]")
