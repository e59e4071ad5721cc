"""The event log's console reads (``activity``, ``event_trail``) on the real PostgreSQL
and on SQLite, against the same sums computed from the records in Python, and the
95% intervals of :mod:`service.usecases.activity` against their closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.storage.base import LATE_SOURCE, DecisionRecord, RewardBucket, RewardRecord
from service.storage.sql_log import SqlEventLog
from service.usecases.activity import Z_95, ActivityViews, reward_point

T0 = 1_700_000_000.0
BUCKET = 60.0


def _decision(
    i: int, t: float, arm: str, policy: str = "p", explored: bool = False
) -> DecisionRecord:
    return DecisionRecord(
        event_id=f"e{i}",
        policy=policy,
        created_at=t,
        context=[0.5, float(i)],
        candidates=[{"id": "a", "features": [1.0]}, {"id": "b", "features": [2.0]}],
        arm_id=arm,
        propensity=0.75,
        scores=[0.25, 0.5],
        model_version=i,
        explored=explored,
    )


def _reward(
    i: int, t: float, arm: str, value: float, policy: str = "p", source: str = "explicit"
) -> RewardRecord:
    return RewardRecord(f"e{i}", policy, arm, value, source, t)


def test_activity_counts_each_bucket_and_arm_as_the_records_say(log: SqlEventLog) -> None:
    rng = np.random.default_rng(7)
    n = 300
    times = T0 + rng.uniform(0, 10 * BUCKET, n)
    arms = rng.choice(["a", "b", "c"], n)
    explored = rng.random(n) < 0.2
    values = rng.normal(0.4, 0.3, n)
    decisions = [
        _decision(i, float(t), str(arm), explored=bool(x))
        for i, (t, arm, x) in enumerate(zip(times, arms, explored))
    ]
    rewards = [
        _reward(i, float(t) + 5.0, str(arm), float(v))
        for i, (t, arm, v) in enumerate(zip(times, arms, values))
    ]
    other = [_decision(10_000, T0 + 30, "a", policy="other")]
    log.append(decisions + other, rewards + [_reward(10_000, T0 + 31, "a", 9.0, policy="other")])

    since, until = T0 + 2 * BUCKET, T0 + 8 * BUCKET
    activity = log.activity("p", since, until, BUCKET)

    expected_counts: dict[tuple[float, str], list[int]] = {}
    for t, arm, x in zip(times, arms, explored):
        if since <= t < until:
            key = (since + math.floor((t - since) / BUCKET) * BUCKET, str(arm))
            counts = expected_counts.setdefault(key, [0, 0])
            counts[0] += 1
            counts[1] += int(x)
    got_counts = {(s.start, s.arm_id): [s.decisions, s.explored] for s in activity.selections}
    assert got_counts == expected_counts

    expected_sums: dict[tuple[float, str], list[float]] = {}
    for t, arm, v in zip(times + 5.0, arms, values):
        if since <= t < until:
            key = (since + math.floor((t - since) / BUCKET) * BUCKET, str(arm))
            sums = expected_sums.setdefault(key, [0, 0.0, 0.0])
            sums[0] += 1
            sums[1] += v
            sums[2] += v * v
    got_sums = {
        (b.start, b.arm_id): [b.rewards, b.total, b.total_squares] for b in activity.rewards
    }
    assert got_sums.keys() == expected_sums.keys()
    for key, (count, total, squares) in expected_sums.items():
        assert got_sums[key][0] == count
        assert got_sums[key][1] == pytest.approx(total, rel=1e-12, abs=1e-12)
        assert got_sums[key][2] == pytest.approx(squares, rel=1e-12)


def test_activity_takes_the_start_of_the_range_and_leaves_its_end(log: SqlEventLog) -> None:
    log.append(
        [_decision(1, T0, "a"), _decision(2, T0 + BUCKET, "b"), _decision(3, T0 - 0.001, "c")],
        [_reward(1, T0, "a", 1.0), _reward(2, T0 + BUCKET, "b", 0.0)],
    )
    activity = log.activity("p", T0, T0 + BUCKET, BUCKET)
    assert [(s.start, s.arm_id, s.decisions) for s in activity.selections] == [(T0, "a", 1)]
    assert [(b.start, b.arm_id, b.rewards) for b in activity.rewards] == [(T0, "a", 1)]


def test_event_trail_has_the_decision_and_every_reward_by_time(log: SqlEventLog) -> None:
    decision = _decision(1, T0, "b")
    applied = _reward(1, T0 + 2, "b", 0.5)
    late = _reward(1, T0 + 9, "b", 1.0, source=LATE_SOURCE)
    log.append([decision, _decision(2, T0, "a")], [late, applied])
    trail = log.event_trail("e1")
    assert trail is not None
    assert trail.decision == decision
    assert trail.rewards == [applied, late]
    assert log.event_trail("missing") is None


def test_the_interval_is_the_normal_interval_of_the_sample_mean() -> None:
    rng = np.random.default_rng(3)
    values = rng.normal(0.3, 0.2, 57)
    halves = [values[:20], values[20:]]
    buckets = [
        RewardBucket(0.0, arm, len(v), float(v.sum()), float((v * v).sum()))
        for arm, v in zip("ab", halves)
    ]
    point = reward_point(0.0, buckets)
    half = Z_95 * values.std(ddof=1) / math.sqrt(len(values))
    assert point.rewards == 57
    assert point.mean == pytest.approx(values.mean(), rel=1e-12)
    assert point.low == pytest.approx(values.mean() - half, rel=1e-9)
    assert point.high == pytest.approx(values.mean() + half, rel=1e-9)
    one = reward_point(5.0, [RewardBucket(5.0, "a", 1, 0.7, 0.49)])
    assert (one.low, one.mean, one.high) == (0.7, 0.7, 0.7)


@pytest.mark.anyio
async def test_policy_activity_ends_now_and_rates_its_last_bucket(log: SqlEventLog) -> None:
    now = T0 + 3600.0
    log.append(
        [_decision(i, now - 10 - i, "a") for i in range(30)] + [_decision(99, now - 400, "b")],
        [_reward(i, now - 5 - i, "a", 1.0 if i % 3 else 0.0) for i in range(30)],
    )
    views = ActivityViews(log, clock=lambda: now)
    activity = await views.policy_activity("p", 3600.0, 12)
    assert (activity.since, activity.until, activity.bucket_seconds) == (T0, now, 300.0)
    assert activity.decisions == 31
    assert activity.last_bucket_rates() == (30 / 5, 30 / 5)
    assert activity.reward_mean == pytest.approx(20 / 30)
    assert activity.selection_share() == {"a": 30 / 31, "b": 1 / 31}
