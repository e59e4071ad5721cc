"""``bandit estimate``: off-policy estimates (IPS, SNIPS, DR, each with a bootstrap
interval) of what a fixed target policy would earn on a log with propensities
(docs/offline.md; the engine side is :func:`bandit_core.evaluation.off_policy_estimates`).
"""

from __future__ import annotations

import argparse
import functools
import operator
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from bandit_core.datasets import LoggedEvent
from bandit_core.evaluation import EstimateResult, UnsupportedLogError
from bandit_core.evaluation.mergeable import EstimateSums, RidgeSums
from bandit_core.evaluation.offpolicy import (
    bootstrap_key,
    fold_of,
    partition_estimate_sums,
    ridge_sums,
)
from bandit_core.policy import BasePolicy
from bandit_core.registry import make_policy, policy_from_bytes
from service.cli.arguments import (
    REFEATURIZING,
    CliError,
    add_log_source,
    add_no_progress,
    add_policy_params,
    at_least_two,
    check_policy,
    clean_exit,
    confidence,
    fraction,
    policy_names,
    policy_params,
    positive_float,
    positive_int,
)
from service.cli.engine_options import add_engine_options, engine_of
from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK
from service.cli.log_sources import (
    LogSpec,
    log_spec,
    one_width,
    partition_facts,
    partitions,
    read_partition,
    source_fields,
)
from service.cli.reports import format_params, progress_bar, write_json
from service.usecases.offline_engine import OfflineEngine

DESCRIPTION = (
    "Off-policy estimates of what a fixed target policy would earn per decision, from a log whose\n"
    "events carry the logging policy's propensities (the service's event log always does):\n"
    "  IPS    (1/n) sum w_i r_i,  w_i = pi(a_i | x_i) / pscore_i\n"
    "  SNIPS  sum w_i r_i / sum w_i\n"
    "  DR     (1/n) sum [sum_a pi(a | x_i) q_hat(x_i, a) + w_i (r_i - q_hat(x_i, a_i))]\n"
    "each with a percentile Poisson-bootstrap interval (--bootstrap resamples: each event weighed\n"
    "by a Poisson(1) count per resample).\n\n"
    "The target is --policy with its parameters: it learns from the first --train-fraction of the\n"
    "events (every event's reward for its served arm), is then frozen and, on each later event,\n"
    "serves greedily (explore=False; ties split evenly): pi is that choice. --train-fraction 0\n"
    "evaluates the untrained policy. DR's q_hat is a per-arm ridge regression of reward on the\n"
    "served arm's feature row (lambda --ridge-lambda), cross-fitted over --folds time-ordered\n"
    "blocks of the evaluated events (each block predicted by the fit on the others).\n"
    "logged_mean_reward is the logging policy's own mean reward on the evaluated events.\n\n"
    "Support: the estimators need every action the target takes to have had a logging\n"
    "probability > 0. When events were logged with propensity 1 (a policy with epsilon 0) and\n"
    "the target chooses other arms there, the estimates are biased and disagree: the command\n"
    "then prints a warning, no estimates, and exits with status 1 (--force prints them anyway).\n\n"
    "Partitions: the log is read a partition at a time (an event log's UTC days, a file as a\n"
    "whole), each by a task of its own on --engine; the sums of the partitions add, so the\n"
    "estimates do not depend on where the days cut nor on the engine (docs/offline.md,\n"
    "Estimates over partitions).\n\n"
    f"{REFEATURIZING}"
    "Policies: {policies}.\n\n"
    "JSON keys: policy, params, data, format (and log_policy, since, until, unrewarded, features for an\n"
    "event log), engine, partitions, protocol, seed, train_events, evaluated_events, logged_mean_reward, confidence,\n"
    "support (n, deterministic_events, unsupported_mass, supported), estimates (ips, snips, dr:\n"
    "estimator, value, ci_low, ci_high, confidence, n_bootstrap, n, support), seconds.\n\n"
    "example: bandit estimate --format eventlog --data postgresql://postgres@127.0.0.1/bandit \\\n"
    "             --log-policy home --policy linucb --alpha 0 --train-fraction 0.5 --json e.json"
)

T = TypeVar("T")


def train_target(policy: BasePolicy, events: Sequence[LoggedEvent]) -> None:
    """Fit ``policy`` on logged events: each event's reward is learned for its served arm
    and feature row, whatever the logging policy was (no replay matching)."""
    for e in events:
        policy.add_arm(e.chosen)
        policy.update(e.chosen, e.X[e.action], e.reward, user_id=e.user_id)


@dataclass(frozen=True)
class EstimateJob:
    """What every task of one ``bandit estimate`` shares: the target, the log's split and
    DR's folds (queries and settings; each task reads its partition itself)."""

    policy: str
    params: dict[str, Any]
    d: int
    n_evaluated: int
    folds: int


