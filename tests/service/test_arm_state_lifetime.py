"""Per-arm state stays bounded: candidates merely scored leave nothing stored, arms not
seen for a policy's ``arm_idle_seconds`` are forgotten by the sweeper, and retire takes
any arm with state (issue 16 item 7). Every test runs on both backends."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis

from service.api.app import LEARNING_SETTINGS
from service.storage.memory_store import InProcessStateStore
from service.usecases.rebuild import rebuild_policy
from tests.service.conftest import POLICY, running

pytestmark = pytest.mark.anyio

IDLE = 600.0  # arm_idle_seconds; the tests move the sweeper's clock instead of waiting
OPEN = {**POLICY, "arms": None, "arm_idle_seconds": IDLE}  # any id may be a candidate


def _arms(ids: list[str]) -> list[dict[str, Any]]:
    return [{"id": i} for i in ids]


async def _stored_arms(app: Any, policy: str, ids: list[str]) -> list[str]:
    """The ids among ``ids`` whose ``arm:<id>`` part the state store holds."""
    values = await app.state.use_cases.store.read(policy, [f"arm:{i}" for i in ids], {})
    return [i for i in ids if values[f"arm:{i}"].data is not None]


def _redis_footprint(settings: Any, policy: str) -> int:
    """Keys of the policy's namespace plus fields of its versions hash (0 embedded)."""
    if settings.redis_url is None:
        return 0
    client = redis.Redis.from_url(settings.redis_url)
    keys = list(client.scan_iter(match=f"bandit:{{{policy}}}:*", count=1000))
    return len(keys) + client.hlen(f"bandit:{{{policy}}}:versions")


async def _serve(http: Any, ids: list[str], policy: str = "p") -> dict[str, Any]:
    r = await http.post(
        "/recommend", json={"policy": policy, "context": [0.1, 0.2, 0.3], "arms": _arms(ids)}
    )
    assert r.status_code == 200, r.text
    return r.json()


async def test_scored_candidates_leave_no_state(make_settings: Any) -> None:
    settings = make_settings()
    async with running(settings) as (app, http, _):
        assert (await http.put("/policies/p", json=OPEN)).status_code == 200
        ids = [f"item-{i}" for i in range(1000)]
        served = (await _serve(http, ids))["arm_id"]
        assert await _stored_arms(app, "p", ids) == []
        # config, versions (config + event), clock, counters, deadlines, seen, event: the
        # 1,000 candidates left no key (they had left 2,000 before)
        assert _redis_footprint(settings, "p") <= 9
        event = (await _serve(http, [served]))["event_id"]
        assert (await http.post("/reward", json={"event_id": event, "reward": 1.0})).json()[
            "applied"
        ]
        assert await _stored_arms(app, "p", ids) == [served]


def _clock(app: Any, at: list[float]) -> None:
    """Every use case of ``app`` reads the time from ``at[0]``."""
    use_cases = app.state.use_cases
    for case in (use_cases.recommender, use_cases.rewards, use_cases.sweeper, use_cases.admin):
        case.clock = lambda: at[0]


@pytest.mark.parametrize("algorithm", ["linucb", "lnucb_ta"])
async def test_arms_not_seen_for_arm_idle_seconds_are_forgotten(
    make_settings: Any, algorithm: str
) -> None:
    settings = make_settings(sweeper_interval_seconds=3600.0)  # sweeps only when called
    async with running(settings) as (app, http, _):
        spec = {**OPEN, "algorithm": algorithm, "default_reward": None}
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        sweeper = app.state.use_cases.sweeper
        t0 = time.time()
        now = [t0]
        _clock(app, now)
        for arm in ("old", "kept"):
            event = (await _serve(http, [arm]))["event_id"]
            r = await http.post("/reward", json={"event_id": event, "reward": 1.0})
            assert r.json()["applied"]
        assert set((await http.get("/policies/p/stats")).json()["arms"]) == {"old", "kept"}
        now[0] = t0 + IDLE / 2
        await sweeper.sweep_once()  # nobody idle yet
        assert await _stored_arms(app, "p", ["old", "kept"]) == ["old", "kept"]
        await _serve(http, ["kept"])  # served again: its idle time starts over

        now[0] = t0 + IDLE + 1
        await sweeper.sweep_once()
        # "old" is gone with its pull count
        assert set((await http.get("/policies/p/stats")).json()["arms"]) == {"kept"}
        assert await _stored_arms(app, "p", ["old", "kept"]) == ["kept"]
        r = await http.post("/policies/p/arms/retire", json={"arms": ["old"]})
        assert r.status_code == 404 and "'old'" in r.json()["detail"]
        # a forgotten arm that comes back starts from the prior
        now[0] = t0 + IDLE + 2
        await _serve(http, ["old"])
        stats = (await http.get("/policies/p/stats")).json()["arms"]
        assert stats["old"]["pulls"] == 1 and stats["old"]["rewarded"] == 0

        now[0] = t0 + 3 * IDLE
        await sweeper.sweep_once()
        assert await _stored_arms(app, "p", ["old", "kept"]) == []
        assert (await http.get("/policies/p/stats")).json()["arms"] == {}
        assert (await _serve(http, ["old", "kept"]))["arm_id"] in {"old", "kept"}


