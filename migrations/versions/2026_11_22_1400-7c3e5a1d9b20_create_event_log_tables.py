"""create event log tables: policies, decisions, rewards, model_snapshots

Revision ID: 7c3e5a1d9b20
Revises:
Create Date: 2026-11-22 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "7c3e5a1d9b20"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "policies",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_policies"),
    )
    op.create_table(
        "decisions",
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
        sa.PrimaryKeyConstraint("event_id", name="pk_decisions"),
    )
    op.create_index(
        "ix_decisions_policy_created_at_event_id",
        "decisions",
        ["policy", "created_at", "event_id"],
    )
    op.create_table(
        "rewards",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("arm_id", sa.Text(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.CheckConstraint("source IN ('explicit', 'default')", name="ck_rewards_source"),
        sa.PrimaryKeyConstraint("id", name="pk_rewards"),
        sa.UniqueConstraint("event_id", name="uq_rewards_event_id"),
    )
    op.create_index("ix_rewards_policy_created_at", "rewards", ["policy", "created_at"])
    op.create_table(
        "model_snapshots",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("model_version", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("meta", JSON, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_model_snapshots"),
    )
    op.create_index(
        "ix_model_snapshots_policy_created_at", "model_snapshots", ["policy", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_model_snapshots_policy_created_at", table_name="model_snapshots")
    op.drop_table("model_snapshots")
    op.drop_index("ix_rewards_policy_created_at", table_name="rewards")
    op.drop_table("rewards")
    op.drop_index("ix_decisions_policy_created_at_event_id", table_name="decisions")
    op.drop_table("decisions")
    op.drop_table("policies")
