"""The argument types and options the offline-evaluation commands share (``bandit
replay``, ``estimate``, ``simulate``, ``compare`` and ``evaluate``; docs/offline.md), and
how their errors end: a user error is one line on stderr with exit status 2, a command
that could not finish one line with status 1, never a traceback
(:mod:`service.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bandit_core.errors import BanditError, ConfigError
from bandit_core.registry import POLICIES
from bandit_core.validation import check_int, check_real
from service.cli.exit_codes import EXIT_FAILURE, EXIT_USAGE
from service.timeparse import parse_timestamp
from service.usecases.offline_engine import OfflineEngineError

FORMATS = ("news", "jsonl", "eventlog", "dsjson")
REFEATURIZING = (
    "Re-featurizing: a policy with features logs its JSON as sent; --features JSON (or\n"
    "--features-file) replays the log under another featurizer config, the rows built for the\n"
    "evaluated policy's layout (its d follows); without it, under the logged policy's own config.\n"
    "A DSJSON log (--format dsjson: Azure AI Personalizer's logs) is featurized under --features,\n"
    "which it needs (docs/offline.md, DSJSON files).\n\n"
)
"""The paragraph of ``--features`` in the descriptions of the commands that read logs."""


class CliError(Exception):
    """A user error reported as one line with exit status 2 (usage)."""


class CommandFailed(Exception):
    """A valid command that could not finish, reported as one line with exit status 1."""


def parse_value(text: str) -> Any:
    """``1`` -> 1, ``0.5`` -> 0.5, ``true`` -> True, ``[0, 1]`` -> [0, 1], else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_assignment(text: str, option: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``option`` -> ``(KEY, VALUE read by parse_value)``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"{option} takes KEY=VALUE, but got {text!r}")
    return key.strip(), parse_value(value.strip())


RESERVED = {"seed": "seeds come from --seeds and --seed-start", "d": "d comes from the data"}


def check_reserved(params: dict[str, Any], option: str) -> dict[str, Any]:
    """``params`` unless one of them is set by the command itself (:data:`RESERVED`)."""
    for key, why in RESERVED.items():
        if key in params:
            raise CliError(f"{option} {key}=... is not allowed: {why}")
    return params


def policy_params(args: argparse.Namespace) -> dict[str, Any]:
    """The policy's config fields of ``--param`` and ``--alpha``."""
    params = check_reserved(dict(parse_assignment(p, "--param") for p in args.param), "--param")
    if getattr(args, "alpha", None) is not None:
        params["alpha"] = args.alpha
    return params


def number_argument(kind: type[int | float], **bounds: Any) -> Callable[[str], Any]:
    """An argparse ``type``: the text parsed as ``kind``, then checked with the engine's
    validators (:func:`bandit_core.validation.check_int` / ``check_real``) and ``bounds``."""
    check = check_int if kind is int else check_real

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            expected = "an int" if kind is int else "a number"
            raise argparse.ArgumentTypeError(
                f"the value must be {expected}, but got {text!r}"
            ) from None
        try:
            return check(value, "the value", **bounds)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


positive_int = number_argument(int, low=1)
at_least_two = number_argument(int, low=2)
non_negative_float = number_argument(float, low=0.0)
positive_float = number_argument(float, low=0.0, low_open=True)


def seeds_of(args: argparse.Namespace) -> list[int]:
    """The seeds of ``--seeds`` and ``--seed-start``."""
    return list(range(args.seed_start, args.seed_start + args.seeds))


def add_run_options(p: argparse.ArgumentParser, rounds_default: int | None) -> None:
    """``--rounds``, ``--seeds``, ``--seed-start``, ``--json``, ``--plot``, ``--no-progress``."""
    rounds_help = (
        "stop after N matched events (default: read the whole log)"
        if rounds_default is None
        else f"number of rounds to simulate (default {rounds_default})"
    )
    p.add_argument(
        "--rounds", type=positive_int, default=rounds_default, metavar="N", help=rounds_help
    )
    p.add_argument(
        "--seeds",
        type=positive_int,
        default=1,
        metavar="S",
        help="number of seeds to repeat over (default 1); seed i seeds the policy's RNG",
    )
    p.add_argument(
        "--seed-start",
        type=int,
        default=0,
        metavar="SEED",
        help="first seed; the runs use SEED, SEED+1, ..., SEED+S-1 (default 0)",
    )
    p.add_argument(
        "--json", type=Path, metavar="PATH", help="write the full result as JSON to PATH"
    )
    p.add_argument(
        "--plot", type=Path, metavar="PATH", help="write a PNG of the cumulative curves to PATH"
    )
    add_no_progress(p)


def add_no_progress(p: argparse.ArgumentParser) -> None:
    """``--no-progress``."""
    p.add_argument(
        "--no-progress", action="store_true", help="do not draw the progress bar (on stderr)"
    )


def add_policy_params(p: argparse.ArgumentParser, alpha_nargs: str | None = None) -> None:
    """``--alpha`` (one value, or a grid with ``alpha_nargs``) and ``--param``."""
    if alpha_nargs:
        p.add_argument(
            "--alpha",
            type=non_negative_float,
            nargs=alpha_nargs,
            metavar="A",
            help="exploration weight(s) alpha; several values form a grid (e.g. --alpha 0.1 1 10)",
        )
    else:
        p.add_argument(
            "--alpha",
            type=non_negative_float,
            metavar="A",
            help="exploration weight alpha of the policy",
        )
    p.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a field of the policy's config, e.g. --param ridge_lambda=1 --param epsilon=0.05; "
        "VALUE is read as JSON (numbers, true/false, lists), else as a string; repeatable",
    )


