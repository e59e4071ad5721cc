"""No lost update across processes: two real app processes (uvicorn) share one Redis
(a server, a 3-master Redis Cluster or a Sentinel-managed master);
8 concurrent clients send 250 rewards each for decisions of the same arm, spread over
both processes. The arm must end with exactly 2000 rewards, the exact reward sum
(rewards are multiples of 1/4, so float sums are exact), and ridge state
``A = 1 + 2000``, ``b = sum of rewards`` (checked through the greedy score b / A).
The same clients against one process on the embedded default (in-process store), and
against two processes on one Redis with ``BANDIT_REWARD_BATCHING=false`` (one store
transaction per reward instead of coalesced batches)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import redis

from bandit_core import policy_from_bytes
from bandit_core.features import Featurizer, FeaturizerConfig
from bandit_core.featurized import featurized_rows
from service.client import BanditAPIError, BanditClient
from tests.databases import postgres_schema
from tests.servers import AppProcess
from tests.service.conftest import API_KEY, ON_REDIS_CLUSTER, ON_REDIS_SENTINEL

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
CLIENTS, PER_CLIENT = 8, 250


@pytest.fixture(
    params=[
        "redis",
        "redis-unbatched",
        "embedded",
        pytest.param("cluster", marks=ON_REDIS_CLUSTER),
        pytest.param("sentinel", marks=ON_REDIS_SENTINEL),
    ]
)
def two_processes(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Base URLs of two uvicorn processes sharing a PostgreSQL schema and one Redis: a
    server (rewards in batches, or one transaction each), the session's Redis Cluster or
    its Sentinel-managed master (emptied first); for ``embedded``, the URL of one process
    on the embedded default, twice."""
    env = {
        "BANDIT_API_KEYS": API_KEY,
        "BANDIT_DEMO_POLICY": "false",
        "BANDIT_PERSONALIZER_LOOP": "false",
        "BANDIT_SNAPSHOT_INTERVAL_SECONDS": "0",
        "BANDIT_REDIS_TIMEOUT_SECONDS": "10",
        "BANDIT_REWARD_BATCHING": str(request.param != "redis-unbatched").lower(),
    }
    if request.param == "embedded":
        app = AppProcess({**env, "BANDIT_DATA_DIR": str(tmp_path / "data")}).start()
        try:
            yield [app.url, app.url]
        finally:
            app.stop()
        return
    if request.param.startswith("redis"):
        redis_url = request.getfixturevalue("redis_url")
        redis.Redis.from_url(redis_url).flushdb()
    else:
        servers = request.getfixturevalue(f"redis_{request.param}")
        redis_url = servers.url
        servers.client().flushall()
    with postgres_schema() as db_url:
        metrics_dir = tmp_path / "metrics"
        metrics_dir.mkdir()
        apps: list[AppProcess] = []
        try:
            for i in range(2):
                shared = {
                    "BANDIT_REDIS_URL": redis_url,
                    "BANDIT_DATABASE_URL": db_url,
                    "BANDIT_DATA_DIR": str(tmp_path / f"data{i}"),
                    "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
                }
                apps.append(AppProcess({**env, **shared}).start())
            for app in apps:
                assert httpx.get(f"{app.url}/readyz", timeout=5.0).status_code == 200
            yield [app.url for app in apps]
        finally:
            for app in apps:
                app.stop()


async def decide_and_reward(
    clients: list[httpx.AsyncClient], rewards: np.ndarray, body: Callable[[int, int], dict]
) -> None:
    """``rewards.shape[0]`` concurrent clients each send ``rewards.shape[1]`` decisions
    (``body(k, j)``) alternating between the processes, then reward each one through the
    other process; every call must succeed and every reward apply."""

    async def decide(k: int) -> list[str]:
        ids = []
        for j in range(rewards.shape[1]):
            r = await clients[(k + j) % 2].post("/recommend", json=body(k, j))
            assert r.status_code == 200, r.text
            ids.append(r.json()["event_id"])
        return ids

    events = await asyncio.gather(*(decide(k) for k in range(rewards.shape[0])))

    async def reward(k: int) -> None:
        for j, event_id in enumerate(events[k]):
            r = await clients[(k + j + 1) % 2].post(
                "/reward", json={"event_id": event_id, "reward": float(rewards[k, j])}
            )
            assert r.status_code == 200 and r.json()["applied"], r.text

    await asyncio.gather(*(reward(k) for k in range(rewards.shape[0])))


