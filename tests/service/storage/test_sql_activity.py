"""The event log's console reads (``activity``, ``event_trail``) on the real PostgreSQL
and on SQLite, against the same sums computed from the records in Python (the rewards'
counts, sums and IPS sums, through the rollups' triggers, retries, deletes, the partition
upkeep and the migration), and the 95% intervals and IPS estimates of
:mod:`service.usecases.activity` against their closed form."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from service.storage.activity import RewardBucket
from service.storage.base import LATE_SOURCE, DecisionRecord, RewardRecord
from service.storage.migrate import downgrade, upgrade_head
from service.storage.partitions import DAY_SECONDS
from service.storage.schema import decisions, rewards
from service.storage.sql_log import SqlEventLog
from service.usecases.activity import Z_95, ActivityViews, ips_points, reward_point
from tests.databases import database

ROLLUPS_PARENT = "9a4c6e2f7b18"  # the revision before the rollups' migration
LATER_COLUMNS = {
    "latency_us",
    "baseline_weight",
    "random_weight",
    "drop_probability",
}  # added after it
T0 = 1_699_999_200.0  # a whole hour: activity ranges lie on the rollups' periods
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
    i: int,
    t: float,
    arm: str,
    value: float,
    policy: str = "p",
    source: str = "explicit",
    weights: tuple[float, float] | None = None,
) -> RewardRecord:
    baseline_weight, random_weight = weights or (None, None)
    return RewardRecord(f"e{i}", policy, arm, value, source, t, baseline_weight, random_weight)


def _random_records(
    n: int, span: float, seed: int = 7
) -> tuple[list[DecisionRecord], list[RewardRecord]]:
    """``n`` decisions of policy ``p`` over ``[T0, T0 + span)`` on arms a, b, c, each
    rewarded 5 s later, nine in ten with the importance weights of a decision among
    the three whose baseline is ``a``, and one decision and reward of another
    policy."""
    rng = np.random.default_rng(seed)
    times = T0 + rng.uniform(0, span, n)
    arms = rng.choice(["a", "b", "c"], n)
    explored = rng.random(n) < 0.2
    values = rng.normal(0.4, 0.3, n)
    propensities = rng.uniform(0.05, 1.0, n)
    weighted = rng.random(n) < 0.9
    decisions = [
        _decision(i, float(t), str(arm), explored=bool(x))
        for i, (t, arm, x) in enumerate(zip(times, arms, explored))
    ]
    rewards = [
        _reward(
            i,
            float(t) + 5.0,
            str(arm),
            float(v),
            weights=(float(arm == "a") / p, 1.0 / (3 * p)) if w else None,
        )
        for i, (t, arm, v, p, w) in enumerate(zip(times, arms, values, propensities, weighted))
    ]
    other = [_decision(10_000, T0 + 30, "a", policy="other")]
    return decisions + other, rewards + [_reward(10_000, T0 + 31, "a", 9.0, policy="other")]


def _assert_activity_is_the_records(
    log: SqlEventLog,
    records: tuple[list[DecisionRecord], list[RewardRecord]],
    since: float,
    until: float,
    bucket: float,
) -> None:
    """``log.activity("p", ...)`` holds the counts and sums computed from ``records``."""
    activity = log.activity("p", since, until, bucket)

    def key(t: float, arm: str) -> tuple[float, str]:
        return (since + math.floor((t - since) / bucket) * bucket, arm)

    expected_counts: dict[tuple[float, str], list[int]] = {}
    for d in records[0]:
        if d.policy == "p" and since <= d.created_at < until:
            counts = expected_counts.setdefault(key(d.created_at, d.arm_id), [0, 0])
            counts[0] += 1
            counts[1] += int(d.explored)
    got_counts = {(s.start, s.arm_id): [s.decisions, s.explored] for s in activity.selections}
    assert got_counts == expected_counts

    # count, sum, squares; weighted, then sum and squares of r·w for each weight
    expected_sums: dict[tuple[float, str], list[float]] = {}
    for r in records[1]:
        if r.policy == "p" and since <= r.created_at < until:
            sums = expected_sums.setdefault(key(r.created_at, r.arm_id), [0] * 8)
            sums[:3] = [sums[0] + 1, sums[1] + r.value, sums[2] + r.value * r.value]
            if r.baseline_weight is not None and r.random_weight is not None:
                terms = [r.value * r.baseline_weight, r.value * r.random_weight]
                sums[3] += 1
                sums[4:] = [
                    sums[4] + terms[0],
                    sums[5] + terms[0] ** 2,
                    sums[6] + terms[1],
                    sums[7] + terms[1] ** 2,
                ]
    got_sums = {
        (b.start, b.arm_id): [
            b.rewards,
            b.total,
            b.total_squares,
            b.weighted,
            b.baseline_total,
            b.baseline_squares,
            b.random_total,
            b.random_squares,
        ]
        for b in activity.rewards
    }
    assert got_sums.keys() == expected_sums.keys()
    for k, expected in expected_sums.items():
        assert (got_sums[k][0], got_sums[k][3]) == (expected[0], expected[3])
        assert got_sums[k][1:3] == pytest.approx(expected[1:3], rel=1e-9, abs=1e-9)
        assert got_sums[k][4:] == pytest.approx(expected[4:], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("bucket", [60.0, 1800.0, 7200.0])
def test_activity_counts_each_bucket_and_arm_as_the_records_say(
    log: SqlEventLog, bucket: float
) -> None:
    """Buckets of 1 minute, 30 minutes and 2 hours read the rollups per 1, 15 and 60
    minutes: each gives what the records say."""
    records = _random_records(300, 10 * bucket)
    log.append(*records)
    _assert_activity_is_the_records(log, records, T0 + 2 * bucket, T0 + 8 * bucket, bucket)


def test_activity_counts_a_batch_sent_again_once_and_forgets_deleted_events(
    log: SqlEventLog,
) -> None:
    records = _random_records(200, 3600.0, seed=11)
    log.append(*records)
    log.append(*records)  # the writer's retry: every record logged already
    _assert_activity_is_the_records(log, records, T0, T0 + 3600.0, 60.0)

    cutoff = T0 + 1800.0
    assert log.delete_events("p", cutoff, batch_size=37) > 0
    kept = (
        [d for d in records[0] if d.policy != "p" or d.created_at >= cutoff],
        [r for r in records[1] if r.policy != "p" or r.created_at >= cutoff],
    )
    _assert_activity_is_the_records(log, kept, T0, T0 + 3600.0, 60.0)
    _assert_activity_is_the_records(log, kept, T0, T0 + 3600.0, 3600.0)

    log.delete_policy("p")
    empty = log.activity("p", T0, T0 + 3600.0, 60.0)
    assert (empty.selections, empty.rewards) == ([], [])
    assert log.activity("other", T0, T0 + 60.0, 60.0).selections[0].decisions == 1


def test_activity_refuses_a_range_off_whole_minutes(log: SqlEventLog) -> None:
    with pytest.raises(ValueError, match="whole minutes"):
        log.activity("p", T0 + 1.5, T0 + 61.5, 60.0)
    with pytest.raises(ValueError, match="whole minutes"):
        log.activity("p", T0, T0 + 3600.0, 90.0)


def test_migration_counts_the_rows_logged_before_it(tmp_path: Path) -> None:
    """Downgrading past the rollups and upgrading again rebuilds them from the rows
    logged meanwhile (what the migration does to an existing log)."""
    for kind in ("postgresql", "sqlite"):
        with database(kind, tmp_path / kind) as url:
            upgrade_head(url)
            downgrade(url, ROLLUPS_PARENT)
            log = SqlEventLog(url)
            records = _random_records(200, 7200.0, seed=5)
            # the columns of that revision: the decisions' later columns left out
            with log.engine.begin() as conn:
                conn.execute(
                    sa.insert(decisions),
                    [
                        {k: v for k, v in dataclasses.asdict(d).items() if k not in LATER_COLUMNS}
                        for d in records[0]
                    ],
                )
                conn.execute(
                    sa.insert(rewards),
                    [
                        {k: v for k, v in dataclasses.asdict(r).items() if k not in LATER_COLUMNS}
                        for r in records[1]
                    ],
                )
            upgrade_head(url)
            # logged without the weights' columns: no IPS term
            unweighted = (
                records[0],
                [
                    dataclasses.replace(r, baseline_weight=None, random_weight=None)
                    for r in records[1]
                ],
            )
            _assert_activity_is_the_records(log, unweighted, T0, T0 + 7200.0, 300.0)
            _assert_activity_is_the_records(log, unweighted, T0, T0 + 7200.0, 3600.0)
            log.close()


def test_partition_upkeep_keeps_the_rollups(tmp_path: Path) -> None:
    """On PostgreSQL, rows moved out of the default partition into their day are counted
    once, and a day partition dropped by the retention leaves the rollups."""
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        records = _random_records(400, 2 * DAY_SECONDS, seed=3)
        log.append(*records)  # no day partitions yet: every row in the default ones
        assert log.prepare_partitions(T0, days_ahead=3)
        _assert_activity_is_the_records(log, records, T0, T0 + 2 * DAY_SECONDS, 3600.0)
        first_day_end = (T0 // DAY_SECONDS + 1) * DAY_SECONDS
        log.apply_retention({"p": first_day_end, "other": first_day_end}, batch_size=1000)
        kept = tuple([r for r in rs if r.created_at >= first_day_end] for rs in records)
        _assert_activity_is_the_records(log, kept, T0, T0 + 2 * DAY_SECONDS, 3600.0)  # type: ignore[arg-type]
        log.close()


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


def test_the_ips_estimates_are_the_means_of_the_weighted_rewards() -> None:
    """Of the rewards logged with weights, the baseline's and random's estimates are the
    sample means of ``r·w`` with their normal intervals; the others are left out."""
    rng = np.random.default_rng(4)
    values = rng.random(40)
    propensities = rng.uniform(0.1, 1.0, 40)
    baseline = np.where(rng.random(40) < 0.5, 1.0 / propensities, 0.0)
    uniform = 1.0 / (4 * propensities)
    buckets = []
    for arm, part in zip("ab", (slice(0, 15), slice(15, 40))):
        b, u = values[part] * baseline[part], values[part] * uniform[part]
        unweighted = 3  # rewards logged without weights: in the mean reward, not the IPS
        buckets.append(
            RewardBucket(
                0.0,
                arm,
                len(b) + unweighted,
                float(values[part].sum()) + unweighted,
                float((values[part] ** 2).sum()) + unweighted,
                len(b),
                float(b.sum()),
                float((b * b).sum()),
                float(u.sum()),
                float((u * u).sum()),
            )
        )
    for point, terms in zip(ips_points(0.0, buckets), (values * baseline, values * uniform)):
        half = Z_95 * terms.std(ddof=1) / math.sqrt(len(terms))
        assert point.rewards == 40
        assert point.mean == pytest.approx(terms.mean(), rel=1e-12)
        assert (point.low, point.high) == pytest.approx(
            (terms.mean() - half, terms.mean() + half), rel=1e-9
        )


@pytest.mark.anyio
async def test_policy_activity_ends_on_the_bucket_holding_now_and_rates_the_last_two(
    log: SqlEventLog,
) -> None:
    now = T0 + 3600.0 + 120.0  # two minutes into the bucket [T0 + 3600, T0 + 3900)
    log.append(
        [_decision(i, now - 10 - i, "a") for i in range(30)] + [_decision(99, now - 400, "b")],
        [_reward(i, now - 5 - i, "a", 1.0 if i % 3 else 0.0) for i in range(30)],
    )
    views = ActivityViews(log, clock=lambda: now)
    activity = await views.policy_activity("p", 3600.0, 12)
    assert (activity.since, activity.until, activity.bucket_seconds) == (
        T0 + 300.0,
        T0 + 3900.0,
        300.0,
    )
    assert activity.decisions == 31
    # the last two buckets start at T0 + 3300: 7 minutes before now
    assert activity.recent_rates() == (31 / 7, 30 / 7)
    assert activity.reward_mean == pytest.approx(20 / 30)
    assert activity.selection_share() == {"a": 30 / 31, "b": 1 / 31}
