"""Several app processes (replicas, not workers of one) on one Redis -- a server or a
3-master Redis Cluster -- do their periodic jobs once between them
(docs/operations.md, "Several replicas"):

- **rebuild at start**: three replicas started together on a wiped Redis each find the
  policy missing and replay the log; the model and the counters hold each logged
  decision and reward once, not once per replica;
- **default rewards**: decisions spread over the replicas get no explicit reward; the
  sweepers of all three give each one the default reward exactly once (counters, the
  model's per-arm sums and the multi-process metric);
- **snapshots**: each replica wakes at every period of ``snapshot_interval_seconds``;
  the event log holds at most one snapshot of the policy per period.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import sqlalchemy as sa

from tests.databases import postgres_schema
from tests.reliability.traffic import HEADERS, logged, spec, wait_until
from tests.servers import (
    AppProcess,
    RedisClusterServers,
    RedisServer,
    reliability_settings,
    settings_env,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300), pytest.mark.slow]
REPLICAS = 3
DEFAULT = 0.25
SEEDED, LATER = 40, 90  # decisions before the wipe, decisions across the replicas


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.slow)])
def redis_target(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Callable[[], None]]]:
    """(``BANDIT_REDIS_URL``, a function that wipes every key) of a private Redis
    server or a private 3-master (+3 replica) cluster."""
    if request.param == "redis":
        server = RedisServer(tmp_path / "redis")
        server.start()
        try:
            yield server.url, lambda: server.client().flushall()
        finally:
            server.stop()
    else:
        cluster = RedisClusterServers()
        cluster.start()
        try:
            yield cluster.url, lambda: cluster.client().flushall()
        finally:
            cluster.stop()


def _snapshot_periods(database_url: str, policy: str) -> list[int]:
    from service.storage.schema import model_snapshots
    from service.storage.sql_log import SqlEventLog

    log = SqlEventLog(database_url)
    try:
        query = sa.select(model_snapshots.c.meta).where(model_snapshots.c.policy == policy)
        with log.engine.connect() as conn:
            return [meta["period"] for (meta,) in conn.execute(query)]
    finally:
        log.close()


async def _stats(client: httpx.AsyncClient) -> dict:
    r = await client.get("/policies/p/stats")
    assert r.status_code == 200, r.text
    return r.json()


async def _rebuilt(client: httpx.AsyncClient) -> bool:
    r = await client.get("/readyz")
    return r.json()["policies_missing"] == []


async def _decide(client: httpx.AsyncClient, rng: np.random.Generator) -> dict:
    context = rng.normal(size=3).round(3).tolist()
    r = await client.post("/recommend", json={"policy": "p", "context": context})
    assert r.status_code == 200, r.text
    return r.json()


async def test_replicas_rebuild_sweep_and_snapshot_once(
    tmp_path: Path, redis_target: tuple[str, Callable[[], None]]
) -> None:
    redis_url, wipe = redis_target
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    with postgres_schema() as db_url:
        replicas = [
            AppProcess(
                settings_env(
                    reliability_settings(
                        data_dir=tmp_path / f"data{i}",
                        redis_url=redis_url,
                        database_url=db_url,
                        snapshot_interval_seconds=1.0,
                        sweeper_interval_seconds=0.1,
                        redis_timeout_seconds=5.0,
                    ),
                    PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
                )
            )
            for i in range(REPLICAS)
        ]
        rng = np.random.default_rng(7)
        served: dict[str, str] = {}  # event id -> arm
        explicit: dict[str, float] = {}
        try:
            # 1. one replica builds a history, then Redis loses everything
            first = replicas[0].start()
            async with httpx.AsyncClient(base_url=first.url, headers=HEADERS, timeout=30) as c:
                policy = spec(default_reward=DEFAULT, reward_wait_seconds=1.0)
                assert (await c.put("/policies/p", json=policy)).status_code == 200
                for j in range(SEEDED):
                    body = await _decide(c, rng)
                    served[body["event_id"]] = body["arm_id"]
                    if j % 2:
                        value = float(j % 5) / 4.0
                        r = await c.post(
                            "/reward", json={"event_id": body["event_id"], "reward": value}
                        )
                        assert r.status_code == 200, r.text
                        explicit[body["event_id"]] = value
                await wait_until(
                    lambda: logged(db_url, "p")[2] == (SEEDED, SEEDED), 60, "history logged"
                )
                before = (await _stats(c))["arms"]
            first.stop()
            wipe()

            # 2. three replicas start together, each rebuilding the wiped policy
            first_period = int(time.time() // 1.0) + 1
            with ThreadPoolExecutor(REPLICAS) as pool:
                list(pool.map(lambda p: p.start(timeout=120), replicas))
            clients = [
                httpx.AsyncClient(base_url=p.url, headers=HEADERS, timeout=30) for p in replicas
            ]
            try:
                for c in clients:
                    await wait_until(lambda c=c: _rebuilt(c), 60, "policy rebuilt")
                stats = await _stats(clients[1])
                assert (stats["decisions"], stats["rewards"]) == (SEEDED, SEEDED)
                assert stats["default_rewards"] == SEEDED - len(explicit)
                assert stats["arms"] == before

                # 3. decisions over the replicas, none rewarded: every sweeper races
                for j in range(LATER):
                    body = await _decide(clients[j % REPLICAS], rng)
                    served[body["event_id"]] = body["arm_id"]

                async def all_defaulted() -> bool:
                    return (await _stats(clients[2]))["rewards"] >= SEEDED + LATER

                await wait_until(all_defaulted, 60, "every event defaulted")
                await asyncio.sleep(0.5)  # a duplicate sweep would land by now
                stats = await _stats(clients[0])
                defaulted = set(served) - set(explicit)
                assert (stats["decisions"], stats["rewards"]) == (len(served), len(served))
                assert stats["default_rewards"] == len(defaulted)
                for arm in ("a", "b", "c"):
                    events = [e for e, a in served.items() if a == arm]
                    got = stats["arms"].get(arm, {"pulls": 0, "rewarded": 0, "reward_sum": 0.0})
                    want = sum(explicit.get(e, DEFAULT) for e in events)
                    assert (got["pulls"], got["rewarded"], got["reward_sum"]) == (
                        len(events),
                        len(events),
                        want,
                    ), arm
                text = (await clients[1].get("/metrics")).text
                m = re.search(r'bandit_default_rewards_total\{policy="p"\} (\S+)', text)
                assert m and float(m.group(1)) == len(defaulted), m  # all four processes
                await wait_until(
                    lambda: logged(db_url, "p")[2] == (len(served), len(served)),
                    60,
                    "every reward logged",
                )
                rewards = logged(db_url, "p")[1]
                assert all(rewards[e] == DEFAULT for e in defaulted)

                # 4. snapshots: a few periods pass with all three replicas awake
                await wait_until(
                    lambda: sum(t >= first_period for t in _snapshot_periods(db_url, "p")) >= 4,
                    60,
                    "four snapshots",
                )
            finally:
                for c in clients:
                    await c.aclose()
        finally:
            for p in replicas:
                p.stop()
        periods = [t for t in _snapshot_periods(db_url, "p") if t >= first_period]
        assert len(periods) == len(set(periods)), sorted(periods)
        gaps = max(periods) - min(periods) + 1 - len(periods)  # a stalled machine skips some
        print(
            f"replicas ({redis_url.split(':')[0]}): {REPLICAS} processes, {len(served)} "
            f"decisions, {len(defaulted)} default rewards each applied once; "
            f"{len(periods)} snapshots in {len(periods)} distinct periods "
            f"({gaps} periods without one)"
        )
