"""PostgreSQL's CPU per logged decision with ``decisions.candidates`` as JSONB or as
``json`` (its text; service/storage/schema.py).

A dense K = 50, d = 32 decision's candidates (the JSON the writer copies:
``service.usecases.candidates.candidates_json``, 1,600 numbers) are copied ``--rows`` at a
time (``COPY ... FROM STDIN``, the text ``service/storage/sql_copy.py`` writes) into a table of
each column type, in interleaved rounds, on a private PostgreSQL server
(``tests.databases``); the CPU is the server backend's own (Linux ``/proc``), per row:

    python -m benchmarks.log_candidates_column [--rounds 6] [--rows 2000]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np
import psycopg

from benchmarks._harness import add_label_argument, load, table, write_json

TYPES = ("jsonb", "json")


def _backend_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of the server process ``pid`` (a local backend)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    parser.add_argument("--rows", type=int, default=2000, help="rows per copy (default 2000)")
    add_label_argument(parser, "log_candidates_column")
    args = parser.parse_args(argv)

    from service.storage.schema import json_dumps
    from service.usecases.candidates import candidates_json
    from tests.databases import OwnedServers

    context = np.round(np.linspace(0.1, 0.9, 32), 3)
    ids = [f"arm{i}" for i in range(50)]
    text = json_dumps(candidates_json(ids, np.tile(context, (50, 1))))
    owned = OwnedServers()
    before = load()
    per_row: dict[str, list[float]] = {t: [] for t in TYPES}
    try:
        with psycopg.connect(owned.postgres_url(), autocommit=True) as conn:
            pid = conn.info.backend_pid
            for t in TYPES:
                conn.execute(f"CREATE TABLE bench_{t} (candidates {t} NOT NULL)")
            for _ in range(args.rounds):
                for t in TYPES:
                    start = _backend_cpu_seconds(pid)
                    with conn.cursor() as cursor, cursor.copy(f"COPY bench_{t} FROM STDIN") as copy:
                        for _ in range(args.rows):
                            copy.write_row([text])
                    per_row[t].append(1e6 * (_backend_cpu_seconds(pid) - start) / args.rows)
                    conn.execute(f"TRUNCATE bench_{t}")
    finally:
        owned.close()
    after = load()
    jsonb = statistics.median(per_row["jsonb"])
    rows = [
        {
            "candidates column": t,
            "server CPU us/row (median)": statistics.median(per_row[t]),
            "x jsonb": statistics.median(per_row[t]) / jsonb,
        }
        for t in TYPES
    ]
    print(f"candidates JSON: {len(text)} bytes; {args.rounds} rounds of {args.rows} rows")
    print(table(rows, ["candidates column", "server CPU us/row (median)", "x jsonb"]))
    print(f"load {before['loadavg']} -> {after['loadavg']}")
    payload = {
        "rounds": args.rounds,
        "rows": args.rows,
        "candidates_bytes": len(text),
        "load_before": before,
        "load_after": after,
        "rows_table": rows,
        "per_round_us": per_row,
    }
    print(f"wrote {write_json('log_candidates_column', payload, args.label)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
