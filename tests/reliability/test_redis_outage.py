"""Redis outage: the test's own redis-server is stopped mid-traffic and restarted.

Contract (docs/reliability.md): while Redis is down ``/recommend`` answers 200 from the
process's cached model, flagged ``degraded`` in the body and in
``bandit_degraded_decisions_total``; ``/reward`` answers 503 with ``Retry-After`` and
the client retries. After recovery every accepted reward is in the model exactly once
and in the event log exactly once, and every answered decision (degraded ones too,
marked) is in the log."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from typing import Any

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
from tests.servers import AppProcess, RedisServer, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180), pytest.mark.slow]


async def test_redis_outage_mid_traffic(
    private_redis: RedisServer, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(redis_retry_after_seconds=1)
    db_url = settings.database_url
    env = settings_env(settings)
    app = AppProcess(env).start()
    ledger = Ledger()
    during: dict[str, int] = {}
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS) as client:
            assert (await client.put("/policies/p", json=spec())).status_code == 200

            async def script() -> None:
                await asyncio.sleep(1.5)
                before = dict(ledger.reward_status)
                private_redis.stop()
                await asyncio.sleep(0.3)
                ready = await client.get("/readyz")
                assert ready.status_code == 503 and ready.json()["state_store"] == "unavailable"
                n0 = len(ledger.degraded)
                await asyncio.sleep(2.0)
                during["degraded"] = len(ledger.degraded) - n0
                during["503"] = ledger.reward_status[503] - before.get(503, 0)
                # a reward sent now is refused with Retry-After and changes nothing
                some = next(e for e in ledger.decisions if e not in ledger.degraded)
                r = await client.post("/reward", json={"event_id": some, "reward": 1.0})
                assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
                private_redis.start()
                await asyncio.sleep(1.5)

            await drive(
                [app.url], ledger, "p", 3, workers=3, script=script, pause=0.01, reward_lag=15
            )
            await retry_rewards(app.url, ledger)

            assert set(ledger.recommend_status) == {200}, ledger.recommend_status
            assert ledger.reward_status.keys() <= {200, 503}, ledger.reward_status
            assert ledger.reward_503_without_retry_after == 0
            assert during["degraded"] > 10, during
            # exactly once in the model: counts and exact (quarter) sums per arm
            assert await model_totals(app.url, "p") == ledger.arm_totals()
            # a repeat after recovery is answered without a second update
            some = next(iter(ledger.accepted))
            r = await client.post(
                "/reward", json={"event_id": some, "reward": ledger.accepted[some]}
            )
            assert r.json()["status"] == "already_rewarded" and r.json()["applied"] is False
            assert await model_totals(app.url, "p") == ledger.arm_totals()
            # degraded decisions are counted in the metrics exactly
            text = (await client.get("/metrics")).text
            m = re.search(r'bandit_degraded_decisions_total\{policy="p"\} (\S+)', text)
            assert m and float(m.group(1)) == len(ledger.degraded), (m, len(ledger.degraded))
            assert (await client.get("/readyz")).status_code == 200

        async def caught_up() -> bool:
            decisions, rewards, _ = logged(db_url, "p")
            return decisions == set(ledger.decisions) and rewards == ledger.accepted

        try:
            await wait_until(caught_up, 20, "event log equal to the answers")
        finally:
            decisions, rewards, (n_decisions, n_rewards) = logged(db_url, "p")
            print(
                "decisions answered, not logged:",
                len(set(ledger.decisions) - decisions),
                "logged, not answered:",
                len(decisions - set(ledger.decisions)),
            )
            print(
                "rewards accepted, not logged:",
                {e: v for e, v in ledger.accepted.items() if e not in rewards},
                "logged, not accepted:",
                {e: v for e, v in rewards.items() if e not in ledger.accepted},
            )
        assert (n_decisions, n_rewards) == (len(ledger.decisions), len(ledger.accepted))
        print(
            f"redis outage: {len(ledger.decisions)} decisions ({len(ledger.degraded)} degraded, "
            f"{during['degraded']} during the outage), {len(ledger.accepted)} rewards, "
            f"{ledger.reward_status[503]} answered 503 then retried"
        )
    finally:
        app.stop()


async def test_redis_lost_right_after_the_model_update(
    private_redis: RedisServer,
    make_settings: Callable[..., Settings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worst moment: Redis goes away right after the reward's commit. The commit
    held the event's retention schedule and counters, so nothing after it needs Redis:
    the answer is applied, the reward reaches the event log, the event waits out its
    retention, and the client's retry after recovery does not apply it again."""
    from service.api.app import create_app

    settings = make_settings(log_flush_seconds=0.02, sweeper_interval_seconds=0.05)
    db_url = settings.database_url
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://app", headers=HEADERS
        ) as http:
            assert (await http.put("/policies/p", json=spec())).status_code == 200
            event = (
                await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
            ).json()
            store = app.state.use_cases.store
            counted = await store.counters("p")
            transact = store.transact

            async def commit_then_outage(*args: Any, **kwargs: Any) -> dict[str, int]:
                monkeypatch.setattr(store, "transact", transact)
                versions = await transact(*args, **kwargs)
                private_redis.stop()
                return versions

            monkeypatch.setattr(store, "transact", commit_then_outage)
            first = await http.post("/reward", json={"event_id": event["event_id"], "reward": 0.75})
            assert first.status_code == 200 and first.json()["status"] == "applied", first.text
            private_redis.start()
            for _ in range(50):  # the client's retries (Retry-After) until Redis answers
                again = await http.post(
                    "/reward", json={"event_id": event["event_id"], "reward": 0.75}
                )
                if again.status_code != 503:
                    break
                await asyncio.sleep(0.1)
            assert again.status_code == 200, again.text
            assert again.json()["status"] == "already_rewarded"
            stats = (await http.get("/policies/p/stats")).json()["arms"][event["arm_id"]]
            assert (stats["rewarded"], stats["reward_sum"]) == (1, 0.75)
            await asyncio.to_thread(app.state.use_cases.sink.flush, 10.0)
            _, rewards, counts = logged(db_url, "p")
            assert rewards == {event["event_id"]: 0.75} and counts == (1, 1)
            # on its retention deadline (a day), no longer on its reward deadline (an hour)
            assert event["event_id"] not in await store.due_events("p", time.time() + 7200, 10)
            after = await store.counters("p")
            assert after["pending"] == counted["pending"] - 1
            assert after.get("rewards", 0.0) == counted.get("rewards", 0.0) + 1
