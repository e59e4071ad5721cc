"""Cost of one decision and one update of the forgetting policies against LinUCB's
(docs/algorithms.md section 10.1, "Cost").

At ``K`` arms and ``d`` features (default 50 x 32), every contender runs the loop of
:func:`benchmarks.engine.engine_runner` (``select`` over the K candidates, then one
``update`` of the served arm), interleaved in one process (:mod:`benchmarks._harness`):
LinUCB, and each forgetting policy on its per-update clock (``gamma`` 0.99;
``window`` 1000) and on wall-clock time (``half_life_seconds`` 3600;
``window_seconds`` 3600 with ``window`` 1000), and hybrid LinUCB with per-arm parts
over the last 8 features (``context_dim`` 8; ``d`` must exceed it) without forgetting,
with ``gamma`` 0.99, with ``window`` 1000, with ``window_seconds`` 600 (``window`` 1000:
the 600 s leave first) and with ``half_life_seconds`` 3600, where
decision ``i`` is made and rewarded at ``now = i`` seconds, as the service passes the
time. Every policy is warmed with ``--warm`` decisions first (its arms hold data). The
``op:`` rows time alone the steps a discounted update adds to LinUCB's, and
``numpy.linalg.inv`` for comparison (:func:`operation_runners`), per call. Prints the CPU time per decision (per call for
``op:``) and its ratio to LinUCB's decision (median over rounds of the per-round ratio)
and writes
``benchmarks/results/forgetting_cost.json``:

    python -m benchmarks.forgetting_cost [--rounds 15] [--label before]
"""

from __future__ import annotations

import argparse
import itertools
from contextlib import nullcontext
from typing import Any

import numpy as np

from bandit_core import clock_at, make_policy
from bandit_core.linear import cholesky_inverse
from benchmarks._harness import (
    Runner,
    add_label_argument,
    interleave,
    load,
    ratio,
    table,
    write_json,
)

BENCHMARK = "forgetting_cost"
CONTENDERS: dict[str, tuple[str, dict[str, Any], bool]] = {
    # label: (algorithm, params, timed)
    "linucb": ("linucb", {}, False),
    "discounted_linucb gamma": ("discounted_linucb", {"gamma": 0.99}, False),
    "discounted_linucb half_life_seconds": (
        "discounted_linucb",
        {"half_life_seconds": 3600.0},
        True,
    ),
    "sliding_window_linucb window": ("sliding_window_linucb", {"window": 1000}, False),
    "sliding_window_linucb window_seconds": (
        "sliding_window_linucb",
        {"window": 1000, "window_seconds": 3600.0},
        True,
    ),
    # per-arm parts over the last 8 features, shared ones over the rest
    "hybrid_linucb per-arm": ("hybrid_linucb", {"context_dim": 8}, False),
    "hybrid_linucb per-arm gamma": ("hybrid_linucb", {"context_dim": 8, "gamma": 0.99}, False),
    "hybrid_linucb per-arm window": ("hybrid_linucb", {"context_dim": 8, "window": 1000}, False),
    "hybrid_linucb per-arm window_seconds": (
        "hybrid_linucb",
        {"context_dim": 8, "window": 1000, "window_seconds": 600.0},
        True,
    ),
    "hybrid_linucb per-arm half_life_seconds": (
        "hybrid_linucb",
        {"context_dim": 8, "half_life_seconds": 3600.0},
        True,
    ),
}


def runner(
    algorithm: str, params: dict[str, Any], timed: bool, K: int, d: int, warm: int
) -> Runner:
    """``run(n)``: ``n`` decisions and updates, the ``i``-th at ``now = i`` when ``timed``."""
    rng = np.random.default_rng(0)
    X_pool = rng.normal(size=(64, K, d)) / np.sqrt(d)
    R_pool = rng.uniform(size=(64, K))
    policy = make_policy(algorithm, d=d, seed=0, **params)
    ids = [f"arm{i}" for i in range(K)]
    pos = {a: i for i, a in enumerate(ids)}
    clock = itertools.count()

    def run(n: int) -> None:
        for _ in range(n):
            i = next(clock)
            X = X_pool[i % 64]
            with clock_at(policy, float(i)) if timed else nullcontext():
                dec = policy.select(ids, X)
                j = pos[dec.arm_id]
                policy.update(dec.arm_id, X[j], R_pool[i % 64, j])

    run(warm)
    return run


def operation_runners(d: int) -> dict[str, Runner]:
    """The steps of a discounted update that LinUCB's Sherman-Morrison update does not
    take, alone on one warmed arm's ``V`` and ``V~`` (``d x d``): the inverse of ``V``
    (:func:`~bandit_core.linear.cholesky_inverse`) and the products ``V^-1 b``,
    ``V^-1 V~ V^-1``; and ``numpy.linalg.inv(V)``, the inverse it replaces."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, d)) / np.sqrt(d)
    V = np.eye(d) + X.T @ X
    V_tilde = np.eye(d) + 0.5 * X.T @ X
    b = X.T @ rng.uniform(size=200)
    V_inv = np.linalg.inv(V)

    def inverse(n: int) -> None:
        for _ in range(n):
            cholesky_inverse(V)

    def numpy_inverse(n: int) -> None:
        for _ in range(n):
            np.linalg.inv(V)

    def products(n: int) -> None:
        for _ in range(n):
            V_inv.dot(b)
            V_inv @ V_tilde @ V_inv

    return {
        "op: inverse of V": inverse,
        "op: theta and V^-1 V~ V^-1": products,
        "op: numpy.linalg.inv(V)": numpy_inverse,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--K", type=int, default=50, help="candidates per decision (default 50)")
    parser.add_argument("--d", type=int, default=32, help="features per candidate (default 32)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument(
        "--warm", type=int, default=2000, help="decisions before timing (default 2000)"
    )
    add_label_argument(parser, BENCHMARK)
    args = parser.parse_args(argv)
    runners = {
        label: runner(algorithm, params, timed, args.K, args.d, args.warm)
        for label, (algorithm, params, timed) in CONTENDERS.items()
    }
    runners.update(operation_runners(args.d))
    before = load()
    measured = interleave(runners, rounds=args.rounds)
    base = measured["linucb"]
    rows = [
        {
            "contender": label,
            "us_per_decision": 1e6 / m.cpu_median,
            "x_linucb": ratio(base, m),
        }
        for label, m in measured.items()
    ]
    print(table(rows, ["contender", "us_per_decision", "x_linucb"]))
    write_json(
        BENCHMARK,
        {
            "K": args.K,
            "d": args.d,
            "rounds": args.rounds,
            "warm": args.warm,
            "load_before": before,
            "load_after": load(),
            "results": rows,
        },
        args.label,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
