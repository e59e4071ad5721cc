"""Faults of a Redis Cluster under traffic, on the test's own 3-master (+3 replica)
cluster (``tests.servers.RedisClusterServers``, node timeout 2 s); three frontends send
recommends and rewards (``tests.reliability.traffic``) to an app on
``redis+cluster://`` while:

- **failover**: the master of the policy's slot is SIGKILLed and never comes back; its
  replica is promoted by the cluster itself;
- **slot migration**: the policy's slot moves to another master as ``redis-cli
  --cluster reshard`` moves it (``SETSLOT IMPORTING/MIGRATING``, ``MIGRATE`` in small
  batches, ``SETSLOT NODE``), the client following MOVED and ASK.

Contract (docs/reliability.md): no answer is a 500 (``/recommend`` answers from the
cached model, ``degraded``; ``/reward`` 503 with ``Retry-After``); no reward is applied
twice; after the migration the model, the counters and the log equal the answers
exactly (nothing is lost: no node died); after the failover the model never holds more
than was accepted (what asynchronous replication may lose is counted and printed). Each
test prints what it measured."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.crc import key_slot

from tests.databases import postgres_schema
from tests.reliability.traffic import (
    HEADERS,
    Ledger,
    assert_no_error_answers,
    check_after_failover,
    drive,
    failover_under_traffic,
    logged,
    model_totals,
    retry_rewards,
    spec,
    wait_until,
)
from tests.servers import AppProcess, RedisClusterServers, reliability_settings, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(300)]
SLOT = key_slot(b"bandit:{p}:versions")  # every key of policy "p" is in this slot


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers()
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def app(tmp_path: Path, cluster: RedisClusterServers) -> Iterator[tuple[AppProcess, str]]:
    """An app on the cluster with 1 s Redis timeouts and ``Retry-After: 1``, and its
    PostgreSQL URL."""
    with postgres_schema() as db_url:
        settings = reliability_settings(
            data_dir=tmp_path / "data",
            redis_url=cluster.url,
            database_url=db_url,
            redis_retry_after_seconds=1,
            redis_timeout_seconds=1.0,
        )
        process = AppProcess(settings_env(settings)).start()
        try:
            yield process, db_url
        finally:
            process.stop()


def _statuses(ledger: Ledger) -> tuple[Counter, Counter, int]:
    return Counter(ledger.recommend_status), Counter(ledger.reward_status), len(ledger.degraded)


async def test_cluster_master_killed_under_traffic(
    cluster: RedisClusterServers, app: tuple[AppProcess, str]
) -> None:
    process, _ = app
    async with httpx.AsyncClient(base_url=process.url, headers=HEADERS) as client:
        assert (await client.put("/policies/p", json=spec())).status_code == 200
    ledger = Ledger(events_may_be_lost=True)

    def kill() -> Callable[[], bool]:
        master = cluster.master_of(SLOT)
        cluster.kill(master)
        return lambda: cluster.master_of(SLOT) != master

    took = await failover_under_traffic(process.url, ledger, kill)
    await check_after_failover(process.url, ledger, "cluster failover", took)


async def test_slot_migration_under_traffic(
    cluster: RedisClusterServers, app: tuple[AppProcess, str]
) -> None:
    process, db_url = app
    ledger = Ledger()
    measured: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=process.url, headers=HEADERS) as client:
        assert (await client.put("/policies/p", json=spec())).status_code == 200

        async def script() -> None:
            await asyncio.sleep(2.0)  # a few hundred pending events to move
            source = cluster.master_of(SLOT)
            target = next(m for m in cluster.masters() if m != source)
            before = _statuses(ledger)
            start = time.monotonic()
            moved = await asyncio.to_thread(cluster.migrate_slot, SLOT, target, 5, 0.05)
            measured["seconds"] = time.monotonic() - start
            measured["keys"] = moved
            after = _statuses(ledger)
            measured["during"] = tuple(a - b for a, b in zip(after[:2], before[:2])) + (
                after[2] - before[2],
            )
            assert cluster.master_of(SLOT) == target
            await asyncio.sleep(1.5)  # traffic on the new owner

        started = time.monotonic()
        await drive(
            [process.url], ledger, "p", 3, workers=3, script=script, pause=0.01, reward_lag=15
        )
        measured["traffic_seconds"] = time.monotonic() - started
        await retry_rewards(process.url, ledger)
        assert_no_error_answers(ledger)
        assert not ledger.lost_events
        stats = (await client.get("/policies/p/stats")).json()
        served = len(ledger.decisions) - len(ledger.degraded)
        assert stats["decisions"] == served  # a degraded decision is not stored
        assert await model_totals(process.url, "p") == ledger.arm_totals()

        async def log_complete() -> bool:
            return logged(db_url, "p")[2] == (len(ledger.decisions), len(ledger.accepted))

        await wait_until(log_complete, 30, "every decision and accepted reward logged")
        decisions, rewards, _ = logged(db_url, "p")
        assert decisions == set(ledger.decisions) and rewards == ledger.accepted
        recommends, reward_answers, degraded = measured["during"]
        seconds = float(measured["seconds"])
        print(
            f"slot migration: {measured['keys']} keys moved in {seconds:.1f}s; "
            f"during it {sum(recommends.values())} decisions ({degraded} degraded; "
            f"{sum(recommends.values()) / seconds:.0f}/s against "
            f"{len(ledger.decisions) / float(measured['traffic_seconds']):.0f}/s over the run) and "
            f"{reward_answers[200]} rewards accepted, {reward_answers[503]} answered 503; "
            f"in all {len(ledger.decisions)} decisions ({len(ledger.degraded)} degraded), "
            f"{len(ledger.accepted)} rewards, model and log exact"
        )