def timestamp_argument(text: str) -> float:
    """An argparse ``type``: unix seconds, or an ISO 8601 date/time, UTC unless it names an
    offset (:func:`service.timeparse.parse_timestamp`)."""
    try:
        return parse_timestamp(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_log_source(p: argparse.ArgumentParser, rejection: bool = True) -> None:
    """The options naming the log to evaluate on (read by
    :func:`service.cli.log_sources.log_spec`), and ``--rejection`` with ``rejection``."""
    p.add_argument(
        "--data",
        metavar="PATH|URL",
        nargs="+",
        help="the log: a file for --format news/jsonl (a .gz file is decompressed; several files "
        "are one log, their events one after the other, each a partition the Ray engine reads "
        "where it runs), files or directories for --format dsjson (as bandit import-log reads "
        "them; one log, a partition per file, the files in the order of their first decisions' "
        "times), a database URL "
        "(postgresql://user@host/db or sqlite:///path) for --format eventlog; with --format news it "
        "defaults to the news data set shipped with bandit_core (the LNUCB-TA paper's Table 3)",
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="news",
        help="log format: 'news' (102 integers a line: logged arm, click, 10x10 arm features; "
        "a uniformly random log), 'jsonl' (one JSON event a line, schema in bandit_core.datasets) or "
        "'eventlog' (the service's decisions and rewards of --log-policy, with their logged "
        "propensities) or 'dsjson' (Azure AI Personalizer's Decision Service JSON lines: the "
        "served action, its logged probability, reward -_label_cost; a line without reward, "
        "_skipLearn, is skipped; its JSON featurized under --features) (default news)",
    )
    p.add_argument(
        "--log-policy",
        metavar="NAME",
        help="with --format eventlog: the service policy whose logged decisions to read",
    )
    p.add_argument(
        "--since",
        type=timestamp_argument,
        metavar="TIME",
        help="with --format eventlog: only decisions made at or after TIME (unix seconds or ISO 8601)",
    )
    p.add_argument(
        "--until",
        type=timestamp_argument,
        metavar="TIME",
        help="with --format eventlog: only decisions made before TIME (unix seconds or ISO 8601)",
    )
    p.add_argument(
        "--unrewarded",
        choices=("skip", "default"),
        default="skip",
        help="with --format eventlog: a decision with no logged reward (pending, expired, or served "
        "degraded) is skipped ('skip', the default) or counts with the policy's default_reward "
        "('default'); rewards the sweeper applied by default are logged and always count",
    )
    _add_features_options(p)
    if rejection:
        p.add_argument(
            "--rejection",
            action="store_true",
            help="rejection-sampling replay for logs with known non-uniform propensities "
            "(every event needs a propensity; the service's event log has them); default: plain "
            "replay, valid for uniformly random logs",
        )


def _add_features_options(p: argparse.ArgumentParser) -> None:
    """``--features`` or ``--features-file``: the featurizer config to re-featurize a
    logged policy's JSON under (docs/features.md)."""
    features = p.add_mutually_exclusive_group()
    features.add_argument(
        "--features",
        metavar="JSON",
        help="with --format eventlog, for a policy that logged JSON features, and --format dsjson "
        "(required there): featurize every logged decision under this featurizer config "
        "(the policy spec's features: bits, interactions, "
        'context_in_actions, output, limits), e.g. \'{"bits": 8, "interactions": []}\'; the rows '
        "follow the evaluated policy's layout (docs/features.md), its d is derived from them "
        "(eventlog's default: the logged policy's own features config)",
    )
    features.add_argument(
        "--features-file",
        type=Path,
        metavar="PATH",
        help="as --features, the config read from a JSON file",
    )


def clean_exit(
    command: str,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Turn user errors into one line on stderr and exit status 2, failures into one line
    and status 1."""

    def wrap(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        @functools.wraps(fn)
        def run(args: argparse.Namespace) -> int:
            try:
                return fn(args)
            except (CommandFailed, OfflineEngineError) as exc:
                print(f"bandit {command}: error: {exc}", file=sys.stderr)
                return EXIT_FAILURE
            except (CliError, BanditError) as exc:
                print(f"bandit {command}: error: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except OSError as exc:
                where = f"{exc.filename}: " if exc.filename else ""
                print(f"bandit {command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
                return EXIT_USAGE

        return run

    return wrap


def policy_names() -> str:
    """The engine's policy names, for the commands' help."""
    return ", ".join(sorted(POLICIES))


def check_policy(name: str) -> None:
    """Refuse a policy name the engine's registry does not know."""
    if name not in POLICIES:
        raise ConfigError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}")


def fraction(text: str) -> float:
    """An argparse ``type``: a number in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), but got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), but got {text}")
    return value


def confidence(text: str) -> float:
    """An argparse ``type``: a confidence level in (0, 1)."""
    value = fraction(text)
    if value == 0.0:
        raise argparse.ArgumentTypeError("expected a confidence in (0, 1), but got 0")
    return value
