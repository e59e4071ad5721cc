"""Offline replay throughput, events/s.

Strict replay (Li et al. 2011; ``bandit_core.evaluation.replay``) of LinUCB and LNUCB-TA
against the *straightforward per-arm-loop implementations* written in
:mod:`benchmarks.reference` (``LoopLinUCB``, ``LoopLNUCBTA``: a Python loop over arms,
``np.linalg.inv`` per arm per step, kNN memory as Python lists), replayed with the same
protocol by :func:`loop_replay` below. Both sides run interleaved, repeat by repeat.

Workloads:

* ``news``: the news data set (``<repo>/bandit_core/data/news_dataset.txt.gz``) until 800
  matched events (the paper's Table 3 protocol), alpha = 0.1.
* ``synthetic``: a generated uniformly-random log of 10^6 events (K = d = 10), the engine
  over all of it; the per-arm-loop baseline, whose cost per event is ~100x higher, over
  a prefix (``--baseline-events``), with the engine timed on the same prefix for the ratio.

The paper's runtimes (LNUCB-TA paper: Table 3's 800-round runs, Table 7's 7500-step
runs; unknown hardware, and Table 7 is on its "article matching" data set) are printed
beside ours as seconds per step.

    python -m benchmarks.replay_throughput
    python -m benchmarks.replay_throughput --repeats 3 --synthetic-events 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument

# Seconds reported by the LNUCB-TA paper at alpha = 0.1: Table 3 (800 matched rounds,
# news data set) and Table 7 (7500 steps, "article matching" data set).
PAPER = {
    "linucb": {"table3_800_rounds_s": 8.09, "table7_7500_steps_s": 19.79},
    "lnucb_ta": {"table3_800_rounds_s": 324.5, "table7_7500_steps_s": 102.00},
}
LOOPS = {"linucb": "LoopLinUCB", "lnucb_ta": "LoopLNUCBTA"}


def loop_replay(
    impl: Any, arms: np.ndarray, rewards: np.ndarray, X: np.ndarray, rounds: int | None
) -> dict[str, float]:
    """Strict replay of a straightforward implementation (``choose``/``learn``) over arrays."""
    matched, total, seen = 0, 0.0, 0
    for a, r, x in zip(arms, rewards, X):
        if rounds is not None and matched >= rounds:
            break
        seen += 1
        if impl.choose(x) == a:
            impl.learn(a, x[a], r)
            matched += 1
            total += r
    return {"events_seen": seen, "matched": matched, "cumulative_reward": total}


class ArrayLog:
    """A :class:`bandit_core.datasets.LogSource` over arrays ``(arms, rewards, X)``."""

    def __init__(self, arms: np.ndarray, rewards: np.ndarray, X: np.ndarray) -> None:
        self.parts: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(arms, rewards, X)]

    @classmethod
    def chunked(cls, chunks: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> ArrayLog:
        log = cls.__new__(cls)
        log.parts = chunks
        return log

    def __iter__(self) -> Iterator[Any]:
        from bandit_core.datasets import LoggedEvent

        ids: tuple[str, ...] | None = None
        for arms, rewards, X in self.parts:
            if ids is None:
                ids = tuple(str(i) for i in range(X.shape[1]))
            for a, r, x in zip(arms.tolist(), rewards.tolist(), X):
                yield LoggedEvent(arm_ids=ids, X=x, action=a, reward=r)


def engine_replay(name: str, source: Any, rounds: int | None, alpha: float) -> dict[str, float]:
    """The project's replay (``bandit_core.evaluation.replay``) of a fresh policy, d = 10."""
    import bandit_core
    from bandit_core.evaluation import replay
    from benchmarks.reference import NEWS_DIM

    policy = bandit_core.make_policy(name, d=NEWS_DIM, alpha=alpha, seed=0)
    res = replay(policy, source, rounds)
    return {
        "events_seen": res.events_seen,
        "matched": res.matched,
        "cumulative_reward": res.cumulative_reward,
    }