@dataclass(frozen=True)
class EvaluatedPart:
    """A partition holding evaluated events: its first ``skip`` events train the target,
    the others are the evaluated events from index ``first_index`` on."""

    spec: LogSpec
    skip: int
    first_index: int


def train_task(
    parts: Sequence[LogSpec], counts: Sequence[int], job: EstimateJob, seed: int, n_train: int
) -> bytes:
    """The target trained on the first ``n_train`` events (:func:`train_target`), reading
    the partitions in time order until it has them; its state as bytes."""
    target = make_policy(job.policy, job.d, **job.params, seed=seed)
    left = n_train
    for spec, count in zip(parts, counts, strict=True):
        if left <= 0:
            break
        if count:
            train_target(target, read_partition(spec, job.policy, job.params)[0][:left])
            left -= count
    return target.to_bytes()


def _evaluated(part: EvaluatedPart, job: EstimateJob) -> tuple[list[LoggedEvent], np.ndarray]:
    """The partition's evaluated events and their cross-fitting folds."""
    events = read_partition(part.spec, job.policy, job.params)[0][part.skip :]
    return events, fold_of(part.first_index, len(events), job.n_evaluated, job.folds)


def ridge_task(job: EstimateJob, part: EvaluatedPart) -> RidgeSums:
    """DR's reward-model sums of a partition (:func:`bandit_core.evaluation.offpolicy.ridge_sums`)."""
    return ridge_sums(*_evaluated(part, job))


def estimate_task(
    job: EstimateJob,
    part: EvaluatedPart,
    target: bytes,
    fits: list[dict[str, np.ndarray]],
    key: int,
    n_bootstrap: int,
) -> EstimateSums:
    """The estimates' sums of a partition
    (:func:`bandit_core.evaluation.offpolicy.partition_estimate_sums`)."""
    events, fold = _evaluated(part, job)
    return partition_estimate_sums(
        policy_from_bytes(target),
        events,
        first_index=part.first_index,
        fold=fold,
        fits=fits,
        key=key,
        n_bootstrap=n_bootstrap,
    )


def _plan(parts: Sequence[LogSpec], counts: Sequence[int], n_train: int) -> list[EvaluatedPart]:
    """The partitions holding evaluated events (those after the first ``n_train``)."""
    out, start = [], 0
    for spec, count in zip(parts, counts, strict=True):
        skip = min(max(n_train - start, 0), count)
        if skip < count:
            out.append(EvaluatedPart(spec, skip, start + skip - n_train))
        start += count
    return out


def _estimate_sums(
    args: argparse.Namespace, spec: LogSpec, parts: list[LogSpec], engine: OfflineEngine
) -> tuple[EstimateSums, int]:
    """The evaluated events' :class:`EstimateSums` and the training events' count: the
    partitions counted, the target trained, DR's reward model fitted and the sums taken,
    each a map over the partitions on ``engine`` (docs/offline.md, "Estimates over
    partitions"); the progress bar counts the tasks done after the counting."""
    params = policy_params(args)
    counted = engine.map(partition_facts, [(p, args.policy, params) for p in parts])
    counts = [f.events for f in counted]
    d = one_width(spec, [f.d for f in counted if f.d is not None])
    n_train = int(args.train_fraction * sum(counts))
    n_evaluated = sum(counts) - n_train
    if n_evaluated < args.folds:
        raise CliError(
            f"{n_evaluated} event(s) left to evaluate after --train-fraction "
            f"{args.train_fraction} of {sum(counts)}; --folds {args.folds} needs at least "
            f"{args.folds}"
        )
    job = EstimateJob(args.policy, params, d, n_evaluated, args.folds)
    plan = _plan(parts, counts, n_train)
    with progress_bar(1 + 2 * len(plan), args.no_progress, "task") as bar:

        def run(fn: Callable[..., T], tasks: list[tuple[Any, ...]]) -> list[T]:
            return engine.map(fn, tasks, done=lambda _, __: bar.update(1))

        target = run(train_task, [(parts, counts, job, args.seed, n_train)])[0]
        ridge = functools.reduce(operator.add, run(ridge_task, [(job, p) for p in plan]))
        fits = ridge.fits(args.folds, args.ridge_lambda)
        key = bootstrap_key(np.random.default_rng([args.seed, 3]))
        tasks = [(job, p, target, fits, key, args.bootstrap) for p in plan]
        return functools.reduce(operator.add, run(estimate_task, tasks)), n_train


