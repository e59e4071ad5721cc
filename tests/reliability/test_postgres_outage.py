"""PostgreSQL outage: the test's own cluster is stopped mid-traffic. Decisions and
rewards keep being answered and spool durably on disk, the app process is restarted
*during* the outage (it must start without the database and adopt the spool), and on
recovery the spool flushes: the log then holds exactly the decisions answered and the
rewards accepted, each once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from service.settings import Settings
from tests.reliability.traffic import (
    HEADERS,
    Ledger,
    drive,
    logged,
    model_totals,
    retry_rewards,
    spec,
    wait_until,
)
from tests.servers import AppProcess, PostgresCluster, RedisServer, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180), pytest.mark.slow]


async def _ready(url: str) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=5.0) as client:
        return (await client.get("/readyz")).json()


async def test_postgres_outage_with_restart(
    tmp_path: Path,
    private_redis: RedisServer,
    pg_cluster: PostgresCluster,
    pg_database: str,
    make_settings: Callable[..., Settings],
) -> None:
    env = settings_env(make_settings(database_url=pg_database))
    app = AppProcess(env).start()
    ledger = Ledger()
    spooled: list[int] = []
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS) as client:
            assert (await client.put("/policies/p", json=spec())).status_code == 200

        async def script() -> None:
            await asyncio.sleep(1.5)
            pg_cluster.stop()
            await wait_until(lambda: _spool_depth(app.url, spooled), 20, "records spooled")
            app.stop()  # graceful restart while the database is down
            app.start()  # same port, same data dir: the new process adopts the spool
            await asyncio.sleep(1.5)
            ready = await _ready(app.url)
            assert ready["event_log"] == "degraded" and ready["spool_depth"] > 0, ready
            assert ready["status"] == "ready", ready  # the spool rides the outage out
            spooled.append(ready["spool_depth"])
            pg_cluster.start()
            await asyncio.sleep(1.0)

        await drive([app.url], ledger, "p", 3, workers=3, script=script, pause=0.01)
        await retry_rewards(app.url, ledger)
        await wait_until(
            lambda: _drained(app.url), 30, "spool flushed and log caught up after recovery"
        )
        # "no answer": refused while the process restarted (never processed, never logged)
        assert set(ledger.recommend_status) <= {200, "no answer"}, ledger.recommend_status
        assert ledger.reward_status.keys() <= {200, "no answer"}, ledger.reward_status
        assert not ledger.degraded
        decisions, rewards, (n_decisions, n_rewards) = logged(pg_database, "p")
        assert decisions == set(ledger.decisions)
        assert n_decisions == len(ledger.decisions)
        assert rewards == ledger.accepted
        assert n_rewards == len(ledger.accepted)
        assert await model_totals(app.url, "p") == ledger.arm_totals()
        print(
            f"postgres outage: {len(ledger.decisions)} decisions, {len(ledger.accepted)} rewards, "
            f"spool depth seen {max(spooled)}"
        )
        assert max(spooled) > 0 and len(ledger.decisions) > 50
    finally:
        app.stop()


async def _spool_depth(url: str, seen: list[int]) -> bool:
    ready = await _ready(url)
    seen.append(ready["spool_depth"])
    return ready["spool_depth"] > 20


async def _drained(url: str) -> bool:
    ready = await _ready(url)
    return (
        ready["status"] == "ready" and ready["spool_depth"] == 0 and ready["log_lag_seconds"] == 0
    )
