"""decisions.candidates as json (its text) instead of jsonb on PostgreSQL

Revision ID: 5d2e8a4c7f19
Revises: 5d2a8c4e6f19
Create Date: 2026-11-28 04:10:00

Nothing queries into a decision's candidates, and parsing them into JSONB (a dense K = 50,
d = 32 decision holds 1,600 numbers) was most of PostgreSQL's CPU per logged decision
(docs/performance.md "Event-log writes"). The change rewrites ``decisions`` (every
partition) under an exclusive lock: on a large log, run it in a quiet window. SQLite
stores JSON as text already: nothing to do there.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "5d2e8a4c7f19"
down_revision: str | None = "5d2a8c4e6f19"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _candidates_as(type_name: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"ALTER TABLE decisions ALTER COLUMN candidates TYPE {type_name} "
            f"USING candidates::{type_name}"
        )


def upgrade() -> None:
    _candidates_as("json")


def downgrade() -> None:
    _candidates_as("jsonb")
