"""Wall time of the news-data-set replay of LinUCB and LNUCB-TA, next to the paper's runtimes.

Two workloads per policy and alpha, each timed ``--repeats`` times (median reported), the
log loaded once beforehand so only replay compute is timed:

* ``800 matched``: the Table 3 protocol, strict replay until 800 matched events;
* ``7500 events``: the first 7500 logged events, the step count of the paper's Table 7.

The LNUCB-TA paper reports, at alpha 0.1, 8.09 s (LinUCB) and 324.5 s (LNUCB-TA) for the
800-round run of Table 3, and 19.79 s / 102.00 s for 7500 steps in Table 7.

    python benchmarks/replay_speed.py --json benchmarks/results/replay_speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bandit_core
from bandit_core.datasets import BanditLog, load_news
from bandit_core.evaluation import replay

PAPER_SECONDS = {  # (policy, alpha) -> (Table 3: 800 rounds, Table 7: 7500 steps)
    ("linucb", 0.1): (8.09, 19.79),
    ("linucb", 1.0): (8.73, 19.02),
    ("linucb", 10.0): (5.97, 18.07),
    ("lnucb_ta", 0.1): (324.5, 102.00),
    ("lnucb_ta", 1.0): (293.83, 98.57),
    ("lnucb_ta", 10.0): (297.28, 95.48),
}


def _time(
    name: str, alpha: float, log: BanditLog, rounds: int | None, repeats: int
) -> dict[str, float]:
    """Median and min wall seconds and median CPU seconds (process time: robust to other
    processes sharing the machine) of ``repeats`` replays."""
    wall, cpu, result = [], [], None
    for _ in range(repeats):
        policy = bandit_core.make_policy(name, d=log.d, alpha=alpha, seed=0)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = replay(policy, log, rounds)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    assert result is not None
    return {
        "events_seen": result.events_seen,
        "cumulative_reward": result.cumulative_reward,
        "median_seconds": statistics.median(wall),
        "min_seconds": min(wall),
        "median_cpu_seconds": statistics.median(cpu),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT / "bandit_core" / "data" / "news_dataset.txt.gz",
        help="news data set (default: bandit_core/data/news_dataset.txt.gz, shipped with the package)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed runs per row; the median is reported (default 5)",
    )
    parser.add_argument(
        "--alpha", type=float, nargs="+", default=[0.1, 1.0, 10.0], help="alphas (default 0.1 1 10)"
    )
    parser.add_argument("--json", type=Path, help="write the rows as JSON to this path")
    args = parser.parse_args()

    full = load_news(args.data)
    first = BanditLog(
        full.arm_ids,
        full.features[:7500],
        full.action[:7500],
        full.reward[:7500],
        full.pscore[:7500],
    )
    policies = [p for p in ("linucb", "lnucb_ta") if p in bandit_core.POLICIES]
    rows = []
    for name in policies:
        for alpha in args.alpha:
            for workload, log, rounds in (("800 matched", full, 800), ("7500 events", first, None)):
                t = _time(name, alpha, log, rounds, args.repeats)
                paper = PAPER_SECONDS.get((name, alpha), (None, None))[0 if rounds else 1]
                rows.append(
                    {
                        "policy": name,
                        "alpha": alpha,
                        "workload": workload,
                        **t,
                        "us_per_event": 1e6 * t["median_seconds"] / t["events_seen"],
                        "paper_seconds": paper,
                        "speedup_vs_paper": None if paper is None else paper / t["median_seconds"],
                    }
                )
    header = (
        f"{'policy':9} {'alpha':>5} {'workload':12} {'events':>6} {'reward':>6} {'median s':>9} {'min s':>7} "
        f"{'cpu s':>7} {'us/event':>8} {'paper s':>8} {'x faster':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        paper = "-" if r["paper_seconds"] is None else f"{r['paper_seconds']:.2f}"
        speed = "-" if r["speedup_vs_paper"] is None else f"{r['speedup_vs_paper']:.0f}"
        print(
            f"{r['policy']:9} {r['alpha']:>5g} {r['workload']:12} {r['events_seen']:>6} "
            f"{r['cumulative_reward']:>6g} {r['median_seconds']:>9.3f} {r['min_seconds']:>7.3f} "
            f"{r['median_cpu_seconds']:>7.3f} {r['us_per_event']:>8.1f} {paper:>8} {speed:>8}"
        )
    missing = sorted({"linucb", "lnucb_ta"} - set(policies))
    if missing:
        print(f"not registered, skipped: {', '.join(missing)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "machine": platform.machine(),
            "processor": platform.processor(),
            "repeats": args.repeats,
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
