"""``bandit rebuild --policy NAME`` reconstructs the state from the event log: after the
Redis state is wiped, the rebuilt model decides exactly as the live one did; periodic
snapshots land in the log."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest
import redis

from bandit_core import policy_from_bytes
from service.api.app import LEARNING_SETTINGS
from service.cli import main
from service.settings import Settings, get_settings
from service.storage.redis_store import RedisStateStore
from service.usecases.rebuild import rebuild_policy
from tests.service.conftest import POLICY, running, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["redis_postgres"])]


async def _cli(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, *arguments: list[str]
) -> list[int]:
    """The exit status of ``bandit rebuild <arguments>`` for each, run in this process
    with the URLs of ``settings`` in the environment."""
    for name, value in {
        "REDIS_URL": settings.redis_url,
        "DATABASE_URL": settings.database_url,
        "DATA_DIR": str(settings.data_dir),
    }.items():
        monkeypatch.setenv(f"BANDIT_{name}", value)
    get_settings.cache_clear()
    try:
        return [await asyncio.to_thread(main, ["rebuild", *args]) for args in arguments]
    finally:
        get_settings.cache_clear()


def _model(snapshot: dict[str, Any]) -> Any:
    return policy_from_bytes(base64.b64decode(snapshot["data"]))


async def test_rebuild_reconstructs_the_live_state(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(snapshot_interval_seconds=0.2)
    rng = np.random.default_rng(3)
    async with running(settings) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        for _ in range(120):
            dec = (
                await http.post(
                    "/recommend", json={"policy": "p", "context": rng.normal(size=3).tolist()}
                )
            ).json()
            await http.post(
                "/reward", json={"event_id": dec["event_id"], "reward": float(rng.random())}
            )
        live_stats = (await http.get("/policies/p/stats")).json()
        live = _model((await http.get("/policies/p/snapshot")).json())
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.latest_snapshot("p") is not None)

    redis.Redis.from_url(settings.redis_url).flushdb()
    # a policy the log does not hold is a usage error, like every command's (exit 2)
    statuses = await _cli(settings, monkeypatch, ["--policy", "p"], ["--policy", "missing"])
    assert statuses == [0, 2]

    async with running(settings) as (_, http, _):
        rebuilt_stats = (await http.get("/policies/p/stats")).json()
        rebuilt = _model((await http.get("/policies/p/snapshot")).json())
    assert rebuilt_stats["arms"] == live_stats["arms"]
    X = rng.normal(size=(3, 3))
    for arm in ("a", "b", "c"):
        assert rebuilt.arm_stats(arm).rewarded == live.arm_stats(arm).rewarded
    np.testing.assert_allclose(
        rebuilt.select(["a", "b", "c"], X, explore=False).scores,
        live.select(["a", "b", "c"], X, explore=False).scores,
        rtol=1e-12,
    )


async def test_rebuild_at_start_keeps_the_state_another_replica_wrote(make_settings: Any) -> None:
    """``replace=False`` (the rebuild at start of every replica): a policy already in the
    store is left as it is, counters not added again; a wiped one rebuilt by three
    replicas at once is written once, its counters added once."""
    rng = np.random.default_rng(4)
    settings = make_settings(rebuild_check_seconds=3600)  # the test's rebuilds only
    async with running(settings) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        for _ in range(20):
            dec = (
                await http.post(
                    "/recommend", json={"policy": "p", "context": rng.normal(size=3).tolist()}
                )
            ).json()
            await http.post("/reward", json={"event_id": dec["event_id"], "reward": 0.5})
        before = (await http.get("/policies/p/stats")).json()
        use_cases = app.state.use_cases
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        kept = await rebuild_policy(
            use_cases.event_log, use_cases.store, "p", replace=False, learning=LEARNING_SETTINGS
        )
        assert (kept.written, kept.decisions, kept.rewards) == (False, 20, 20)
        assert (await http.get("/policies/p/stats")).json() == before
        await use_cases.store.delete_policy("p")
        # three replicas starting at once, each with its own connections
        stores = [RedisStateStore(settings.redis_url) for _ in range(3)]
        try:
            reports = await asyncio.gather(
                *(
                    rebuild_policy(
                        use_cases.event_log, s, "p", replace=False, learning=LEARNING_SETTINGS
                    )
                    for s in stores
                )
            )
        finally:
            for store in stores:
                await store.close()
        assert sorted(r.written for r in reports) == [False, False, True]
        after = (await http.get("/policies/p/stats")).json()
        assert {k: after[k] for k in ("decisions", "rewards", "arms")} == {
            k: before[k] for k in ("decisions", "rewards", "arms")
        }


async def test_rebuild_all_replaces_an_older_backup_counters_included(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Redis restored from an older backup: counters behind the log, an arm's part and
    pull count the log does not know. ``bandit rebuild --all`` makes every policy's state
    what the log says: the counters equal the log's (decisions, rewards, pulls per arm)
    and the unknown arm is gone."""
    settings = make_settings(rebuild_check_seconds=3600)  # the command's rebuild only
    rng = np.random.default_rng(8)
    async with running(settings) as (app, http, _):
        for name in ("p", "q"):
            await http.put(f"/policies/{name}", json=POLICY)
            for _ in range(30):
                context = rng.normal(size=3).tolist()
                dec = await http.post("/recommend", json={"policy": name, "context": context})
                event_id = dec.json()["event_id"]
                await http.post("/reward", json={"event_id": event_id, "reward": 0.25})
        live = {n: (await http.get(f"/policies/{n}/stats")).json() for n in ("p", "q")}
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
        store = app.state.use_cases.store
        await store.add_counters("p", {"decisions": -9.0, "rewards": -9.0, "pulls:zombie": 4.0})
        a_part = (await store.read("p", ["arm:a"], {}))["arm:a"].data
        await store.transact("p", ["arm:zombie"], lambda values: {"arm:zombie": a_part})
        restored = (await http.get("/policies/p/stats")).json()
        assert restored["decisions"] == 21 and "zombie" in restored["arms"]

    assert await _cli(settings, monkeypatch, ["--all"]) == [0]
    assert capsys.readouterr().out.splitlines() == [
        f"rebuilt {name}: 30 rewards of 30 decisions replayed into 3 state parts"
        for name in ("p", "q")
    ]
    async with running(settings) as (_, http, _):
        rebuilt = {n: (await http.get(f"/policies/{n}/stats")).json() for n in ("p", "q")}
    for name in ("p", "q"):
        assert (rebuilt[name]["decisions"], rebuilt[name]["rewards"]) == (30, 30)
        assert rebuilt[name]["arms"].keys() == live[name]["arms"].keys()
        for arm, stats in rebuilt[name]["arms"].items():
            want = live[name]["arms"][arm]
            assert (stats["pulls"], stats["rewarded"]) == (want["pulls"], want["rewarded"])
            assert stats["reward_sum"] == pytest.approx(want["reward_sum"], rel=1e-12)
