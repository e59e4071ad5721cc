"""partition decisions and rewards by time (PostgreSQL); event-id keys include the time

On PostgreSQL ``decisions`` and ``rewards`` become ``PARTITION BY RANGE (created_at)``
tables with a DEFAULT partition holding every existing row (no row can fail to insert);
the service's partition upkeep (``bandit partitions``, and on a schedule) moves them
into daily partitions and creates the days ahead (docs/operations.md). A partitioned
table's unique keys must contain the partition key, so the keys become
``(event_id, created_at)`` on both dialects: a re-sent record (same event id, same time)
is still logged once. SQLite keeps plain tables (rebuilt with the new keys).

Revision ID: 4b8d2f6a1c37
Revises: 7c3e5a1d9b20
Create Date: 2026-11-25 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "4b8d2f6a1c37"
down_revision: str | None = "7c3e5a1d9b20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = postgresql.JSONB(none_as_null=True)
DECISION_COLUMNS = (
    "event_id, policy, created_at, user_id, context, candidates, arm_id, propensity, "
    "scores, model_version, explored, guardrail, degraded"
)
REWARD_COLUMNS = "id, event_id, policy, arm_id, value, source, created_at"


def _decision_columns() -> list[sa.Column]:
    return [
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=True),
        sa.Column("context", JSON, nullable=False),
        sa.Column("candidates", JSON, nullable=False),
        sa.Column("arm_id", sa.Text(), nullable=False),
        sa.Column("propensity", sa.Double(), nullable=False),
        sa.Column("scores", JSON, nullable=False),
        sa.Column("model_version", sa.BigInteger(), nullable=False),
        sa.Column("explored", sa.Boolean(), nullable=False),
        sa.Column("guardrail", JSON, nullable=True),
        sa.Column("degraded", sa.Boolean(), nullable=False),
    ]


def _reward_columns() -> list[sa.Column]:
    return [
        sa.Column(
            "id",
            sa.BigInteger(),
            server_default=sa.text("nextval('rewards_id_seq')"),
            nullable=False,
        ),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("arm_id", sa.Text(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
    ]


def _set_aside(table: str, renames: dict[str, str]) -> None:
    """Rename ``table`` to ``<table>_heap`` and its constraints and indexes (whose names
    PostgreSQL keeps schema-wide) out of the way of the new table's."""
    op.rename_table(table, f"{table}_heap")
    for old, kind in renames.items():
        if kind == "index":
            op.execute(f"ALTER INDEX {old} RENAME TO {old}_heap")
        else:
            op.execute(f"ALTER TABLE {table}_heap RENAME CONSTRAINT {old} TO {old}_heap")


def _upgrade_postgresql() -> None:
    _set_aside(
        "decisions",
        {"pk_decisions": "constraint", "ix_decisions_policy_created_at_event_id": "index"},
    )
    op.create_table(
        "decisions",
        *_decision_columns(),
        sa.PrimaryKeyConstraint("event_id", "created_at", name="pk_decisions"),
        postgresql_partition_by="RANGE (created_at)",
    )
    op.create_index(
        "ix_decisions_policy_created_at_event_id", "decisions", ["policy", "created_at", "event_id"]
    )
    op.execute("CREATE TABLE decisions_default PARTITION OF decisions DEFAULT")
    op.execute(
        f"INSERT INTO decisions ({DECISION_COLUMNS}) SELECT {DECISION_COLUMNS} FROM decisions_heap"
    )
    op.drop_table("decisions_heap")

    _set_aside(
        "rewards",
        {
            "pk_rewards": "constraint",
            "uq_rewards_event_id": "constraint",
            "ix_rewards_policy_created_at": "index",
        },
    )
    op.create_table(
        "rewards",
        *_reward_columns(),
        sa.CheckConstraint("source IN ('explicit', 'default')", name="ck_rewards_source"),
        sa.PrimaryKeyConstraint("id", "created_at", name="pk_rewards"),
        sa.UniqueConstraint("event_id", "created_at", name="uq_rewards_event_id_created_at"),
        postgresql_partition_by="RANGE (created_at)",
    )
    op.create_index("ix_rewards_policy_created_at", "rewards", ["policy", "created_at"])
    op.execute("CREATE TABLE rewards_default PARTITION OF rewards DEFAULT")
    op.execute(f"INSERT INTO rewards ({REWARD_COLUMNS}) SELECT {REWARD_COLUMNS} FROM rewards_heap")
    # the id sequence moves to the new table before the old one (its owner) is dropped
    op.execute("ALTER SEQUENCE rewards_id_seq OWNED BY rewards.id")
    op.drop_table("rewards_heap")


