"""rewards' importance weights and their IPS sums in reward_sums

``rewards.baseline_weight`` and ``rewards.random_weight`` are the weights of the decision
a reward is for, ``1{served = baseline} / p`` and ``1 / (K p)``, which the reward use case
knows from the pending event when it logs the reward (null for the rewards logged before
this revision and for imported ones). ``reward_sums`` counts the rewards logged with
weights (``weighted``) and sums their IPS terms ``value·weight`` and the squares of those
(``baseline_total``, ``baseline_squares``, ``random_total``, ``random_squares``), in the
same triggers as its other sums (migration 5d2a8c4e6f19): one grouped upsert per
statement on PostgreSQL, one per row on SQLite. No trigger pairs a reward with its
decision. Existing rows have no weights: their new sums are 0.

Revision ID: 8e3b5f1a2d64
Revises: 6b1f3d7a2c85
Create Date: 2026-11-28 06:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "8e3b5f1a2d64"
down_revision: str | None = "6b1f3d7a2c85"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEY = "policy, period, start, arm_id"
SUMS = {
    "rewards": "1",
    "total": "{row}.value",
    "squares": "{row}.value * {row}.value",
}
TERM = "{{row}}.value * {{row}}.{weight}_weight"
IPS_SUMS = {
    "weighted": "CASE WHEN {row}.baseline_weight IS NULL THEN 0 ELSE 1 END",
    **{
        column: f"coalesce({square.format(term=TERM.format(weight=weight))}, 0)"
        for weight in ("baseline", "random")
        for column, square in (
            (f"{weight}_total", "{term}"),
            (f"{weight}_squares", "({term}) * ({term})"),
        )
    },
}


def _upsert(sums: dict[str, str], select: str) -> str:
    columns = ", ".join(sums)
    adds = ", ".join(f"{c} = reward_sums.{c} + excluded.{c}" for c in sums)
    return (
        f"INSERT INTO reward_sums ({KEY}, {columns}) {select} "
        f"ON CONFLICT ({KEY}) DO UPDATE SET {adds}"
    )


def _postgresql_function(sums: dict[str, str]) -> None:
    """``reward_sums_add()``, which both statement triggers on ``rewards`` execute."""
    terms = ", ".join(f"sign * sum({v.format(row='changed')})" for v in sums.values())
    # ordered by key, so concurrent writers lock the rollup rows in one order
    select = (
        f"SELECT policy, p.period, floor(created_at / p.period) * p.period, arm_id, {terms} "
        "FROM changed CROSS JOIN (VALUES (60), (900), (3600)) AS p(period) "
        "GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
    )
    op.execute(
        "CREATE OR REPLACE FUNCTION reward_sums_add() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "DECLARE sign integer := CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE -1 END; "
        f"BEGIN {_upsert(sums, select)}; RETURN NULL; END $$"
    )


def _sqlite_triggers(sums: dict[str, str]) -> None:
    """The row triggers ``reward_sums_insert`` and ``reward_sums_delete``, anew."""
    periods = "(SELECT 60 AS period UNION ALL SELECT 900 UNION ALL SELECT 3600) AS p"
    for event, row, sign in (("INSERT", "NEW", ""), ("DELETE", "OLD", "-")):
        op.execute(f"DROP TRIGGER reward_sums_{event.lower()}")
        terms = ", ".join(f"{sign}({v.format(row=row)})" for v in sums.values())
        # the cast truncates, the floor of the positive times; WHERE true tells SQLite's
        # parser the ON CONFLICT is the upsert's
        select = (
            f"SELECT {row}.policy, p.period, "
            f"CAST({row}.created_at / p.period AS INTEGER) * p.period, {row}.arm_id, "
            f"{terms} FROM {periods} WHERE true"
        )
        op.execute(
            f"CREATE TRIGGER reward_sums_{event.lower()} AFTER {event} ON rewards "
            f"BEGIN {_upsert(sums, select)}; END"
        )


def _triggers(sums: dict[str, str]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_function(sums)
    else:
        _sqlite_triggers(sums)


def upgrade() -> None:
    op.add_column("rewards", sa.Column("baseline_weight", sa.Double(), nullable=True))
    op.add_column("rewards", sa.Column("random_weight", sa.Double(), nullable=True))
    op.add_column(
        "reward_sums",
        sa.Column("weighted", sa.BigInteger(), nullable=False, server_default="0"),
    )
    for column in list(IPS_SUMS)[1:]:
        op.add_column(
            "reward_sums", sa.Column(column, sa.Double(), nullable=False, server_default="0")
        )
    _triggers({**SUMS, **IPS_SUMS})


def downgrade() -> None:
    _triggers(SUMS)  # first: SQLite drops no column a trigger reads
    for column in IPS_SUMS:
        op.drop_column("reward_sums", column)
    op.drop_column("rewards", "random_weight")
    op.drop_column("rewards", "baseline_weight")
