"""Folded model updates (service/usecases/folds.py) when Redis restarts in the middle of a
fold: the Redis server holding the policy is SIGKILLed and started again on its files
at one step of a fold, the fold paused there by a hook in the store's transaction (no
timing):

- **before the read**: the fold listed the pending deltas, its transaction has not read;
- **before the commit**: it read the shared part and the deltas and computed the fold;
- **down at the commit**: as before the commit, but Redis comes back only after the
  commit failed;
- **after the commit**: the fold's commit was acknowledged.

Each accepted reward is in the model exactly once afterwards (the ``shared`` part equals
the rewards applied one by one in a random order, to 1e-9) and no delta is left. Each
step runs on three deployments, every server with an append-only file fsync'ed on every
write: the test's own ``redis-server`` (``tests.servers.RedisServer``); the master of
the policy's slot in this module's Redis Cluster (3 masters, 3 replicas); the master of
this module's Sentinel group (a master, a replica, three sentinels). The cluster's node
timeout and the sentinels' down-after are 60 s, longer than a restart: the server comes
back as the master it was (a restart, not a failover, which
``test_cluster_faults.py`` and ``test_sentinel_failover.py`` cover)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import pytest
from redis.crc import key_slot

from bandit_core.hybrid_linucb import HybridSharedState
from service.policies import build_policy, spec_of
from service.settings import Settings
from service.storage.base import StoreUnavailableError
from service.usecases.events import DELTA_PREFIX, EventState, PendingEvent, event_key
from tests.conftest import running as servers_running
from tests.servers import RedisClusterServers, SentinelGroup
from tests.service.conftest import API_KEY, running
from tests.service.test_folds import NAME, SPEC, Served, assert_close, decisions, served_rows

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group(__name__),
]

REWARDS = 60
STEPS = ["before-read", "before-commit", "down-at-commit", "after-commit"]
DEPLOYMENTS = ["redis", "cluster", "sentinel"]
NO_FAILOVER_MS = 60_000


class Restartable(Protocol):
    """The Redis server that holds the policy: ``url`` the service's ``BANDIT_REDIS_URL``,
    :meth:`kill` SIGKILLs it, :meth:`start` starts it again on its files."""

    url: str

    def kill(self) -> None: ...

    def start(self) -> None: ...


class ClusterMaster:
    """The master of ``NAME``'s slot in a Redis Cluster."""

    def __init__(self, servers: RedisClusterServers) -> None:
        self.servers = servers
        self.url = servers.url
        self.port = servers.master_of(key_slot(NAME.encode()))

    def kill(self) -> None:
        self.servers.kill(self.port)

    def start(self) -> None:
        self.servers.restart(self.port)


class SentinelMaster:
    """The master of a Sentinel group."""

    def __init__(self, servers: SentinelGroup) -> None:
        self.servers = servers
        self.url = servers.url
        self.port = servers.master_address()[1]

    def kill(self) -> None:
        assert self.servers.kill_master() == self.port

    def start(self) -> None:
        self.servers.restart(self.port)


@pytest.fixture(scope="module")
def aof_cluster() -> Iterator[RedisClusterServers]:
    """This module's own cluster: the session's runs without persistence, and restarting
    its nodes would disturb the other tests on it."""
    yield from servers_running(RedisClusterServers(persist=True, node_timeout_ms=NO_FAILOVER_MS))


@pytest.fixture(scope="module")
def aof_sentinel() -> Iterator[SentinelGroup]:
    """This module's own Sentinel group, for the reason of :func:`aof_cluster`."""
    yield from servers_running(SentinelGroup(persist=True, down_after_ms=NO_FAILOVER_MS))


@pytest.fixture(params=DEPLOYMENTS)
def node(request: pytest.FixtureRequest) -> Restartable:
    """The server holding the policy on the deployment under test, its data flushed."""
    if request.param == "redis":
        redis_server = request.getfixturevalue("private_redis")
        server: Restartable = redis_server
        client: Any = redis_server.client()
    elif request.param == "cluster":
        servers = request.getfixturevalue("aof_cluster")
        server, client = ClusterMaster(servers), servers.client()
    else:
        group = request.getfixturevalue("aof_sentinel")
        server, client = SentinelMaster(group), group.client()
    client.flushall()  # a cluster client sends it to every master
    return server


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
    make_settings: Callable[..., Settings], node: Restartable, step: str
) -> None:
    settings = make_settings(
        redis_url=node.url, api_keys=[API_KEY], fold_check_seconds=3600.0, fold_max_deltas=100_000
    )
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
            node.kill()
            node.start()

        async def paused(policy: str, keys: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
            def computed_then(values: dict[str, bytes | None]) -> Any:
                writes = fn(values)
                if not hooked:
                    hooked.append(step)
                    if step == "before-commit":
                        restart()
                    elif step == "down-at-commit":
                        node.kill()
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
                node.start()
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
