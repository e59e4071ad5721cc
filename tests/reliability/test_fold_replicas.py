"""Folded model updates across replicas (service/usecases/folds.py): two app processes
on one Redis serve a shared model with ``model_update_interval``; 8 clients per process
reward its events. Every reward the service took is folded into the ``shared`` part
exactly once, equal to the rewards applied one by one (1e-9), also when one replica is
SIGKILLed while rewards and folds run: the other takes the folds' periods over, nothing
is lost and nothing is applied twice. Each case runs on the test's own Redis, on the
session's Redis Cluster (3 masters, 3 replicas) and on its Sentinel group (a master, a
replica, three sentinels)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import numpy as np
import orjson
import pytest
import redis

from bandit_core.hybrid_linucb import HybridSharedState
from service.policies import build_policy
from service.schemas import PolicySpec
from service.settings import Settings
from service.usecases.events import EventState, PendingEvent
from tests.reliability.traffic import HEADERS, wait_until
from tests.servers import AppProcess, apps, settings_env
from tests.service.conftest import ON_REDIS_CLUSTER, ON_REDIS_SENTINEL
from tests.service.test_folds import assert_close, request_body

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(600), pytest.mark.slow]

SPEC: dict[str, Any] = {
    "algorithm": "hybrid_linucb",
    "features": {"bits": 5, "interactions": [["*", "*"]]},
    "params": {"alpha": 0.0},
    "reward_range": [-1.0, 1.0],
    "default_reward": None,
    "reward_wait_seconds": 3600,
    "model_update_interval": 0.2,
}
CLIENTS = 8  # per process
PER_CLIENT = 40  # the deployment and SIGKILL cases; one case runs 1,000


def _session(url: str) -> aiohttp.ClientSession:
    """One keep-alive connection to ``url``, on aiohttp's client: httpx took about 1 ms
    of the test process's CPU per request, which on the 2-core machine is taken from the
    servers under test (docs/testing.md)."""
    return aiohttp.ClientSession(
        url, headers=HEADERS, connector=aiohttp.TCPConnector(limit=1), json_serialize=_dumps
    )


def _dumps(body: Any) -> str:
    return orjson.dumps(body).decode()


async def _decide(url: str, n: int) -> list[str]:
    """The event ids of ``n`` decisions (``request_body``) from CLIENTS clients of
    ``url`` at once."""

    async def client(i: int) -> list[str]:
        async with _session(url) as http:
            ids = []
            for j in range(i, n, CLIENTS):
                async with http.post("/recommend", json=request_body(j, "p")) as r:
                    body = await r.json(loads=orjson.loads)
                    assert r.status == 200, body
                ids.append(body["event_id"])
            return ids

    return [e for ids in await asyncio.gather(*(client(i) for i in range(CLIENTS))) for e in ids]


async def _reward(url: str, events: list[str], value: Callable[[str], float]) -> None:
    """Reward ``events`` from CLIENTS clients of ``url``; a client whose process died
    stops (its rewards in flight may or may not have been taken)."""

    async def client(i: int) -> None:
        try:
            async with _session(url) as http:
                for event_id in events[i::CLIENTS]:
                    reward = {"event_id": event_id, "reward": value(event_id)}
                    async with http.post("/reward", json=reward) as r:
                        body = await r.json(loads=orjson.loads)
                        assert r.status == 200 and body["applied"], body
        except (aiohttp.ClientError, OSError):
            return

    await asyncio.gather(*(client(i) for i in range(CLIENTS)))


def _redis(
    request: pytest.FixtureRequest, deployment: str
) -> tuple[str, redis.Redis | redis.RedisCluster]:
    """The ``BANDIT_REDIS_URL`` of ``deployment`` and a client of its data, flushed."""
    servers = request.getfixturevalue(
        {"redis": "private_redis", "cluster": "redis_cluster", "sentinel": "redis_sentinel"}[
            deployment
        ]
    )
    client = servers.client()
    client.flushall()  # a cluster client sends it to every master
    return servers.url, client


def _state(client: redis.Redis | redis.RedisCluster) -> tuple[HybridSharedState | None, int]:
    data = client.get("bandit:{p}:k:shared")
    pending = sum(1 for _ in client.hscan_iter("bandit:{p}:versions", match="delta:*"))
    return (None if data is None else HybridSharedState.from_bytes(data)), pending


def _events(client: redis.Redis | redis.RedisCluster, events: list[str]) -> list[PendingEvent]:
    pipe = client.pipeline(transaction=False)
    for event_id in events:
        pipe.get(f"bandit:{{p}}:k:event:{event_id}")
    stored = pipe.execute()
    assert None not in stored
    return [PendingEvent.from_json(data) for data in stored]


def _expected(
    client: redis.Redis | redis.RedisCluster,
    spec: PolicySpec,
    events: list[str],
    served: list[PendingEvent],
) -> HybridSharedState:
    """The rewards of the events stored as rewarded, applied one by one in a random
    order to a fresh engine, on the rows of the events as ``served`` (read while
    pending: a finalized event keeps no row)."""
    policy = build_policy(spec)
    rewarded = []
    for event, pending in zip(_events(client, events), served, strict=True):
        if event.state is EventState.REWARDED:
            assert event.reward is not None
            rewarded.append((pending.arm_id, pending.row(), event.reward))
    for i in np.random.default_rng(3).permutation(len(rewarded)):
        policy.update(*rewarded[i])
    return HybridSharedState.from_bytes(policy.export_parts(["shared"])["shared"])


@pytest.mark.parametrize(
    "deployment",
    [
        "redis",
        pytest.param("cluster", marks=ON_REDIS_CLUSTER),
        pytest.param("sentinel", marks=ON_REDIS_SENTINEL),
    ],
)
@pytest.mark.parametrize("kill", [False, True], ids=["both-live", "one-sigkilled"])
async def test_two_replicas_fold_every_reward_once(
    make_settings: Callable[..., Settings],
    request: pytest.FixtureRequest,
    deployment: str,
    kill: bool,
) -> None:
    await two_replicas_reward(make_settings, request, deployment, kill, PER_CLIENT)


@pytest.mark.timeout(1800)
async def test_two_replicas_fold_a_thousand_rewards_per_client_once(
    make_settings: Callable[..., Settings], request: pytest.FixtureRequest
) -> None:
    """The issue's size: 2 processes x 8 clients x 1,000 rewards, on the test's own Redis."""
    await two_replicas_reward(make_settings, request, "redis", False, 1000)


async def two_replicas_reward(
    make_settings: Callable[..., Settings],
    request: pytest.FixtureRequest,
    deployment: str,
    kill: bool,
    per_client: int,
) -> None:
    """Both replicas decide ``CLIENTS * per_client`` events and reward them from CLIENTS
    clients each (one replica SIGKILLed after a quarter is folded when ``kill``); the
    folded ``shared`` part equals the stored rewards applied one by one."""
    url, client = _redis(request, deployment)
    settings = make_settings(redis_url=url, fold_check_seconds=0.05, fold_max_deltas=64)
    env = settings_env(settings)
    a, b = AppProcess(env), AppProcess(env)
    with apps(a, b):
        async with httpx.AsyncClient(base_url=a.url, headers=HEADERS) as http:
            assert (await http.put("/policies/p", json=SPEC)).status_code == 200
        n = CLIENTS * per_client
        on_a, on_b = await asyncio.gather(_decide(a.url, n), _decide(b.url, n))
        served = _events(client, on_a + on_b)
        rng = np.random.default_rng(11)
        values = {e: float(v) for e, v in zip(on_a + on_b, rng.uniform(-1, 1, 2 * n), strict=True)}
        rewarding = asyncio.gather(
            _reward(a.url, on_a, values.__getitem__), _reward(b.url, on_b, values.__getitem__)
        )
        if kill:  # once some rewards are in, while the rest and the folds go on

            async def some_folded() -> bool:
                shared, _ = _state(client)
                return shared is not None and shared.n >= n // 4

            await wait_until(some_folded, 120, "a first fold")
            a.kill()
        await rewarding

        async def all_folded() -> bool:
            shared, pending = _state(client)
            return pending == 0 and shared is not None

        await wait_until(all_folded, 120, "every delta folded")
        spec = PolicySpec.model_validate(SPEC)
        shared, _ = _state(client)
        want = _expected(client, spec, on_a + on_b, served)
        assert_close(shared, want)
        if not kill:
            assert want.n == 2 * n
        else:
            assert n <= want.n <= 2 * n  # all of b's; a's until it died
