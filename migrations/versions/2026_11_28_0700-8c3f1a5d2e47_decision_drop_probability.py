"""decisions.drop_probability: the probability that the logging system dropped an event
like this one (DSJSON's ``pdrop``, kept from an imported log and written back by ``bandit
export-log``); null for decisions served here and for those logged before this revision.

Revision ID: 8c3f1a5d2e47
Revises: 8e3b5f1a2d64
Create Date: 2026-11-28 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8c3f1a5d2e47"
down_revision: str | None = "8e3b5f1a2d64"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("decisions", sa.Column("drop_probability", sa.Double(), nullable=True))


def downgrade() -> None:
    op.drop_column("decisions", "drop_probability")
