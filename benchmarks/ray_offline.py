"""Offline evaluation throughput on the local engine and on Ray (docs/operations.md
"Offline work on a Ray cluster").

Generates a log of ``--decisions`` decisions of a float-vector policy (``--dimension``
features per arm, ``--arms`` arms, uniform logging, Bernoulli rewards of a linear click
rate) over ``--days`` days in a private PostgreSQL's day partitions, then evaluates
``--candidates`` learning settings on it (LinUCB over a grid of alpha and epsilon,
progressive validation as an evaluation of the service replays them) four ways, on the
same two cores (``--engines`` picks some):

* ``local1``, ``local x1``: the local engine in one process (one stream);
* ``local2``, ``local x2``: two streams on a pool of two processes;
* ``ray1``, ``ray 1 node``: one Ray actor per stream on a one-node cluster of 2 CPUs;
* ``ray2``, ``ray 2 nodes``: the same on two nodes of 1 CPU each (this machine, loopback).

The candidates are dealt into one :class:`service.usecases.evaluation_streams.CandidateStream`
per core, as an evaluation on Ray deals them: each stream reads the day partitions
itself from PostgreSQL, one after the other, once for all its candidates (on Ray through
:meth:`OfflineEngine.stream`, its state checkpointed to the driver after each day); the
driver sends the queries. The rate is events replayed (decisions x candidates) per
second of wall time per core; Ray's overhead is its rate's shortfall from ``local x2``
(the same cores); ``worker MiB`` is the largest peak RSS of a process that ran a
candidate. Every run's per-candidate sums are checked equal to the first run's. Last,
the capacity table of docs/operations.md (:func:`capacity`) from the Ray one-node rate
per core (the first run's without it). Writes run ``--label`` of
``benchmarks/results/ray_offline.json``.

    python -m benchmarks.ray_offline                         # the numbers of docs/operations.md
    python -m benchmarks.ray_offline --decisions 10000000 --days 64 --candidates 16   # the issue's size
"""

from __future__ import annotations

import argparse
import math
import resource
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument, table, write_json
from service.schemas import PolicySpec
from service.storage.base import DecisionRecord, RewardRecord
from service.storage.migrate import upgrade_head
from service.storage.partitions import create_partitions
from service.storage.sql_log import SqlEventLog
from service.usecases.evaluation_streams import (
    CandidateStream,
    DecisionQuery,
    GroupState,
    candidate_streams,
    ungrouped,
)
from service.usecases.evaluations import Candidate
from service.usecases.offline_engine import OfflineEngine

POLICY = "bench"
DAY = 86_400.0
START = 1_780_000_000.0
CAPACITY_CANDIDATES = 32
CAPACITY_DECISIONS = (10**8, 10**9)
CAPACITY_CLUSTERS = ((1, 8), (2, 8), (4, 8), (2, 16), (8, 8))
"""(nodes, cores per node) of the capacity table."""
LOCAL = OfflineEngine()


