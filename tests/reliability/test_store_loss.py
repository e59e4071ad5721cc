"""Redis loses its data: nothing learned is lost (docs/reliability.md, "Redis loses its
data").

- Redis flushed (FLUSHALL on the test's own redis-server) under traffic, then the api
  restarted on a Redis emptied again, with and without a policies file: every policy
  comes back from the PostgreSQL event log with the statistics it had (decisions and
  rewards per policy; pulls, rewards and reward sums per arm, exact), never re-created
  fresh (same ``reset_at``, a setting changed through the API kept); every decision
  answered meanwhile is a 200, degraded while the policy was being rebuilt, never a 404;
  ``/readyz`` answers 503 naming the missing policies while the rebuild at start waits.
- Redis flushed while PostgreSQL is down: the policy cannot be rebuilt, so its decisions
  stay degraded, ``/readyz`` answers 503 naming it and ``bandit_policies_missing`` is 1
  (the BanditPoliciesMissing alert's expression); PostgreSQL back, the next check
  rebuilds it and the service is ready with the statistics it had.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import psycopg
import pytest
import yaml

from service.settings import Settings
from tests.reliability.traffic import HEADERS, logged, spec, wait_until
from tests.servers import AppProcess, PostgresCluster, RedisServer, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240), pytest.mark.slow]
POLICIES = ("p", "q")
HISTORY = 120  # decisions, each rewarded, per policy before Redis loses its data


async def _history(client: httpx.AsyncClient, policy: str, rng: np.random.Generator) -> None:
    """``HISTORY`` decisions of ``policy``, each rewarded with a quarter (exact sums)."""
    for j in range(HISTORY):
        context = rng.normal(size=3).round(3).tolist()
        r = await client.post("/recommend", json={"policy": policy, "context": context})
        assert r.status_code == 200, r.text
        value = float(j % 5) / 4.0
        r = await client.post("/reward", json={"event_id": r.json()["event_id"], "reward": value})
        assert r.status_code == 200, r.text


async def _stats(client: httpx.AsyncClient, policy: str) -> dict:
    r = await client.get(f"/policies/{policy}/stats")
    assert r.status_code == 200, r.text
    return r.json()


async def _ready(client: httpx.AsyncClient) -> bool:
    r = await client.get("/readyz")
    return r.status_code == 200 and r.json()["policies_missing"] == []


class Traffic:
    """One sequential stream of ``/recommend`` per policy (no rewards) until stopped; keeps
    every answer's status and, per policy, the arms of the decisions not degraded."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.status: Counter[int] = Counter()
        self.degraded = 0
        self.stored: dict[str, Counter[str]] = {p: Counter() for p in POLICIES}
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def _stream(self, policy: str, seed: int) -> None:
        rng = np.random.default_rng(seed)
        async with httpx.AsyncClient(base_url=self.url, headers=HEADERS, timeout=10) as client:
            while not self._stop.is_set():
                context = rng.normal(size=3).round(3).tolist()
                r = await client.post("/recommend", json={"policy": policy, "context": context})
                self.status[r.status_code] += 1
                if r.status_code == 200:
                    body = r.json()
                    if body["degraded"]:
                        self.degraded += 1
                    else:
                        self.stored[policy][body["arm_id"]] += 1
                await asyncio.sleep(0.005)

    def start(self, seed: int) -> None:
        self._stop.clear()
        self._tasks = [
            asyncio.create_task(self._stream(p, seed + i)) for i, p in enumerate(POLICIES)
        ]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


def _expected(before: dict, stored: Counter[str]) -> dict:
    """The statistics of a policy that had ``before`` and then served the decisions
    ``stored`` (not degraded, none rewarded)."""
    arms = {
        arm: {
            "pulls": s["pulls"] + stored[arm],
            "rewarded": s["rewarded"],
            "reward_sum": s["reward_sum"],
        }
        for arm, s in before["arms"].items()
    }
    return {
        "decisions": before["decisions"] + sum(stored.values()),
        "rewards": before["rewards"],
        "arms": arms,
    }


def _logged_pulls(database_url: str, policy: str) -> dict[str, int]:
    """Per arm, the decisions not degraded in the event log."""
    from service.storage.sql_log import SqlEventLog

    log = SqlEventLog(database_url)
    try:
        events = list(log.iter_events(policy))
    finally:
        log.close()
    return dict(Counter(e.decision.arm_id for e in events if not e.decision.degraded))


def _compared(stats: dict) -> dict:
    arms = {
        a: {k: s[k] for k in ("pulls", "rewarded", "reward_sum")} for a, s in stats["arms"].items()
    }
    return {"decisions": stats["decisions"], "rewards": stats["rewards"], "arms": arms}


