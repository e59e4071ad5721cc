"""The importance weights each reward is logged with (``service.usecases.events``
``ips_weights``) and the event log's IPS sums of them (docs/console.md, "Baseline and
random"), on the embedded default (SQLite) and on Redis + PostgreSQL: the rollups hold
the sums computed from the logged decisions (the served arm's propensity, the candidates
after exclusions, the first of them the baseline) and their rewards, each rewarded event
counted once however its reward came: a native reward sent again with the same value and
with another, a Personalizer loop's rewards summed within the wait, the default reward,
a reward after the wait (late: no term)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from service.storage.base import EventLog
from tests.service.conftest import running, wait_for

pytestmark = pytest.mark.anyio

ARMS = ["a", "b", "c", "d"]
NATIVE = "native"
NATIVE_SPEC = {
    "algorithm": "linucb",
    "dimension": 2,
    "arms": ARMS,
    "epsilon": 0.5,
    "reward_wait_seconds": 600,
}
LOOP = "summed"
BASE = f"/loops/{LOOP}/personalizer/v1.1-preview.3"
LOOP_SPEC = {"algorithm": "linucb", "features": {"bits": 4}, "epsilon": 0.5}
ACTIONS = [{"id": a, "features": [{"item": {"name": a}}]} for a in ARMS]
LOOP_EVENTS = 6


def _expected(log: EventLog, policy: str) -> list[float]:
    """From the logged decisions and rewards of ``policy``: the rewards, and the sums and
    sums of squares of ``r·w`` for the baseline's and random's weights."""
    sums = [0.0] * 5
    for logged in log.iter_events(policy):
        d, r = logged.decision, logged.reward
        if r is None:
            continue
        assert isinstance(d.candidates, list)
        ids = [c["id"] for c in d.candidates]
        baseline = r.value * (d.arm_id == ids[0]) / d.propensity
        uniform = r.value / (len(ids) * d.propensity)
        sums = [a + b for a, b in zip(sums, (1, baseline, baseline**2, uniform, uniform**2))]
    return sums


def _rolled_up(log: EventLog, policy: str, since: float) -> tuple[list[float], int]:
    """The IPS sums of ``policy``'s rollups from ``since`` to the minute after now, in the
    order of :func:`_expected`, and the rewards counted."""
    start = math.floor(since / 60) * 60 - 60
    activity = log.activity(policy, start, math.ceil(time.time() / 60) * 60 + 60, 60.0)
    got = [0.0] * 5
    for b in activity.rewards:
        terms = (b.weighted, b.baseline_total, b.baseline_squares, b.random_total)
        got = [a + v for a, v in zip(got, (*terms, b.random_squares))]
    return got, sum(b.rewards for b in activity.rewards)


async def _native_traffic(http: Any) -> int:
    """Decisions among 2 to 4 candidates in turning orders (some with the first
    excluded), most rewarded, some twice; the events rewarded."""
    assert (await http.put(f"/policies/{NATIVE}", json=NATIVE_SPEC)).status_code == 200
    rewarded = 0
    for i in range(24):
        turned = ARMS[i % 4 :] + ARMS[: i % 4]
        body: dict[str, Any] = {
            "policy": NATIVE,
            "context": [1.0, i / 24],
            "arms": [{"id": a} for a in turned[: 2 + i % 3]],
        }
        if i % 5 == 0:
            body["exclude"] = [turned[0]]  # the baseline is then the second one sent
        answer = await http.post("/recommend", json=body)
        assert answer.status_code == 200, answer.text
        event_id = answer.json()["event_id"]
        if i % 6 == 5:
            continue  # no reward within the test: nothing logged
        first = (i % 4) / 4
        # sent again: with the same value (already rewarded), another (conflicting), none
        for value in [first, *{0: [first], 1: [1.0], 2: []}[i % 3]]:
            sent = await http.post("/reward", json={"event_id": event_id, "reward": value})
            assert sent.status_code == 200, sent.text
        rewarded += 1
    return rewarded


async def _loop_traffic(http: Any) -> list[str]:
    """A loop summing the rewards of a 2-second wait: two of three events get 0.2 and
    0.3, the others none (the default reward); the event ids."""
    assert (await http.put(f"/policies/{LOOP}", json=LOOP_SPEC)).status_code == 200
    config = (await http.get(f"{BASE}/configurations/service")).json()
    config.pop("latestApprenticeModeMetrics", None)
    changes = {"rewardAggregation": "sum", "rewardWaitTime": "PT2S", "defaultReward": 0.25}
    put = await http.put(f"{BASE}/configurations/service", json={**config, **changes})
    assert put.status_code == 200, put.text
    events = []
    for j in range(LOOP_EVENTS):
        context = [{"user": {"n": j}}]
        ranked = await http.post(
            f"{BASE}/rank", json={"contextFeatures": context, "actions": ACTIONS}
        )
        assert ranked.status_code == 201, ranked.text
        events.append(ranked.json()["eventId"])
        for value in (0.2, 0.3) if j % 3 else ():
            sent = await http.post(f"{BASE}/events/{events[-1]}/reward", json={"value": value})
            assert sent.status_code == 204, sent.text
    return events


async def test_each_rewarded_event_adds_its_ips_terms_once(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        log = app.state.use_cases.event_log
        started = time.time()
        native_rewarded = await _native_traffic(http)
        events = await _loop_traffic(http)
        # the sweeper applies each sum (or the default) when the wait ends
        await wait_for(lambda: log.count(LOOP)[1] == LOOP_EVENTS, timeout=30)
        late = await http.post(f"{BASE}/events/{events[1]}/reward", json={"value": 1.0})
        assert late.status_code == 204, late.text
        await wait_for(lambda: len(log.late_rewards(LOOP)) == 1, timeout=30)
        await wait_for(lambda: log.count(NATIVE)[1] == native_rewarded, timeout=30)
        for policy, rewarded in ((NATIVE, native_rewarded), (LOOP, LOOP_EVENTS)):
            expected = _expected(log, policy)
            got, rewards = _rolled_up(log, policy, started)
            assert (got[0], rewards, expected[0]) == (rewarded, rewarded, rewarded)
            assert got[1:] == pytest.approx(expected[1:], rel=1e-9, abs=1e-12)
        summed = {e.decision.event_id: e.reward for e in log.iter_events(LOOP)}
        assert sorted(r.value for r in summed.values() if r is not None) == [0.25] * 2 + [0.5] * 4
