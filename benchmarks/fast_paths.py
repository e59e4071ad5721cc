"""Before/after CPU figures of the engine's hot paths (select + update).

* the strict 800-matched-round news replay (``bandit_core.evaluation.replay``,
  alpha 1.0, seed 0) of LNUCB-TA and LinUCB: CPU seconds, median of ``--repeats``;
* decisions/s (CPU) at (K, d) = (50, 32) of the engine's LinUCB and LNUCB-TA (default
  5000-point kNN window) against :class:`benchmarks.reference.NumpyLinUCBFloor`,
  interleaved round by round, median over rounds.

    python -m benchmarks.fast_paths [--repeats 5] [--engine-path PATH]

``--engine-path`` imports ``bandit_core`` from another checkout (before/after runs).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _cpu(fn, *args) -> float:
    c0 = time.process_time()
    fn(*args)
    return time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="repeats / rounds (default 5)")
    parser.add_argument(
        "--decisions", type=int, default=2000, help="decisions per round at (50, 32)"
    )
    parser.add_argument("--engine-path", default="", help="import bandit_core from this checkout")
    args = parser.parse_args(argv)
    if args.engine_path:
        sys.path.insert(0, str(Path(args.engine_path).resolve()))
    import bandit_core
    from bandit_core.datasets import load_news
    from bandit_core.evaluation import replay
    from benchmarks import _harness as h
    from benchmarks.reference import NumpyLinUCBFloor, Workload, news_path

    print(f"bandit_core from {Path(bandit_core.__file__).parent}")
    news = load_news(news_path(h.ROOT))  # this checkout's data set, whichever engine runs
    for name in ("lnucb_ta", "linucb"):
        cpu = [
            _cpu(replay, bandit_core.make_policy(name, d=10, alpha=1.0, seed=0), news, 800)
            for _ in range(args.repeats)
        ]
        print(
            f"news replay, 800 matched rounds, {name}: CPU median {np.median(cpu):.3f} s ({args.repeats} runs)"
        )

    K, d = 50, 32
    pool = Workload.make(K, d)
    ids = [f"arm{i}" for i in range(K)]
    pos = {a: i for i, a in enumerate(ids)}

    def engine(name: str):
        policy = bandit_core.make_policy(name, d=d, seed=0)

        def run(n: int, off: int) -> None:
            for t in range(n):
                i = (off + t) % len(pool.X)
                dec = policy.select(ids, pool.X[i])
                j = pos[dec.arm_id]
                policy.update(dec.arm_id, pool.X[i, j], pool.R[i, j])

        return run

    def floor():
        f = NumpyLinUCBFloor(K, d)

        def run(n: int, off: int) -> None:
            for t in range(n):
                i = (off + t) % len(pool.X)
                f.step(pool.X[i], pool.R[i])

        return run

    runners = {"numpy floor": floor(), "linucb": engine("linucb"), "lnucb_ta": engine("lnucb_ta")}
    rates: dict[str, list[float]] = {k: [] for k in runners}
    n = args.decisions
    for r in range(args.repeats):
        for label, run in runners.items():
            rates[label].append(n / _cpu(run, n, r * n))
    med = {k: float(np.median(v)) for k, v in rates.items()}
    print(f"(K, d) = ({K}, {d}), {n} decisions x {args.repeats} rounds, CPU decisions/s (median):")
    for label, v in med.items():
        print(
            f"  {label:12s} {v:10.0f}  x floor {v / med['numpy floor']:.2f}  linucb/this {med['linucb'] / v:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
