"""Decision + update cost of Hybrid LinUCB at K = 50 candidates.

For each shared dimension ``k`` it runs, interleaved in one process (see
:mod:`benchmarks._harness`): ``hybrid_linucb`` without a per-arm part (``context_dim =
0``, the shared-matrix LinUCB over ``z``) and with a per-arm part over a context of
``--context-dim`` features, next to per-arm ``linucb`` over the same ``k`` features.
One unit is one ``select`` over the K candidates and one ``update`` of the served arm.

    python -m benchmarks.hybrid_linucb                  # k = 32, 128, 512; writes hybrid_linucb.json
    python -m benchmarks.hybrid_linucb --shared-dims 32 --rounds 5
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks._harness import add_label_argument

K = 50


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--shared-dims", default="32,128,512", help="comma-separated k (default: %(default)s)"
    )
    parser.add_argument("--context-dim", type=int, default=8, help="per-arm part's d (default 8)")
    parser.add_argument(
        "--rounds", type=int, default=7, help="interleaved rounds per k (default 7)"
    )
    parser.add_argument("--slice", type=float, default=0.1, help="seconds per contender per round")
    add_label_argument(parser, "hybrid_linucb")
    args = parser.parse_args(argv)

    from benchmarks import _harness as h
    from benchmarks.engine import engine_runner
    from benchmarks.reference import Workload

    c = args.context_dim
    results: list[dict[str, Any]] = []
    for k in (int(v) for v in args.shared_dims.split(",")):
        shared_only, with_context = Workload.make(K, k), Workload.make(K, k + c)
        runners = {
            "hybrid_linucb, context_dim 0": engine_runner("hybrid_linucb", K, k, shared_only),
            f"hybrid_linucb, context_dim {c}": engine_runner(
                "hybrid_linucb", K, k + c, with_context, {"context_dim": c}
            ),
            "linucb (per arm)": engine_runner("linucb", K, k, shared_only),
        }
        before = h.load()
        m = h.interleave(runners, rounds=args.rounds, slice_s=args.slice)
        after = h.load()
        linucb = m["linucb (per arm)"]
        rows = [
            {
                "contender": name,
                "us/decision+update (cpu)": 1e6 / meas.cpu_median,
                "decisions/s (cpu)": meas.cpu_median,
                "x linucb time (cpu)": h.ratio(linucb, meas),
                "cpu_rounds": meas.cpu,
            }
            for name, meas in m.items()
        ]
        print(f"\nK = {K}, k = {k}   load before {before['loadavg']} after {after['loadavg']}")
        print(
            h.table(
                rows,
                [
                    "contender",
                    "us/decision+update (cpu)",
                    "decisions/s (cpu)",
                    "x linucb time (cpu)",
                ],
            )
        )
        results.append(
            {
                "K": K,
                "k": k,
                "context_dim": c,
                "load_before": before,
                "load_after": after,
                "rows": rows,
            }
        )
    path = h.write_json(
        "hybrid_linucb",
        {"rounds": args.rounds, "slice_s": args.slice, "configs": results},
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
