"""Event-log upkeep on PostgreSQL (docs/operations.md, "Event-log partitions"): the
partitioning migration over a log holding events, the upkeep splitting the carried-over
rows into days, and the retention: whole-day drops against bounded-batch deletes, with
the longest single delete transaction (what a concurrent insert could wait behind).

The script starts its own PostgreSQL (``tests.databases``; ``BANDIT_TEST_POSTGRES_URL``
points it at an existing server instead) and writes ``benchmarks/results/event_log_upkeep.json``.

    python -m benchmarks.event_log_upkeep
    python -m benchmarks.event_log_upkeep --decisions 20000 --days 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command

from benchmarks._harness import add_label_argument, load, write_json
from service.storage.migrate import alembic_config, upgrade_head
from service.storage.partitions import DAY_SECONDS, create_partitions, drop_partitions_before
from service.storage.schema import create_log_engine, decisions, rewards
from service.storage.sql_log import SqlEventLog
from tests.databases import database

FIRST_REVISION = "7c3e5a1d9b20"
DAY0 = 20_000  # unix days


def fill(url: str, total: int, days: int, policy: str, first_day: int = 0) -> None:
    """``total`` decisions of ``policy`` evenly over ``days`` days from DAY0 + first_day,
    every other one rewarded, inserted in chunks."""
    engine = create_log_engine(url)
    step = days * DAY_SECONDS / total
    try:
        for start in range(0, total, 5000):
            rows = [
                {
                    "event_id": f"{policy}-{i}",
                    "policy": policy,
                    "created_at": (DAY0 + first_day) * DAY_SECONDS + i * step,
                    "user_id": None,
                    "context": [0.1, 0.2, 0.3],
                    "candidates": [{"id": "a"}, {"id": "b"}, {"id": "c"}],
                    "arm_id": "a",
                    "propensity": 0.5,
                    "scores": [0.1, 0.2, 0.3],
                    "model_version": i,
                    "explored": False,
                    "guardrail": None,
                    "degraded": False,
                }
                for i in range(start, min(total, start + 5000))
            ]
            paid = [
                {
                    "event_id": r["event_id"],
                    "policy": policy,
                    "arm_id": "a",
                    "value": 1.0,
                    "source": "explicit",
                    "created_at": r["created_at"] + 60.0,
                }
                for r in rows[::2]
            ]
            with engine.begin() as conn:
                conn.execute(sa.insert(decisions), rows)
                conn.execute(sa.insert(rewards), paid)
    finally:
        engine.dispose()


def run(total: int, days: int, batch: int) -> dict[str, Any]:
    with database("postgresql", Path(tempfile.mkdtemp())) as url:
        command.upgrade(alembic_config(url), FIRST_REVISION)
        fill(url, total, days, "p")
        keep = total // days // 10  # a policy keeping everything, on the two days before the cutoff
        middle = days // 2
        fill(url, keep, 2, "keep", first_day=middle - 2)
        t0 = time.perf_counter()
        upgrade_head(url)
        migrate_s = time.perf_counter() - t0
        log = SqlEventLog(url)
        engine = log.engine
        t0 = time.perf_counter()
        created = create_partitions(engine, (DAY0 + days - 1) * DAY_SECONDS, 1)
        split_s = time.perf_counter() - t0
        before = log.count("p")

        longest = [0.0]

        def started(conn: Any, *_: Any) -> None:
            conn.info["t"] = time.perf_counter()

        def finished(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.lstrip().startswith("DELETE"):
                longest[0] = max(longest[0], time.perf_counter() - conn.info["t"])

        sa.event.listen(engine, "before_cursor_execute", started)
        sa.event.listen(engine, "after_cursor_execute", finished)
        cutoffs = {"p": float((DAY0 + middle) * DAY_SECONDS)}
        t0 = time.perf_counter()
        dropped = drop_partitions_before(engine, cutoffs)
        drop_s = time.perf_counter() - t0
        after_drop = log.count("p")
        t0 = time.perf_counter()
        deleted = log.delete_events("p", cutoffs["p"], batch)
        delete_s = time.perf_counter() - t0
        after = log.count("p")
        log.close()
    return {
        "decisions": total,
        "rewards": total // 2,
        "days": days,
        "migrate_s": round(migrate_s, 3),
        "split_into_days_s": round(split_s, 3),
        "partitions_created": len(created),
        "retention_drop": {
            "partitions": len(dropped),
            "rows": sum(before) - sum(after_drop),
            "seconds": round(drop_s, 3),
        },
        "retention_batched_delete": {
            "rows": deleted,
            "batch": batch,
            "seconds": round(delete_s, 3),
            "rows_per_s": round(deleted / delete_s) if delete_s else None,
            "longest_delete_statement_ms": round(longest[0] * 1000, 2),
        },
        "remaining_p": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000, help="BANDIT_LOG_DELETE_BATCH")
    add_label_argument(parser, "event_log_upkeep")
    args = parser.parse_args()
    before = load()
    result = run(args.decisions, args.days, args.batch)
    payload = {"load_before": before, "load_after": load(), **result}
    print(payload)
    print(f"wrote {write_json('event_log_upkeep', payload, args.label)}")


if __name__ == "__main__":
    main()
