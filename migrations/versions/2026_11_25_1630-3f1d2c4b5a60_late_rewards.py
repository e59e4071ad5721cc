"""late_rewards: rewards received after their event's reward wait (logged, not learned)

Revision ID: 3f1d2c4b5a60
Revises: 4e8b2c6d1a73
Create Date: 2026-11-25 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3f1d2c4b5a60"
down_revision: str | None = "4e8b2c6d1a73"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "late_rewards",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("arm_id", sa.Text(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_late_rewards"),
        sa.UniqueConstraint("event_id", "created_at", name="uq_late_rewards_event_id_created_at"),
    )
    op.create_index("ix_late_rewards_policy_created_at", "late_rewards", ["policy", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_late_rewards_policy_created_at", table_name="late_rewards")
    op.drop_table("late_rewards")