def generate(url: str, decisions: int, days: int, arms: int, dimension: int, seed: int) -> None:
    """Write the log (module docstring) in batches, then move it to day partitions."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=dimension) / np.sqrt(dimension)
    event_log = SqlEventLog(url)
    try:
        batch = 20_000
        for first in range(0, decisions, batch):
            n = min(batch, decisions - first)
            X = rng.random((n, arms, dimension))
            chosen = rng.integers(arms, size=n)
            mu = 0.1 + 0.8 / (1 + np.exp(-4 * (X[np.arange(n), chosen] @ theta)))
            clicks = rng.random(n) < mu
            times = START + (first + np.arange(n)) * (days * DAY / decisions)
            records, rewards = [], []
            for i in range(n):
                event_id = uuid.UUID(int=int(rng.integers(2**63)) << 64 | first + i).hex
                ids = [f"a{k}" for k in range(arms)]
                records.append(
                    DecisionRecord(
                        event_id=event_id,
                        policy=POLICY,
                        created_at=float(times[i]),
                        context=[],
                        candidates=[
                            {"id": a, "features": X[i, k].tolist()} for k, a in enumerate(ids)
                        ],
                        arm_id=ids[chosen[i]],
                        propensity=1.0 / arms,
                        scores=[0.0] * arms,
                        model_version=0,
                    )
                )
                rewards.append(
                    RewardRecord(
                        event_id=event_id,
                        policy=POLICY,
                        arm_id=ids[chosen[i]],
                        value=float(clicks[i]),
                        source="explicit",
                        created_at=float(times[i]) + 1.0,
                    )
                )
            event_log.append(records, rewards)
        create_partitions(event_log.engine, START + days * DAY, 1)
    finally:
        event_log.close()


def candidates(count: int, arms: int, dimension: int) -> list[Candidate]:
    """``count`` LinUCB settings: alpha x epsilon, as many as asked."""
    out = []
    for i in range(count):
        alpha, epsilon = (0.1, 0.3, 1.0, 3.0)[i % 4], (0.0, 0.05, 0.1, 0.2)[i // 4 % 4]
        spec = PolicySpec.model_validate(
            {
                "algorithm": "linucb",
                "dimension": dimension,
                "arms": [f"a{k}" for k in range(arms)],
                "params": {"alpha": alpha, "ridge_lambda": 1.0 + i // 16},
                "epsilon": epsilon,
                "reward_range": [0.0, 1.0],
            }
        )
        out.append(Candidate(f"c{i}", "", "Custom", spec))
    return out


@dataclass(frozen=True)
class MeasuredStream:
    """A :class:`CandidateStream` whose result adds the peak RSS (MiB) of the process
    that ran it."""

    inner: CandidateStream

    @property
    def partitions(self) -> int:
        return self.inner.partitions

    def begin(self) -> tuple[GroupState, list[float]]:
        return self.inner.begin(), [0.0]

    def advance(self, state: tuple[GroupState, list[float]], partition: int) -> int:
        events = self.inner.advance(state[0], partition)
        state[1][0] = max(state[1][0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        return events

    def finished(self, state: tuple[GroupState, list[float]]) -> bool:
        return False

    def result(self, state: tuple[GroupState, list[float]]) -> tuple[Any, float]:
        return self.inner.result(state[0]), state[1][0]


def measured_stream(stream: MeasuredStream) -> tuple[Any, float]:
    """``stream`` run here (a local process's work)."""
    return LOCAL.stream([stream])[0]


def run_local_pool(streams: list[MeasuredStream], processes: int) -> list[Any]:
    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(measured_stream, streams))


