"""SQLAlchemy 2 :class:`~service.storage.base.EventLog` on PostgreSQL or SQLite.

The schema comes from the Alembic migrations (``service.storage.migrate.upgrade_head``);
this class never creates tables. ``append`` inserts with ``ON CONFLICT DO NOTHING`` on
``(event_id, created_at)`` (both dialects; a record keeps its time), so re-sending a
batch -- the writer's retry after a failure, or a spool flushed twice -- logs every
decision and reward exactly once. On PostgreSQL both tables are partitioned by day
(:mod:`service.storage.partitions`), and the batch goes in with ``COPY``
(:func:`service.storage.sql_copy.write_rows`; docs/performance.md "Event-log writes");
SQLite inserts the rows. ``append_batches`` writes an import's rows the same way. ``iter_events`` streams with a server-side cursor on PostgreSQL. A
database out of reach raises :class:`EventLogUnavailableError` (a StoreUnavailableError).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine

from service.storage.activity import Activity
from service.storage.base import (
    LATE_SOURCE,
    AuditRecord,
    DecisionRecord,
    EventRows,
    EventTrail,
    LoggedDecision,
    PolicyRetention,
    Retention,
    RewardRecord,
    Snapshot,
)
from service.storage.partitions import Partition, create_partitions, drop_partitions_before
from service.storage.schema import (
    ROLLUP_TABLES,
    audit_log,
    create_log_engine,
    decisions,
    late_rewards,
    model_snapshots,
    policies,
    rewards,
)
from service.storage.sql_activity import read_activity, read_event_trail, read_partitions
from service.storage.sql_connection import TurnLock, database_reachable
from service.storage.sql_copy import insert_rows, record_rows, write_rows

_DECISION_FIELDS = [f.name for f in dataclasses.fields(DecisionRecord)]
_REWARD_FIELDS = [f.name for f in dataclasses.fields(RewardRecord)]
_LATE_FIELDS = [name for name in _REWARD_FIELDS if name in late_rewards.c]
# AuditRecord field -> audit_log column
_AUDIT_COLUMNS = {
    f.name: "id" if f.name == "record_id" else f.name for f in dataclasses.fields(AuditRecord)
}
# the unique key of both tables (a partitioned table's keys contain its partition key)
EVENT_KEY = ["event_id", "created_at"]
# how much earlier than its decision a reward's time may read (replicas' clocks differ)
REWARD_CLOCK_SKEW_SECONDS = 3600.0


class SqlEventLog:
    """The event log in the database at ``url`` (``postgresql://`` or ``sqlite:///``)."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        self._engine: Engine = create_log_engine(url, connect_timeout=connect_timeout)
        dialect = self._engine.dialect.name
        self._insert: Callable[[sa.Table], Any] = (
            postgresql.insert if dialect == "postgresql" else sqlite.insert
        )
        # SQLite has one writer at a time and its busy handler is not fair: under load the
        # log writer's back-to-back batches could starve a retention delete past the busy
        # timeout, so this process's write transactions take turns in arrival order
        self._write_turns: AbstractContextManager[Any] = (
            nullcontext() if dialect == "postgresql" else TurnLock()
        )

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for migrations and tests)."""
        return self._engine

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        with database_reachable(), self._engine.begin() as conn:
            yield conn

    @contextmanager
    def _begin_write(self) -> Iterator[Connection]:
        """A transaction that writes: on SQLite it waits for its turn first."""
        with self._write_turns, self._begin() as conn:
            yield conn

    @property
    def partitioned(self) -> bool:
        """Whether ``decisions`` and ``rewards`` are partitioned by time (PostgreSQL)."""
        return self._engine.dialect.name == "postgresql"

    def append(
        self,
        decisions_: Sequence[DecisionRecord],
        rewards_: Sequence[RewardRecord],
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        """Insert a batch in one transaction, skipping event ids (and audit record ids)
        already logged; rewards of source ``late`` (received after the reward wait, never
        learned) go to ``late_rewards``."""
        if not decisions_ and not rewards_ and not audit:
            return
        with self._begin_write() as conn:
            self._insert_batch(conn, decisions_, rewards_, audit)

    def append_batches(self, batches: Iterable[EventRows]) -> int:
        """Write the rows of every batch of ``batches`` (read one at a time) in one
        transaction, skipping event ids logged already: an error raised while they are
        read or written leaves none of them logged. Returns the batches written."""
        written = 0
        with self._begin_write() as conn:
            for batch in batches:
                write_rows(conn, decisions, batch.decisions, _DECISION_FIELDS, EVENT_KEY)
                write_rows(conn, rewards, batch.rewards, _REWARD_FIELDS, EVENT_KEY)
                written += 1
        return written

    def _insert_batch(
        self,
        conn: Connection,
        decisions_: Sequence[DecisionRecord],
        rewards_: Sequence[RewardRecord],
        audit: Sequence[AuditRecord],
    ) -> None:
        late = [r for r in rewards_ if r.source == LATE_SOURCE]
        rewards_ = [r for r in rewards_ if r.source != LATE_SOURCE]
        for table, records, fields in (
            (decisions, decisions_, _DECISION_FIELDS),
            (rewards, rewards_, _REWARD_FIELDS),
            (late_rewards, late, _LATE_FIELDS),
        ):
            if records and self.partitioned:
                write_rows(conn, table, record_rows(records, fields, table), fields, EVENT_KEY)
            elif records:
                insert = self._insert(table).on_conflict_do_nothing(index_elements=EVENT_KEY)
                conn.execute(insert, insert_rows(records, fields))
        if audit:
            rows = [
                {column: getattr(r, name) for name, column in _AUDIT_COLUMNS.items()} for r in audit
            ]
            conn.execute(self._insert(audit_log).on_conflict_do_nothing(), rows)

    def audit_records(
        self,
        policy: str | None = None,
        since: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Audit records in ``(created_at, id)`` order (an index on each of ``(policy,
        created_at, id)`` and ``(created_at, id)`` serves the page)."""
        query = sa.select(*(audit_log.c[column] for column in _AUDIT_COLUMNS.values()))
        if policy is not None:
            query = query.where(audit_log.c.policy == policy)
        if since is not None:
            query = query.where(audit_log.c.created_at >= since)
        if after is not None:
            query = query.where(
                sa.tuple_(audit_log.c.created_at, audit_log.c.id) > sa.tuple_(*after)
            )
        query = query.order_by(audit_log.c.created_at, audit_log.c.id).limit(limit)
        with self._begin() as conn:
            rows = conn.execute(query).all()
        return [AuditRecord(*row) for row in rows]

    def upsert_policy(self, name: str, config: dict[str, Any]) -> None:
        """Insert or replace the config of ``name``."""
        now = time.time()
        stmt = self._insert(policies).values(
            name=name, config=config, created_at=now, updated_at=now
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["name"],
            set_={"config": stmt.excluded.config, "updated_at": stmt.excluded.updated_at},
        )
        with self._begin_write() as conn:
            conn.execute(stmt)

    def delete_policy(self, name: str) -> None:
        """Delete the policy's config, decisions, rewards and snapshots, so a new policy
        of that name never replays the old one's events."""
        with self._begin_write() as conn:
            conn.execute(sa.delete(policies).where(policies.c.name == name))
            for table in (decisions, rewards, late_rewards, model_snapshots, *ROLLUP_TABLES):
                conn.execute(sa.delete(table).where(table.c.policy == name))

    def policies(self) -> dict[str, dict[str, Any]]:
        """Configs by policy name."""
        with self._begin() as conn:
            rows = conn.execute(sa.select(policies.c.name, policies.c.config))
            return {name: config for name, config in rows}

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store a serialized whole-policy state."""
        with self._begin_write() as conn:
            conn.execute(sa.insert(model_snapshots).values(**dataclasses.asdict(snapshot)))

    def latest_snapshot(self, policy: str) -> Snapshot | None:
        """The most recent snapshot of ``policy`` (by time, then insertion)."""
        cols = [
            model_snapshots.c[name]
            for name in ("policy", "created_at", "model_version", "data", "meta")
        ]
        query = (
            sa.select(*cols)
            .where(model_snapshots.c.policy == policy)
            .order_by(model_snapshots.c.created_at.desc(), model_snapshots.c.id.desc())
            .limit(1)
        )
        with self._begin() as conn:
            row = conn.execute(query).first()
        return None if row is None else Snapshot(**row._mapping)

    def prune_snapshots(self, policy: str, keep: int, before: float | None) -> int:
        """Delete the snapshots of ``policy`` beyond its newest ``keep`` (0: no count
        limit) and those created before ``before`` (None: no age limit), never its newest
        one (order: time, then insertion); returns how many were deleted."""

        def newest(n: int) -> sa.Select[Any]:
            return (
                sa.select(model_snapshots.c.id)
                .where(model_snapshots.c.policy == policy)
                .order_by(model_snapshots.c.created_at.desc(), model_snapshots.c.id.desc())
                .limit(n)
            )

        expired = [] if before is None else [model_snapshots.c.created_at < before]
        if keep > 0:
            expired.append(model_snapshots.c.id.not_in(newest(keep)))
        if not expired:
            return 0
        stmt = sa.delete(model_snapshots).where(
            model_snapshots.c.policy == policy,
            model_snapshots.c.id.not_in(newest(1)),
            sa.or_(*expired),
        )
        with self._begin_write() as conn:
            return conn.execute(stmt).rowcount

    def events_query(
        self, policy: str, since: float | None = None, until: float | None = None
    ) -> sa.Select[Any]:
        """The query :meth:`iter_events` runs. Its time bounds on ``decisions`` and the
        lower bound on ``rewards`` (a reward comes after its decision, give or take
        :data:`REWARD_CLOCK_SKEW_SECONDS` between replicas' clocks) let PostgreSQL scan
        only the partitions of the range (docs/operations.md, "Event-log partitions")."""
        reward_cols = [rewards.c[name].label(f"r_{name}") for name in [*_REWARD_FIELDS, "id"]]
        joined = rewards.c.event_id == decisions.c.event_id
        if since is not None:
            joined = sa.and_(joined, rewards.c.created_at >= since - REWARD_CLOCK_SKEW_SECONDS)
        query = (
            sa.select(*(decisions.c[name] for name in _DECISION_FIELDS), *reward_cols)
            .select_from(decisions.outerjoin(rewards, joined))
            .where(decisions.c.policy == policy)
            .order_by(decisions.c.created_at, decisions.c.event_id)
        )
        if since is not None:
            query = query.where(decisions.c.created_at >= since)
        if until is not None:
            query = query.where(decisions.c.created_at < until)
        return query

    def explain_events(
        self, policy: str, since: float | None = None, until: float | None = None
    ) -> str:
        """PostgreSQL's ``EXPLAIN`` of :meth:`events_query` (the partitions it scans)."""
        query = self.events_query(policy, since, until)
        with self._begin() as conn:
            compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
            rows = conn.execute(sa.text(f"EXPLAIN (COSTS OFF) {compiled}")).scalars()
            return "\n".join(rows)

    def iter_events(
        self,
        policy: str,
        since: float | None = None,
        until: float | None = None,
        batch_size: int = 1000,
    ) -> Iterator[LoggedDecision]:
        """Decisions of ``policy`` with ``since <= created_at < until`` in (time, event id)
        order, each with its reward, fetched ``batch_size`` rows at a time."""
        query = self.events_query(policy, since, until)
        with self._begin() as conn:
            result = conn.execution_options(yield_per=batch_size).execute(query)
            for rows in result.partitions():
                for row in rows:
                    yield _logged_event(row._mapping)

    def recent_decisions(self, policy: str, limit: int) -> list[DecisionRecord]:
        """The latest ``limit`` decisions of ``policy``, newest first (the index on
        ``(policy, created_at, event_id)`` read backwards)."""
        query = (
            sa.select(*(decisions.c[name] for name in _DECISION_FIELDS))
            .where(decisions.c.policy == policy)
            .order_by(decisions.c.created_at.desc(), decisions.c.event_id.desc())
            .limit(limit)
        )
        with self._begin() as conn:
            rows = conn.execute(query).all()
        return [DecisionRecord(**row._mapping) for row in rows]

    def late_rewards(self, policy: str) -> list[RewardRecord]:
        """The rewards of ``policy`` received after their reward wait (logged, never
        learned from), oldest first, with source ``late``."""
        query = (
            sa.select(*(late_rewards.c[name] for name in _LATE_FIELDS))
            .where(late_rewards.c.policy == policy)
            .order_by(late_rewards.c.created_at, late_rewards.c.id)
        )
        with self._begin() as conn:
            rows = conn.execute(query).all()
        return [RewardRecord(**row._mapping, source=LATE_SOURCE) for row in rows]

    def last_reward_at(self, policy: str) -> float | None:
        """``max(created_at)`` of the policy's rewards (the index on ``(policy,
        created_at)`` answers it)."""
        query = sa.select(sa.func.max(rewards.c.created_at)).where(rewards.c.policy == policy)
        with self._begin() as conn:
            value = conn.execute(query).scalar_one()
        return None if value is None else float(value)

    def count(self, policy: str | None = None) -> tuple[int, int]:
        """``(decisions, rewards)`` logged, for ``policy`` or all."""
        counts = []
        with self._begin() as conn:
            for table in (decisions, rewards):
                query = sa.select(sa.func.count()).select_from(table)
                if policy is not None:
                    query = query.where(table.c.policy == policy)
                counts.append(int(conn.execute(query).scalar_one()))
        return counts[0], counts[1]

    def prepare_partitions(self, now: float, days_ahead: int) -> list[str]:
        """Create the day partitions from yesterday to ``days_ahead`` days after ``now``
        and empty the default partitions into theirs (PostgreSQL; SQLite has none):
        :func:`service.storage.partitions.create_partitions`. Returns the names created."""
        if not self.partitioned:
            return []
        with database_reachable():
            return create_partitions(self._engine, now, days_ahead)

    def delete_events(self, policy: str, before: float, batch_size: int) -> int:
        """Delete the decisions, rewards and late rewards of ``policy`` with ``created_at <
        before``, ``batch_size`` rows per transaction (no lock held for long, the writer's
        inserts go on between batches); returns the rows deleted."""
        deleted = 0
        for table, key in (
            (decisions, ("event_id", "created_at")),
            (rewards, ("id", "created_at")),
            (late_rewards, ("id", "created_at")),
        ):
            columns = [table.c[name] for name in key]
            batch = (
                sa.select(*columns)
                .where(table.c.policy == policy, table.c.created_at < before)
                .limit(batch_size)
            )
            while True:
                with self._begin_write() as conn:
                    count = conn.execute(
                        sa.delete(table).where(sa.tuple_(*columns).in_(batch))
                    ).rowcount
                deleted += count
                if count < batch_size:
                    break
        return deleted

    def apply_retention(self, cutoffs: Mapping[str, float], batch_size: int) -> Retention:
        """Delete every policy's events older than its cutoff (``cutoffs``: policy -> unix
        time; policies absent keep everything): on PostgreSQL the day partitions holding
        only such events are dropped whole, then what is left (the boundary day, the
        default partition; everything on SQLite) goes in bounded batches."""
        dropped: dict[str, set[str]] = {}
        if self.partitioned:
            with database_reachable():
                dropped = drop_partitions_before(self._engine, cutoffs)
        deleted = {
            policy: self.delete_events(policy, cutoff, batch_size)
            for policy, cutoff in cutoffs.items()
        }
        by_policy = {
            policy: PolicyRetention(
                [name for name, owners in dropped.items() if policy in owners], rows
            )
            for policy, rows in deleted.items()
        }
        return Retention(
            list(dropped),
            sum(deleted.values()),
            {p: r for p, r in by_policy.items() if r.dropped_partitions or r.deleted_rows},
        )

    def time_range(self, policy: str) -> tuple[float, float] | None:
        """The first and last decision times of ``policy``, or None (index probes)."""
        query = sa.select(
            sa.func.min(decisions.c.created_at), sa.func.max(decisions.c.created_at)
        ).where(decisions.c.policy == policy)
        with self._begin() as conn:
            first, last = conn.execute(query).one()
        return None if first is None else (float(first), float(last))

    def activity(self, policy: str, since: float, until: float, bucket_seconds: float) -> Activity:
        """:func:`service.storage.sql_activity.read_activity` in one transaction."""
        with self._begin() as conn:
            return read_activity(conn, policy, since, until, bucket_seconds)

    def event_trail(self, event_id: str) -> EventTrail | None:
        """:func:`service.storage.sql_activity.read_event_trail` in one transaction."""
        with self._begin() as conn:
            return read_event_trail(conn, event_id)

    def partitions(self) -> list[Partition]:
        """:func:`service.storage.sql_activity.read_partitions` (none on SQLite)."""
        with self._begin() as conn:
            return read_partitions(conn) if self.partitioned else []

    def ping(self) -> None:
        """``SELECT 1``, or raise :class:`EventLogUnavailableError`."""
        with self._begin() as conn:
            conn.execute(sa.text("SELECT 1"))

    def close(self) -> None:
        """Dispose of the connection pool."""
        self._engine.dispose()


def _logged_event(row: Any) -> LoggedDecision:
    decision = DecisionRecord(**{name: row[name] for name in _DECISION_FIELDS})
    if row["r_event_id"] is None:
        return LoggedDecision(decision)
    reward = RewardRecord(**{name: row[f"r_{name}"] for name in _REWARD_FIELDS})
    return LoggedDecision(decision, reward, reward_order=row["r_id"])