def _downgrade_postgresql() -> None:
    op.rename_table("decisions", "decisions_parts")
    op.execute("ALTER TABLE decisions_parts RENAME CONSTRAINT pk_decisions TO pk_decisions_parts")
    op.execute(
        "ALTER INDEX ix_decisions_policy_created_at_event_id "
        "RENAME TO ix_decisions_policy_created_at_event_id_parts"
    )
    op.create_table(
        "decisions",
        *_decision_columns(),
        sa.PrimaryKeyConstraint("event_id", name="pk_decisions"),
    )
    op.create_index(
        "ix_decisions_policy_created_at_event_id", "decisions", ["policy", "created_at", "event_id"]
    )
    # an event id logged at two times keeps its earliest decision
    op.execute(
        f"INSERT INTO decisions ({DECISION_COLUMNS}) SELECT {DECISION_COLUMNS} "
        "FROM decisions_parts ORDER BY created_at ON CONFLICT (event_id) DO NOTHING"
    )
    op.execute("DROP TABLE decisions_parts CASCADE")

    op.rename_table("rewards", "rewards_parts")
    for old in ("pk_rewards", "uq_rewards_event_id_created_at"):
        op.execute(f"ALTER TABLE rewards_parts RENAME CONSTRAINT {old} TO {old}_parts")
    op.execute(
        "ALTER INDEX ix_rewards_policy_created_at RENAME TO ix_rewards_policy_created_at_parts"
    )
    op.create_table(
        "rewards",
        *_reward_columns(),
        sa.CheckConstraint("source IN ('explicit', 'default')", name="ck_rewards_source"),
        sa.PrimaryKeyConstraint("id", name="pk_rewards"),
        sa.UniqueConstraint("event_id", name="uq_rewards_event_id"),
    )
    op.create_index("ix_rewards_policy_created_at", "rewards", ["policy", "created_at"])
    op.execute(
        f"INSERT INTO rewards ({REWARD_COLUMNS}) SELECT {REWARD_COLUMNS} "
        "FROM rewards_parts ORDER BY created_at ON CONFLICT (event_id) DO NOTHING"
    )
    op.execute("ALTER SEQUENCE rewards_id_seq OWNED BY rewards.id")
    op.execute("DROP TABLE rewards_parts CASCADE")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgresql()
        return
    with op.batch_alter_table("decisions", recreate="always") as batch:
        batch.drop_constraint("pk_decisions", type_="primary")
        batch.create_primary_key("pk_decisions", ["event_id", "created_at"])
    with op.batch_alter_table("rewards", recreate="always") as batch:
        batch.drop_constraint("uq_rewards_event_id", type_="unique")
        batch.create_unique_constraint("uq_rewards_event_id_created_at", ["event_id", "created_at"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _downgrade_postgresql()
        return
    bind = op.get_bind()
    # an event id logged at two times keeps its earliest record
    for table in ("decisions", "rewards"):
        bind.execute(
            sa.text(
                f"DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM {table} AS t "
                f"WHERE t.event_id = {table}.event_id AND t.created_at < {table}.created_at)"
            )
        )
    with op.batch_alter_table("decisions", recreate="always") as batch:
        batch.drop_constraint("pk_decisions", type_="primary")
        batch.create_primary_key("pk_decisions", ["event_id"])
    with op.batch_alter_table("rewards", recreate="always") as batch:
        batch.drop_constraint("uq_rewards_event_id_created_at", type_="unique")
        batch.create_unique_constraint("uq_rewards_event_id", ["event_id"])
