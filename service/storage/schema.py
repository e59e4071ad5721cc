"""Tables of the event log (SQLAlchemy Core) and the engine for ``BANDIT_DATABASE_URL``.

The Alembic migrations in ``migrations/`` own the schema; this metadata mirrors them
(``tests/migrations`` checks that autogenerate finds no difference). Times are unix
seconds as double precision, so records round-trip exactly on both dialects;
JSON columns are JSONB on PostgreSQL, except ``decisions.candidates``: PostgreSQL's
``json``, kept as the text the writer sent (only its syntax checked), as nothing queries
into it and parsing it into JSONB was most of the database's CPU per logged decision
(docs/performance.md "Event-log writes").

On PostgreSQL ``decisions`` and ``rewards`` are partitioned by range of ``created_at``
(``service.storage.partitions``; docs/operations.md "Event-log partitions"), so their
keys contain ``created_at``: ``(event_id, created_at)`` is what makes a re-sent record
land once (its time travels with it), while a new decision reusing a taken event id
is refused by the state store's event-id registry before it is logged. On PostgreSQL the primary key of ``rewards``
is ``(id, created_at)``; SQLite keeps ``id`` alone (its auto-increment needs that), a
difference Alembic's comparison does not look at.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, Engine, make_url

from bandit_core.errors import ConfigError

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

Json = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
# a JSON column stored as its text on PostgreSQL too (module docstring)
JsonText = sa.JSON(none_as_null=True).with_variant(postgresql.JSON(none_as_null=True), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

policies = sa.Table(
    "policies",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("config", Json, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("updated_at", sa.Double, nullable=False),
)

decisions = sa.Table(
    "decisions",
    metadata,
    sa.Column("event_id", sa.Text, primary_key=True),
    sa.Column("policy", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, primary_key=True),
    sa.Column("user_id", sa.Text, nullable=True),
    sa.Column("context", Json, nullable=False),
    sa.Column("candidates", JsonText, nullable=False),
    sa.Column("arm_id", sa.Text, nullable=False),
    sa.Column("propensity", sa.Double, nullable=False),
    sa.Column("scores", Json, nullable=False),
    sa.Column("model_version", sa.BigInteger, nullable=False),
    sa.Column("explored", sa.Boolean, nullable=False),
    sa.Column("guardrail", Json, nullable=True),
    sa.Column("degraded", sa.Boolean, nullable=False),
    sa.Column("latency_us", sa.BigInteger, nullable=True),
    sa.Column("drop_probability", sa.Double, nullable=True),
    sa.Index(None, "policy", "created_at", "event_id"),
    postgresql_partition_by="RANGE (created_at)",
)

rewards = sa.Table(
    "rewards",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    # No foreign key to decisions: a replica may log a reward before another replica's
    # spooled decision reaches the database.
    sa.Column("event_id", sa.Text, nullable=False),
    sa.Column("policy", sa.Text, nullable=False),
    sa.Column("arm_id", sa.Text, nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    # the decision's importance weights of the baseline and of uniform random
    # (service.storage.base.ips_weights; migration 8e3b5f1a2d64), null when unknown
    sa.Column("baseline_weight", sa.Double, nullable=True),
    sa.Column("random_weight", sa.Double, nullable=True),
    sa.CheckConstraint("source IN ('explicit', 'default')", name="source"),
    sa.UniqueConstraint("event_id", "created_at"),
    sa.Index(None, "policy", "created_at"),
    postgresql_partition_by="RANGE (created_at)",
)

late_rewards = sa.Table(
    "late_rewards",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.Text, nullable=False),
    sa.Column("policy", sa.Text, nullable=False),
    # the served arm; empty when the event was gone when the reward arrived
    sa.Column("arm_id", sa.Text, nullable=False),
    sa.Column("value", sa.Double, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    # a batch the writer sends again logs each late reward once
    sa.UniqueConstraint("event_id", "created_at"),
    sa.Index(None, "policy", "created_at"),
)


# per (policy, period, start, arm) counts of ``decisions`` and sums of ``rewards`` over
# ``[start, start + period)``, period ROLLUP_PERIODS; kept by database triggers on every
# insert and delete (migration 5d2a8c4e6f19, docs/console.md "Performance"), so the
# console's charts read O(buckets) rows, not O(events)
def _rollup(name: str, *values: sa.Column[Any]) -> sa.Table:
    """A rollup table: its ``values`` per (policy, period, period start, arm)."""
    return sa.Table(
        name,
        metadata,
        sa.Column("policy", sa.Text, primary_key=True),
        sa.Column("period", sa.Integer, primary_key=True),
        sa.Column("start", sa.Double, primary_key=True),
        sa.Column("arm_id", sa.Text, primary_key=True),
        *values,
    )


decision_counts = _rollup(
    "decision_counts",
    sa.Column("decisions", sa.BigInteger, nullable=False),
    sa.Column("explored", sa.BigInteger, nullable=False),
)
reward_sums = _rollup(
    "reward_sums",
    sa.Column("rewards", sa.BigInteger, nullable=False),
    sa.Column("total", sa.Double, nullable=False),
    sa.Column("squares", sa.Double, nullable=False),
    # of the rewards logged with weights: how many, and the sums and sums of squares of
    # their IPS terms value·weight (migration 8e3b5f1a2d64)
    sa.Column("weighted", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("baseline_total", sa.Double, nullable=False, server_default="0"),
    sa.Column("baseline_squares", sa.Double, nullable=False, server_default="0"),
    sa.Column("random_total", sa.Double, nullable=False, server_default="0"),
    sa.Column("random_squares", sa.Double, nullable=False, server_default="0"),
)

# per (policy, period, start, latency bin) the decisions whose ``latency_us`` fell in
# the bin (service.storage.activity.LATENCY_BINS_PER_OCTAVE; migration 6b1f3d7a2c85): the
# console's p50/p99 latency per bucket
decision_latency = sa.Table(
    "decision_latency",
    metadata,
    sa.Column("policy", sa.Text, primary_key=True),
    sa.Column("period", sa.Integer, primary_key=True),
    sa.Column("start", sa.Double, primary_key=True),
    sa.Column("bin", sa.Integer, primary_key=True),
    sa.Column("decisions", sa.BigInteger, nullable=False),
)

ROLLUP_PERIODS = (60, 900, 3600)
"""The periods (seconds) of the rows of the rollup tables."""
ROLLUP_OF = {"decisions": (decision_counts, decision_latency), "rewards": (reward_sums,)}
ROLLUP_TABLES = (decision_counts, decision_latency, reward_sums)

model_snapshots = sa.Table(
    "model_snapshots",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("policy", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("model_version", sa.BigInteger, nullable=False),
    sa.Column("data", sa.LargeBinary, nullable=False),
    sa.Column("meta", Json, nullable=False),
    sa.Index(None, "policy", "created_at"),
)

evaluations = sa.Table(
    "evaluations",
    metadata,
    sa.Column("policy", sa.Text, primary_key=True),
    sa.Column("evaluation_id", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("heartbeat_at", sa.Double, nullable=False),
    sa.Column("start_time", sa.Double, nullable=False),
    sa.Column("end_time", sa.Double, nullable=False),
    sa.Column("progress", sa.Double, nullable=False),
    sa.Column("owner", sa.Text, nullable=True),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("request", Json, nullable=False),
    sa.Column("result", Json, nullable=True),
    sa.Index(None, "status", "heartbeat_at"),
)

# who changed a policy, its model or its log (service.usecases.audit); ``id`` is drawn by
# the service, so a record the writer sends twice (docs/operations.md, "Audit trail")
# lands once
audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("created_at", sa.Double, nullable=False),
    sa.Column("policy", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("request_id", sa.Text, nullable=True),
    sa.Column("before", Json, nullable=True),
    sa.Column("after", Json, nullable=True),
    sa.Column("detail", Json, nullable=True),
    sa.Index(None, "policy", "created_at", "id"),
    sa.Index(None, "created_at", "id"),
)


PARTITIONED_TABLES = ("decisions", "rewards")
# decisions_default, decisions_p20261125, rewards_...: see service.storage.partitions
PARTITION_NAME = re.compile(r"^(decisions|rewards)_(default|p\d{8})$")


def is_partition(name: str | None) -> bool:
    """Whether ``name`` is a partition of a partitioned table: a table the service
    creates and drops at run time, which the metadata (and Alembic) leave out."""
    return name is not None and PARTITION_NAME.match(name) is not None


def include_name(name: str | None, type_: str, _parents: Any) -> bool:
    """Alembic's ``include_name`` hook: every name but the partitions' (the service
    manages those, docs/operations.md "Event-log partitions")."""
    return not (type_ == "table" and is_partition(name))


def database_url(url: str | URL) -> URL:
    """The SQLAlchemy URL for a plain ``postgresql://`` (psycopg 3) or ``sqlite:///`` URL;
    an explicit ``dialect+driver`` is kept."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigError(
            f"BANDIT_DATABASE_URL must be a postgresql:// or sqlite:/// URL, but got "
            f"{parsed.render_as_string(hide_password=True)!r}"
        )
    return parsed