@pytest.mark.parametrize("with_file", [False, True], ids=["no_policies_file", "policies_file"])
async def test_redis_flushed_under_traffic_then_the_api_restarted(
    with_file: bool,
    tmp_path: Path,
    private_redis: RedisServer,
    make_settings: Callable[..., Settings],
) -> None:
    overrides: dict = {}
    if with_file:
        path = tmp_path / "policies.yaml"
        path.write_text(yaml.safe_dump({"policies": {p: spec() for p in POLICIES}}))
        overrides["policies_file"] = path
    settings = make_settings(**overrides)
    db_url = settings.database_url
    assert db_url is not None
    app = AppProcess(settings_env(settings)).start()
    redis_client = private_redis.client()
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=10) as client:
            if not with_file:
                for p in POLICIES:
                    assert (await client.put(f"/policies/{p}", json=spec())).status_code == 200
            # a setting changed through the API, which the policies file must not undo
            retention = {"personalizer": {"logRetentionDays": 30}}
            r = await client.put("/policies/p", json={**spec(), **retention})
            assert r.status_code == 200, r.text
            rng = np.random.default_rng(11)
            for p in POLICIES:
                await _history(client, p, rng)
            infos = {p: (await client.get(f"/policies/{p}")).json() for p in POLICIES}
            before = {p: await _stats(client, p) for p in POLICIES}

            # 1. Redis flushed under traffic; the running api rebuilds on its own
            traffic = Traffic(app.url)
            traffic.start(seed=1)
            await asyncio.sleep(1.0)
            assert redis_client.flushall()
            await asyncio.sleep(1.0)
            await wait_until(lambda: _ready(client), 60, "policies rebuilt while running")
            await asyncio.sleep(0.5)
            await traffic.stop()
            assert set(traffic.status) == {200}, traffic.status
            assert traffic.degraded > 0  # served while the policies were missing
            for p in POLICIES:
                assert _compared(await _stats(client, p)) == _expected(
                    before[p], traffic.stored[p]
                ), p
        app.stop()

        # 2. Redis loses everything again while the api is down, then the api starts.
        # The log's decisions are locked meanwhile, so the rebuild at start waits (its
        # replay reads them) long enough to be seen; the migrations, which would wait on
        # the lock too, ran at the first start.
        assert redis_client.flushall()
        app = AppProcess({**settings_env(settings), "BANDIT_RUN_MIGRATIONS": "false"})
        restarted = Traffic(app.url)
        with psycopg.connect(db_url) as lock:
            lock.execute("LOCK TABLE decisions IN ACCESS EXCLUSIVE MODE")
            app.start()
            restarted.start(seed=2)
            async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=10) as client:
                await wait_until(lambda: restarted.degraded >= 20, 60, "degraded decisions")
                ready = await client.get("/readyz")
                assert ready.status_code == 503, ready.text
                assert ready.json()["policies_missing"] == list(POLICIES)
            lock.rollback()
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=10) as client:
            await wait_until(lambda: _ready(client), 60, "policies rebuilt at start")
            await asyncio.sleep(0.5)
            await restarted.stop()
            assert set(restarted.status) == {200}, restarted.status
            for p in POLICIES:
                stored = traffic.stored[p] + restarted.stored[p]
                stats = await _stats(client, p)
                assert _compared(stats) == _expected(before[p], stored), p
                info = (await client.get(f"/policies/{p}")).json()
                assert (info["reset_at"], info["created_at"]) == (
                    infos[p]["reset_at"],
                    infos[p]["created_at"],
                )
            kept = (await client.get("/policies/p")).json()["personalizer"]
            assert kept == {"logRetentionDays": 30}
            counted = {
                p: {a: s["pulls"] for a, s in (await _stats(client, p))["arms"].items()}
                for p in POLICIES
            }
        # the counters equal what the log says, once it caught up
        await wait_until(
            lambda: all(_logged_pulls(db_url, p) == counted[p] for p in POLICIES), 30, "log"
        )
    finally:
        app.stop()
    print(
        f"store loss ({'with' if with_file else 'without'} a policies file): "
        f"{sum(traffic.status.values())} decisions while flushed under traffic "
        f"({traffic.degraded} degraded), {sum(restarted.status.values())} during the "
        f"restart ({restarted.degraded} degraded), no answer but 200"
    )


async def test_a_policy_missing_while_the_log_is_down_is_not_ready_until_rebuilt(
    tmp_path: Path,
    private_redis: RedisServer,
    pg_cluster: PostgresCluster,
    pg_database: str,
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(database_url=pg_database, rebuild_check_seconds=0.5)
    app = AppProcess(settings_env(settings)).start()
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=10) as client:
            assert (await client.put("/policies/p", json=spec())).status_code == 200
            await _history(client, "p", np.random.default_rng(3))
            before = await _stats(client, "p")
            await wait_until(
                lambda: logged(pg_database, "p")[2] == (HISTORY, HISTORY), 30, "history logged"
            )
            pg_cluster.stop()
            assert private_redis.client().flushall()
            for _ in range(20):
                r = await client.post("/recommend", json={"policy": "p", "context": [0.1] * 3})
                assert r.status_code == 200 and r.json()["degraded"], r.text
            ready = await client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["policies_missing"] == ["p"]
            metrics = (await client.get("/metrics")).text
            assert re.search(r"^bandit_policies_missing 1\.0$", metrics, re.MULTILINE), metrics
            r = await client.get("/policies/p/stats")
            assert r.status_code == 503 and "retry-after" in r.headers, r.text

            pg_cluster.start()
            await wait_until(lambda: _ready(client), 60, "rebuilt once PostgreSQL is back")
            assert _compared(await _stats(client, "p")) == _compared(before)
            metrics = (await client.get("/metrics")).text
            assert re.search(r"^bandit_policies_missing 0\.0$", metrics, re.MULTILINE)
            assert 'bandit_policy_rebuilds_total{outcome="rebuilt"} 1.0' in metrics
    finally:
        app.stop()