@clean_exit("estimate")
def _run(args: argparse.Namespace) -> int:
    check_policy(args.policy)
    params = policy_params(args)
    spec = log_spec(args)
    engine = engine_of(args)
    started = time.perf_counter()
    parts = partitions(spec)
    sums, n_train = _estimate_sums(args, spec, parts, engine)
    head = {
        "policy": args.policy,
        "params": params,
        **source_fields(spec),
        "engine": engine.kind,
        "partitions": len(parts),
    }
    try:
        results = sums.results(args.confidence, require_support=not args.force)
    except UnsupportedLogError as exc:
        print(f"bandit estimate: WARNING: {exc} (docs/offline.md, Support)", file=sys.stderr)
        print("bandit estimate: no estimates printed; --force prints them anyway", file=sys.stderr)
        write_json(args.json, {**head, "support": exc.support.to_dict(), "estimates": None})
        return EXIT_FAILURE
    logged = sums.reward.value / sums.n
    _print_estimates(args.policy, params, results, n_train, sums.n, logged)
    payload = {
        **head,
        **_details(args, n_train, sums.n, logged),
        "support": sums.support().to_dict(),
        "estimates": {name: r.to_dict() for name, r in results.items()},
        "seconds": time.perf_counter() - started,
    }
    write_json(args.json, payload)
    return EXIT_OK


def _print_estimates(
    policy: str,
    params: dict[str, Any],
    results: dict[str, EstimateResult],
    n_train: int,
    n_evaluated: int,
    logged: float,
) -> None:
    """The summary on stdout; a warning on stderr when the log does not support the target
    (the estimates printed with ``--force``)."""
    diagnostic = next(iter(results.values())).support
    if not diagnostic.supported:
        print(
            f"bandit estimate: WARNING: {diagnostic.message()} (docs/offline.md, Support)",
            file=sys.stderr,
        )
    print(
        f"{policy} {format_params(params)} on {n_evaluated} events (trained on {n_train}); "
        f"logging policy's mean reward {logged:.4f}"
    )
    for name, r in results.items():
        print(
            f"  {name:<5} {r.value:.4f}  [{r.ci_low:.4f}, {r.ci_high:.4f}] ({r.confidence:.0%} bootstrap)"
        )


def _details(
    args: argparse.Namespace, n_train: int, n_evaluated: int, logged: float
) -> dict[str, Any]:
    """The JSON fields describing how the estimates were made."""
    return {
        "protocol": (
            f"target trained on the first {n_train} events, then fixed and greedy (explore=False) on the "
            f"{n_evaluated} later ones; DR's q_hat: per-arm ridge (lambda {args.ridge_lambda}) "
            f"cross-fitted over {args.folds} time-ordered folds; percentile Poisson bootstrap, {args.bootstrap} resamples"
        ),
        "seed": args.seed,
        "train_events": n_train,
        "evaluated_events": n_evaluated,
        "logged_mean_reward": logged,
        "confidence": args.confidence,
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``estimate`` to ``subparsers``."""
    p = subparsers.add_parser(
        "estimate",
        help="estimate a fixed policy's value from a log with propensities (IPS, SNIPS, DR)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(policies=policy_names()),
    )
    add_log_source(p, rejection=False)
    p.add_argument(
        "--policy", required=True, metavar="NAME", help=f"target policy, one of: {policy_names()}"
    )
    add_policy_params(p)
    _add_estimator_options(p)
    add_engine_options(p)
    add_no_progress(p)
    p.add_argument(
        "--json", type=Path, metavar="PATH", help="write the full result as JSON to PATH"
    )
    p.set_defaults(run=_run)


def _add_estimator_options(p: argparse.ArgumentParser) -> None:
    """The target's training share, the bootstrap, DR's reward model, the seed, ``--force``."""
    p.add_argument(
        "--train-fraction",
        type=fraction,
        default=0.5,
        metavar="F",
        help="share of the events (the earliest) the target learns from before it is fixed (default 0.5)",
    )
    p.add_argument(
        "--bootstrap",
        type=positive_int,
        default=1000,
        metavar="B",
        help="bootstrap resamples per estimator (default 1000)",
    )
    p.add_argument(
        "--confidence",
        type=confidence,
        default=0.95,
        metavar="C",
        help="coverage of the bootstrap interval (default 0.95)",
    )
    p.add_argument(
        "--ridge-lambda",
        type=positive_float,
        default=1.0,
        metavar="L",
        help="ridge penalty of DR's reward model (default 1)",
    )
    p.add_argument(
        "--folds",
        type=at_least_two,
        default=2,
        metavar="F",
        help="cross-fitting blocks of DR's reward model (default 2)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="SEED",
        help="seed of the target policy's RNG and of the bootstrap (default 0)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="print the estimates even when the log does not support the target "
        "(they are then biased; the warning still goes to stderr)",
    )
