"""Folded model updates (service/usecases/folds.py): a shared model with
``model_update_interval`` keeps each accepted reward as a delta written with its event,
and folds the deltas into the ``shared`` part in one transaction that deletes exactly
those deltas. Checked against the closed form (the rewards applied one by one in a
random order, to 1e-9) on the embedded default and on Redis + PostgreSQL: concurrent
rewards, a fold abandoned after its read, a fold racing another writer, a reset, and
the rebuild from the log."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from typing import Any, TypeAlias

import numpy as np
import pytest

import bandit_core
from bandit_core.hybrid_linucb import HybridSharedState
from bandit_core.state import unpack
from service.api.app import LEARNING_SETTINGS, make_store
from service.policies import build_policy, spec_of
from service.settings import Settings
from service.usecases.events import DELTA_PREFIX, PendingEvent, event_key
from service.usecases.folds import Folds
from service.usecases.policy_cache import PolicyCache
from service.usecases.rebuild import rebuild_policy
from tests.service.conftest import running
from tests.service.test_reward_signs import metric

pytestmark = pytest.mark.anyio

NAME = "loop"
Served: TypeAlias = tuple[str, Any]  # an event's served arm and its row
SPEC: dict[str, Any] = {
    "algorithm": "hybrid_linucb",
    "features": {"bits": 5, "interactions": [["*", "*"]]},
    "params": {"alpha": 0.0},
    "reward_range": [-1.0, 1.0],
    "epsilon": 0.2,
}
# the writer's loop runs once at the start, then never within a test
NO_LOOP = {"fold_check_seconds": 3600.0, "fold_max_deltas": 100_000}


def request_body(j: int, policy: str = NAME) -> dict[str, Any]:
    """The ``j``-th ``/recommend`` of the tests: 4 of 9 items in 3 categories, a context
    of 3 segments."""
    context = {"user": {"segment": "abc"[j % 3], "visits": j % 4}}
    items = [
        {"id": f"item-{(j + k) % 9}", "features": {"item": {"cat": "xyz"[(j + k) % 3]}}}
        for k in range(4)
    ]
    return {"policy": policy, "context": context, "arms": items}


async def decisions(http: Any, n: int, policy: str = NAME) -> list[str]:
    """The event ids of ``n`` decisions of ``policy`` (:func:`request_body`)."""
    ids = []
    for j in range(n):
        r = await http.post("/recommend", json=request_body(j, policy))
        assert r.status_code == 200, r.text
        ids.append(r.json()["event_id"])
    return ids


async def _reward_concurrently(http: Any, rewards: dict[str, float], clients: int) -> None:
    """``clients`` tasks, each rewarding its share of the events one after another."""
    events = list(rewards)

    async def client(i: int) -> None:
        for event_id in events[i::clients]:
            r = await http.post("/reward", json={"event_id": event_id, "reward": rewards[event_id]})
            assert r.status_code == 200 and r.json()["applied"], r.text

    await asyncio.gather(*(client(i) for i in range(clients)))


def _rewards(ids: list[str]) -> dict[str, float]:
    rng = np.random.default_rng(len(ids))
    return {e: float(v) for e, v in zip(ids, rng.uniform(-1.0, 1.0, len(ids)), strict=True)}


async def _shared(app: Any) -> HybridSharedState | None:
    data = (await app.state.use_cases.store.read(NAME, ["shared"], {}))["shared"].data
    return None if data is None else HybridSharedState.from_bytes(data)


async def _pending(app: Any) -> list[str]:
    return await app.state.use_cases.store.keys(NAME, [DELTA_PREFIX])


async def _until_folded(app: Any, n: int, timeout: float = 60.0) -> None:
    """Poll the store until the writer folded ``n`` rewards and left no delta."""
    deadline = time.monotonic() + timeout
    while True:
        shared = await _shared(app)
        if shared is not None and shared.n == n and not await _pending(app):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{n} rewards not folded within {timeout:.0f}s")
        await asyncio.sleep(0.05)


async def served_rows(store: Any, policy: str, ids: list[str]) -> dict[str, Served]:
    """The served arm and row of each pending event of ``ids`` (read before its reward:
    a finalized event keeps no row)."""
    stored = await store.read(policy, [event_key(e) for e in ids], {})
    out = {}
    for event_id in ids:
        data = stored[event_key(event_id)].data
        assert data is not None
        event = PendingEvent.from_json(data)
        assert event.pending
        out[event_id] = (event.arm_id, event.row())
    return out


async def _one_by_one(
    app: Any, rewards: dict[str, float], served: dict[str, Served]
) -> HybridSharedState:
    """The shared part of the policy's rewards applied one by one to a fresh engine,
    in a random order, from the rows ``served``."""
    info = (await app.state.use_cases.cache.load(NAME))[0].info
    policy = build_policy(spec_of(info))
    events = list(rewards)
    for i in np.random.default_rng(7).permutation(len(events)):
        arm, row = served[events[i]]
        policy.update(arm, row, rewards[events[i]])
    return HybridSharedState.from_bytes(policy.export_parts(["shared"])["shared"])


def assert_close(got: HybridSharedState | None, want: HybridSharedState) -> None:
    """The shared parts ``got`` and ``want`` hold the same rewards, their arrays equal
    to 1e-9."""
    assert got is not None
    for field in ("A", "A_inv", "b", "theta"):
        np.testing.assert_allclose(getattr(got, field), getattr(want, field), rtol=0, atol=1e-9)
    assert got.n == want.n
    assert got.reward_sum == pytest.approx(want.reward_sum, abs=1e-9)


async def _create(http: Any, interval: float) -> None:
    r = await http.put(f"/policies/{NAME}", json={**SPEC, "model_update_interval": interval})
    assert r.status_code == 200, r.text
    assert r.json()["model_update_interval"] == interval


async def _forty_pending(app: Any, http: Any) -> tuple[dict[str, float], dict[str, Served]]:
    """The policy folding hourly, 40 decisions rewarded by 4 concurrent clients, their
    deltas pending: the rewards by event id and the served rows."""
    await _create(http, 3600.0)
    rewards = _rewards(await decisions(http, 40))
    served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
    await _reward_concurrently(http, rewards, clients=4)
    return rewards, served


async def test_concurrent_rewards_are_folded_once_each(make_settings: Any) -> None:
    """8 clients reward 160 events while the writer folds every 0.1 s: every reward is
    folded exactly once (the closed form to 1e-9), no delta is left, and the staleness
    gauge is exported."""
    settings = make_settings(fold_check_seconds=0.05, fold_max_deltas=25)
    async with running(settings) as (app, http, _):
        await _create(http, 0.1)
        rewards = _rewards(await decisions(http, 160))
        served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
        await _reward_concurrently(http, rewards, clients=8)

        await _until_folded(app, len(rewards))
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))
        metrics = (await http.get("/metrics")).text
        assert f'bandit_model_staleness_seconds{{policy="{NAME}"}}' in metrics


async def test_rewards_wait_as_deltas_until_the_fold(make_settings: Any) -> None:
    """Until a fold, a reward changes no model part (decisions read the last folded
    model) and leaves one delta; a fold takes them all in one transaction."""
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        await _create(http, 3600.0)
        rewards = _rewards(await decisions(http, 30))
        served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
        before = await _shared(app)
        await _reward_concurrently(http, rewards, clients=4)
        assert await _shared(app) == before
        assert sorted(await _pending(app)) == sorted(DELTA_PREFIX + e for e in rewards)
        repeat = await http.post("/reward", json={"event_id": next(iter(rewards)), "reward": 0.5})
        assert repeat.json()["status"] == "conflicting_reward"
        assert len(await _pending(app)) == len(rewards)  # a repeat adds no delta
        folds = await metric(http, "bandit_folds_total", NAME)
        assert await app.state.use_cases.folds.fold(NAME) == len(rewards)
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))
        assert await app.state.use_cases.folds.fold(NAME) == 0
        assert await metric(http, "bandit_folds_total", NAME) == folds + 1  # none for nothing


async def test_a_fold_abandoned_after_its_read_writes_nothing(make_settings: Any) -> None:
    """A writer that read the deltas and computed the fold but never committed (killed
    in between: simulated by its transaction raising after the fold was computed)
    leaves every delta pending and the model as it was; the next fold takes each once."""
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        rewards, served = await _forty_pending(app, http)
        before = await _shared(app)
        store = app.state.use_cases.store
        transact = store.transact
        computed: list[int] = []

        async def killed(policy: str, keys: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            def dies(values: dict[str, bytes | None]) -> Any:
                computed.append(len(fn(values)))
                raise SystemExit("the writer died before its commit")

            return await transact(policy, keys, dies, *args, **kwargs)

        store.transact = killed
        with pytest.raises(SystemExit):
            await app.state.use_cases.folds.fold(NAME)
        store.transact = transact
        assert computed == [len(rewards) + 1]  # the shared part and every delta, computed
        assert await _shared(app) == before
        assert len(await _pending(app)) == len(rewards)
        app.state.use_cases.cache.forget(NAME)  # the dead writer's cache is gone with it
        assert await app.state.use_cases.folds.fold(NAME) == len(rewards)
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


async def test_a_decision_is_served_while_a_fold_computes(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fold computes its update in a worker thread, not on the event loop: with the
    engine's batch update held until a decision has been served, the decision is
    served meanwhile, and the fold then commits every reward once."""
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        rewards, served = await _forty_pending(app, http)
        engine = type((await app.state.use_cases.cache.load(NAME))[0].policy)
        update_batch = engine.update_batch
        entered, decided = threading.Event(), threading.Event()
        waited: list[bool] = []

        def held(self: Any, *args: Any, **kwargs: Any) -> Any:
            entered.set()
            waited.append(decided.wait(timeout=10))  # on the loop's thread: never set
            return update_batch(self, *args, **kwargs)

        monkeypatch.setattr(engine, "update_batch", held)
        fold = asyncio.ensure_future(app.state.use_cases.folds.fold(NAME))
        assert await asyncio.to_thread(entered.wait, 10)
        r = await http.post("/recommend", json=request_body(0))
        assert r.status_code == 200, r.text
        decided.set()
        assert await fold == len(rewards)
        monkeypatch.undo()
        assert waited == [True]
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


