"""The event log's aggregate and single-event reads behind the console
(:meth:`~service.storage.sql_log.SqlEventLog.activity`, ``event_trail``, ``partitions``),
on PostgreSQL and SQLite.

The aggregates read the rollup tables ``decision_counts``, ``reward_sums`` and
``decision_latency`` (per
1, 15 and 60 minutes, kept by triggers: ``migrations/``, docs/console.md "Performance")
over their primary keys ``(policy, period, start, arm_id)``; an event is found by the
primary key of ``decisions`` and the unique ``(event_id, created_at)`` keys of
``rewards`` and ``late_rewards``, whose first column is the event id.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from service.storage.activity import Activity, ArmSelections, LatencyBin, RewardBucket
from service.storage.base import LATE_SOURCE, DecisionRecord, EventTrail, RewardRecord
from service.storage.partitions import Partition, list_partitions
from service.storage.schema import (
    PARTITIONED_TABLES,
    ROLLUP_PERIODS,
    decision_counts,
    decision_latency,
    decisions,
    late_rewards,
    reward_sums,
    rewards,
)

_DECISION_FIELDS = [f.name for f in dataclasses.fields(DecisionRecord)]
_REWARD_FIELDS = [f.name for f in dataclasses.fields(RewardRecord)]
_LATE_FIELDS = [name for name in _REWARD_FIELDS if name in late_rewards.c]
# the columns of reward_sums in the order of RewardBucket's fields after the arm
_REWARD_SUMS = (
    "rewards",
    "total",
    "squares",
    "weighted",
    "baseline_total",
    "baseline_squares",
    "random_total",
    "random_squares",
)


def rollup_period(since: float, until: float, bucket_seconds: float) -> int:
    """The longest of :data:`ROLLUP_PERIODS` that divides ``since``, ``until`` and
    ``bucket_seconds``: its rows fall each in one bucket of the range. A ValueError
    when none does (the range must lie on whole minutes)."""
    for period in sorted(ROLLUP_PERIODS, reverse=True):
        if all(value % period == 0 for value in (since, until, bucket_seconds)):
            return period
    raise ValueError(
        f"an activity range lies on whole minutes, but got since={since}, until={until}, "
        f"bucket_seconds={bucket_seconds}"
    )


def _per_bucket_and_arm(
    conn: Connection, rollup: sa.Table, window: tuple[str, float, float, float], *sums: Any
) -> sa.Select[Any]:
    """``sums`` of the ``rollup`` rows of the policy starting in ``[since, until)``
    (``window``: policy, since, until, bucket seconds), grouped and ordered by bucket
    index and arm (``decision_latency``: by bucket index and latency bin)."""
    policy, since, until, bucket_seconds = window
    key = "bin" if rollup is decision_latency else "arm_id"
    offset = (rollup.c.start - since) / bucket_seconds
    # exact: the starts and the bounds are whole multiples of the period. SQLite's
    # integer cast truncates, the floor of these non-negative offsets.
    index = sa.cast(offset, sa.Integer) if conn.dialect.name == "sqlite" else sa.func.floor(offset)
    bucket = index.label("bucket")
    return (
        sa.select(bucket, rollup.c[key], *sums)
        .where(
            rollup.c.policy == policy,
            rollup.c.period == rollup_period(since, until, bucket_seconds),
            rollup.c.start >= since,
            rollup.c.start < until,
        )
        .group_by(bucket, rollup.c[key])
        .having(sums[0] > 0)  # rows whose events were all deleted count 0
        .order_by(bucket, rollup.c[key])
    )


def read_activity(
    conn: Connection, policy: str, since: float, until: float, bucket_seconds: float
) -> Activity:
    """Decisions and rewards (with their IPS sums) per (bucket, arm) and decisions per
    (bucket, latency bin) of ``policy`` in ``[since, until)``: three grouped queries over
    the rollup rows of the range (:func:`rollup_period`), as many as its periods times
    its arms (or bins) whatever the events."""
    window = (policy, since, until, bucket_seconds)
    sum_ = sa.func.sum
    chosen = _per_bucket_and_arm(
        conn,
        decision_counts,
        window,
        sum_(decision_counts.c.decisions),
        sum_(decision_counts.c.explored),
    )
    applied = _per_bucket_and_arm(
        conn, reward_sums, window, *(sum_(reward_sums.c[name]) for name in _REWARD_SUMS)
    )
    selections = [
        ArmSelections(since + int(index) * bucket_seconds, arm, int(count), int(explored))
        for index, arm, count, explored in conn.execute(chosen)
    ]
    reward_buckets = [
        RewardBucket(
            since + int(index) * bucket_seconds,
            arm,
            int(count),
            float(total),
            float(sq),
            int(weighted),
            *map(float, ips),
        )
        for index, arm, count, total, sq, weighted, *ips in conn.execute(applied)
    ]
    timed = _per_bucket_and_arm(conn, decision_latency, window, sum_(decision_latency.c.decisions))
    latency = [
        LatencyBin(since + int(index) * bucket_seconds, int(bin_), int(count))
        for index, bin_, count in conn.execute(timed)
    ]
    return Activity(since, until, bucket_seconds, selections, reward_buckets, latency)


def read_event_trail(conn: Connection, event_id: str) -> EventTrail | None:
    """The first decision logged as ``event_id`` and the rewards and late rewards of that
    event, by time."""
    row = conn.execute(
        sa.select(*(decisions.c[name] for name in _DECISION_FIELDS))
        .where(decisions.c.event_id == event_id)
        .order_by(decisions.c.created_at)
        .limit(1)
    ).first()
    if row is None:
        return None
    decision = DecisionRecord(**row._mapping)
    applied = [
        RewardRecord(**r._mapping)
        for r in conn.execute(
            sa.select(*(rewards.c[name] for name in _REWARD_FIELDS)).where(
                rewards.c.event_id == event_id, rewards.c.policy == decision.policy
            )
        )
    ]
    late = [
        RewardRecord(**r._mapping, source=LATE_SOURCE)
        for r in conn.execute(
            sa.select(*(late_rewards.c[name] for name in _LATE_FIELDS)).where(
                late_rewards.c.event_id == event_id, late_rewards.c.policy == decision.policy
            )
        )
    ]
    return EventTrail(decision, sorted(applied + late, key=lambda r: r.created_at))


def read_partitions(conn: Connection) -> list[Partition]:
    """Every partition of the partitioned tables (PostgreSQL) with its bounds, the
    planner's estimate of its rows and its size: read from the catalog, no table
    scanned."""
    return [p for table in PARTITIONED_TABLES for p in list_partitions(conn, table)]