def run_ray(streams: list[MeasuredStream], nodes: int, cores: int) -> tuple[float, list[Any]]:
    """Wall seconds (connecting included, the cluster's start not) and results on a
    fresh cluster of ``nodes`` nodes sharing ``cores`` CPUs."""
    from tests.ray_cluster import RayCluster

    cluster = RayCluster(nodes=nodes, cpus=cores // nodes)
    try:
        cluster.start()
        engine = OfflineEngine("ray", cluster.address)
        started = time.perf_counter()
        results = engine.stream(streams)
        wall = time.perf_counter() - started
        import ray

        ray.shutdown()
        return wall, results
    finally:
        cluster.destroy()


def capacity(rate_per_core: float) -> list[dict[str, Any]]:
    """Hours to evaluate :data:`CAPACITY_CANDIDATES` candidates over each of
    :data:`CAPACITY_DECISIONS` on each cluster of :data:`CAPACITY_CLUSTERS`, at
    ``rate_per_core`` events per second per core. A candidate is one actor replaying in
    time order on one core, so the cores run ceil(candidates / cores) candidates one
    after the other; cores beyond the candidates stay idle."""
    rows = []
    for nodes, cores in CAPACITY_CLUSTERS:
        waves = math.ceil(CAPACITY_CANDIDATES / (nodes * cores))
        row: dict[str, Any] = {"nodes": nodes, "cores_per_node": cores}
        for decisions in CAPACITY_DECISIONS:
            row[f"hours_{decisions:.0e}"] = decisions * waves / rate_per_core / 3600
        rows.append(row)
    return rows


def add_log_arguments(parser: argparse.ArgumentParser, decisions: int, days: int) -> None:
    """The generated log's options, shared by the Ray benchmarks."""
    parser.add_argument("--decisions", type=int, default=decisions)
    parser.add_argument("--days", type=int, default=days)
    parser.add_argument("--arms", type=int, default=4)
    parser.add_argument("--dimension", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--database", help="a PostgreSQL URL to fill (default: a private server)")


def generated_log(args: argparse.Namespace) -> tuple[str, float]:
    """The URL of ``args.database`` (or of a private PostgreSQL server) at the schema's
    head, filled by :func:`generate`, and the seconds the filling took."""
    url = args.database
    if url is None:
        from tests.databases import OWNED

        url = OWNED.postgres_url()
    upgrade_head(url)
    started = time.perf_counter()
    generate(url, args.decisions, args.days, args.arms, args.dimension, args.seed)
    return url, time.perf_counter() - started


ENGINES = {"local1": ("local x1", 1), "local2": ("local x2", 2), "ray1": ("ray 1 node", 1)}
ENGINES["ray2"] = ("ray 2 nodes", 2)
"""``--engines`` choices: (the run's name, Ray nodes or local processes), on 1 core for
``local1``, 2 for the others."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_log_arguments(parser, decisions=20_000, days=4)
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument(
        "--engines",
        nargs="+",
        choices=list(ENGINES),
        default=list(ENGINES),
        help="the runs to make, in this order (default: all four)",
    )
    parser.add_argument(
        "--per-candidate",
        action="store_true",
        help="one stream per candidate, each reading every partition itself, instead of "
        "one per core reading each partition once for its candidates",
    )
    add_label_argument(parser, "ray_offline")
    args = parser.parse_args()

    url, generate_seconds = generated_log(args)
    parts = tuple(DecisionQuery(url, POLICY, float("-inf"), float("inf")).days())
    settings = candidates(args.candidates, args.arms, args.dimension)
    events = args.decisions * len(settings)

    def streams(cores: int) -> list[MeasuredStream]:
        groups = len(settings) if args.per_candidate else cores
        return [MeasuredStream(s) for s in candidate_streams(parts, settings, groups)]

    setup = {
        "decisions": args.decisions,
        "candidates": len(settings),
        "days": args.days,
        "arms": args.arms,
        "dimension": args.dimension,
        "streams": "per candidate" if args.per_candidate else "per core",
        "generate_seconds": generate_seconds,
    }
    runs: list[dict[str, Any]] = []
    reference: list[Any] | None = None

    def record(name: str, cores: int, wall: float, results: list[Any]) -> None:
        nonlocal reference
        sums = ungrouped([r for r, _ in results])
        reference = reference or sums
        runs.append(
            {
                "engine": name,
                "cores": cores,
                "wall_seconds": wall,
                "events_per_second_per_core": events / wall / cores,
                "worker_peak_mib": max(m for _, m in results),
                "equal_to_first_run": sums == reference,
            }
        )
        print(f"{name}: {wall:.1f} s", flush=True)
        write_json("ray_offline", {**setup, "runs": runs}, args.label)  # kept if a later run fails

    for engine in args.engines:
        name, count = ENGINES[engine]
        cores = 1 if engine == "local1" else 2
        if engine.startswith("ray"):
            wall, results = run_ray(streams(cores), count, cores)
        else:
            t = time.perf_counter()
            if count == 1:
                results = [measured_stream(s) for s in streams(cores)]
            else:
                results = run_local_pool(streams(cores), count)
            wall = time.perf_counter() - t
        record(name, cores, wall, results)
    base = next((r for r in runs if r["engine"] == "local x2"), None)
    for r in runs:
        r["overhead_vs_local_x2"] = (
            1 - r["events_per_second_per_core"] / base["events_per_second_per_core"]
            if base is not None and r["cores"] == 2
            else None
        )
    print(
        table(
            runs,
            [
                "engine",
                "cores",
                "wall_seconds",
                "events_per_second_per_core",
                "overhead_vs_local_x2",
                "worker_peak_mib",
                "equal_to_first_run",
            ],
        )
    )
    rate = next((r for r in runs if r["engine"] == "ray 1 node"), runs[0])[
        "events_per_second_per_core"
    ]
    rows = capacity(rate)
    print(table(rows, list(rows[0])))
    print(write_json("ray_offline", {**setup, "runs": runs, "capacity": rows}, args.label))


if __name__ == "__main__":
    main()
