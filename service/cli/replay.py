"""``bandit replay``: a policy replayed on a log (Li et al. 2011; docs/algorithms.md
section 6, docs/offline.md), plain or by rejection sampling, over one or several seeds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bandit_core.evaluation import (
    ReplayResult,
    ReplayRun,
    SeedReplays,
    rejection_replay,
    replay,
)
from bandit_core.registry import make_policy
from service.cli.arguments import (
    REFEATURIZING,
    add_log_source,
    add_policy_params,
    add_run_options,
    check_policy,
    clean_exit,
    policy_names,
    policy_params,
    seeds_of,
)
from service.cli.engine_options import add_engine_options, engine_of
from service.cli.exit_codes import EXIT_OK
from service.cli.log_sources import (
    LogSpec,
    PartitionFacts,
    featurized,
    load_log,
    log_spec,
    one_width,
    partition_facts,
    partitions,
    read_partition,
    source_fields,
    source_title,
)
from service.cli.reports import (
    Line,
    format_params,
    plot,
    progress_bar,
    protocol,
    replay_summary,
    write_json,
)
from service.usecases.offline_engine import OfflineEngine

DESCRIPTION = (
    "Replay a policy on a log (Li et al. 2011): events are read in order; when the policy picks the\n"
    "logged arm the reward counts and the policy learns from it, otherwise the event is skipped.\n"
    "Stops after --rounds matched events or at the end of the log. Valid for uniformly random logs;\n"
    "use --rejection for logs with known non-uniform propensities, such as the service's own event\n"
    "log (--format eventlog --data URL --log-policy NAME) and Azure AI Personalizer's logs\n"
    "(--format dsjson --data PATH... --features JSON). With no --data, --format news replays\n"
    "the news data set shipped with bandit_core (the LNUCB-TA paper's Table 3).\n\n"
    f"{REFEATURIZING}"
    "Policies: {policies}.\n\n"
    "JSON keys: policy, params, protocol, cumulative_reward (mean over seeds), cumulative_reward_std,\n"
    "mean_reward, matched, events_seen, seconds and cpu_seconds (mean wall and CPU time per run),\n"
    "spread, per_seed, curve.\n\n"
    "example: bandit replay --format news --policy linucb --alpha 0.1 \\\n"
    "             --rounds 800 --seeds 1 --json r.json --plot r.png\n"
    "         bandit replay --format eventlog --data sqlite:///data/events.sqlite3 --log-policy home \\\n"
    "             --rejection --policy linucb --alpha 0.5 --json r.json\n"
    "         bandit replay --format eventlog --data sqlite:///storefront.sqlite3 --log-policy shop \\\n"
    '             --features \'{{"bits": 6, "interactions": [["*", "*"]]}}\' --policy hybrid_linucb --alpha 0.5'
)


def replay_one(
    spec: LogSpec,
    name: str,
    params: dict[str, Any],
    seed: int,
    rounds: int | None,
    rejection: bool,
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """One replay of policy ``name`` with ``params`` and ``seed`` on the log of ``spec``
    (:func:`bandit_core.evaluation.replay`, or ``rejection_replay`` with ``rejection``)."""
    log, d = load_log(spec, name, params)
    policy = make_policy(name, d, **params, seed=seed)
    if rejection:
        return rejection_replay(
            policy, log, np.random.default_rng([seed, 1]), rounds, progress=progress
        )
    return replay(policy, log, rounds, progress=progress)


def replay_task(
    spec: LogSpec, name: str, params: dict[str, Any], seed: int, rounds: int | None, rejection: bool
) -> ReplayResult:
    """:func:`replay_one` without progress: the worker entry point of ``bandit compare``
    (module level so it pickles)."""
    return replay_one(spec, name, params, seed, rounds, rejection)


@dataclass(frozen=True)
class ReplayStream:
    """:func:`replay_one` as a :class:`~service.usecases.offline_engine.PartitionStream`:
    the replay (a :class:`~bandit_core.evaluation.ReplayRun`) fed the log's partitions
    ``parts`` in time order, each read where the stream runs; ``p_min`` is rejection
    sampling's (the smallest propensity of the whole log), None for a plain replay. Its
    result equals :func:`replay_one`'s on the whole log."""

    parts: tuple[LogSpec, ...]
    policy: str
    params: dict[str, Any]
    d: int
    seed: int
    rounds: int | None
    p_min: float | None

    @property
    def partitions(self) -> int:
        return len(self.parts)

    def begin(self) -> ReplayRun:
        policy = make_policy(self.policy, self.d, **self.params, seed=self.seed)
        if self.p_min is None:
            return ReplayRun(policy, self.rounds)
        return ReplayRun(policy, self.rounds, (np.random.default_rng([self.seed, 1]), self.p_min))

    def advance(self, state: ReplayRun, partition: int) -> int:
        events, _ = read_partition(self.parts[partition], self.policy, self.params)
        state.feed(events)
        return len(events)

    def finished(self, state: ReplayRun) -> bool:
        return state.finished

    def result(self, state: ReplayRun) -> ReplayResult:
        return state.result()


