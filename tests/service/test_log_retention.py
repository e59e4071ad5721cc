"""Log retention (``logRetentionDays``) and the log routes of the native API, on the
embedded default (SQLite) and on Redis + PostgreSQL (partitioned): with a retention of
one day and events spread over three, the older go and the newer stay, while decisions
keep being served (docs/operations.md, "Log retention")."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from service.storage.base import DecisionRecord, RewardRecord
from service.storage.partitions import DAY_SECONDS, day_partition
from tests.service.conftest import API_KEY, POLICY, running, wait_for

pytestmark = pytest.mark.anyio
PER_DAY = 1500


def old_events(
    policy: str, ages_in_days: list[float], now: float
) -> tuple[list[DecisionRecord], list[RewardRecord]]:
    """``PER_DAY`` decisions ``age`` days old (spread over an hour) for each age, every
    other one rewarded a minute later."""
    made = [
        DecisionRecord(
            event_id=f"{policy}-{age}-{i}",
            policy=policy,
            created_at=now - age * DAY_SECONDS + i * 3600.0 / PER_DAY,
            context=[1.0, 0.0, 0.5],
            candidates=[{"id": "a"}, {"id": "b"}],
            arm_id="a",
            propensity=0.5,
            scores=[0.1, 0.2],
            model_version=1,
        )
        for age in ages_in_days
        for i in range(PER_DAY)
    ]
    paid = [
        RewardRecord(d.event_id, policy, "a", 1.0, "explicit", d.created_at + 60.0)
        for d in made[::2]
    ]
    return made, paid


async def test_retention_deletes_the_old_events_while_decisions_are_served(
    make_settings: Any,
) -> None:
    settings = make_settings(log_upkeep_interval_seconds=0, log_delete_batch=25)
    async with running(settings) as (app, http, _):
        use_cases = app.state.use_cases
        event_log, upkeep = use_cases.event_log, use_cases.log_upkeep
        spec = {**POLICY, "personalizer": {"logRetentionDays": 1}}
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        assert (await http.put("/policies/keep", json=POLICY)).status_code == 200
        now = time.time()
        decisions, rewards = old_events("p", [2.5, 1.5, 0.5], now)
        kept_decisions, kept_rewards = old_events("keep", [1.5], now)
        await asyncio.to_thread(
            event_log.append, decisions + kept_decisions, rewards + kept_rewards
        )
        await upkeep.prepare_partitions()  # the old days get partitions of their own
        assert await asyncio.to_thread(event_log.count, "p") == (3 * PER_DAY, 3 * PER_DAY // 2)

        served: list[float] = []
        stop = asyncio.Event()

        async def recommend_loop() -> None:
            while not stop.is_set():
                r = await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.5]})
                assert r.status_code == 200, r.text
                served.append(time.monotonic())
                # a steady stream, not a flood that starves the log writer of the GIL
                await asyncio.sleep(0.005)

        loop = asyncio.create_task(recommend_loop())
        await wait_for(lambda: len(served) > 0)
        started = time.monotonic()
        retention = await upkeep.apply_retention()
        finished = time.monotonic()
        stop.set()
        await loop

        # decisions were served while the deletion ran, and logged meanwhile
        assert any(started < t < finished for t in served)
        cutoff = now - DAY_SECONDS
        expected = PER_DAY + len(served)
        await wait_for(lambda: event_log.count("p")[0] == expected)
        assert event_log.count("p") == (expected, PER_DAY // 2)
        remaining = list(event_log.iter_events("p"))
        assert min(e.decision.created_at for e in remaining) >= cutoff
        assert {e.decision.event_id for e in remaining} >= {
            d.event_id for d in decisions[-PER_DAY:]
        }
        # a policy without a retention keeps everything, even in the days dropped for p
        assert event_log.count("keep") == (PER_DAY, PER_DAY // 2)
        if event_log.partitioned:
            oldest = int((now - 2.5 * DAY_SECONDS) // DAY_SECONDS)
            assert day_partition("decisions", oldest).name in retention.dropped_partitions
        else:
            assert retention.dropped_partitions == []
        assert retention.deleted_rows > 0
        # a second round finds nothing more to do
        again = await upkeep.apply_retention()
        assert (again.dropped_partitions, again.deleted_rows) == ([], 0)


async def test_log_routes_report_the_span_and_delete_the_policy_log(make_settings: Any) -> None:
    async with running(make_settings(log_upkeep_interval_seconds=0)) as (app, http, _):
        event_log = app.state.use_cases.event_log
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        assert (await http.put("/policies/q", json=POLICY)).status_code == 200
        empty = await http.get("/policies/p/logs")
        assert empty.status_code == 200
        assert empty.json() == {"policy": "p", "first": None, "last": None}
        now = time.time()
        decisions, rewards = old_events("p", [2.0, 0.0], now)
        other, _ = old_events("q", [1.0], now)
        await asyncio.to_thread(event_log.append, decisions + other, rewards)
        span = (await http.get("/policies/p/logs")).json()
        first, last = decisions[0].created_at, decisions[-1].created_at
        assert span["first"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(first)))
        assert span["last"].startswith(time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(last)))
        assert (await http.delete("/policies/p/logs")).status_code == 204
        assert event_log.count("p") == (0, 0)
        assert event_log.count("q") == (PER_DAY, 0)
        assert (await http.get("/policies/p/logs")).json()["first"] is None
        # the model is kept: the policy still serves
        r = await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.5]})
        assert r.status_code == 200
        for method in ("get", "delete"):
            missing = await getattr(http, method)("/policies/nope/logs")
            assert missing.status_code == 404 and "nope" in missing.text


async def test_the_retention_is_the_loops_log_retention_days(make_settings: Any) -> None:
    """``logRetentionDays`` set through Personalizer's service configuration is the
    loop's retention; -1 keeps everything."""
    async with running(make_settings(log_upkeep_interval_seconds=0)) as (app, http, _):
        upkeep = app.state.use_cases.log_upkeep
        assert (await http.put("/policies/loop", json=POLICY)).status_code == 200
        path = "/loops/loop/personalizer/configurations/service"
        headers = {"Ocp-Apim-Subscription-Key": API_KEY}
        config = (await http.get(path, headers=headers)).json()
        assert config["logRetentionDays"] == -1
        assert await upkeep.cutoffs() == {}
        config["logRetentionDays"] = 2
        assert (await http.put(path, json=config, headers=headers)).status_code == 200
        before = time.time()
        cutoff = (await upkeep.cutoffs())["loop"]
        assert before - 2 * DAY_SECONDS <= cutoff <= time.time() - 2 * DAY_SECONDS
