"""decision_counts and reward_sums: rollups per 1, 15 and 60 minutes kept by triggers

Each row holds a policy's decisions (and explorations) of one arm over ``[start, start +
period)``, or the count, sum and sum of squares of its rewards, for periods of 60, 900
and 3600 seconds. Triggers on ``decisions`` and ``rewards`` add every inserted row and
subtract every deleted one in the same transaction: on PostgreSQL one grouped upsert per
statement over its transition table (a ``COPY`` of 10,000 rows is one upsert), on SQLite
one per row. A row skipped by ``ON CONFLICT DO NOTHING`` is not inserted, so it is not
counted. Rows moved between partitions by the partition upkeep are deleted from and
inserted into the partitions themselves, which fire no statement trigger of the parent;
a dropped day partition takes its rollup rows with it
(the partition upkeep deletes them). The existing rows are counted.

Revision ID: 5d2a8c4e6f19
Revises: 9a4c6e2f7b18
Create Date: 2026-11-28 04:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5d2a8c4e6f19"
down_revision: str | None = "9a4c6e2f7b18"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PERIODS = "(VALUES (60), (900), (3600)) AS p(period)"
KEY = "policy, period, start, arm_id"
# (table, rollup, the rollup's value columns, their values for one row)
ROLLUPS = (
    (
        "decisions",
        "decision_counts",
        ("decisions", "explored"),
        ("1", "CASE WHEN {row}.explored THEN 1 ELSE 0 END"),
    ),
    (
        "rewards",
        "reward_sums",
        ("rewards", "total", "squares"),
        ("1", "{row}.value", "{row}.value * {row}.value"),
    ),
)


def _create_table(name: str, *values: sa.Column) -> None:
    op.create_table(
        name,
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("period", sa.Integer(), nullable=False),
        sa.Column("start", sa.Double(), nullable=False),
        sa.Column("arm_id", sa.Text(), nullable=False),
        *values,
        sa.PrimaryKeyConstraint("policy", "period", "start", "arm_id", name=f"pk_{name}"),
    )


def _create_tables() -> None:
    _create_table(
        "decision_counts",
        sa.Column("decisions", sa.BigInteger(), nullable=False),
        sa.Column("explored", sa.BigInteger(), nullable=False),
    )
    _create_table(
        "reward_sums",
        sa.Column("rewards", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.Double(), nullable=False),
        sa.Column("squares", sa.Double(), nullable=False),
    )


def _upsert(rollup: str, columns: Sequence[str], select: str) -> str:
    adds = ", ".join(f"{c} = {rollup}.{c} + excluded.{c}" for c in columns)
    return (
        f"INSERT INTO {rollup} ({KEY}, {', '.join(columns)}) {select} "
        f"ON CONFLICT ({KEY}) DO UPDATE SET {adds}"
    )


def _count_existing(
    table: str, rollup: str, columns: Sequence[str], values: Sequence[str], index: str, periods: str
) -> None:
    """The rollup rows of the rows ``table`` holds; ``index``: a row's period index."""
    sums = ", ".join(f"sum({v.format(row=table)})" for v in values)
    op.execute(
        f"INSERT INTO {rollup} ({KEY}, {', '.join(columns)}) "
        f"SELECT policy, p.period, {index} * p.period, arm_id, {sums} "
        f"FROM {table} CROSS JOIN {periods} GROUP BY 1, 2, 3, 4"
    )


def _upgrade_postgresql() -> None:
    for table, rollup, columns, values in ROLLUPS:
        sums = ", ".join(f"sign * sum({v.format(row='changed')})" for v in values)
        # ordered by key, so concurrent writers lock the rollup rows in one order
        select = (
            f"SELECT policy, p.period, floor(created_at / p.period) * p.period, arm_id, {sums} "
            f"FROM changed CROSS JOIN {PERIODS} GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
        )
        op.execute(
            f"CREATE FUNCTION {rollup}_add() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "DECLARE sign integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; "
            f"BEGIN {_upsert(rollup, columns, select)}; RETURN NULL; END $$"
        )
        for event, transition in (("INSERT", "NEW"), ("DELETE", "OLD")):
            op.execute(
                f"CREATE TRIGGER {rollup}_{event.lower()} AFTER {event} ON {table} "
                f"REFERENCING {transition} TABLE AS changed FOR EACH STATEMENT "
                f"EXECUTE FUNCTION {rollup}_add()"
            )
        _count_existing(table, rollup, columns, values, "floor(created_at / p.period)", PERIODS)


def _upgrade_sqlite() -> None:
    periods = "(SELECT 60 AS period UNION ALL SELECT 900 UNION ALL SELECT 3600) AS p"
    for table, rollup, columns, values in ROLLUPS:
        for event, row, sign in (("INSERT", "NEW", ""), ("DELETE", "OLD", "-")):
            terms = ", ".join(f"{sign}({v.format(row=row)})" for v in values)
            # the cast truncates, the floor of the positive times; WHERE true tells
            # SQLite's parser the ON CONFLICT is the upsert's
            select = (
                f"SELECT {row}.policy, p.period, "
                f"CAST({row}.created_at / p.period AS INTEGER) * p.period, {row}.arm_id, "
                f"{terms} FROM {periods} WHERE true"
            )
            op.execute(
                f"CREATE TRIGGER {rollup}_{event.lower()} AFTER {event} ON {table} "
                f"BEGIN {_upsert(rollup, columns, select)}; END"
            )
        index = "CAST(created_at / p.period AS INTEGER)"
        _count_existing(table, rollup, columns, values, index, periods)


def upgrade() -> None:
    _create_tables()
    if op.get_bind().dialect.name == "postgresql":
        _upgrade_postgresql()
    else:
        _upgrade_sqlite()


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for table, rollup, _columns, _values in ROLLUPS:
        for event in ("insert", "delete"):
            op.execute(
                f"DROP TRIGGER {rollup}_{event} ON {table}"
                if postgresql
                else f"DROP TRIGGER {rollup}_{event}"
            )
        if postgresql:
            op.execute(f"DROP FUNCTION {rollup}_add()")
        op.drop_table(rollup)