async def _folds_racing(
    app: Any, settings: Settings, b_skips: int = 0
) -> tuple[int, int, list[int]]:
    """Writer A (``app``'s folds, under ``settings``) folds ``NAME``; between A's read and
    A's commit, writer B (another process: its own connection and cache, the same
    ``settings``, the pending deltas but the oldest ``b_skips``) folds it too and commits.
    Returns how many A folded, how many B folded, and the deltas A's transaction found at
    each of its attempts."""
    folded_by_b: list[int] = []

    def writer_b() -> None:
        async def fold() -> None:
            store = make_store(settings)
            listed = store.keys

            async def skipping(*args: Any) -> list[str]:
                return (await listed(*args))[b_skips:]

            store.keys = skipping  # type: ignore[method-assign]
            try:
                folded_by_b.append(await Folds(PolicyCache(store), store, settings).fold(NAME))
            finally:
                await store.close()

        asyncio.run(fold())

    folds = app.state.use_cases.folds
    store = app.state.use_cases.store
    transact, kept = store.transact, folds.settings
    attempts: list[int] = []

    async def interleaved(policy: str, keys: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def then_b(values: dict[str, bytes | None]) -> Any:
            attempts.append(sum(v is not None for k, v in values.items() if k != "shared"))
            if len(attempts) == 1:  # between A's read and A's commit
                thread = threading.Thread(target=writer_b)
                thread.start()
                thread.join()
            return fn(values)

        return await transact(policy, keys, then_b, *args, **kwargs)

    store.transact, folds.settings = interleaved, settings
    try:
        folded_by_a = await folds.fold(NAME)
    finally:
        store.transact, folds.settings = transact, kept
    (folded,) = folded_by_b
    return folded_by_a, folded, attempts


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_fold_racing_another_writer_applies_nothing_twice(make_settings: Any) -> None:
    """Redis: writer A reads the deltas; before A commits, writer B folds them all and
    commits (:func:`_folds_racing`). A's commit finds the versions moved, reads again,
    finds no delta left and writes nothing: each reward is folded once. (The in-process
    store runs a transaction under its lock: no writer can come between a read and a
    commit.)"""
    settings: Settings = make_settings(**NO_LOOP)
    async with running(settings) as (app, http, _):
        rewards, served = await _forty_pending(app, http)
        folded_by_a, folded_by_b, attempts = await _folds_racing(app, settings)
        assert folded_by_b == len(rewards)
        assert attempts == [len(rewards), 0] and folded_by_a == 0
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_fold_whose_deltas_another_folded_takes_the_next_ones(make_settings: Any) -> None:
    """Redis, 40 pending deltas, folds of at most 20: writer A lists the oldest 20 and
    reads them; before A commits, writer B lists the same 20 and folds them
    (:func:`_folds_racing`). A's commit finds them folded, so A lists again and folds
    the other 20: the two folds leave no delta waiting (as two replicas reaching
    ``fold_max_deltas`` together do), and each reward is folded once."""
    settings: Settings = make_settings(**NO_LOOP)
    async with running(settings) as (app, http, _):
        rewards, served = await _forty_pending(app, http)
        batch = settings.model_copy(update={"fold_max_deltas": 20})
        folds = await metric(http, "bandit_folds_total", NAME)
        assert await _folds_racing(app, batch) == (20, 20, [20, 0, 20])
        # B's and A's second (in this process's registry both); A's first wrote nothing
        assert await metric(http, "bandit_folds_total", NAME) == folds + 2
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_fold_whose_shared_part_another_moved_computes_again_in_a_thread(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis, 40 pending deltas, folds of at most 20: writer A reads the oldest 20 and
    computes their fold; before A commits, writer B folds the other 20 and commits
    (:func:`_folds_racing`), moving the shared part. A's commit finds it moved with A's
    deltas still pending, so A reads and computes again in a worker thread (never on the
    event loop's thread) and commits: each reward is folded once."""
    settings: Settings = make_settings(**NO_LOOP)
    async with running(settings) as (app, http, _):
        rewards, served = await _forty_pending(app, http)
        engine = type((await app.state.use_cases.cache.load(NAME))[0].policy)
        update_batch = engine.update_batch
        threads: list[threading.Thread] = []

        def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
            threads.append(threading.current_thread())
            return update_batch(self, *args, **kwargs)

        monkeypatch.setattr(engine, "update_batch", recorded)
        batch = settings.model_copy(update={"fold_max_deltas": 20})
        # A's attempts: its read, the commit that found the part moved, the second commit
        assert await _folds_racing(app, batch, b_skips=20) == (20, 20, [20, 20, 20])
        monkeypatch.undo()
        assert len(threads) == 3 and threading.current_thread() not in threads  # A, B, A
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


async def test_a_reset_drops_the_pending_rewards(make_settings: Any) -> None:
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        await _create(http, 3600.0)
        rewards = _rewards(await decisions(http, 10))
        await _reward_concurrently(http, rewards, clients=2)
        assert (await http.post(f"/policies/{NAME}/reset")).status_code == 200
        assert await _pending(app) == []
        assert await app.state.use_cases.folds.fold(NAME) == 0
        assert await _shared(app) is None


async def test_the_rebuild_from_the_log_equals_the_folded_model(make_settings: Any) -> None:
    """Rewards folded in several folds, and some still pending: the rebuild from the
    log replays every logged reward, so it equals the rewards applied one by one, and
    it drops the pending deltas it replayed (they are not folded a second time)."""
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        await _create(http, 3600.0)
        rewards = _rewards(await decisions(http, 45))
        served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
        ids = list(rewards)
        for part, fold in ((ids[:20], True), (ids[20:35], True), (ids[35:], False)):
            await _reward_concurrently(http, {e: rewards[e] for e in part}, clients=3)
            if fold:
                assert await app.state.use_cases.folds.fold(NAME) == len(part)
        assert len(await _pending(app)) == 10
        use_cases = app.state.use_cases
        assert use_cases.sink.flush(10.0)
        await rebuild_policy(
            use_cases.event_log, use_cases.store, NAME, replace=True, learning=LEARNING_SETTINGS
        )
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


async def test_rewards_pending_when_updates_turn_immediate_are_folded(
    make_settings: Any,
) -> None:
    """A policy changed from folded to immediate updates: the deltas pending then are
    folded by the writer, and later rewards update the model at once."""
    async with running(make_settings(fold_check_seconds=0.05)) as (app, http, _):
        await _create(http, 3600.0)
        # this hour's period claimed (by the writer's loop or here, folding nothing): no
        # fold comes before the change, whenever the loop first looks at the policy
        await app.state.use_cases.folds.fold_due()
        ids = await decisions(http, 21)
        rewards = _rewards(ids[:20])
        await _reward_concurrently(http, rewards, clients=4)
        assert len(await _pending(app)) == 20
        changed = await http.put(f"/policies/{NAME}", json=SPEC)  # the same model, no interval
        assert changed.status_code == 200 and changed.json()["model_update_interval"] is None
        await _until_folded(app, 20)
        r = await http.post("/reward", json={"event_id": ids[20], "reward": 0.5})
        assert r.status_code == 200 and r.json()["applied"]
        shared = await _shared(app)
        assert shared is not None and shared.n == 21 and await _pending(app) == []


async def test_export_snapshot_and_stats_fold_the_pending_rewards_first(
    make_settings: Any,
) -> None:
    """The stats, a snapshot and a model file each see every reward accepted before
    them: the pending deltas are folded first (one fold each, deleting its deltas), so
    the shared part then equals the rewards applied one by one, and nothing is left
    pending to be folded again."""
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        await _create(http, 3600.0)
        rewards = _rewards(await decisions(http, 30))
        served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
        ids = list(rewards)
        await _reward_concurrently(http, {e: rewards[e] for e in ids[:10]}, clients=2)
        assert len(await _pending(app)) == 10
        stats = (await http.get(f"/policies/{NAME}/stats")).json()
        assert stats["policy_stats"]["rewarded"] == 10
        assert await _pending(app) == []

        await _reward_concurrently(http, {e: rewards[e] for e in ids[10:20]}, clients=2)
        snapshot = (await http.get(f"/policies/{NAME}/snapshot")).json()
        policy = bandit_core.policy_from_bytes(base64.b64decode(snapshot["data"]))
        assert policy.policy_stats()["rewarded"] == 20
        assert await _pending(app) == []

        await _reward_concurrently(http, {e: rewards[e] for e in ids[20:]}, clients=2)
        exported = await http.get(f"/policies/{NAME}/model")
        assert exported.status_code == 200, exported.text
        _, _, arrays = unpack(exported.content, "bandit_model")
        assert bandit_core.policy_from_bytes(arrays["engine"].tobytes()).policy_stats()[
            "rewarded"
        ] == len(rewards)
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))
        assert await app.state.use_cases.folds.fold(NAME) == 0


@pytest.mark.parametrize("backend", ["redis_postgres"])
@pytest.mark.parametrize("interval", [3600.0, None], ids=["folded", "immediate"])
async def test_the_stats_never_count_a_reward_their_model_lacks(
    make_settings: Any, interval: float | None
) -> None:
    """Replica B's rewards commit while replica A's stats read counters (a reward before
    each read): A's stats count no reward the model they report lacks, so a poll of the
    stats until a count is reached then finds at least that many rewards in the model,
    folded or applied at once."""
    settings = make_settings(**NO_LOOP)
    async with running(settings) as (a, http_a, _), running(settings) as (_, http_b, _):
        r = await http_a.put(f"/policies/{NAME}", json={**SPEC, "model_update_interval": interval})
        assert r.status_code == 200, r.text
        rewards = _rewards(await decisions(http_b, 6))
        ids = list(rewards)
        await _reward_concurrently(http_b, {e: rewards[e] for e in ids[:2]}, clients=1)
        store = a.state.use_cases.admin.store
        counters, during = store.counters, iter(ids[2:])
        answers: list[Any] = []

        async def counters_as_b_rewards(name: str) -> dict[str, float]:
            # A's periodic tasks read counters too, maybe meanwhile: each call takes its
            # own event before it awaits
            if (event_id := next(during, None)) is not None:
                reward = {"event_id": event_id, "reward": rewards[event_id]}
                answers.append(await http_b.post("/reward", json=reward))
            return await counters(name)

        store.counters = counters_as_b_rewards
        try:
            stats = (await http_a.get(f"/policies/{NAME}/stats")).json()
        finally:
            del store.counters
    assert len(answers) >= 2 and all(r.json()["applied"] for r in answers), answers
    assert 3 <= stats["rewards"] <= stats["policy_stats"]["rewarded"], stats


async def test_fold_pending_folds_every_batch(make_settings: Any) -> None:
    """More deltas pending than one fold takes (``fold_max_deltas``): ``fold_pending``
    folds batch after batch until none is left, each reward once."""
    settings = make_settings(**NO_LOOP)
    async with running(settings) as (app, http, _):
        await _create(http, 3600.0)
        rewards = _rewards(await decisions(http, 10))
        served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
        await _reward_concurrently(http, rewards, clients=2)
        store = app.state.use_cases.store
        small = settings.model_copy(update={"fold_max_deltas": 4})
        assert await Folds(PolicyCache(store), store, small).fold_pending(NAME) == 10
        assert await _pending(app) == []
        assert_close(await _shared(app), await _one_by_one(app, rewards, served))


async def test_model_properties_report_the_pending_rewards_and_their_wait(
    make_settings: Any,
) -> None:
    """The model-properties route counts the rewards waiting for a fold and says how
    long the oldest waited (between its acceptance and the read); none after a fold."""
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        await _create(http, 3600.0)
        rewards = _rewards(await decisions(http, 6))
        fresh = (await http.get(f"/policies/{NAME}/model/properties")).json()
        assert (fresh["pending_rewards"], fresh["staleness_seconds"]) == (0, 0.0)
        started = time.time()
        await _reward_concurrently(http, rewards, clients=2)
        await asyncio.sleep(0.2)
        properties = (await http.get(f"/policies/{NAME}/model/properties")).json()
        assert properties["pending_rewards"] == len(rewards)
        assert 0.2 <= properties["staleness_seconds"] <= time.time() - started
        assert await app.state.use_cases.folds.fold(NAME) == len(rewards)
        folded = (await http.get(f"/policies/{NAME}/model/properties")).json()
        assert (folded["pending_rewards"], folded["staleness_seconds"]) == (0, 0.0)


SMALL_FEATURES = {"bits": 3, "interactions": [["*", "*"]]}
# name -> (spec, whether its rewards are folded): of the other shared models, diag_linucb's
# per-feature fit folds (its rewards add to per-column sums, in any order); its joint fit
# (an update reads the current weights) and hybrid_linucb with per-arm parts (an update
# writes the arm's part too) update the model at once, model_update_interval or not
OTHER_MODELS: dict[str, tuple[dict[str, Any], bool]] = {
    "diag_per_feature": (
        {"algorithm": "diag_linucb", "params": {"alpha": 0.0, "fit": "per_feature"}},
        True,
    ),
    "diag_joint": ({"algorithm": "diag_linucb", "params": {"alpha": 0.0}}, False),
    "hybrid_per_arm": (
        {"algorithm": "hybrid_linucb", "params": {"alpha": 0.0, "context_dim": 9}},
        False,
    ),
}


async def _parts_one_by_one(
    app: Any, rewards: dict[str, float], served: dict[str, Served], order: Any
) -> tuple[dict[str, bytes], Any]:
    """The parts the rewards wrote (by name) and the engine after the rewards applied one
    by one in ``order`` to a fresh engine, from the rows ``served``."""
    events = list(rewards)
    policy = build_policy(spec_of((await app.state.use_cases.cache.load(NAME))[0].info))
    names: set[str] = set()
    for i in order:
        arm, row = served[events[i]]
        policy.add_arm(arm)
        policy.update(arm, row, rewards[events[i]])
        names.update(policy.parts_for_update(arm))
    return dict(policy.export_parts(sorted(names))), policy


@pytest.mark.parametrize("model", list(OTHER_MODELS))
async def test_other_shared_models_fold_or_update_at_once_equal_to_one_by_one(
    make_settings: Any, model: str
) -> None:
    """With ``model_update_interval`` set: a model that folds keeps each reward as a
    delta until the fold, and the folded part equals the rewards applied one by one in a
    random order (1e-9); a model that does not leaves no delta, and after each reward its
    stored parts are those of the rewards applied one by one in their order, bit for bit."""
    spec, folds = OTHER_MODELS[model]
    async with running(make_settings(**NO_LOOP)) as (app, http, _):
        r = await http.put(
            f"/policies/{NAME}",
            json={
                **spec,
                "features": SMALL_FEATURES,
                "reward_range": [-1.0, 1.0],
                "epsilon": 0.2,
                "model_update_interval": 3600.0,
            },
        )
        assert r.status_code == 200, r.text
        rewards = _rewards(await decisions(http, 30))
        served = await served_rows(app.state.use_cases.store, NAME, list(rewards))
        store = app.state.use_cases.store
        for k, event_id in enumerate(rewards, start=1):
            r = await http.post("/reward", json={"event_id": event_id, "reward": rewards[event_id]})
            assert r.status_code == 200 and r.json()["applied"], r.text
            if not folds and k in (1, 15, 30):
                want, _ = await _parts_one_by_one(
                    app, dict(list(rewards.items())[:k]), served, range(k)
                )
                got = await store.read(NAME, list(want), {})
                assert {name: got[name].data for name in want} == want
        pending = await _pending(app)
        assert len(pending) == (len(rewards) if folds else 0)
        assert await app.state.use_cases.folds.fold(NAME) == len(pending)
        assert await _pending(app) == []
        if folds:
            order = np.random.default_rng(3).permutation(len(rewards))
            _, engine = await _parts_one_by_one(app, rewards, served, order)
            got = (await store.read(NAME, ["shared"], {}))["shared"].data
            assert got is not None
            folded = type(engine.shared_state).from_bytes(got)
            np.testing.assert_array_equal(folded.index, engine.shared_state.index)
            for field in ("sum_sq", "w"):
                np.testing.assert_allclose(
                    getattr(folded, field), getattr(engine.shared_state, field), rtol=0, atol=1e-9
                )
            assert folded.n == len(rewards)
            assert folded.reward_sum == pytest.approx(sum(rewards.values()), abs=1e-9)
