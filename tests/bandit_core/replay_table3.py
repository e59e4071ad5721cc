"""Measure LNUCB-TA and its ablations on the news data set under the strict replay
protocol (README "Reproduction"). Not a test; run from the repository root:

    python -m tests.bandit_core.replay_table3

Prints, per variant and alpha_0 in {0.1, 1, 10}, the cumulative reward over 800
matched rounds for seeds 0..4 (mean, population std, min, max), then the wall time of
one 800-round LNUCB-TA replay (median of 5, wall and process CPU time) next to LinUCB's.
"""

from __future__ import annotations

import time

import numpy as np

import bandit_core
from tests.bandit_core.conftest import load_news, strict_replay

VARIANTS: dict[str, tuple[str, dict]] = {
    "LinUCB": ("linucb", {}),
    "LNUCB-TA (linear_target=reward)": ("lnucb_ta", {}),
    "LNUCB-TA (linear_target=residual)": ("lnucb_ta", {"linear_target": "residual"}),
    "LNUCB-TA (knn_weights=distance)": ("lnucb_ta", {"knn_weights": "distance"}),
    "(Lin+kNN)-UCB": ("lnucb_ta", {"temporal_attention": False}),
    "kNN-UCB": ("lnucb_ta", {"use_linear": False, "temporal_attention": False}),
}


def main() -> None:
    news = load_news()
    for label, (name, params) in VARIANTS.items():
        cells = []
        for alpha in (0.1, 1.0, 10.0):
            r = [strict_replay(bandit_core.make_policy(name, d=10, alpha=alpha, seed=s, **params), news) for s in range(5)]
            cells.append(f"{np.mean(r):.1f} ± {np.std(r):.1f} [{min(r):.0f}-{max(r):.0f}]")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    for name in ("lnucb_ta", "linucb"):
        wall, cpu = [], []
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            strict_replay(bandit_core.make_policy(name, d=10, alpha=1.0, seed=0), news)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(
            f"{name}: one 800-round replay, median of 5: wall {np.median(wall):.2f} s, CPU {np.median(cpu):.2f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