async def test_concurrent_rewards_to_one_arm_across_two_processes(two_processes: list[str]) -> None:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    clients = [httpx.AsyncClient(base_url=u, headers=headers, timeout=30.0) for u in two_processes]
    try:
        spec = {
            "algorithm": "linucb",
            "dimension": 1,
            "params": {"alpha": 0.0},
            "arms": ["hot"],
            "reward_wait_seconds": 3600,
        }
        with BanditClient(two_processes[0], api_key=API_KEY) as admin:  # the sync client
            assert admin.put_policy("p", spec).arms == ["hot"]
            with pytest.raises(BanditAPIError, match="does not exist") as missing:
                admin.get_policy("missing")
            assert missing.value.status == 404
        rewards = np.random.default_rng(7).integers(0, 5, size=(CLIENTS, PER_CLIENT)) / 4.0
        await decide_and_reward(clients, rewards, lambda k, j: {"policy": "p", "context": [1.0]})

        expected_sum = float(rewards.sum())
        for url in two_processes:  # both processes see the same, exact state
            with BanditClient(url, api_key=API_KEY) as admin:
                hot = admin.stats("p").arms["hot"]
            assert hot.pulls == CLIENTS * PER_CLIENT
            assert hot.rewarded == CLIENTS * PER_CLIENT
            assert hot.reward_sum == expected_sum
        # /metrics of either process aggregates both (PROMETHEUS_MULTIPROC_DIR).
        text = (await clients[0].get("/metrics")).text
        assert 'bandit_rewards_total{arm="hot",policy="p",source="explicit"} 2000.0' in text
        assert (
            f'bandit_reward_positive_sum_total{{arm="hot",policy="p",source="explicit"}} {expected_sum}'
            in text
        )
        assert (
            'bandit_reward_negative_sum_total{arm="hot",policy="p",source="explicit"} 0.0' in text
        )
        snap = (await clients[1].get("/policies/p/snapshot")).json()
        policy = policy_from_bytes(base64.b64decode(snap["data"]))
        score = policy.select(["hot"], np.ones((1, 1)), explore=False).scores[0]
        assert score == pytest.approx(expected_sum / (1 + CLIENTS * PER_CLIENT), rel=1e-9)
    finally:
        for client in clients:
            await client.aclose()


async def test_concurrent_rewards_to_a_shared_model_across_two_processes(
    two_processes: list[str],
) -> None:
    """hybrid_linucb over JSON features, candidates with new ids on every request: the
    shared part takes every reward exactly once (count, sum and A_0, b_0 exact)."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    clients = [httpx.AsyncClient(base_url=u, headers=headers, timeout=30.0) for u in two_processes]
    n_clients, per_client = 4, 100
    try:
        spec = {
            "algorithm": "hybrid_linucb",
            "features": {"bits": 4},
            "params": {"alpha": 0.0},
            "reward_wait_seconds": 3600,
        }
        assert (await clients[0].put("/policies/s", json=spec)).status_code == 200
        rewards = np.random.default_rng(11).integers(0, 5, size=(n_clients, per_client)) / 4.0
        context = {"user": {"segment": "a"}}
        item = {"item": {"category": "food"}}  # every candidate has the same row z

        def body(k: int, j: int) -> dict:
            arms = [{"id": f"c{k}-{j}-{m}", "features": item} for m in range(3)]
            return {"policy": "s", "context": context, "arms": arms}

        await decide_and_reward(clients, rewards, body)

        n, total = n_clients * per_client, float(rewards.sum())
        for url in two_processes:
            with BanditClient(url, api_key=API_KEY) as admin:
                stats = admin.stats("s")
            assert stats.policy_stats["rewarded"] == n
            assert stats.policy_stats["reward_sum"] == total
        snap = (await clients[1].get("/policies/s/snapshot")).json()
        policy = policy_from_bytes(base64.b64decode(snap["data"]))
        assert policy.part_names() == ["shared"]  # no state for the 1,200 candidate ids
        z = featurized_rows(Featurizer(FeaturizerConfig(bits=4)), policy, context, [item])[0]
        # A_0 = I + n z z', b_0 = total z: z'beta = total |z|^2 / (1 + n |z|^2)
        score = policy.select(["any"], z[None, :], explore=False).scores[0]
        zz = float(z @ z)
        assert score == pytest.approx(total * zz / (1 + n * zz), rel=1e-9)
    finally:
        for client in clients:
            await client.aclose()