async def test_registered_arms_keep_their_state(make_settings: Any) -> None:
    settings = make_settings(sweeper_interval_seconds=3600.0)
    async with running(settings) as (app, http, _):
        spec = {**POLICY, "arm_idle_seconds": IDLE}  # arms a, b, c registered
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        now = [time.time()]
        _clock(app, now)
        event = (await _serve(http, ["a"]))["event_id"]
        assert (await http.post("/reward", json={"event_id": event, "reward": 1.0})).json()[
            "applied"
        ]
        before = (await http.get("/policies/p/stats")).json()
        now[0] += 10 * IDLE
        await app.state.use_cases.sweeper.sweep_once()
        assert (await http.get("/policies/p/stats")).json() == before
        assert await _stored_arms(app, "p", ["a"]) == ["a"]


async def test_retire_takes_any_arm_with_state(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json={**POLICY, "arms": None})).status_code == 200
        event = (await _serve(http, ["x", "y"]))["event_id"]
        served = (await http.post("/reward", json={"event_id": event, "reward": 1.0})).json()
        arm = served["arm_id"]
        other = "y" if arm == "x" else "x"
        # arms registered after: the served arm stays an unregistered arm with state
        r = await http.post("/policies/p/arms", json={"arms": ["a", "b", "c"]})
        assert r.json()["arms"] == ["a", "b", "c"]
        assert arm in (await http.get("/policies/p/stats")).json()["arms"]
        # merely scored, never served: no state, so nothing to retire
        r = await http.post("/policies/p/arms/retire", json={"arms": [other, "never-sent"]})
        assert r.status_code == 404
        assert f"'{other}'" in r.json()["detail"] and "'never-sent'" in r.json()["detail"]
        r = await http.post("/policies/p/arms/retire", json={"arms": [arm, "a"]})
        assert r.status_code == 200 and r.json()["arms"] == ["b", "c"]
        assert await _stored_arms(app, "p", [arm, "a"]) == []
        assert set((await http.get("/policies/p/stats")).json()["arms"]) == {"b", "c"}


async def test_rebuild_restores_last_seen_and_forgets_idle_arms(make_settings: Any) -> None:
    async with running(make_settings(sweeper_interval_seconds=3600.0)) as (app, http, _):
        t0 = time.time()
        now = [t0 - 3 * IDLE]
        _clock(app, now)
        assert (await http.put("/policies/p", json=OPEN)).status_code == 200
        for arm, when in (("x", t0 - 2 * IDLE), ("y", t0 - 10)):
            now[0] = when
            event = (await _serve(http, [arm]))["event_id"]
            r = await http.post("/reward", json={"event_id": event, "reward": 1.0})
            assert r.json()["applied"]
        use_cases = app.state.use_cases
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        store = InProcessStateStore()
        await rebuild_policy(use_cases.event_log, store, "p", learning=LEARNING_SETTINGS)
    values = await store.read("p", ["arm:x", "arm:y"], {})
    assert values["arm:x"].data is None and values["arm:y"].data is not None
    assert "pulls:x" not in await store.counters("p")
    assert await store.take_idle("p", t0, 10) == ["y"]
