"""``bandit import-log --format dsjson`` into PostgreSQL (docs/personalizer.md,
"Importing and exporting logs"): a generated Decision Service log of N single-slot
events (5 actions with JSON features, a context of two namespaces, 80% rewarded), read,
parsed and copied into the event log in one process; the rate is events per second of
wall time and of the importing process's CPU time (PostgreSQL's own work runs in its
server processes), then a second import of the same file (which adds nothing).

The script starts its own PostgreSQL (``tests.databases``; ``BANDIT_TEST_POSTGRES_URL``
points it at an existing server instead) and writes ``benchmarks/results/dsjson_import.json``.

    python -m benchmarks.dsjson_import
    python -m benchmarks.dsjson_import --events 100000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from benchmarks._harness import add_label_argument, load, write_json
from service.personalizer.log_commands import import_files
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
from service.policies import new_info
from service.storage.migrate import upgrade_head
from service.storage.sql_log import SqlEventLog
from service.timeparse import format_timestamp
from tests.databases import database

LOOP = "personalizer"
ACTIONS = ("tea", "scarf", "lamp", "mug", "book")


def generate(path: Path, events: int, seed: int = 1) -> None:
    """Write ``events`` DSJSON lines to ``path``, streaming."""
    rng = np.random.default_rng(seed)
    actions = [
        {"_tag": a, "i": {"constant": 1, "id": a}, "j": [{"item": {"name": a, "price": 5 * i}}]}
        for i, a in enumerate(ACTIONS)
    ]
    start = 1_772_000_000.0
    with path.open("wb") as out:
        for n in range(events):
            served = int(rng.integers(len(ACTIONS)))
            ranking = [served + 1, *(j + 1 for j in range(len(ACTIONS)) if j != served)]
            line: dict[str, Any] = {
                "Timestamp": format_timestamp(start + n * 0.5),
                "Version": "1",
                "EventId": f"event-{n}",
                "a": ranking,
                "c": {
                    "user": {"segment": f"s{n % 7}", "visits": n % 13},
                    "device": {"kind": "phone" if n % 3 else "desktop"},
                    "_multi": actions,
                },
                "p": [0.8, 0.05, 0.05, 0.05, 0.05],
            }
            if n % 5:
                line = {
                    "_label_cost": -float(rng.random() < 0.3),
                    "_label_probability": 0.8,
                    "_labelIndex": served,
                    "o": [{"v": 1.0, "EventId": f"event-{n}"}],
                    **line,
                }
            out.write(orjson.dumps(line) + b"\n")


def run(events: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, database("postgresql", Path(tmp)) as url:
        path = Path(tmp) / "log.json"
        generate(path, events)
        upgrade_head(url)
        log = SqlEventLog(url)
        log.upsert_policy(
            LOOP, new_info(LOOP, DEFAULT_LOOP_SPEC, time.time()).model_dump(mode="json")
        )
        timings = []
        for _ in range(2):
            wall, cpu = time.perf_counter(), time.process_time()
            counts = import_files(log, LOOP, [path])
            timings.append((time.perf_counter() - wall, time.process_time() - cpu, counts))
            print(f"import {len(timings)}: {timings[-1][:2]} s wall, cpu", flush=True)
        logged = log.count(LOOP)
        log.close()
    (first_wall, first_cpu, counts), (again_wall, again_cpu, _) = timings
    return {
        "events": events,
        "file_mb": round(path_size_mb(events), 1),
        "decisions_logged": logged[0],
        "rewards_logged": logged[1],
        "import": {
            "wall_s": round(first_wall, 2),
            "cpu_s": round(first_cpu, 2),
            "events_per_s_wall": round(counts.lines / first_wall),
            "events_per_s_cpu": round(counts.lines / first_cpu),
        },
        "second_import_adds_nothing": {
            "wall_s": round(again_wall, 2),
            "cpu_s": round(again_cpu, 2),
            "events_per_s_wall": round(events / again_wall),
            "events_per_s_cpu": round(events / again_cpu),
        },
    }


def path_size_mb(events: int) -> float:
    """The size of the generated log (MB), from one sample of its lines."""
    with tempfile.TemporaryDirectory() as tmp:
        sample = Path(tmp) / "sample.json"
        generate(sample, 1000)
        return sample.stat().st_size * events / 1000 / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    add_label_argument(parser, "dsjson_import")
    args = parser.parse_args()
    before = load()
    result = run(args.events)
    payload = {"load_before": before, "load_after": load(), **result}
    print(payload)
    print(f"wrote {write_json('dsjson_import', payload, args.label)}")


if __name__ == "__main__":
    main()
