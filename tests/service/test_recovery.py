"""Policies the state store lost come back from the event log
(service/usecases/recovery.py), on the embedded default and on Redis + PostgreSQL: the
store emptied under a running app, and the embedded default's restart with the demo
policy and the default Personalizer loop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import numpy as np
import pytest
from prometheus_client import REGISTRY

from service.api.app import LEARNING_SETTINGS
from service.policies import CONFIG_KEY
from service.storage.redis_store import RedisStateStore
from service.storage.sql_log import SqlEventLog
from service.usecases.audit import AuditTrail
from service.usecases.policy_cache import PolicyCache
from service.usecases.recovery import Recovery
from tests.service.conftest import POLICY, running

pytestmark = pytest.mark.anyio


async def _history(http: Any, name: str, n: int) -> None:
    rng = np.random.default_rng(5)
    for j in range(n):
        context = rng.normal(size=3).tolist()
        dec = (await http.post("/recommend", json={"policy": name, "context": context})).json()
        reward = {"event_id": dec["event_id"], "reward": (j % 5) / 4}
        assert (await http.post("/reward", json=reward)).status_code == 200


async def test_a_store_emptied_under_a_running_app_is_rebuilt_never_404(
    make_settings: Any,
) -> None:
    # no periodic check during the test: the request and the test's check find them
    async with running(make_settings(rebuild_check_seconds=3600)) as (app, http, _):
        for name in ("p", "q"):
            assert (await http.put(f"/policies/{name}", json=POLICY)).status_code == 200
            await _history(http, name, 40)
        before = {n: (await http.get(f"/policies/{n}/stats")).json() for n in ("p", "q")}
        use_cases = app.state.use_cases
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        for name in ("p", "q"):  # every key of both policies gone, as after FLUSHALL
            await use_cases.store.delete_policy(name)
        assert await use_cases.store.list_policies() == []

        # the first request finds p gone: served degraded from the cached model
        r = await http.post("/recommend", json={"policy": "p", "context": [0.1, 0.2, 0.3]})
        assert r.status_code == 200 and r.json()["degraded"], r.text
        await use_cases.recovery.wait()
        # a check that finds q missing, then the next that finds it missing again
        assert (await use_cases.recovery.check()) == []
        assert (await use_cases.recovery.check()) == ["q"]
        await use_cases.recovery.wait()

        ready = await http.get("/readyz")
        assert ready.status_code == 200 and ready.json()["policies_missing"] == []
        listed = [p["name"] for p in (await http.get("/policies")).json()["policies"]]
        assert listed == ["p", "q"]
        for name in ("p", "q"):
            after = (await http.get(f"/policies/{name}/stats")).json()
            assert (after["decisions"], after["rewards"]) == (40, 40)
            assert after["arms"] == before[name]["arms"]
        r = await http.post("/recommend", json={"policy": "p", "context": [0.1, 0.2, 0.3]})
        assert r.status_code == 200 and not r.json()["degraded"]
        # a policy neither the store nor the log knows is still a 404
        r = await http.post("/recommend", json={"policy": "nope", "context": [0.1, 0.2, 0.3]})
        assert r.status_code == 404, r.text


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_embedded_default_restarts_with_its_demo_policy_and_loop(
    make_settings: Any,
) -> None:
    settings = make_settings(demo_policy=True, personalizer_loop=True)
    async with running(settings) as (_app, http, _):
        infos = {p["name"]: p for p in (await http.get("/policies")).json()["policies"]}
        dec = await http.post("/recommend", json={"policy": "demo", "context": [1, 0, 0, 0]})
        reward = {"event_id": dec.json()["event_id"], "reward": 1.0}
        assert (await http.post("/reward", json=reward)).status_code == 200
        before = (await http.get("/policies/demo/stats")).json()
    async with running(settings) as (_app, http, _):
        again = {p["name"]: p for p in (await http.get("/policies")).json()["policies"]}
        after = (await http.get("/policies/demo/stats")).json()
    assert sorted(again) == sorted(infos) == ["demo", "personalizer"]
    assert {n: i["reset_at"] for n, i in again.items()} == {
        n: i["reset_at"] for n, i in infos.items()
    }
    assert after["arms"] == before["arms"] and after["rewards"] == 1


def _rebuilds() -> float:
    """The rebuilds from the log this process started, whatever their outcome."""
    return sum(
        REGISTRY.get_sample_value("bandit_policy_rebuilds_total", {"outcome": outcome}) or 0.0
        for outcome in ("rebuilt", "deleted", "failed")
    )


async def _before_the_write(http: Any, change: str) -> None:
    """Policy ``p`` with a few rewarded decisions, unless ``change`` creates it."""
    if change != "create":
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        await _history(http, "p", 3)


def _config_write(http: Any, change: str) -> tuple[Coroutine[Any, Any, Any], int]:
    """The request that writes policy ``p``'s config by ``change`` (``create``;
    ``replace`` with a new dimension, which resets the state; ``reset``), and the
    context dimension of its decisions after it."""
    if change == "create":
        return http.put("/policies/p", json=POLICY), 3
    if change == "replace":
        return http.put("/policies/p", json={**POLICY, "dimension": 4}), 4
    return http.post("/policies/p/reset"), 3


@pytest.mark.parametrize("backend", ["embedded"])
@pytest.mark.parametrize("change", ["create", "replace", "reset"])
@pytest.mark.parametrize("write_ends", ["after_the_check", "between_the_reads"])
async def test_a_config_written_during_the_check_is_not_taken_for_a_lost_policy(
    make_settings: Any, change: str, write_ends: str
) -> None:
    """A create or replace records the config in the log, then in the store (a reset
    removes the store's entry before it writes the new one). The check reads the log,
    then the store, while the write waits in its store step; the write ends after the
    check, or between the store's answer and the check's use of it. Neither is a lost
    policy: no stand-in, no rebuild."""
    async with running(make_settings(rebuild_check_seconds=3600)) as (app, http, _):
        use_cases = app.state.use_cases
        recovery, store = use_cases.recovery, use_cases.store
        await _before_the_write(http, change)
        rebuilds = _rebuilds()
        store_step = store.add_policy
        paused, resume = asyncio.Event(), asyncio.Event()

        async def paused_step(name: str) -> None:
            paused.set()
            await resume.wait()
            await store_step(name)

        request, dimension = _config_write(http, change)
        store.add_policy = paused_step
        write = asyncio.ensure_future(request)
        await asyncio.wait_for(paused.wait(), 10)
        store.add_policy = store_step
        listed = store.list_policies

        async def listed_then_the_write_ends() -> list[str]:
            names = await listed()
            resume.set()
            await write
            return names

        if write_ends == "between_the_reads":
            store.list_policies = listed_then_the_write_ends
        try:
            assert await recovery.check() == []
        finally:
            store.list_policies = listed
            resume.set()
        assert (await write).status_code == 200, (await write).text
        await recovery.wait()
        assert recovery.missing() == [] and _rebuilds() == rebuilds
        context = [0.1] * dimension
        dec = await http.post("/recommend", json={"policy": "p", "context": context})
        assert dec.status_code == 200 and not dec.json()["degraded"], dec.text


@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_policy_deleted_between_the_checks_reads_is_not_taken_for_a_lost_one(
    make_settings: Any,
) -> None:
    """A delete leaves the log, then the store: deleted after the check read the log
    and before it read the store, the policy is in the one and not in the other without
    being lost."""
    async with running(make_settings(rebuild_check_seconds=3600)) as (app, http, _):
        use_cases = app.state.use_cases
        recovery, store = use_cases.recovery, use_cases.store
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        rebuilds = _rebuilds()
        listed = store.list_policies

        async def deleted_then_listed() -> list[str]:
            assert (await http.delete("/policies/p")).status_code == 204
            return await listed()

        store.list_policies = deleted_then_listed
        try:
            assert await recovery.check() == []
        finally:
            store.list_policies = listed
        await recovery.wait()
        assert recovery.missing() == [] and _rebuilds() == rebuilds
        r = await http.post("/recommend", json={"policy": "p", "context": [0.1, 0.2, 0.3]})
        assert r.status_code == 404, r.text


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_policy_another_replica_creates_during_a_check_is_not_taken_for_a_lost_one(
    make_settings: Any,
) -> None:
    """Replica B creates ``p``: its row in the log, then its config in Redis. Replica A's
    check reads the log (``p`` there) and Redis (``p`` not yet there) meanwhile, which
    no write of A's own explains: the finding is remembered, not acted on, and the next
    check, finding ``p``, forgets it. A policy Redis really lost is found missing by two
    checks in a row and rebuilt from the log at the second."""
    settings = make_settings(rebuild_check_seconds=3600)
    async with running(settings) as (app, http, _):
        b = app.state.use_cases
        assert settings.redis_url is not None
        store = RedisStateStore(settings.redis_url)
        event_log = SqlEventLog(settings.log_url)
        a = Recovery(
            PolicyCache(store),
            store,
            b.sink,
            event_log,
            settings,
            AuditTrail(b.sink, event_log),
            LEARNING_SETTINGS,
        )
        try:
            assert await a.check() == []  # A's first check: nothing in the log yet
            rebuilds = _rebuilds()
            store_step = b.store.add_policy
            paused, resume = asyncio.Event(), asyncio.Event()

            async def paused_step(name: str) -> None:
                paused.set()
                await resume.wait()
                await store_step(name)

            b.store.add_policy = paused_step
            create = asyncio.ensure_future(http.put("/policies/p", json=POLICY))
            await asyncio.wait_for(paused.wait(), 10)
            b.store.add_policy = store_step
            listed = store.list_policies
            seen: list[tuple[list[str], list[str]]] = []

            async def listed_then_b_writes_the_config() -> list[str]:
                names = await listed()
                seen.append((names, sorted(await asyncio.to_thread(event_log.policies))))
                resume.set()
                assert (await create).status_code == 200
                return names

            store.list_policies = listed_then_b_writes_the_config
            try:
                assert await a.check() == []
            finally:
                store.list_policies = listed
                resume.set()
            assert seen == [([], ["p"])]  # the check found p in the log, not in Redis
            assert (await create).status_code == 200
            await a.wait()
            assert a.missing() == [] and _rebuilds() == rebuilds
            assert await a.check() == []  # p is there: the finding is forgotten

            await _history(http, "p", 6)
            before = (await http.get("/policies/p/stats")).json()
            await asyncio.to_thread(b.sink.flush, 5.0)
            await store.delete_policy("p")  # every key of p gone, as after FLUSHALL
            assert await a.check() == []  # found missing once (not twice, as forgotten)
            await a.wait()
            assert a.missing() == [] and _rebuilds() == rebuilds
            assert await a.check() == ["p"]  # and again: rebuilt from the log
            await a.wait()
            assert a.missing() == [] and _rebuilds() == rebuilds + 1
            after = (await http.get("/policies/p/stats")).json()
            assert (after["decisions"], after["rewards"]) == (6, 6)
            assert after["arms"] == before["arms"]
        finally:
            await store.close()
            await asyncio.to_thread(event_log.close)


@pytest.mark.parametrize("backend", ["embedded", "redis_postgres"])
@pytest.mark.parametrize("change", ["create", "replace", "reset"])
async def test_a_load_while_this_process_writes_the_config_waits_for_the_write(
    make_settings: Any, change: str
) -> None:
    """A create, replace or reset lists the policy in the store, then writes its config.
    A stats read and a decision in between, after a check has read the log's row, find
    the listed policy's config missing: they wait for the write and read again. Neither
    takes the policy for lost: no stand-in, no rebuild, no degraded decision."""
    settings = make_settings(rebuild_check_seconds=3600, metrics_refresh_seconds=3600)
    async with running(settings) as (app, http, _):
        use_cases = app.state.use_cases
        recovery, store, cache = use_cases.recovery, use_cases.store, use_cases.cache
        await _before_the_write(http, change)
        rebuilds = _rebuilds()
        add_policy = store.add_policy
        listed, resume = asyncio.Event(), asyncio.Event()

        async def listed_then_paused(name: str) -> None:
            await add_policy(name)
            listed.set()
            await resume.wait()

        request, dimension = _config_write(http, change)
        store.add_policy = listed_then_paused
        write = asyncio.ensure_future(request)
        await asyncio.wait_for(listed.wait(), 10)
        store.add_policy = add_policy
        assert await recovery.check() == []  # the log has the row, the store lists p

        read = cache.store.read
        found_missing: list[str] = []
        both_found = asyncio.Event()

        async def spied(name: str, keys: list[str], known: Any) -> Any:
            values = await read(name, keys, known)
            config = values.get(CONFIG_KEY)
            if name == "p" and CONFIG_KEY in keys and (config is None or config.data is None):
                found_missing.append(name)
                if len(found_missing) == 2:
                    both_found.set()
            return values

        cache.store.read = spied
        try:
            stats = asyncio.ensure_future(http.get("/policies/p/stats"))
            decision = asyncio.ensure_future(
                http.post("/recommend", json={"policy": "p", "context": [0.1] * dimension})
            )
            await asyncio.wait_for(both_found.wait(), 10)
        finally:
            cache.store.read = read
            resume.set()
        assert (await write).status_code == 200, (await write).text
        assert (await stats).status_code == 200, (await stats).text
        dec = await decision
        assert dec.status_code == 200 and not dec.json()["degraded"], dec.text
        await recovery.wait()
        assert recovery.missing() == [] and _rebuilds() == rebuilds


@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_rebuild_another_replica_wrote_first_keeps_the_cached_runtime(
    make_settings: Any,
) -> None:
    """A request that finds a policy's config missing (another replica creating or
    resetting it) starts its rebuild; a replay that finds the config written meanwhile
    writes nothing and leaves the runtime this process cached: its decisions go on
    drawing from the same rng stream."""
    async with running(make_settings(rebuild_check_seconds=3600)) as (app, http, _):
        use_cases = app.state.use_cases
        recovery, cache = use_cases.recovery, use_cases.cache
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        await _history(http, "p", 3)
        runtime = cache.cached("p")
        assert runtime is not None
        assert await recovery.check() == []  # the directory read: p is known
        rebuilds = _rebuilds()
        assert await recovery.stand_in("p", None) is not None
        assert recovery.missing() == ["p"]
        await recovery.wait()
        assert recovery.missing() == [] and _rebuilds() == rebuilds + 1
        assert cache.cached("p") is runtime
