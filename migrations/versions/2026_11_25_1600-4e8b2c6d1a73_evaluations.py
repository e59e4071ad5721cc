"""evaluations: the offline evaluations of a loop and their results

Revision ID: 4e8b2c6d1a73
Revises: 4b8d2f6a1c37
Create Date: 2026-11-25 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "4e8b2c6d1a73"
down_revision: str | None = "4b8d2f6a1c37"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("evaluation_id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("heartbeat_at", sa.Double(), nullable=False),
        sa.Column("start_time", sa.Double(), nullable=False),
        sa.Column("end_time", sa.Double(), nullable=False),
        sa.Column("progress", sa.Double(), nullable=False),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("request", JSON, nullable=False),
        sa.Column("result", JSON, nullable=True),
        sa.PrimaryKeyConstraint("policy", "evaluation_id", name="pk_evaluations"),
    )
    op.create_index("ix_evaluations_status_heartbeat_at", "evaluations", ["status", "heartbeat_at"])


def downgrade() -> None:
    op.drop_index("ix_evaluations_status_heartbeat_at", table_name="evaluations")
    op.drop_table("evaluations")
