"""``bandit simulate``: a policy run on a simulated bandit with known expected rewards,
reporting its cumulative regret and reward (docs/offline.md; the engine side is
:mod:`bandit_core.simulation`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from bandit_core.datasets import load_classification_csv
from bandit_core.registry import make_policy
from bandit_core.simulation import (
    ClassificationEnvironment,
    Environment,
    SimulationResult,
    SyntheticEnvironment,
    simulate_run,
)
from service.cli.arguments import (
    CliError,
    add_policy_params,
    add_run_options,
    check_policy,
    clean_exit,
    policy_names,
    policy_params,
    positive_int,
    seeds_of,
)
from service.cli.exit_codes import EXIT_OK
from service.cli.reports import format_params, plot, progress_bar, write_json

DESCRIPTION = (
    "Run a policy for --rounds rounds on a bandit whose expected rewards are known and report the\n"
    "cumulative (pseudo-)regret sum_t [max_a mu_t(a) - mu_t(chosen)] and the cumulative reward.\n"
    "With --csv: a classification data set as a bandit (each class an arm, reward 1 for the true\n"
    "class, rows shuffled per seed, features scaled to unit L2 norm, every arm sees the row).\n"
    "Without --csv: a synthetic environment (--env linear: mu = (1 + x.theta)/2; nonlinear:\n"
    "mu = (x.theta)^2; x and theta on the unit sphere).\n\n"
    "Policies: {policies}.\n\n"
    "JSON keys: policy, params, environment, cumulative_regret, cumulative_regret_std,\n"
    "cumulative_reward, cumulative_reward_std, seconds, per_seed, regret_curve, reward_curve.\n\n"
    "example: bandit simulate --csv examples/flowers.csv --label-column species --policy linucb --rounds 2000 --seeds 5"
)


def _environment(args: argparse.Namespace) -> Environment:
    if args.csv is not None:
        if args.label_column is None:
            raise CliError("--csv needs --label-column COL")
        return ClassificationEnvironment(load_classification_csv(args.csv, args.label_column))
    if args.label_column is not None:
        raise CliError("--label-column needs --csv PATH")
    return SyntheticEnvironment.random(
        args.arms, args.dim, args.env, np.random.default_rng(args.env_seed)
    )


@clean_exit("simulate")
def _run(args: argparse.Namespace) -> int:
    check_policy(args.policy)
    params = policy_params(args)
    seeds = seeds_of(args)
    env = _environment(args)
    make_policy(
        args.policy, env.d, **params, seed=seeds[0]
    )  # invalid parameters fail before the runs
    runs = []
    with progress_bar(args.rounds * len(seeds), args.no_progress, "round") as bar:
        for seed in seeds:
            bar.set_description(f"{args.policy} seed {seed}")
            policy = make_policy(args.policy, env.d, **params, seed=seed)
            rng = np.random.default_rng([seed, 2])
            runs.append(simulate_run(policy, env, args.rounds, rng, seed=seed, progress=bar.update))
    result = SimulationResult(runs=tuple(runs))
    print(
        f"{args.policy} {format_params(params)}: cumulative regret {result.cumulative_regret.mean:.2f} "
        f"+- {result.cumulative_regret.std:.2f}, cumulative reward {result.cumulative_reward.mean:.2f} "
        f"over {args.rounds} rounds, {len(seeds)} seed(s)"
    )
    write_json(args.json, _payload(args, params, seeds, env, result))
    if args.plot:
        plot(
            args.plot,
            [
                ("round", "cumulative regret", [(args.policy, result.regret_curves, {})]),
                ("round", "cumulative reward", [(args.policy, result.reward_curves, {})]),
            ],
            f"Simulation: {args.csv.name if args.csv else args.env + ' environment'}",
        )
    return EXIT_OK


def _payload(
    args: argparse.Namespace,
    params: dict[str, Any],
    seeds: list[int],
    env: Environment,
    result: SimulationResult,
) -> dict[str, Any]:
    """The ``--json`` result of a simulation."""
    source = (
        {"csv": str(args.csv), "label_column": args.label_column, "arms": list(env.arm_ids)}
        if args.csv is not None
        else {"env": args.env, "arms": args.arms, "dim": args.dim, "env_seed": args.env_seed}
    )
    runs = result.runs
    return {
        "policy": args.policy,
        "params": params,
        "environment": source,
        "rounds": args.rounds,
        "seeds": seeds,
        "cumulative_regret": result.cumulative_regret.mean,
        "cumulative_regret_std": result.cumulative_regret.std,
        "cumulative_reward": result.cumulative_reward.mean,
        "cumulative_reward_std": result.cumulative_reward.std,
        "seconds": float(np.mean([r.seconds for r in runs])),
        "per_seed": [
            {
                "seed": r.seed,
                "cumulative_regret": r.cumulative_regret,
                "cumulative_reward": r.cumulative_reward,
                "seconds": r.seconds,
            }
            for r in runs
        ],
        "regret_curve": result.regret_curves.mean(axis=0).tolist(),
        "reward_curve": result.reward_curves.mean(axis=0).tolist(),
    }


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``simulate`` to ``subparsers``."""
    p = subparsers.add_parser(
        "simulate",
        help="run a policy on a simulated bandit with known ground truth",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=DESCRIPTION.format(policies=policy_names()),
    )
    p.add_argument("--csv", type=Path, metavar="PATH", help="classification CSV with a header row")
    p.add_argument(
        "--label-column", metavar="COL", help="name of the CSV's label column (with --csv)"
    )
    p.add_argument(
        "--env",
        choices=("linear", "nonlinear"),
        default="linear",
        help="synthetic environment when no --csv is given (default linear)",
    )
    p.add_argument(
        "--arms",
        type=positive_int,
        default=10,
        metavar="K",
        help="arms of the synthetic environment (default 10)",
    )
    p.add_argument(
        "--dim",
        type=positive_int,
        default=10,
        metavar="D",
        help="feature length of the synthetic environment (default 10)",
    )
    p.add_argument(
        "--env-seed",
        type=int,
        default=0,
        metavar="SEED",
        help="seed drawing the synthetic environment's theta (default 0)",
    )
    p.add_argument(
        "--policy", required=True, metavar="NAME", help=f"policy to run, one of: {policy_names()}"
    )
    add_policy_params(p)
    add_run_options(p, rounds_default=1000)
    p.set_defaults(run=_run)