def json_dumps(value: Any) -> str:
    """JSON text of a column value by orjson (34 us of stdlib ``json.dumps`` against 3 us
    for a K = 50 decision's columns). Non-string keys and numpy scalars are written as the
    stdlib would; anything else orjson refuses falls back to the stdlib, so what can be
    logged does not change. NaN and infinities become ``null`` (the stdlib writes tokens
    that PostgreSQL's JSONB rejects)."""
    try:
        return orjson.dumps(
            value, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
        ).decode()
    except TypeError:
        return json.dumps(value)


def json_loads(text: str | bytes) -> Any:
    """The value of a JSON column's text by orjson (a seventh of the stdlib's time on a
    decision's candidates), or by the stdlib when orjson would read it differently: a
    run of 19 or more digits (orjson reads an integer past 64 bits as a double, the
    stdlib as an int) or text orjson refuses. Both round other numbers to the nearest
    double, so the values read are the stdlib's."""
    if isinstance(text, str):
        text = text.encode()
    if _DIGIT_RUN not in text.translate(_DIGITS_AS_ZERO):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


_DIGITS_AS_ZERO = bytes(48 if 48 <= i <= 57 else 32 for i in range(256))  # "0-9" -> "0", else " "
_DIGIT_RUN = b"0" * 19


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.close()


def create_log_engine(url: str | URL, *, connect_timeout: float = 5.0) -> Engine:
    """An engine for the event log: psycopg 3 with a connect timeout and pre-ping on
    PostgreSQL; WAL and a busy timeout on SQLite (whose parent directory is created)."""
    parsed = database_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            # if this fails, connecting reports it (as StoreUnavailableError in the log)
            with contextlib.suppress(OSError):
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            parsed,
            connect_args={"check_same_thread": False},
            json_serializer=json_dumps,
            json_deserializer=json_loads,
        )
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return sa.create_engine(
        parsed,
        pool_pre_ping=True,
        connect_args={"connect_timeout": max(1, round(connect_timeout))},
        json_serializer=json_dumps,
        json_deserializer=json_loads,
    )
