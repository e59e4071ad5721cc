"""Daily range partitions of the event log on PostgreSQL (docs/operations.md, "Event-log
partitions").

Since migration ``4b8d2f6a1c37`` ``decisions`` and ``rewards`` are ``PARTITION BY RANGE
(created_at)`` (unix seconds). Each UTC day ``[d, d + 86400)`` is a partition named
``<table>_pYYYYMMDD``; ``<table>_default`` takes any row no day partition covers, so an
insert never fails, even when the upkeep has not run. :func:`create_partitions` (the
service's upkeep, and ``bandit partitions``) creates the days from yesterday to
``days_ahead`` days ahead and moves whatever the default partition holds into its days
(the rows the migration carried over, or rows written while the upkeep was late): per
day, in one short transaction, a new table gets the day's rows out of the default
partition and is attached. :func:`drop_partitions_before` drops whole days for the
retention. Every step holds a transaction-level advisory lock, so replicas running the
upkeep at once take turns, and a ``lock_timeout``, so a step waiting behind a long
query gives up (and the next round retries) instead of stalling the writers behind it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from service.storage.schema import PARTITIONED_TABLES, ROLLUP_OF

DAY_SECONDS = 86_400
# an arbitrary 64-bit key for pg_advisory_xact_lock, shared by every replica
UPKEEP_LOCK_KEY = 0x62616E646975
LOCK_TIMEOUT = "5s"
_BOUND = re.compile(r"FROM \('?([-0-9.e+]+)'?\) TO \('?([-0-9.e+]+)'?\)")


@dataclass(frozen=True)
class Partition:
    """One partition of ``table``: rows with ``start <= created_at < end``; both None for
    the default partition. ``rows``: the planner's estimate of its rows (None before it
    was first analyzed); ``size_bytes``: its size on disk with its indexes."""

    table: str
    name: str
    start: float | None
    end: float | None
    rows: float | None = field(default=None, compare=False)
    size_bytes: int | None = field(default=None, compare=False)


def day_partition(table: str, day: int) -> Partition:
    """The partition of ``table`` for day number ``day`` (unix days, UTC)."""
    start = day * DAY_SECONDS
    name = f"{table}_p{datetime.fromtimestamp(start, UTC):%Y%m%d}"
    return Partition(table, name, float(start), float(start + DAY_SECONDS))


def day_ranges(
    since: float | None, until: float | None, first: float, last: float
) -> list[tuple[float | None, float | None]]:
    """``[since, until)`` (None: unbounded) cut at the UTC midnights between ``first``
    and ``last``, the times of the first and the last row the range holds: consecutive
    ranges in time order, one per day partition those rows lie in."""
    low = first if since is None else max(first, since)
    high = last if until is None else min(last, until)
    days = list(range(int(low // DAY_SECONDS), int(high // DAY_SECONDS) + 1))
    bounds = [since, *[float(day * DAY_SECONDS) for day in days[1:]], until]
    return list(itertools.pairwise(bounds))


def list_partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of ``table`` (in the connection's schema), by start, default first."""
    rows = conn.execute(
        sa.text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples, "
            "pg_total_relation_size(c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:t AS regclass)"
        ),
        {"t": table},
    ).all()
    partitions = []
    for name, bound, estimate, size in rows:
        match = _BOUND.search(bound)
        start, end = (None, None) if match is None else (float(match[1]), float(match[2]))
        counted = None if estimate is None or estimate < 0 else float(estimate)
        partitions.append(Partition(table, name, start, end, counted, int(size)))
    return sorted(partitions, key=lambda p: -float("inf") if p.start is None else p.start)


def _step(conn: Connection) -> None:
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": UPKEEP_LOCK_KEY})
    conn.execute(sa.text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))


