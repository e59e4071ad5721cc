"""Write a generated Azure AI Personalizer log (Decision Service JSON lines, DSJSON) to try
``bandit replay/estimate/compare --format dsjson`` on (docs/offline.md, "DSJSON files").

A loop offers three items (``tea``, ``scarf``, ``lamp``) to shoppers of three segments
(``new``, ``returning``, ``vip``); segment ``k`` clicks item ``k`` and no other (reward 1,
logged as ``_label_cost`` -1). The logging policy ignores the segment: its pick is item
``visits mod 3`` (``visits``, the shopper's other feature, is 0 to 4), served with
probability 0.8, each other item with 0.1, the served item drawn at random with these
probabilities (logged in ``p``): its mean reward is 1/3; serving segment ``k`` item
``k`` earns 1. Decisions are a minute apart from 2026-03-01 00:00 UTC; every 9th line
is ``_skipLearn`` and every 10th has no ``_label_cost`` (neither has a reward). The
lines go to ``--files`` files ``NN.json`` of ``--output``, in time order.

Run: ``python examples/personalizer_log.py [--output DIR] [--events N] [--files F] [--seed S]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np

SEGMENTS = ("new", "returning", "vip")
ITEMS = ("tea", "scarf", "lamp")
START = datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC)


def dsjson_lines(count: int, seed: int) -> list[bytes]:
    """``count`` DSJSON lines of the loop above (module docstring), seeded."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        segment, visits = int(rng.integers(3)), i % 5
        probabilities = [0.8 if j == visits % 3 else 0.1 for j in range(3)]
        served = int(rng.choice(3, p=probabilities))
        ranking = [served, *[j for j in range(3) if j != served]]
        when = START + datetime.timedelta(minutes=i)
        line: dict[str, Any] = {
            "_label_cost": -float(served == segment),
            "_label_probability": probabilities[served],
            "Timestamp": when.strftime("%Y-%m-%dT%H:%M:%S.0000000Z"),
            "EventId": f"e{i}",
            "a": [j + 1 for j in ranking],
            "c": {
                "shopper": {"segment": SEGMENTS[segment], "visits": visits},
                "_multi": [{"_tag": t, "j": [{"item": {"name": t}}]} for t in ITEMS],
            },
            "p": [probabilities[j] for j in ranking],
        }
        if i % 9 == 4:
            line["_skipLearn"] = True
        if i % 10 == 7:
            del line["_label_cost"]
        lines.append(json.dumps(line, separators=(",", ":")).encode())
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=Path("personalizer-logs"))
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    lines = dsjson_lines(args.events, args.seed)
    args.output.mkdir(parents=True, exist_ok=True)
    size = -(-len(lines) // args.files)
    for k in range(args.files):
        chunk = lines[k * size : (k + 1) * size]
        (args.output / f"{k:02d}.json").write_bytes(b"".join(line + b"\n" for line in chunk))
    print(f"{len(lines)} DSJSON lines in {args.files} files of {args.output}")


if __name__ == "__main__":
    main()