def timed(fn: Any, *args: Any) -> dict[str, float]:
    """``fn(*args)``'s result plus its wall and CPU seconds."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args)
    w1, c1 = time.perf_counter(), time.process_time()
    return {**out, "wall_s": w1 - w0, "cpu_s": c1 - c0}


def news_rows(
    policies: list[str], repeats: int, rounds: int, alpha: float, path: Path
) -> list[dict[str, Any]]:
    from benchmarks import _harness as h
    from benchmarks import reference as ref

    arms, rewards, X = ref.load_news(path)
    log = ArrayLog(arms, rewards, X)
    runs: dict[str, list[dict[str, float]]] = {}
    jobs = {}
    for name in policies:
        loop_cls = getattr(ref, LOOPS[name])
        jobs[f"engine {name}"] = lambda name=name: engine_replay(name, log, rounds, alpha)
        jobs[f"per-arm loop {name}"] = lambda c=loop_cls: loop_replay(
            c(ref.NEWS_ARMS, ref.NEWS_DIM, alpha), arms, rewards, X, rounds
        )
    rng = np.random.default_rng(0)
    order = list(jobs)
    load_before = h.load()
    for _ in range(repeats):
        rng.shuffle(order)
        for key in order:
            runs.setdefault(key, []).append(timed(jobs[key]))
    load_after = h.load()
    rows = []
    for key, rs in runs.items():
        name = key.split()[-1]
        cpu = float(np.median([r["cpu_s"] for r in rs]))
        wall = float(np.median([r["wall_s"] for r in rs]))
        row = {
            "workload": f"news, {rounds} matched",
            "contender": key,
            "events_seen": rs[0]["events_seen"],
            "matched": rs[0]["matched"],
            "cumulative_reward": rs[0]["cumulative_reward"],
            "cpu_s": cpu,
            "wall_s": wall,
            "events/s (cpu)": rs[0]["events_seen"] / cpu,
            "events/s (wall)": rs[0]["events_seen"] / wall,
            "s/matched round (cpu)": cpu / max(rs[0]["matched"], 1),
            "runs": rs,
            "load_before": load_before,
            "load_after": load_after,
        }
        if key.startswith("engine"):
            loop = runs[f"per-arm loop {name}"]
            row["x per-arm loop (cpu)"] = float(
                np.median([lr["cpu_s"] / er["cpu_s"] for er, lr in zip(rs, loop)])
            )
            row["x per-arm loop (wall)"] = float(
                np.median([lr["wall_s"] / er["wall_s"] for er, lr in zip(rs, loop)])
            )
            paper = PAPER[name]
            row["paper table 3 s (800 rounds)"] = paper["table3_800_rounds_s"]
            row["x paper table 3 (wall)"] = paper["table3_800_rounds_s"] / wall * rounds / 800
            row["paper table 7 s/step"] = paper["table7_7500_steps_s"] / 7500
        rows.append(row)
    if "engine linucb" in runs and "engine lnucb_ta" in runs:
        ratio = float(
            np.median(
                [
                    t["cpu_s"] / l["cpu_s"]
                    for t, l in zip(runs["engine lnucb_ta"], runs["engine linucb"])
                ]
            )
        )
        for row in rows:
            if row["contender"] == "engine lnucb_ta":
                row["time / engine linucb (cpu)"] = ratio
    return rows


def synthetic_rows(
    policies: list[str], events: dict[str, int], baseline_events: int, alpha: float
) -> list[dict[str, Any]]:
    from benchmarks import _harness as h
    from benchmarks import reference as ref

    rows = []
    prefix = [
        np.concatenate(p) for p in zip(*ref.synthetic_log(baseline_events, chunk=baseline_events))
    ]
    for name in policies:
        n = events[name]
        load_before = h.load()
        full = timed(engine_replay, name, ArrayLog.chunked(ref.synthetic_log(n)), None, alpha)
        eng = timed(engine_replay, name, ArrayLog(*prefix), None, alpha)
        loop_impl = getattr(ref, LOOPS[name])(ref.NEWS_ARMS, ref.NEWS_DIM, alpha)
        loop = timed(loop_replay, loop_impl, *prefix, None)
        eng2 = timed(engine_replay, name, ArrayLog(*prefix), None, alpha)
        eng_cpu = min(eng["cpu_s"], eng2["cpu_s"])
        rows.append(
            {
                "workload": f"synthetic K=d=10, {n:,} events",
                "contender": f"engine {name}",
                "events_seen": full["events_seen"],
                "matched": full["matched"],
                "cumulative_reward": full["cumulative_reward"],
                "cpu_s": full["cpu_s"],
                "wall_s": full["wall_s"],
                "events/s (cpu)": full["events_seen"] / full["cpu_s"],
                "events/s (wall)": full["events_seen"] / full["wall_s"],
                "load_before": load_before,
                "load_after": h.load(),
            }
        )
        rows.append(
            {
                "workload": f"synthetic, first {baseline_events:,} events",
                "contender": f"per-arm loop {name}",
                "events_seen": loop["events_seen"],
                "matched": loop["matched"],
                "cumulative_reward": loop["cumulative_reward"],
                "cpu_s": loop["cpu_s"],
                "wall_s": loop["wall_s"],
                "events/s (cpu)": loop["events_seen"] / loop["cpu_s"],
                "events/s (wall)": loop["events_seen"] / loop["wall_s"],
                "engine on same prefix, events/s (cpu)": eng["events_seen"] / eng_cpu,
                "engine x per-arm loop on prefix (cpu)": loop["cpu_s"] / eng_cpu,
                "load_after": h.load(),
            }
        )
    return rows


COLUMNS = [
    "workload",
    "contender",
    "events_seen",
    "matched",
    "cumulative_reward",
    "cpu_s",
    "wall_s",
    "events/s (cpu)",
    "events/s (wall)",
    "x per-arm loop (cpu)",
    "engine x per-arm loop on prefix (cpu)",
    "time / engine linucb (cpu)",
    "x paper table 3 (wall)",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="linucb,lnucb_ta")
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument(
        "--rounds", type=int, default=800, help="matched events of the news replay (default 800)"
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="interleaved repeats of the news replays (default 5)"
    )
    parser.add_argument(
        "--synthetic-events", type=int, default=1_000_000, help="LinUCB's synthetic log length"
    )
    parser.add_argument(
        "--synthetic-events-lnucb",
        type=int,
        default=30_000,
        help="LNUCB-TA's synthetic log length (its kNN cost grows with the memory; default 30000)",
    )
    parser.add_argument(
        "--baseline-events",
        type=int,
        default=10_000,
        help="prefix of the synthetic log replayed by the per-arm-loop baselines (default 10000)",
    )
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="news data set (default <repo>/bandit_core/data/news_dataset.txt.gz)",
    )
    parser.add_argument(
        "--engine-path", default="", help="import bandit_core from this checkout instead"
    )
    add_label_argument(parser, "replay_throughput")
    args = parser.parse_args(argv)
    if args.engine_path:
        sys.path.insert(0, str(Path(args.engine_path).resolve()))
    import bandit_core
    from benchmarks import _harness as h
    from benchmarks import reference as ref

    policies = [p for p in args.policies.split(",") if p in bandit_core.POLICIES]
    missing = sorted(set(args.policies.split(",")) - set(policies))
    data = args.data or ref.news_path(h.ROOT)
    rows = news_rows(policies, args.repeats, args.rounds, args.alpha, data)
    print(h.table(rows, COLUMNS))
    if not args.skip_synthetic:
        events = {"linucb": args.synthetic_events, "lnucb_ta": args.synthetic_events_lnucb}
        syn = synthetic_rows(policies, events, args.baseline_events, args.alpha)
        print()
        print(h.table(syn, COLUMNS))
        rows += syn
    if missing:
        print(f"not registered, skipped: {', '.join(missing)}")
    path = h.write_json(
        "replay_throughput",
        {
            "alpha": args.alpha,
            "rounds": args.rounds,
            "repeats": args.repeats,
            "paper": PAPER,
            "rows": rows,
            "skipped": missing,
        },
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
