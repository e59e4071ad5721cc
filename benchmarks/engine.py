"""Engine throughput per decision: select over K candidates, then one update.

For each (K, d) it runs, interleaved in one process (see :mod:`benchmarks._harness`):

* every algorithm in ``bandit_core.registry.POLICIES`` through its public
  ``select``/``update``;
* the numpy floor (:class:`benchmarks.reference.NumpyLinUCBFloor`);
* MABWiser ``LearningPolicy.LinUCB`` (``predict`` then ``partial_fit``), Vowpal Wabbit
  ``--cb_explore_adf`` (``predict`` then ``learn`` on text examples formatted before
  timing) and River ``bandit.LinUCBDisjoint`` (``pull`` then ``update``), when the
  ``bench`` extra is installed.

MABWiser and River score every arm against one shared context vector (their API); the
engine, the floor and VW get a distinct feature row per candidate. The arithmetic per
arm is the same d-dimensional quadratic form either way.

    python -m benchmarks.engine                      # all four (K, d), writes engine.json
    python -m benchmarks.engine --configs 50x32 --rounds 15
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument

CONFIGS = ((10, 10), (50, 32), (50, 128), (1000, 32))

# Parameters an algorithm needs beyond d to run on the synthetic workload. The
# guardrailed policy gets two guardrails that are evaluated on every decision (an
# exposure cap over all arms and a minimum-estimate rule), no safe arm.
ALGORITHM_PARAMS: dict[str, dict[str, Any]] = {
    "guardrailed_linucb": {
        "guardrails": (
            {"type": "exposure_cap", "max_share": 0.2, "window": 50},
            {"type": "min_estimate", "min_pulls": 10, "min_value": 0.05},
        ),
    },
}


def _cycle(pool_size: int) -> Callable[[], int]:
    i = -1

    def nxt() -> int:
        nonlocal i
        i = (i + 1) % pool_size
        return i

    return nxt


def engine_runner(
    name: str, K: int, d: int, pool: Any, params: dict[str, Any] | None = None
) -> Callable[[int], None]:
    """``run(n)``: ``n`` decisions of the registered algorithm ``name``."""
    import bandit_core

    policy = bandit_core.make_policy(
        name, d=d, seed=0, **(params if params is not None else ALGORITHM_PARAMS.get(name, {}))
    )
    ids = [f"arm{i}" for i in range(K)]
    pos = {a: i for i, a in enumerate(ids)}
    nxt = _cycle(len(pool.X))
    X_pool, R_pool = pool.X, pool.R

    def run(n: int) -> None:
        for _ in range(n):
            i = nxt()
            X = X_pool[i]
            dec = policy.select(ids, X)
            j = pos[dec.arm_id]
            policy.update(dec.arm_id, X[j], R_pool[i, j])

    return run


def floor_runner(K: int, d: int, pool: Any) -> Callable[[int], None]:
    from benchmarks.reference import NumpyLinUCBFloor

    floor = NumpyLinUCBFloor(K, d)
    nxt = _cycle(len(pool.X))

    def run(n: int) -> None:
        for _ in range(n):
            i = nxt()
            floor.step(pool.X[i], pool.R[i])

    return run


def mabwiser_runner(K: int, d: int, pool: Any) -> Callable[[int], None]:
    from mabwiser.mab import MAB, LearningPolicy

    mab = MAB(list(range(K)), LearningPolicy.LinUCB(alpha=1.0, l2_lambda=1.0), seed=0)
    contexts = pool.X[:, 0, :]
    # One fit so every arm is known: arm a learns from context a (mod pool) once.
    mab.fit(
        decisions=np.arange(K),
        rewards=pool.R[np.arange(K) % len(pool.X), np.arange(K)],
        contexts=contexts[np.arange(K) % len(pool.X)],
    )
    nxt = _cycle(len(pool.X))

    def run(n: int) -> None:
        for _ in range(n):
            i = nxt()
            c = contexts[i : i + 1]
            arm = mab.predict(c)
            mab.partial_fit([arm], [pool.R[i, arm]], c)

    return run


def river_runner(K: int, d: int, pool: Any) -> Callable[[int], None]:
    from river.bandit import LinUCBDisjoint

    policy = LinUCBDisjoint(alpha=1.0, seed=0)
    arms = list(range(K))
    contexts = [dict(enumerate(map(float, c))) for c in pool.X[:, 0, :]]
    nxt = _cycle(len(contexts))

    def run(n: int) -> None:
        for _ in range(n):
            i = nxt()
            arm = policy.pull(arms, context=contexts[i])
            policy.update(arm, contexts[i], float(pool.R[i, arm]))

    return run


def vw_runner(K: int, d: int, pool: Any, max_pool: int = 8) -> Callable[[int], None]:
    import vowpalwabbit

    vw = vowpalwabbit.Workspace("--cb_explore_adf --quiet")
    n_pool = min(max_pool, len(pool.X))
    examples = [
        ["shared |s bias"]
        + ["|a " + " ".join(f"{j}:{v:.6f}" for j, v in enumerate(x)) for x in pool.X[i]]
        for i in range(n_pool)
    ]
    rng = np.random.default_rng(0)
    nxt = _cycle(n_pool)

    def run(n: int) -> None:
        for _ in range(n):
            i = nxt()
            lines = examples[i]
            pmf = vw.predict(lines)
            a = min(int(np.searchsorted(np.cumsum(pmf), rng.random())), K - 1)
            labelled = list(lines)
            labelled[1 + a] = f"0:{-pool.R[i, a]}:{pmf[a]} " + lines[1 + a]
            vw.learn(labelled)

    return run


EXTERNAL: dict[str, Callable[[int, int, Any], Callable[[int], None]]] = {
    "mabwiser LinUCB": mabwiser_runner,
    "vw cb_explore_adf": vw_runner,
    "river LinUCBDisjoint": river_runner,
}


def contenders(
    K: int, d: int, *, external: bool = True, only: list[str] | None = None
) -> tuple[dict[str, Callable[[int], None]], dict[str, str]]:
    """Runners for one (K, d), and the reasons for those that could not be built."""
    from bandit_core.errors import BanditError
    from bandit_core.registry import POLICIES
    from benchmarks.reference import Workload

    pool = Workload.make(K, d)
    runners: dict[str, Callable[[int], None]] = {"numpy floor": floor_runner(K, d, pool)}
    skipped: dict[str, str] = {}
    for name in POLICIES:
        if only and name not in only:
            continue
        try:
            run = engine_runner(name, K, d, pool)
            run(2)
            runners[f"engine {name}"] = run
        except (
            BanditError,
            TypeError,
        ) as exc:  # an algorithm whose inputs this workload cannot give
            skipped[f"engine {name}"] = f"{type(exc).__name__}: {exc}"
    if external:
        for label, make in EXTERNAL.items():
            try:
                runners[label] = make(K, d, pool)
            except ImportError as exc:
                skipped[label] = f"not installed ({exc.name}); pip install -e '.[bench]'"
    return runners, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--configs",
        default=",".join(f"{K}x{d}" for K, d in CONFIGS),
        help="comma-separated KxD pairs (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=int, default=9, help="interleaved rounds per config (default 9)"
    )
    parser.add_argument("--slice", type=float, default=0.05, help="seconds per contender per round")
    parser.add_argument("--no-external", action="store_true", help="skip MABWiser, VW and River")
    parser.add_argument(
        "--algorithms", default="", help="comma-separated registry names (default: all)"
    )
    parser.add_argument(
        "--engine-path",
        default="",
        help="import bandit_core from this checkout instead (before/after comparisons)",
    )
    add_label_argument(parser, "engine")
    args = parser.parse_args(argv)
    if args.engine_path:
        sys.path.insert(0, str(Path(args.engine_path).resolve()))

    from benchmarks import _harness as h

    results: list[dict[str, Any]] = []
    for spec in args.configs.split(","):
        K, d = (int(v) for v in spec.lower().split("x"))
        runners, skipped = contenders(
            K,
            d,
            external=not args.no_external,
            only=[a for a in args.algorithms.split(",") if a] or None,
        )
        before = h.load()
        m = h.interleave(runners, rounds=args.rounds, slice_s=args.slice)
        after = h.load()
        floor, linucb = m["numpy floor"], m.get("engine linucb")
        rows = []
        for name, meas in m.items():
            rows.append(
                {
                    "contender": name,
                    "decisions/s (wall)": meas.wall_median,
                    "decisions/s (cpu)": meas.cpu_median,
                    "us/decision (cpu)": 1e6 / meas.cpu_median,
                    "x floor (cpu)": h.ratio(meas, floor),
                    "x floor (wall)": h.ratio(meas, floor, "wall"),
                    "linucb / this (cpu)": h.ratio(linucb, meas) if linucb else None,
                    "wall_rounds": meas.wall,
                    "cpu_rounds": meas.cpu,
                }
            )
        print(f"\nK = {K}, d = {d}   load before {before['loadavg']} after {after['loadavg']}")
        print(
            h.table(
                rows,
                [
                    "contender",
                    "decisions/s (wall)",
                    "decisions/s (cpu)",
                    "us/decision (cpu)",
                    "x floor (cpu)",
                    "x floor (wall)",
                    "linucb / this (cpu)",
                ],
            )
        )
        for name, why in skipped.items():
            print(f"  skipped {name}: {why}")
        results.append(
            {
                "K": K,
                "d": d,
                "load_before": before,
                "load_after": after,
                "rows": rows,
                "skipped": skipped,
            }
        )
    path = h.write_json(
        "engine", {"rounds": args.rounds, "slice_s": args.slice, "configs": results}, args.label
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
