"""decisions.latency_us and decision_latency: a latency histogram per 1, 15 and 60 minutes

``latency_us`` is the microseconds from a request's receipt to its decision being
logged (null for decisions logged before this revision and for imported ones). Each row
of ``decision_latency`` counts a policy's decisions over ``[start, start + period)``
whose latency fell in one log-spaced bin, ``floor(8·ln(max(latency_us, 1)) / ln 2)``
(8 bins per doubling), so a bucket's percentiles come from its bin counts. Triggers on
``decisions`` keep it as those of ``decision_counts`` do (migration 5d2a8c4e6f19): one
grouped upsert per statement on PostgreSQL, one per row on SQLite; the partition upkeep
deletes the rows of a dropped day partition. Nothing is counted for existing rows, which
have no latency.

Revision ID: 6b1f3d7a2c85
Revises: 5d2e8a4c7f19
Create Date: 2026-11-28 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6b1f3d7a2c85"
down_revision: str | None = "5d2e8a4c7f19"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = "policy, period, start, bin"
UPSERT = (
    f"INSERT INTO decision_latency ({KEY}, decisions) {{select}} "
    f"ON CONFLICT ({KEY}) DO UPDATE SET decisions = decision_latency.decisions + "
    "excluded.decisions"
)
# ln, not log2: PostgreSQL has no log2 of a double; the same expression on both dialects
BIN = "CAST(floor(8 * ln({greatest}({row}.latency_us, 1)) / ln(2)) AS INTEGER)"


def upgrade() -> None:
    op.add_column("decisions", sa.Column("latency_us", sa.BigInteger(), nullable=True))
    op.create_table(
        "decision_latency",
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("start", sa.Double(), nullable=False),
        sa.Column("bin", sa.Integer(), nullable=False),
        sa.Column("decisions", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("policy", "period", "start", "bin", name="pk_decision_latency"),
    )
    if op.get_bind().dialect.name == "postgresql":
        # ordered by key, so concurrent writers lock the rollup rows in one order
        select = (
            "SELECT policy, p.period, floor(created_at / p.period) * p.period, "
            f"{BIN.format(greatest='greatest', row='changed')}, sign * count(*) "
            "FROM changed CROSS JOIN (VALUES (60), (900), (3600)) AS p(period) "
            "WHERE latency_us IS NOT NULL GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        )
        op.execute(
            "CREATE FUNCTION decision_latency_add() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "DECLARE sign integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; "
            f"BEGIN {UPSERT.format(select=select)}; RETURN NULL; END $$"
        )
        for event, transition in (("INSERT", "NEW"), ("DELETE", "OLD")):
            op.execute(
                f"CREATE TRIGGER decision_latency_{event.lower()} AFTER {event} ON decisions "
                f"REFERENCING {transition} TABLE AS changed FOR EACH STATEMENT "
                "EXECUTE FUNCTION decision_latency_add()"
            )
        return
    periods = "(SELECT 60 AS period UNION ALL SELECT 900 UNION ALL SELECT 3600) AS p"
    for event, row, sign in (("INSERT", "NEW", ""), ("DELETE", "OLD", "-")):
        # the cast truncates, the floor of the positive times; WHERE true tells SQLite's
        # parser the ON CONFLICT is the upsert's
        select = (
            f"SELECT {row}.policy, p.period, "
            f"CAST({row}.created_at / p.period AS INTEGER) * p.period, "
            f"{BIN.format(greatest='max', row=row)}, {sign}1 FROM {periods} WHERE true"
        )
        op.execute(
            f"CREATE TRIGGER decision_latency_{event.lower()} AFTER {event} ON decisions "
            f"WHEN {row}.latency_us IS NOT NULL "
            f"BEGIN {UPSERT.format(select=select)}; END"
        )


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for event in ("insert", "delete"):
        op.execute(
            f"DROP TRIGGER decision_latency_{event} ON decisions"
            if postgresql
            else f"DROP TRIGGER decision_latency_{event}"
        )
    if postgresql:
        op.execute("DROP FUNCTION decision_latency_add()")
    op.drop_table("decision_latency")
    op.drop_column("decisions", "latency_us")
