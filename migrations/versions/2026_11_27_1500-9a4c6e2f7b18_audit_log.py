"""audit_log: who changed a policy, its model or its log, when, and the values before and after

Revision ID: 9a4c6e2f7b18
Revises: 3f1d2c4b5a60
Create Date: 2026-11-27 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "9a4c6e2f7b18"
down_revision: str | None = "3f1d2c4b5a60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("action", sa.Text(), nullable=False),
        sa.Column("actor", sa.Text(), nullable=False),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.Column("before", JSON, nullable=True),
        sa.Column("after", JSON, nullable=True),
        sa.Column("detail", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index(
        "ix_audit_log_policy_created_at_id", "audit_log", ["policy", "created_at", "id"]
    )
    op.create_index("ix_audit_log_created_at_id", "audit_log", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_created_at_id", table_name="audit_log")
    op.drop_index("ix_audit_log_policy_created_at_id", table_name="audit_log")
    op.drop_table("audit_log")
