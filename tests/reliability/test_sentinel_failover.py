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

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.databases import postgres_schema
from tests.reliability.traffic import HEADERS, Ledger, drive, model_totals, retry_rewards, spec
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
            env = settings_env(settings)
            app = AppProcess(env).start()
            ledger = Ledger(events_may_be_lost=True)
            seen: dict[str, float] = {}
            try:
                async with httpx.AsyncClient(base_url=app.url, headers=HEADERS) as client:
                    assert (await client.put("/policies/p", json=spec())).status_code == 200

                    async def script() -> None:
                        await asyncio.sleep(1.5)
                        old = group.master_address()
                        accepted_before = ledger.reward_status[200]
                        seen["killed"] = time.monotonic()
                        group.kill_master()
                        while group.master_address() == old:
                            assert time.monotonic() - seen["killed"] < 60, "no promotion"
                            await asyncio.sleep(0.05)
                        seen["promoted"] = time.monotonic()
                        while ledger.reward_status[200] == accepted_before:
                            assert time.monotonic() - seen["killed"] < 60, "no reconnection"
                            await asyncio.sleep(0.05)
                        seen["rewards again"] = time.monotonic()
                        await asyncio.sleep(1.0)

                    await drive(
                        [app.url],
                        ledger,
                        "p",
                        3,
                        workers=3,
                        script=script,
                        pause=0.01,
                        reward_lag=15,
                    )
                    await retry_rewards(app.url, ledger)
                    assert ledger.recommend_status.keys() <= {200}, ledger.recommend_status
                    assert ledger.reward_status.keys() <= {200, 503, 404}, ledger.reward_status
                    assert ledger.reward_503_without_retry_after == 0
                    # reconnected by itself: fresh decisions are not degraded, ready again
                    r = await client.post("/recommend", json={"policy": "p", "context": [0, 0, 1]})
                    assert r.status_code == 200 and not r.json()["degraded"], r.text
                    assert (await client.get("/readyz")).status_code == 200
                    model = await model_totals(app.url, "p")
                    answered = ledger.arm_totals()
                    for arm, (n, total) in model.items():  # never more than accepted
                        assert n <= answered[arm][0] and total <= answered[arm][1], (arm, model)
                    lost_rewards = sum(n for n, _ in answered.values()) - sum(
                        n for n, _ in model.values()
                    )
                    window = seen["rewards again"] - seen["killed"]
                    print(
                        f"sentinel failover: promotion after "
                        f"{seen['promoted'] - seen['killed']:.1f}s, rewards applied again after "
                        f"{window:.1f}s; {len(ledger.decisions)} decisions "
                        f"({len(ledger.degraded)} degraded), {len(ledger.accepted)} rewards "
                        f"accepted, {ledger.reward_status[503]} answered 503 then retried, "
                        f"{lost_rewards} accepted rewards lost, {len(ledger.lost_events)} "
                        f"decisions whose event was lost (reward answered 404)"
                    )
                    assert window < 30
            finally:
                app.stop()
    finally:
        group.stop()
