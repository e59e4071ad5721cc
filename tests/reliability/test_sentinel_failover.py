"""Sentinel failover under traffic: the master of the test's own Sentinel group (one
master, one replica, three sentinels, down-after 1 s) is killed while three frontends
send recommends and rewards to an app on ``redis+sentinel://``.

Contract (docs/reliability.md): no answer is a 500 (``/recommend`` answers from the
cached model, flagged ``degraded``; ``/reward`` answers 503 with ``Retry-After``); the
service reconnects to the promoted replica by itself; no reward is applied twice (the
model never holds more rewards than were accepted); what is lost is what Redis's
asynchronous replication loses (writes acknowledged in the last moments before the
kill), and the test prints it with the unavailability window."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.databases import postgres_schema
from tests.reliability.traffic import (
    HEADERS,
    Ledger,
    check_after_failover,
    failover_under_traffic,
    spec,
)
from tests.servers import AppProcess, SentinelGroup, reliability_settings, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(240)]


async def test_sentinel_master_killed_under_traffic(tmp_path: Path) -> None:
    group = SentinelGroup()
    group.start()
    try:
        with postgres_schema() as db_url:
            settings = reliability_settings(
                data_dir=tmp_path / "data",
                redis_url=group.url,
                database_url=db_url,
                redis_retry_after_seconds=1,
                redis_timeout_seconds=1.0,
            )
            app = AppProcess(settings_env(settings)).start()
            try:
                async with httpx.AsyncClient(base_url=app.url, headers=HEADERS) as client:
                    assert (await client.put("/policies/p", json=spec())).status_code == 200
                ledger = Ledger(events_may_be_lost=True)

                def kill() -> Callable[[], bool]:
                    old = group.master_address()
                    group.kill_master()
                    return lambda: group.master_address() != old

                took = await failover_under_traffic(app.url, ledger, kill)
                await check_after_failover(app.url, ledger, "sentinel failover", took)
                assert took["window"] < 30
            finally:
                app.stop()
    finally:
        group.stop()
