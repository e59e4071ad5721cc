"""The large-space shared model, diag_linucb: cost and what it gives up.

**Cost.** For each ``bits`` (2^12 to 2^20 buckets) the featurizer's sparse rows of the
benchmark request of :mod:`benchmarks.featurizer` (15 context features in 3 namespaces,
50 actions of 6 features, every context x action interaction: about 110 nonzeros a
row) are fed to ``diag_linucb``, pre-featurized (a pool of ``POOL`` requests, so the
featurizer's own cost is not counted: it is in ``benchmarks/featurizer.py``). One unit is
one ``select`` over the K = 50 candidates and one ``update`` of the served row; the
bits are measured interleaved in one process (:mod:`benchmarks._harness`). After the
runs, the ``shared`` part's size and ``to_bytes`` cost, next to what a dense diagonal
(two float64 arrays of ``2**bits + 1``) would weigh.

**Reward.** On :class:`bandit_core.storefront.Storefront` (JSON shoppers and items,
closed-form click rates, every item replaced by a new id at ``--replace-at``), through
:func:`~bandit_core.storefront.run_storefront` with each action's featurized vector
(context, item, every context x item interaction): ``hybrid_linucb`` (the full matrix,
``context_dim`` 0) at ``bits`` 8 (d = 257, feasible) against ``diag_linucb`` on the same
rows and at ``bits`` 18 (sparse rows; both fits, UCB and epsilon-greedy), and random.
The figure is the expected click rate of the chosen items, before and after the
replacement and at the end, and the share of the full matrix's lift over random.

    python -m benchmarks.sparse_model                       # writes results/sparse_model.json
    python -m benchmarks.sparse_model --rounds 3 --steps 1000 --replace-at 500 --span 200 --seeds 1
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument

K = 50
POOL = 16
WARM_UPDATES = 2000
CONTENDERS: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    # label, algorithm, featurizer bits, params
    ("hybrid_linucb (full matrix), bits 8", "hybrid_linucb", 8, {"alpha": 0.5}),
    ("diag_linucb joint, bits 8", "diag_linucb", 8, {"alpha": 0.5}),
    ("diag_linucb joint, bits 18", "diag_linucb", 18, {"alpha": 0.5}),
    ("diag_linucb joint, bits 18, epsilon 0.2", "diag_linucb", 18, {"alpha": 0.0, "epsilon": 0.2}),
    ("diag_linucb per_feature, bits 18", "diag_linucb", 18, {"alpha": 0.5, "fit": "per_feature"}),
    ("random", "random", 8, {}),
)


def reward_comparison(rounds: int, replace_at: int, span: int, seeds: int) -> list[dict[str, Any]]:
    """Expected click rate of the chosen items on the storefront, per contender: the
    ``span`` rounds before the catalog replacement, the ``span`` after it, the last
    ``span``; means over ``seeds`` runs (each seed's shoppers and offers are the same for
    every contender)."""
    import bandit_core
    from bandit_core.features import Featurizer, FeaturizerConfig
    from bandit_core.storefront import Storefront, run_storefront, shared_rows

    shop = Storefront()
    phases = {
        "before": (replace_at - span, replace_at),
        "after": (replace_at, replace_at + span),
        "end": (rounds - span, rounds),
    }
    featurizers = {
        8: Featurizer(FeaturizerConfig(bits=8, output="dense")),
        18: Featurizer(FeaturizerConfig(bits=18, output="sparse")),
    }
    out: list[dict[str, Any]] = []
    for label, algorithm, bits, params in CONTENDERS:
        featurizer = featurizers[bits]
        per_phase: dict[str, list[float]] = {n: [] for n in phases}
        best: dict[str, list[float]] = {n: [] for n in phases}
        t0 = time.process_time()
        for seed in range(seeds):
            policy = bandit_core.make_policy(
                algorithm, d=featurizer.config.dim, seed=seed, **params
            )
            run = run_storefront(
                policy,
                shared_rows(featurizer),
                shop,
                rounds,
                replace_at,
                np.random.default_rng(seed),
            )
            for n, (lo, hi) in phases.items():
                per_phase[n].append(float(run.chosen_mu[lo:hi].mean()))
                best[n].append(float(run.best_mu[lo:hi].mean()))
        out.append(
            {
                "contender": label,
                **{n: float(np.mean(v)) for n, v in per_phase.items()},
                "ms/round with featurizing (cpu)": 1e3
                * (time.process_time() - t0)
                / (rounds * seeds),
                "per seed": per_phase,
                "best offered": {n: float(np.mean(v)) for n, v in best.items()},
            }
        )
    rand, full = out[-1], out[0]
    for row in out:
        for n in phases:
            lift = full[n] - rand[n]
            row[f"share of full-matrix lift, {n}"] = (row[n] - rand[n]) / lift if lift > 0 else None
    return out


def cost_runner(bits: int):
    """A runner doing ``n`` decisions + updates of diag_linucb at ``bits``, and its policy."""
    import bandit_core
    from bandit_core.features import Featurizer, FeaturizerConfig
    from benchmarks.featurizer import request

    featurizer = Featurizer(FeaturizerConfig(bits=bits, output="sparse"))
    pool = [featurizer.featurize(*request(seed)).actions for seed in range(POOL)]
    ids = [f"sku-{k}" for k in range(K)]
    policy = bandit_core.make_policy("diag_linucb", d=featurizer.config.dim, alpha=0.5, seed=0)
    rng = np.random.default_rng(bits)
    for i in range(WARM_UPDATES):  # a state with the touched entries of many rewards
        policy.update(
            "warm", pool[i % POOL].one_row(int(rng.integers(K))), float(rng.uniform() < 0.1)
        )
    served = [rows.one_row(k) for rows in pool for k in range(K)]
    step = [0]

    def run(n: int) -> None:
        for _ in range(n):
            i = step[0] = step[0] + 1
            dec = policy.select(ids, pool[i % POOL])
            policy.update(
                dec.arm_id, served[(i % POOL) * K + ids.index(dec.arm_id)], float(i % 10 == 0)
            )

    return run, policy


def state_cost(policy: Any, bits: int, repeats: int = 20) -> dict[str, Any]:
    """Bytes and to_bytes / from_bytes time of the sparse ``shared`` part, and of a dense
    diagonal of the same dimension (two float64 arrays of ``2**bits + 1``)."""
    from bandit_core.diag_linucb import DiagSharedState
    from bandit_core.state import pack, unpack

    def timed(f) -> float:
        t0 = time.process_time()
        for _ in range(repeats):
            f()
        return 1e6 * (time.process_time() - t0) / repeats

    shared = policy.shared_state
    data = shared.to_bytes()
    dense = {"sum_sq": np.zeros((1 << bits) + 1), "w": np.zeros((1 << bits) + 1)}
    dense["sum_sq"][shared.index] = shared.sum_sq
    dense["w"][shared.index] = shared.w
    dense_data = pack("dense_diag", {"n": shared.n}, dense)
    return {
        "touched entries": len(shared.index),
        "sparse part bytes": len(data),
        "sparse to_bytes us": timed(shared.to_bytes),
        "sparse from_bytes us": timed(lambda: DiagSharedState.from_bytes(data)),
        "dense part bytes": len(dense_data),
        "dense to_bytes us": timed(lambda: pack("dense_diag", {"n": shared.n}, dense)),
        "dense from_bytes us": timed(lambda: unpack(dense_data)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bits", default="12,14,16,18,20", help="comma-separated bits (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--slice", type=float, default=0.1, help="seconds per contender per round")
    parser.add_argument(
        "--steps", type=int, default=4000, help="storefront rounds per seed (default 4000)"
    )
    parser.add_argument(
        "--replace-at",
        type=int,
        default=2000,
        help="round of the catalog replacement (default 2000)",
    )
    parser.add_argument(
        "--span", type=int, default=500, help="rounds of each phase of the table (default 500)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="storefront seeds (default 3)")
    add_label_argument(parser, "sparse_model")
    args = parser.parse_args(argv)

    from benchmarks import _harness as h

    bits_list = [int(v) for v in args.bits.split(",")]
    built = {b: cost_runner(b) for b in bits_list}
    before = h.load()
    m = h.interleave(
        {f"bits {b}": built[b][0] for b in bits_list}, rounds=args.rounds, slice_s=args.slice
    )
    after = h.load()
    first = m[f"bits {bits_list[0]}"]
    cost_rows = [
        {
            "bits": b,
            "us/decision+update (cpu)": 1e6 / m[f"bits {b}"].cpu_median,
            f"x bits {bits_list[0]} time (cpu)": h.ratio(first, m[f"bits {b}"]),
            **state_cost(built[b][1], b),
            "cpu_rounds": m[f"bits {b}"].cpu,
        }
        for b in bits_list
    ]
    print(
        f"\ndiag_linucb, K = {K}, ~110 nonzeros a row   load before {before['loadavg']} after {after['loadavg']}"
    )
    print(
        h.table(
            cost_rows,
            [
                "bits",
                "us/decision+update (cpu)",
                f"x bits {bits_list[0]} time (cpu)",
                "touched entries",
                "sparse part bytes",
                "sparse to_bytes us",
                "dense part bytes",
                "dense to_bytes us",
            ],
        )
    )
    reward_rows = reward_comparison(args.steps, args.replace_at, args.span, args.seeds)
    print(
        f"\nstorefront: {args.seeds} seeds x {args.steps} rounds, catalog replaced at {args.replace_at}; "
        f"expected click rate of the chosen item over {args.span} rounds"
    )
    print(
        h.table(
            reward_rows,
            [
                "contender",
                "before",
                "after",
                "end",
                "share of full-matrix lift, before",
                "share of full-matrix lift, after",
                "share of full-matrix lift, end",
                "ms/round with featurizing (cpu)",
            ],
        )
    )
    path = h.write_json(
        "sparse_model",
        {
            "K": K,
            "rounds": args.rounds,
            "slice_s": args.slice,
            "load_before": before,
            "load_after": after,
            "cost": cost_rows,
            "storefront": {
                "steps": args.steps,
                "replace_at": args.replace_at,
                "span": args.span,
                "seeds": args.seeds,
                "rows": reward_rows,
            },
        },
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
