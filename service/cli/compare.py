"""``bandit compare``: several policies and parameter grids replayed on one log for every
seed, in parallel processes or on Ray, and tabulated (docs/offline.md; each replay is
:func:`service.cli.replay.replay_task`, on Ray a :class:`service.cli.replay.ReplayStream`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import product
from typing import Any

from bandit_core.evaluation import ReplayResult, SeedReplays
from bandit_core.registry import make_policy
from service.cli.arguments import (
    REFEATURIZING,
    CliError,
    add_log_source,
    add_policy_params,
    add_run_options,
    check_policy,
    check_reserved,
    clean_exit,
    parse_assignment,
    parse_value,
    positive_int,
    seeds_of,
)
from service.cli.engine_options import add_engine_options, engine_of
from service.cli.exit_codes import EXIT_OK
from service.cli.log_sources import LogSpec, load_log, log_spec, source_fields, source_title
from service.cli.replay import Run, replay_task, streamed_replays
from service.cli.reports import plot, progress_bar, protocol, replay_summary, write_json
from service.usecases.offline_engine import OfflineEngine

DESCRIPTION = (
    "Replay every combination of --policy and grid values for every seed on one log, in parallel\n"
    "processes (--jobs), then print one table (mean, sd, min, max of the cumulative reward over\n"
    "seeds, mean reward, matched events, events seen, wall and CPU seconds per run) and draw one plot.\n\n"
    "A --policy is [LABEL=]NAME[:KEY=VALUE,...], e.g. 'kNN-UCB=lnucb_ta:use_linear=false'.\n"
    "--alpha A1 A2 ... and --grid KEY=V1,V2 form a grid crossed with every policy.\n\n"
    f"{REFEATURIZING}"
    "JSON keys: data, format, protocol, rounds, seeds, jobs, engine, wall_seconds, results (one per row:\n"
    "label, policy, params, cumulative_reward, cumulative_reward_std, mean_reward, matched,\n"
    "events_seen, seconds, cpu_seconds, spread, per_seed, curve).\n\n"
    "example: bandit compare --policy linucb --policy lnucb_ta \\\n"
    "             --alpha 0.1 1 10 --rounds 800 --seeds 20 --json table3.json --plot table3.png"
)
DASHES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Variant:
    """One row of a comparison: a display label, a policy name and its parameters."""

    label: str
    policy: str
    params: dict[str, Any] = field(default_factory=dict)


def parse_policy_spec(spec: str) -> Variant:
    """``[LABEL=]NAME[:KEY=VALUE,KEY=VALUE...]`` -> :class:`Variant`.

    >>> parse_policy_spec("kNN-UCB=lnucb_ta:use_linear=false,temporal_attention=false")
    Variant(label='kNN-UCB', policy='lnucb_ta', params={'use_linear': False, 'temporal_attention': False})
    >>> parse_policy_spec("linucb").label
    'linucb'
    """
    head, _, tail = spec.partition(":")
    label, sep, name = head.partition("=")
    if not sep:
        label = name = head
    label, name = label.strip(), name.strip()
    if not name:
        raise CliError(f"--policy takes [LABEL=]NAME[:KEY=VALUE,...], but got {spec!r}")
    check_policy(name)
    params = (
        dict(parse_assignment(kv, "--policy") for kv in tail.split(",") if kv.strip())
        if tail
        else {}
    )
    check_reserved(params, "--policy")
    return Variant(label or name, name, params)


def _grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    axes: list[tuple[str, list[Any]]] = []
    if args.alpha:
        axes.append(("alpha", list(args.alpha)))
    for item in args.grid:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise CliError(f"--grid takes KEY=V1,V2,..., but got {item!r}")
        axes.append((key.strip(), [parse_value(v.strip()) for v in values.split(",")]))
    keys = [k for k, _ in axes]
    check_reserved(dict.fromkeys(keys), "--grid")
    if len(set(keys)) != len(keys):
        raise CliError(f"each grid key may appear once, but got {keys}")
    return [dict(zip(keys, combo, strict=True)) for combo in product(*(v for _, v in axes))]


def _rows(args: argparse.Namespace) -> tuple[list[Variant], list[dict[str, Any]]]:
    """Every ``--policy`` crossed with every grid point, and the plot style of each: one
    colour per ``--policy``, one line style per grid point."""
    variants = [parse_policy_spec(s) for s in args.policy]
    common = check_reserved(dict(parse_assignment(p, "--param") for p in args.param), "--param")
    grid = _grid(args)
    rows = [
        Variant(v.label + "".join(f" {k}={g[k]}" for k in g), v.policy, {**common, **v.params, **g})
        for v in variants
        for g in grid
    ]
    styles = [
        {"color": f"C{vi % 10}", "linestyle": DASHES[gi % len(DASHES)]}
        for vi in range(len(variants))
        for gi in range(len(grid))
    ]
    return rows, styles


@contextmanager
def _executor(jobs: int) -> Iterator[ProcessPoolExecutor | None]:
    if jobs == 1:
        yield None
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield pool


def _replay_all(
    args: argparse.Namespace,
    spec: LogSpec,
    rows: list[Variant],
    seeds: list[int],
    engine: OfflineEngine,
) -> list[SeedReplays]:
    """The replays of every row for every seed, in ``--jobs`` processes (1: this one) or
    on the Ray cluster (``--engine ray``)."""
    tasks = [(i, s) for i in range(len(rows)) for s in seeds]
    results: dict[tuple[int, int], ReplayResult] = {}
    if engine.kind == "ray":  # one actor per run, each reading the log's partitions
        runs = [Run(rows[i].policy, rows[i].params, s) for i, s in tasks]
        replays = streamed_replays(
            engine, spec, runs, args.rounds, args.rejection, args.no_progress
        )
        results.update(zip(tasks, replays, strict=True))
    else:
        with (
            progress_bar(len(tasks), args.no_progress, "run") as bar,
            _executor(args.jobs) as pool,
        ):
            if pool is None:
                for i, s in tasks:
                    results[i, s] = replay_task(
                        spec, rows[i].policy, rows[i].params, s, args.rounds, args.rejection
                    )
                    bar.update(1)
            else:
                futures = {
                    pool.submit(
                        replay_task,
                        spec,
                        rows[i].policy,
                        rows[i].params,
                        s,
                        args.rounds,
                        args.rejection,
                    ): (i, s)
                    for i, s in tasks
                }
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    bar.update(1)
    return [
        SeedReplays(seeds=tuple(seeds), results=tuple(results[i, s] for s in seeds))
        for i in range(len(rows))
    ]


@clean_exit("compare")
def _run(args: argparse.Namespace) -> int:
    rows, styles = _rows(args)
    seeds = seeds_of(args)
    spec = log_spec(args)
    engine = engine_of(args)
    if engine.kind == "local":  # invalid parameters fail here, before any worker starts
        for row in rows:  # (on Ray, in streamed_replays, before any actor starts)
            _, d = load_log(spec, row.policy, row.params)
            make_policy(row.policy, d, **row.params, seed=seeds[0])
    started = time.perf_counter()
    per_row = _replay_all(args, spec, rows, seeds, engine)
    wall = time.perf_counter() - started
    summaries = [
        {"label": row.label, "policy": row.policy, "params": row.params, **replay_summary(runs)}
        for row, runs in zip(rows, per_row, strict=True)
    ]
    payload = {
        **source_fields(spec),
        "protocol": protocol(args.rejection),
        "rounds": args.rounds,
        "seeds": seeds,
        "jobs": args.jobs,
        "engine": engine.kind,
        "wall_seconds": wall,
        "results": summaries,
    }
    print(_table(summaries))
    where = "on the Ray cluster" if engine.kind == "ray" else f"with {args.jobs} process(es)"
    print(f"{len(rows) * len(seeds)} runs in {wall:.1f} s {where}")
    write_json(args.json, payload)
    if args.plot:
        lines = [
            (row.label, runs.curves(), style)
            for row, runs, style in zip(rows, per_row, styles, strict=True)
        ]
        title = f"Replay of {source_title(spec)}: mean over {len(seeds)} seed(s), band +-1 sd"
        plot(args.plot, [("matched round", "cumulative reward", lines)], title)
    return EXIT_OK


def _table(summaries: Sequence[dict[str, Any]]) -> str:
    header = (
        "policy",
        "cum. reward",
        "sd",
        "min",
        "max",
        "mean reward",
        "matched",
        "events seen",
        "s/run",
        "cpu s/run",
    )
    body = [
        (
            s["label"],
            f"{s['cumulative_reward']:.1f}",
            f"{s['cumulative_reward_std']:.1f}",
            f"{s['spread']['cumulative_reward']['min']:g}",
            f"{s['spread']['cumulative_reward']['max']:g}",
            f"{s['mean_reward']:.3f}",
            f"{s['matched']:g}",
            f"{s['events_seen']:.0f}",
            f"{s['seconds']:.3f}",
            f"{s['cpu_seconds']:.3f}",
        )
        for s in summaries
    ]
    widths = [max(len(r[c]) for r in (header, *body)) for c in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            v.ljust(w) if c == 0 else v.rjust(w)
            for c, (v, w) in enumerate(zip(cells, widths, strict=True))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare`` to ``subparsers``."""
    p = subparsers.add_parser(
        "compare",
        help="replay several policies / parameter grids on one log in parallel and tabulate them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION,
    )
    add_log_source(p)
    p.add_argument(
        "--policy",
        action="append",
        required=True,
        metavar="SPEC",
        help="[LABEL=]NAME[:KEY=VALUE,...]; repeat for each policy to compare",
    )
    add_policy_params(p, alpha_nargs="+")
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="another grid axis over a config field, e.g. --grid ridge_lambda=0.1,1; repeatable",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=os.cpu_count() or 1,
        metavar="J",
        help="worker processes (default: the number of CPUs; 1 runs in this process)",
    )
    add_run_options(p, rounds_default=None)
    add_engine_options(p)
    p.set_defaults(run=_run)