@dataclass(frozen=True)
class Run:
    """One replay of ``bandit replay`` or ``bandit compare``: a policy, its parameters
    and a seed."""

    policy: str
    params: dict[str, Any]
    seed: int


def streamed_replays(
    engine: OfflineEngine,
    spec: LogSpec,
    runs: Sequence[Run],
    rounds: int | None,
    rejection: bool,
    no_progress: bool,
) -> list[ReplayResult]:
    """The replay of each of ``runs`` on the log of ``spec``, one
    :class:`ReplayStream` per run on ``engine`` reading the log's partitions itself
    (docs/offline.md, "Learning replays over partitions"). The partitions are first
    counted where they lie (their events, feature length and, with ``rejection``,
    smallest propensity); the progress bar counts the events replayed of those to do."""
    parts = partitions(spec)
    facts: dict[tuple[str, int] | None, list[PartitionFacts]] = {}
    streams, total = [], 0
    for run in runs:
        # the rows, hence the facts, depend on the policy only for a log of JSON features
        key = (run.policy, int(run.params.get("context_dim", 0))) if featurized(spec) else None
        if key not in facts:
            tasks = [(part, run.policy, run.params, rejection) for part in parts]
            facts[key] = engine.map(partition_facts, tasks)
        found = facts[key]
        d = one_width(spec, [f.d for f in found if f.d is not None])
        p_min = min(f.min_pscore for f in found if f.min_pscore is not None) if rejection else None
        stream = ReplayStream(tuple(parts), run.policy, run.params, d, run.seed, rounds, p_min)
        stream.begin()  # invalid parameters fail here, before any actor starts
        streams.append(stream)
        total += sum(f.events for f in found)
    with progress_bar(total, no_progress, "event") as bar:
        return engine.stream(streams, lambda _, events: bar.update(events))


@clean_exit("replay")
def _run(args: argparse.Namespace) -> int:
    check_policy(args.policy)
    params = policy_params(args)
    seeds = seeds_of(args)
    spec = log_spec(args)
    engine = engine_of(args)
    if engine.kind == "ray":  # one actor per seed, each reading the log's partitions
        seed_runs = [Run(args.policy, params, seed) for seed in seeds]
        results = streamed_replays(
            engine, spec, seed_runs, args.rounds, args.rejection, args.no_progress
        )
    else:
        load_log(spec, args.policy, params)
        total = args.rounds * len(seeds) if args.rounds else None
        results = []
        with progress_bar(total, args.no_progress, "round") as bar:
            for seed in seeds:
                bar.set_description(f"{args.policy} seed {seed}")
                results.append(
                    replay_one(
                        spec, args.policy, params, seed, args.rounds, args.rejection, bar.update
                    )
                )
    runs = SeedReplays(seeds=tuple(seeds), results=tuple(results))
    payload = {
        "policy": args.policy,
        "params": params,
        **source_fields(spec),
        "protocol": protocol(args.rejection),
        "rounds": args.rounds,
        "seeds": seeds,
        **replay_summary(runs),
    }
    cr = runs.cumulative_reward
    spread = f" +- {cr.std:.1f} (min {cr.min:g}, max {cr.max:g})" if cr.n > 1 else ""
    print(
        f"{args.policy} {format_params(params)}: cumulative reward {cr.mean:g}{spread} over "
        f"{payload['matched']:g} matched of {payload['events_seen']:g} events seen, mean reward "
        f"{runs.mean_reward.mean:.4f}, {runs.seconds.mean:.3f} s ({runs.cpu_seconds.mean:.3f} s CPU) per run, "
        f"{len(seeds)} seed(s)"
    )
    write_json(args.json, payload)
    if args.plot:
        lines: list[Line] = [(args.policy, runs.curves(), {})]
        plot(
            args.plot,
            [("matched round", "cumulative reward", lines)],
            f"Replay of {source_title(spec)}",
        )
    return EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``replay`` to ``subparsers``."""
    p = subparsers.add_parser(
        "replay",
        help="evaluate a policy offline on a logged data set (replay method)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(policies=policy_names()),
    )
    add_log_source(p)
    p.add_argument(
        "--policy",
        required=True,
        metavar="NAME",
        help=f"policy to evaluate, one of: {policy_names()}",
    )
    add_policy_params(p)
    add_run_options(p, rounds_default=None)
    add_engine_options(p)
    p.set_defaults(run=_run)
