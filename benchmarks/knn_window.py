"""LNUCB-TA against LinUCB as the kNN memories fill up to the 5000-point window.

For each (K, d) and each memory size m, every arm of an LNUCB-TA policy holds m points
(one arm is taught m rewards through the public ``update``; its exported part is then
imported under every arm id), and a decision (select over all K arms, then one update)
is measured interleaved with LinUCB's, whose cost does not depend on m. At m equal to
the window the memory is a full ring and stays full.

    python -m benchmarks.knn_window
    python -m benchmarks.knn_window --configs 10x10 --fills 0,5000
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument


def filled_policy(K: int, d: int, m: int, seed: int = 0) -> Any:
    """An LNUCB-TA policy over arms ``arm0..arm{K-1}``, each holding ``m`` memory points."""
    import bandit_core

    policy = bandit_core.make_policy("lnucb_ta", d=d, seed=seed)
    ids = [f"arm{i}" for i in range(K)]
    policy.select(ids, np.zeros((K, d)))
    rng = np.random.default_rng(seed)
    for x in rng.normal(size=(m, d)) / np.sqrt(d):
        policy.update(ids[0], x, float(rng.random() < 0.3))
    part = policy.export_parts([f"arm:{ids[0]}"])[f"arm:{ids[0]}"]
    policy.import_parts({f"arm:{a}": part for a in ids})
    return policy


def measure(K: int, d: int, m: int, rounds: int, slice_s: float) -> dict[str, Any]:
    from benchmarks import _harness as h
    from benchmarks.engine import _cycle, engine_runner
    from benchmarks.reference import Workload

    pool = Workload.make(K, d)
    policy = filled_policy(K, d, m)
    ids = [f"arm{i}" for i in range(K)]
    pos = {a: i for i, a in enumerate(ids)}
    nxt = _cycle(len(pool.X))

    def lnucb(n: int) -> None:
        for _ in range(n):
            i = nxt()
            X = pool.X[i]
            dec = policy.select(ids, X)
            j = pos[dec.arm_id]
            policy.update(dec.arm_id, X[j], pool.R[i, j])

    runners = {"engine linucb": engine_runner("linucb", K, d, pool, {}), "engine lnucb_ta": lnucb}
    before = h.load()
    res = h.interleave(runners, rounds=rounds, slice_s=slice_s)
    lin, ta = res["engine linucb"], res["engine lnucb_ta"]
    return {
        "K": K,
        "d": d,
        "memory points per arm": m,
        "linucb us/decision (cpu)": 1e6 / lin.cpu_median,
        "lnucb_ta us/decision (cpu)": 1e6 / ta.cpu_median,
        "lnucb_ta time / linucb (cpu)": h.ratio(lin, ta),
        "load_before": before,
        "load_after": h.load(),
        "rounds": {"linucb_cpu": lin.cpu, "lnucb_ta_cpu": ta.cpu},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default="10x10,50x32", help="comma-separated KxD pairs")
    parser.add_argument("--fills", default="0,100,1000,5000", help="memory points per arm")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slice", type=float, default=0.1)
    parser.add_argument("--engine-path", default="", help="import bandit_core from this checkout")
    add_label_argument(parser, "knn_window")
    args = parser.parse_args(argv)
    if args.engine_path:
        sys.path.insert(0, str(Path(args.engine_path).resolve()))
    from benchmarks import _harness as h

    rows = []
    for spec in args.configs.split(","):
        K, d = (int(v) for v in spec.lower().split("x"))
        for m in (int(v) for v in args.fills.split(",")):
            rows.append(measure(K, d, m, args.rounds, args.slice))
    cols = [
        "K",
        "d",
        "memory points per arm",
        "linucb us/decision (cpu)",
        "lnucb_ta us/decision (cpu)",
        "lnucb_ta time / linucb (cpu)",
    ]
    print(h.table([{**r, "load": r["load_before"]["loadavg"][0]} for r in rows], [*cols, "load"]))
    path = h.write_json("knn_window", {"rows": rows}, args.label)
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
