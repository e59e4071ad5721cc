"""The event log's aggregate and single-event reads behind the console
(:meth:`~service.storage.sql_log.SqlEventLog.activity`, ``event_trail``, ``partitions``),
on PostgreSQL and SQLite.

Every aggregate is bounded in time on ``created_at``, so PostgreSQL prunes the day
partitions outside the range and both dialects read the ``(policy, created_at ...)``
indexes; an event is found by the primary key of ``decisions`` and the unique
``(event_id, created_at)`` keys of ``rewards`` and ``late_rewards``, whose first column
is the event id.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from service.storage.base import (
    LATE_SOURCE,
    Activity,
    ArmSelections,
    DecisionRecord,
    EventTrail,
    RewardBucket,
    RewardRecord,
)
from service.storage.partitions import Partition, list_partitions
from service.storage.schema import PARTITIONED_TABLES, decisions, late_rewards, rewards

_DECISION_FIELDS = [f.name for f in dataclasses.fields(DecisionRecord)]
_LATE_FIELDS = [f.name for f in dataclasses.fields(RewardRecord) if f.name != "source"]


def _bucket(conn: Connection, column: Any, since: float, bucket_seconds: float) -> Any:
    """The bucket index of ``column``: ``floor((column - since) / bucket_seconds)``.
    SQLite's ``floor`` exists only in builds with its math functions; its integer cast
    truncates, which is the floor of the non-negative values the range allows
    (PostgreSQL's cast rounds instead)."""
    offset = (column - since) / bucket_seconds
    if conn.dialect.name == "sqlite":
        return sa.cast(offset, sa.Integer)
    return sa.func.floor(offset)


def _per_bucket_and_arm(
    conn: Connection,
    table: sa.Table,
    window: tuple[str, float, float, float],
    *aggregates: Any,
) -> sa.Select[Any]:
    """``aggregates`` of ``table``'s rows of the policy with ``since <= created_at <
    until`` (``window``: policy, since, until, bucket seconds), grouped and ordered by
    bucket index and arm."""
    policy, since, until, bucket_seconds = window
    bucket = _bucket(conn, table.c.created_at, since, bucket_seconds).label("bucket")
    return (
        sa.select(bucket, table.c.arm_id, *aggregates)
        .where(table.c.policy == policy, table.c.created_at >= since, table.c.created_at < until)
        .group_by(bucket, table.c.arm_id)
        .order_by(bucket, table.c.arm_id)
    )


def read_activity(
    conn: Connection, policy: str, since: float, until: float, bucket_seconds: float
) -> Activity:
    """Decisions and rewards per (bucket, arm) of ``policy`` in ``[since, until)``: two
    grouped queries over the time range."""
    window = (policy, since, until, bucket_seconds)
    explored = sa.func.sum(sa.case((decisions.c.explored, 1), else_=0))
    chosen = _per_bucket_and_arm(conn, decisions, window, sa.func.count(), explored)
    value = rewards.c.value
    applied = _per_bucket_and_arm(
        conn, rewards, window, sa.func.count(), sa.func.sum(value), sa.func.sum(value * value)
    )
    selections = [
        ArmSelections(since + int(index) * bucket_seconds, arm, int(count), int(explored or 0))
        for index, arm, count, explored in conn.execute(chosen)
    ]
    reward_buckets = [
        RewardBucket(since + int(index) * bucket_seconds, arm, int(count), float(total), float(sq))
        for index, arm, count, total, sq in conn.execute(applied)
    ]
    return Activity(since, until, bucket_seconds, selections, reward_buckets)


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
            sa.select(*(rewards.c[name] for name in [*_LATE_FIELDS, "source"])).where(
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
