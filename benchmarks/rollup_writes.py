"""What the console's rollup triggers cost the event-log writer (docs/console.md,
"Performance"): batches of ``--batch`` decisions and as many rewards appended with
``SqlEventLog.append`` (PostgreSQL's ``COPY``, SQLite's insert), in alternating phases
with the triggers of ``decision_counts`` and ``reward_sums`` on and off (PostgreSQL:
``ALTER TABLE ... DISABLE TRIGGER``; SQLite: the triggers dropped and created again),
``--batches`` batches a phase, ``--rounds`` rounds. Reports the median time of a batch
in each state and the cost per logged record (decision or reward).

The script starts its own PostgreSQL (``tests.databases``) and writes
``benchmarks/results/rollup_writes.json``.

    python -m benchmarks.rollup_writes
    python -m benchmarks.rollup_writes --batch 200 --batches 20 --rounds 4
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from benchmarks._harness import add_label_argument, load, write_json
from service.storage.base import DecisionRecord, RewardRecord, ips_weights
from service.storage.migrate import upgrade_head
from service.storage.partitions import DAY_SECONDS, create_partitions
from service.storage.sql_log import SqlEventLog
from tests.databases import database

ARMS = [f"item-{i}" for i in range(20)]
TRIGGERS = {
    "decisions": ("decision_counts_insert", "decision_counts_delete"),
    "rewards": ("reward_sums_insert", "reward_sums_delete"),
}


def batch(first: int, size: int, now: float) -> tuple[list[DecisionRecord], list[RewardRecord]]:
    """``size`` decisions of one policy over the minute before ``now`` (ids from
    ``first``), each with its reward (and its importance weights), K = 20 candidates of
    3 floats."""
    decisions, rewards = [], []
    for i in range(first, first + size):
        t = now - 60.0 + 60.0 * (i - first) / size
        arm = ARMS[i % len(ARMS)]
        decisions.append(
            DecisionRecord(
                event_id=f"e{i}",
                policy="storefront",
                created_at=t,
                context=[1.0, 0.5, 0.25],
                candidates=[{"id": a, "features": None} for a in ARMS],
                arm_id=arm,
                propensity=0.9,
                scores=[0.5] * len(ARMS),
                model_version=i,
                explored=i % 10 == 0,
            )
        )
        weights = ips_weights(arm, ARMS, 0.9)
        value = float(i % 3 == 0)
        rewards.append(RewardRecord(f"e{i}", "storefront", arm, value, "explicit", t, *weights))
    return decisions, rewards


class Triggers:
    """Turns the rollup triggers of ``log``'s database off and on again."""

    def __init__(self, log: SqlEventLog) -> None:
        self.engine = log.engine
        self.postgresql = log.partitioned
        self.on = True
        with self.engine.connect() as conn:
            self.sqlite_sql = (
                []
                if self.postgresql
                else list(
                    conn.execute(
                        # only those it drops: the others (decision_latency's) stay
                        sa.select(sa.column("sql"))
                        .select_from(sa.table("sqlite_master"))
                        .where(
                            sa.column("type") == "trigger",
                            sa.column("name").in_([n for ns in TRIGGERS.values() for n in ns]),
                        )
                    )
                    .scalars()
                    .all()
                )
            )

    def set(self, on: bool) -> None:
        if on == self.on:
            return
        self.on = on
        with self.engine.begin() as conn:
            for table, names in TRIGGERS.items():
                for name in names:
                    if self.postgresql:
                        state = "ENABLE" if on else "DISABLE"
                        conn.execute(sa.text(f"ALTER TABLE {table} {state} TRIGGER {name}"))
                    elif not on:
                        conn.execute(sa.text(f"DROP TRIGGER {name}"))
            if on and not self.postgresql:
                for sql in self.sqlite_sql:
                    conn.execute(sa.text(sql))


def measure(url: str, size: int, batches: int, rounds: int) -> dict[str, Any]:
    upgrade_head(url)
    log = SqlEventLog(url)
    now = time.time()
    if log.partitioned:
        create_partitions(log.engine, now - DAY_SECONDS, 2)
    triggers = Triggers(log)
    times: dict[str, list[float]] = {"on": [], "off": []}
    ids = itertools.count(0, size)
    for _, state in itertools.product(range(rounds), ("on", "off")):
        triggers.set(state == "on")
        for _ in range(batches):
            records = batch(next(ids), size, now)
            t0 = time.perf_counter()
            log.append(*records)
            times[state].append(time.perf_counter() - t0)
    triggers.set(True)
    log.close()
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    return {
        "batch_on_ms": round(on * 1000, 2),
        "batch_off_ms": round(off * 1000, 2),
        "per_record_us": round((on - off) / (2 * size) * 1e6, 2),
        "ratio": round(on / off, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=200, help="decisions (and rewards) a batch")
    parser.add_argument("--batches", type=int, default=20, help="batches a phase")
    parser.add_argument("--rounds", type=int, default=4, help="on/off rounds")
    add_label_argument(parser, "rollup_writes")
    args = parser.parse_args()
    before = load()
    results = {}
    for kind in ("postgresql", "sqlite"):
        with database(kind, Path(tempfile.mkdtemp())) as url:
            results[kind] = measure(url, args.batch, args.batches, args.rounds)
            print(kind, results[kind], flush=True)
    payload = {
        "load_before": before,
        "load_after": load(),
        "batch": args.batch,
        "batches": args.batches,
        "rounds": args.rounds,
        "results": results,
    }
    print(f"wrote {write_json('rollup_writes', payload, args.label)}")


if __name__ == "__main__":
    main()