def _add_day(engine: Engine, partition: Partition) -> bool:
    """Create ``partition`` with the rows of its day the default partition holds; False
    if another replica created it meanwhile."""
    table, name = partition.table, partition.name
    with engine.begin() as conn:
        _step(conn)
        if any(p.name == name for p in list_partitions(conn, table)):
            return False
        # Inserts wait for this step (milliseconds): an insert routed while the
        # partition set changes would send a row of the new day to the default partition
        # and fail its new constraint. SHARE ROW EXCLUSIVE conflicts with their ROW
        # EXCLUSIVE, not with reads.
        conn.execute(sa.text(f"LOCK TABLE ONLY {table} IN SHARE ROW EXCLUSIVE MODE"))
        conn.execute(
            sa.text(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        )
        conn.execute(
            sa.text(
                f"WITH moved AS (DELETE FROM {table}_default WHERE created_at >= :s "
                f"AND created_at < :e RETURNING *) INSERT INTO {name} SELECT * FROM moved"
            ),
            {"s": partition.start, "e": partition.end},
        )
        conn.execute(
            sa.text(
                f"ALTER TABLE {table} ATTACH PARTITION {name} "
                f"FOR VALUES FROM ({partition.start!r}) TO ({partition.end!r})"
            )
        )
    return True


def create_partitions(engine: Engine, now: float, days_ahead: int) -> list[str]:
    """Create the day partitions of both tables from the day before ``now`` to
    ``days_ahead`` days after it, and those of the days the default partitions hold
    rows of; returns the names created (none on a database already prepared)."""
    today = int(now // DAY_SECONDS)
    created = []
    for table in PARTITIONED_TABLES:
        with engine.connect() as conn:
            existing = {p.name for p in list_partitions(conn, table)}
            stray = conn.execute(
                sa.text(f"SELECT DISTINCT floor(created_at / {DAY_SECONDS}) FROM {table}_default")
            ).scalars()
            days = set(range(today - 1, today + days_ahead + 1)) | {int(d) for d in stray}
        for day in sorted(days):
            partition = day_partition(table, day)
            if partition.name not in existing and _add_day(engine, partition):
                created.append(partition.name)
    return created


def policies_in(conn: Connection, name: str) -> set[str]:
    """The policies with rows in table ``name``: one index probe per policy (a loose
    index scan over the ``(policy, created_at ...)`` index) instead of a full scan."""
    rows = conn.execute(
        sa.text(
            f"WITH RECURSIVE p AS ((SELECT policy FROM {name} ORDER BY policy LIMIT 1) "
            f"UNION ALL SELECT (SELECT policy FROM {name} WHERE policy > p.policy "
            "ORDER BY policy LIMIT 1) FROM p WHERE p.policy IS NOT NULL) "
            "SELECT policy FROM p WHERE policy IS NOT NULL"
        )
    ).scalars()
    return set(rows)


def drop_partitions_before(engine: Engine, cutoffs: Mapping[str, float]) -> dict[str, set[str]]:
    """Drop the day partitions whose every row is older than its policy's cutoff
    (``cutoffs``: policy -> unix time; a policy absent keeps everything); returns the
    names dropped, each with the policies whose rows it held. The rows older than a
    cutoff in partitions that stay are left to :meth:`SqlEventLog.delete_events`
    (bounded batches). The rollup rows of a dropped day go with it."""
    if not cutoffs:
        return {}
    latest = max(cutoffs.values())
    dropped: dict[str, set[str]] = {}
    for table in PARTITIONED_TABLES:
        with engine.connect() as conn:
            candidates = [
                (p, p.end)
                for p in list_partitions(conn, table)
                if p.end is not None and p.end <= latest
            ]
        for partition, end in candidates:
            with engine.begin() as conn:
                _step(conn)
                if (
                    conn.execute(sa.text("SELECT to_regclass(:n)"), {"n": partition.name}).scalar()
                    is None
                ):
                    continue  # another replica dropped it
                owners = policies_in(conn, partition.name)
                if all(cutoffs.get(p, -float("inf")) >= end for p in owners):
                    conn.execute(sa.text(f"DROP TABLE {partition.name}"))
                    # a dropped table fires no delete trigger: its day leaves the rollups
                    for rollup in ROLLUP_OF[table]:
                        conn.execute(
                            sa.delete(rollup).where(
                                rollup.c.start >= partition.start, rollup.c.start < end
                            )
                        )
                    dropped[partition.name] = owners
    return dropped
