"""Offline evaluation from the command line: ``bandit replay``, ``bandit estimate``,
``bandit simulate`` and ``bandit compare`` (docs/algorithms.md section 6; the engine side is
:mod:`bandit_core.evaluation` and :mod:`bandit_core.simulation`). Logs come from a news
or JSON Lines file or from the service's own event log (``--format eventlog``, read
through :class:`service.offline_source.EventLogSource`).

Every command prints a short summary, writes the full result as JSON with
``--json PATH`` and a PNG of the cumulative curves with ``--plot PATH``. Invalid
input ends with a one-line message on stderr and exit status 2, an unreachable event log
with status 1, never a traceback (:mod:`service.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bandit_core.datasets import (
    JsonlLog,
    LoggedEvent,
    LogSource,
    load_classification_csv,
    load_news,
    news_dataset_path,
)
from bandit_core.errors import BanditError, ConfigError
from bandit_core.evaluation import (
    ReplayResult,
    SeedReplays,
    Spread,
    UnsupportedLogError,
    off_policy_estimates,
    rejection_replay,
    replay,
)
from bandit_core.features import Featurizer, FeaturizerConfig, SparseRows
from bandit_core.featurized import featurized_dimension, featurized_rows
from bandit_core.policy import BasePolicy
from bandit_core.registry import POLICIES, make_policy, policy_class
from bandit_core.simulation import (
    ClassificationEnvironment,
    Environment,
    SimulationResult,
    SyntheticEnvironment,
    simulate_run,
)
from bandit_core.validation import check_int, check_real
from service.cli.engine_options import add_engine_options, engine_of
from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from service.schemas import MAX_DENSE_DIMENSION  # the offline commands keep rows dense
from service.usecases.offline_engine import OfflineEngineError

if TYPE_CHECKING:
    from service.offline_source import Featurize

FORMATS = ("news", "jsonl", "eventlog")


class CliError(Exception):
    """A user error reported as one line with exit status 2 (usage)."""


class CommandFailed(Exception):
    """A valid command that could not finish, reported as one line with exit status 1."""


# ---- argument helpers ---------------------------------------------------------------------
def _parse_value(text: str) -> Any:
    """``1`` -> 1, ``0.5`` -> 0.5, ``true`` -> True, ``[0, 1]`` -> [0, 1], else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _parse_assignment(text: str, option: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"{option} takes KEY=VALUE, but got {text!r}")
    return key.strip(), _parse_value(value.strip())


RESERVED = {"seed": "seeds come from --seeds and --seed-start", "d": "d comes from the data"}


def _check_reserved(params: dict[str, Any], option: str) -> dict[str, Any]:
    for key, why in RESERVED.items():
        if key in params:
            raise CliError(f"{option} {key}=... is not allowed: {why}")
    return params


def _params(args: argparse.Namespace) -> dict[str, Any]:
    params = _check_reserved(dict(_parse_assignment(p, "--param") for p in args.param), "--param")
    if getattr(args, "alpha", None) is not None:
        params["alpha"] = args.alpha
    return params


def _number_argument(kind: type[int | float], **bounds: Any) -> Callable[[str], Any]:
    """An argparse ``type``: the text parsed as ``kind``, then checked with the engine's
    validators (:func:`bandit_core.validation.check_int` / ``check_real``) and ``bounds``."""
    check = check_int if kind is int else check_real

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            expected = "an int" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"the value must be {expected}, but got {text!r}") from None
        try:
            return check(value, "the value", **bounds)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


_positive_int = _number_argument(int, low=1)
_at_least_two = _number_argument(int, low=2)
_non_negative_float = _number_argument(float, low=0.0)
_positive_float = _number_argument(float, low=0.0, low_open=True)


def _seeds(args: argparse.Namespace) -> list[int]:
    return list(range(args.seed_start, args.seed_start + args.seeds))


def _add_common(p: argparse.ArgumentParser, rounds_default: int | None) -> None:
    rounds_help = (
        "stop after N matched events (default: read the whole log)"
        if rounds_default is None
        else f"number of rounds to simulate (default {rounds_default})"
    )
    p.add_argument("--rounds", type=_positive_int, default=rounds_default, metavar="N", help=rounds_help)
    p.add_argument(
        "--seeds", type=_positive_int, default=1, metavar="S",
        help="number of seeds to repeat over (default 1); seed i seeds the policy's RNG",
    )
    p.add_argument(
        "--seed-start", type=int, default=0, metavar="SEED",
        help="first seed; the runs use SEED, SEED+1, ..., SEED+S-1 (default 0)",
    )
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full result as JSON to PATH")
    p.add_argument("--plot", type=Path, metavar="PATH", help="write a PNG of the cumulative curves to PATH")
    p.add_argument("--no-progress", action="store_true", help="do not draw the progress bar (on stderr)")


def _add_policy_params(p: argparse.ArgumentParser, alpha_nargs: str | None = None) -> None:
    if alpha_nargs:
        p.add_argument(
            "--alpha", type=_non_negative_float, nargs=alpha_nargs, metavar="A",
            help="exploration weight(s) alpha; several values form a grid (e.g. --alpha 0.1 1 10)",
        )
    else:
        p.add_argument("--alpha", type=_non_negative_float, metavar="A", help="exploration weight alpha of the policy")
    p.add_argument(
        "--param", action="append", default=[], metavar="KEY=VALUE",
        help="a field of the policy's config, e.g. --param ridge_lambda=1 --param epsilon=0.05; "
        "VALUE is read as JSON (numbers, true/false, lists), else as a string; repeatable",
    )


def timestamp_argument(text: str) -> float:
    """Unix seconds, or an ISO 8601 date/time (UTC unless it names an offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected unix seconds or an ISO 8601 time such as 2026-01-31T12:00, but got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _add_log_source(p: argparse.ArgumentParser, rejection: bool = True) -> None:
    p.add_argument(
        "--data", metavar="PATH|URL",
        help="the log: a file for --format news/jsonl (a .gz file is decompressed), a database URL "
        "(postgresql://user@host/db or sqlite:///path) for --format eventlog; with --format news it "
        "defaults to the news data set shipped with bandit_core (the LNUCB-TA paper's Table 3)",
    )
    p.add_argument(
        "--format", choices=FORMATS, default="news",
        help="log format: 'news' (102 integers a line: logged arm, click, 10x10 arm features; "
        "a uniformly random log), 'jsonl' (one JSON event a line, schema in bandit_core.datasets) or "
        "'eventlog' (the service's decisions and rewards of --log-policy, with their logged "
        "propensities) (default news)",
    )
    p.add_argument(
        "--log-policy", metavar="NAME",
        help="with --format eventlog: the service policy whose logged decisions to read",
    )
    p.add_argument("--since", type=timestamp_argument, metavar="TIME",
                   help="with --format eventlog: only decisions made at or after TIME (unix seconds or ISO 8601)")
    p.add_argument("--until", type=timestamp_argument, metavar="TIME",
                   help="with --format eventlog: only decisions made before TIME (unix seconds or ISO 8601)")
    p.add_argument(
        "--unrewarded", choices=("skip", "default"), default="skip",
        help="with --format eventlog: a decision with no logged reward (pending, expired, or served "
        "degraded) is skipped ('skip', the default) or counts with the policy's default_reward "
        "('default'); rewards the sweeper applied by default are logged and always count",
    )
    features = p.add_mutually_exclusive_group()
    features.add_argument(
        "--features", metavar="JSON",
        help="with --format eventlog, for a policy that logged JSON features: re-featurize every logged "
        "decision under this featurizer config (the policy spec's features: bits, interactions, "
        "context_in_actions, output, limits), e.g. '{\"bits\": 8, \"interactions\": []}'; the rows "
        "follow the evaluated policy's layout (docs/features.md), its d is derived from them "
        "(default: the logged policy's own features config)",
    )
    features.add_argument(
        "--features-file", type=Path, metavar="PATH",
        help="as --features, the config read from a JSON file",
    )
    if rejection:
        p.add_argument(
            "--rejection", action="store_true",
            help="rejection-sampling replay for logs with known non-uniform propensities "
            "(every event needs a propensity; the service's event log has them); default: plain "
            "replay, valid for uniformly random logs",
        )


# ---- loading logs -------------------------------------------------------------------------
@dataclass(frozen=True)
class LogSpec:
    """Where a log comes from (hashable: logs are cached per process by it, and it is what
    ``bandit compare`` sends to its workers)."""

    data: str
    fmt: str
    log_policy: str | None = None
    since: float | None = None
    until: float | None = None
    unrewarded: str = "skip"
    features: str | None = None
    """The featurizer config of --features / --features-file as canonical JSON (None: the
    logged policy's own)."""


def _features_option(args: argparse.Namespace) -> str | None:
    """The featurizer config of ``--features`` or ``--features-file``, checked and written
    as canonical JSON (hashable, for :class:`LogSpec`); None when neither is given."""
    if args.features is not None:
        option, text = "--features", args.features
    elif args.features_file is not None:
        option = f"--features-file {args.features_file}"
        try:
            text = args.features_file.read_text()
        except OSError as exc:
            raise CliError(f"{option}: {exc.strerror or exc}") from None
    else:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{option}: not valid JSON ({exc})") from None
    try:
        config = FeaturizerConfig.from_dict(data)
    except (ConfigError, TypeError) as exc:
        raise CliError(f"{option}: {exc}") from None
    return json.dumps(config.to_dict(), sort_keys=True)


def _log_spec(args: argparse.Namespace) -> LogSpec:
    data = args.data
    if data is None:
        if args.format != "news":
            raise CliError(f"--format {args.format} needs --data")
        data = str(news_dataset_path())
    features = _features_option(args)
    spec = LogSpec(data, args.format, args.log_policy, args.since, args.until, args.unrewarded, features)
    if spec.fmt == "eventlog":
        if spec.log_policy is None:
            raise CliError("--format eventlog needs --log-policy NAME")
    elif spec.log_policy is not None or spec.since is not None or spec.until is not None or spec.unrewarded != "skip":
        raise CliError("--log-policy, --since, --until and --unrewarded apply to --format eventlog only")
    elif features is not None:
        raise CliError("--features and --features-file apply to --format eventlog only")
    return spec


def _load_log(spec: LogSpec, policy: str, params: dict[str, Any]) -> tuple[LogSource, int]:
    """The log and its feature length ``d`` for evaluating ``policy`` with ``params``: an
    event log of JSON features is featurized for that policy's layout (and its
    ``context_dim``), every other log is the same for every policy."""
    if spec.fmt != "eventlog":
        return _load_rows(spec, None, 0)
    return _load_rows(spec, policy, int(params.get("context_dim", 0)))


@functools.lru_cache(maxsize=4)
def _load_rows(spec: LogSpec, policy: str | None, context_dim: int) -> tuple[LogSource, int]:
    """The log and its feature length ``d`` (cached per process)."""
    if spec.fmt == "eventlog":
        events = _load_event_log(spec, policy, context_dim)


    else:
        path = Path(spec.data)
        if not path.is_file():
            raise CliError(f"--data {path}: no such file")
        if spec.fmt == "news":
            log = load_news(path)
            return log, log.d
        events = list(JsonlLog(path))
    if not events:
        raise CliError(f"--data {spec.data}: the log holds no events")
    widths = sorted({int(e.X.shape[1]) for e in events})
    if len(widths) > 1:
        raise CliError(
            f"--data {spec.data}: events have feature lengths {widths}; one length is needed "
            "(for an event log, pick a --since after the policy's dimension changed)"
        )
    return events, widths[0]




def _featurizer_config(spec: LogSpec, logged: dict[str, Any] | None) -> FeaturizerConfig | None:
    """The featurizer a replay of ``spec`` uses: --features, else the logged policy's own
    ``features`` (``logged`` is its config in the event log, None when deleted)."""
    if spec.features is not None:
        return FeaturizerConfig.from_dict(json.loads(spec.features))
    features = None if logged is None else logged.get("features")
    return None if features is None else FeaturizerConfig.from_dict(features)


def _refeaturize(spec: LogSpec, config: FeaturizerConfig, policy: str, context_dim: int) -> Featurize:
    """The rows ``policy`` (with ``context_dim``) takes for a logged decision's JSON under
    ``config`` (``bandit_core.featurized.featurized_rows``, made dense). A decision that
    logged float vectors is a :class:`CliError`."""
    layout = policy_class(policy).FEATURE_LAYOUT
    d = featurized_dimension(layout, config, context_dim)
    if d > MAX_DENSE_DIMENSION:
        raise CliError(
            f"{policy} over features with bits {config.bits} takes rows of {d} entries; the offline "
            f"commands keep rows dense, at most {MAX_DENSE_DIMENSION}: lower bits in --features"
        )
    extra = {"context_dim": context_dim} if context_dim else {}
    shape = make_policy(policy, d, **extra)  # featurized_rows reads its layout and d only
    featurizer = Featurizer(config)

    def featurize(context: Any, actions: list[Any]) -> np.ndarray:
        if any(_is_vector(f) for f in [context, *actions]):
            raise CliError(
                f"the event log of {spec.log_policy!r} holds float vectors, not JSON features: "
                "--features applies to a policy that logged JSON features"
            )
        rows = featurized_rows(featurizer, shape, context, actions)
        return rows.to_dense() if isinstance(rows, SparseRows) else rows

    return featurize


def _is_vector(value: Any) -> bool:
    """A logged float vector (a non-empty list of numbers), as a policy without
    ``features`` logs its rows."""
    return type(value) is list and bool(value) and all(type(v) in (int, float) for v in value)


def _load_event_log(spec: LogSpec, policy: str | None, context_dim: int) -> list[LoggedEvent]:
    """Every event of ``spec``'s policy and time range, read from the service's event log;
    JSON features re-featurized for ``policy`` (:func:`_refeaturize`)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from service.offline_source import EventLogSource, check_logged, default_reward
    from service.storage.base import StoreUnavailableError
    from service.storage.sql_log import SqlEventLog

    try:
        url = make_url(spec.data)
    except ArgumentError:
        raise CliError(f"--data must be a postgresql:// or sqlite:/// URL with --format eventlog, but got {spec.data!r}") from None
    if url.get_backend_name() not in ("postgresql", "sqlite"):
        raise CliError(f"--data must be a postgresql:// or sqlite:/// URL with --format eventlog, but got {spec.data!r}")
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).is_file()):
        raise CliError(f"--data {spec.data}: no such SQLite file")
    assert spec.log_policy is not None
    event_log = SqlEventLog(spec.data)
    try:
        check_logged(event_log, spec.log_policy)
        fill = default_reward(event_log, spec.log_policy) if spec.unrewarded == "default" else None
        config = _featurizer_config(spec, event_log.policies().get(spec.log_policy))
        featurize = None
        if config is not None and policy is not None:
            featurize = _refeaturize(spec, config, policy, context_dim)
        source = EventLogSource(
            event_log, spec.log_policy, spec.since, spec.until, unrewarded=fill, featurize=featurize
        )
        return list(source)
    except StoreUnavailableError as exc:
        message = " ".join(str(exc).split())  # a driver's message may span lines
        raise CommandFailed(f"--data {url.render_as_string(hide_password=True)}: {message}") from None
    finally:
        event_log.close()


def _source_fields(spec: LogSpec) -> dict[str, Any]:
    """The log's description in a JSON result (a URL's password hidden)."""
    if spec.fmt != "eventlog":
        return {"data": spec.data, "format": spec.fmt}
    from sqlalchemy.engine import make_url

    return {
        "data": make_url(spec.data).render_as_string(hide_password=True),
        "format": spec.fmt,
        "log_policy": spec.log_policy,
        "since": spec.since,
        "until": spec.until,
        "unrewarded": spec.unrewarded,
        "features": None if spec.features is None else json.loads(spec.features),
    }


def _source_title(spec: LogSpec) -> str:
    return f"the event log of {spec.log_policy}" if spec.fmt == "eventlog" else Path(spec.data).name


# ---- running replays ------------------------------------------------------------------------


def _build_policy(name: str, d: int, params: dict[str, Any], seed: int) -> BasePolicy:
    return make_policy(name, d, **params, seed=seed)


def _replay_one(
    spec: LogSpec, name: str, params: dict[str, Any], seed: int, rounds: int | None,
    rejection: bool, progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    log, d = _load_log(spec, name, params)
    policy = _build_policy(name, d, params, seed)
    if rejection:
        return rejection_replay(policy, log, np.random.default_rng([seed, 1]), rounds, progress=progress)
    return replay(policy, log, rounds, progress=progress)


def _replay_task(
    spec: LogSpec, name: str, params: dict[str, Any], seed: int, rounds: int | None, rejection: bool
) -> ReplayResult:
    """Worker entry point of ``bandit compare`` (module level so it pickles)."""
    return _replay_one(spec, name, params, seed, rounds, rejection)


def _progress_bar(total: int | None, disable: bool, unit: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, disable=disable, unit=unit, file=sys.stderr, dynamic_ncols=True)


def _spread_dict(s: Spread) -> dict[str, float]:
    return {"mean": s.mean, "std": s.std, "min": s.min, "max": s.max}


def _replay_summary(runs: SeedReplays) -> dict[str, Any]:
    res = runs.results
    return {
        "cumulative_reward": runs.cumulative_reward.mean,
        "cumulative_reward_std": runs.cumulative_reward.std,
        "mean_reward": runs.mean_reward.mean,
        "matched": float(np.mean([r.matched for r in res])),
        "events_seen": float(np.mean([r.events_seen for r in res])),
        "seconds": runs.seconds.mean,
        "cpu_seconds": runs.cpu_seconds.mean,
        "spread": {
            "cumulative_reward": _spread_dict(runs.cumulative_reward),
            "mean_reward": _spread_dict(runs.mean_reward),
            "seconds": _spread_dict(runs.seconds),
            "cpu_seconds": _spread_dict(runs.cpu_seconds),
        },
        "per_seed": [{"seed": s, **r.to_dict()} for s, r in zip(runs.seeds, res, strict=True)],
        "curve": runs.mean_curve().tolist(),
    }


def _protocol(rejection: bool) -> str:
    return (
        "rejection-sampling replay (Li et al. 2011): matched events accepted with probability p_min/pscore"
        if rejection
        else "strict replay (Li et al. 2011): the policy learns only from events whose logged arm it chose"
    )


# ---- plots -------------------------------------------------------------------------------------
Line = tuple[str, np.ndarray, dict[str, Any]]


def _plot(path: Path, panels: Sequence[tuple[str, str, Sequence[Line]]], title: str) -> None:
    """Write a PNG with one panel per ``(x label, y label, lines)``, a line being
    ``(label, curves (S, T), matplotlib style)``: the mean over the S seeds with a band of
    +-1 standard deviation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    for ax, (xlabel, ylabel, lines) in zip(axes[0], panels, strict=True):
        for label, curves, style in lines:
            curves = np.atleast_2d(curves)
            mean = curves.mean(axis=0)
            std = curves.std(axis=0, ddof=1) if curves.shape[0] > 1 else np.zeros_like(mean)
            t = np.arange(1, mean.size + 1)
            (drawn,) = ax.plot(t, mean, label=label, linewidth=1.4, **style)
            if curves.shape[0] > 1:
                ax.fill_between(t, mean - std, mean + std, alpha=0.15, color=drawn.get_color())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=110)
    except OSError as exc:
        raise CliError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _write_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        path.write_text(json.dumps(payload, indent=2) + "\n")
    except OSError as exc:
        raise CliError(f"--json {path}: {exc.strerror or exc}") from None


def _clean_exit(command: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
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


def _check_policy(name: str) -> None:
    if name not in POLICIES:
        raise ConfigError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}")


# ---- bandit replay ---------------------------------------------------------------------------------
@_clean_exit("replay")
def _run_replay(args: argparse.Namespace) -> int:
    _check_policy(args.policy)
    params = _params(args)
    seeds = _seeds(args)
    spec = _log_spec(args)
    engine = engine_of(args)
    _load_log(spec, args.policy, params)
    total = args.rounds * len(seeds) if args.rounds else None
    results = []
    with _progress_bar(total, args.no_progress, "round") as bar:
        if engine.kind == "local":
            for seed in seeds:
                bar.set_description(f"{args.policy} seed {seed}")
                results.append(
                    _replay_one(spec, args.policy, params, seed, args.rounds, args.rejection, bar.update)
                )
        else:
            tasks = [(spec, args.policy, params, seed, args.rounds, args.rejection) for seed in seeds]
            results = engine.map(_replay_task, tasks, lambda _, r: bar.update(r.matched))
    runs = SeedReplays(seeds=tuple(seeds), results=tuple(results))
    payload = {
        "policy": args.policy,
        "params": params,
        **_source_fields(spec),
        "protocol": _protocol(args.rejection),
        "rounds": args.rounds,
        "seeds": seeds,
        **_replay_summary(runs),
    }
    cr = runs.cumulative_reward
    spread = f" +- {cr.std:.1f} (min {cr.min:g}, max {cr.max:g})" if cr.n > 1 else ""
    print(
        f"{args.policy} {_format_params(params)}: cumulative reward {cr.mean:g}{spread} over "
        f"{payload['matched']:g} matched of {payload['events_seen']:g} events seen, mean reward "
        f"{runs.mean_reward.mean:.4f}, {runs.seconds.mean:.3f} s ({runs.cpu_seconds.mean:.3f} s CPU) per run, "
        f"{len(seeds)} seed(s)"
    )
    _write_json(args.json, payload)
    if args.plot:
        _plot(args.plot, [("matched round", "cumulative reward", [(args.policy, runs.curves(), {})])],
              f"Replay of {_source_title(spec)}")
    return EXIT_OK


def _format_params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(defaults)"


# ---- bandit estimate -----------------------------------------------------------------------------
def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), but got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), but got {text}")
    return value


def _confidence(text: str) -> float:
    value = _fraction(text)
    if value == 0.0:
        raise argparse.ArgumentTypeError("expected a confidence in (0, 1), but got 0")
    return value


def train_target(policy: BasePolicy, events: Sequence[LoggedEvent]) -> None:
    """Fit ``policy`` on logged events: each event's reward is learned for its served arm
    and feature row, whatever the logging policy was (no replay matching)."""
    for e in events:
        policy.add_arm(e.chosen)
        policy.update(e.chosen, e.X[e.action], e.reward, user_id=e.user_id)


@_clean_exit("estimate")
def _run_estimate(args: argparse.Namespace) -> int:
    _check_policy(args.policy)
    params = _params(args)
    spec = _log_spec(args)
    log, d = _load_log(spec, args.policy, params)
    events = list(log)
    n_train = int(args.train_fraction * len(events))
    evaluated = events[n_train:]
    if len(evaluated) < args.folds:
        raise CliError(
            f"{len(evaluated)} event(s) left to evaluate after --train-fraction {args.train_fraction} of "
            f"{len(events)}; --folds {args.folds} needs at least {args.folds}"
        )
    started = time.perf_counter()
    target = _build_policy(args.policy, d, params, args.seed)
    train_target(target, events[:n_train])
    try:
        results = off_policy_estimates(
            target, evaluated, rng=np.random.default_rng([args.seed, 3]), n_bootstrap=args.bootstrap,
            confidence=args.confidence, ridge_lambda=args.ridge_lambda, folds=args.folds,
            require_support=not args.force,
        )
    except UnsupportedLogError as exc:
        print(f"bandit estimate: WARNING: {exc} (docs/offline.md, Support)", file=sys.stderr)
        print("bandit estimate: no estimates printed; --force prints them anyway", file=sys.stderr)
        _write_json(args.json, {"policy": args.policy, "params": params, **_source_fields(spec),
                                "support": exc.support.to_dict(), "estimates": None})
        return EXIT_FAILURE
    logged = float(np.mean([e.reward for e in evaluated]))
    diagnostic = next(iter(results.values())).support
    payload = {
        "policy": args.policy,
        "params": params,
        **_source_fields(spec),
        "protocol": (
            f"target trained on the first {n_train} events, then fixed and greedy (explore=False) on the "
            f"{len(evaluated)} later ones; DR's q_hat: per-arm ridge (lambda {args.ridge_lambda}) "
            f"cross-fitted over {args.folds} time-ordered folds; percentile bootstrap, {args.bootstrap} resamples"
        ),
        "seed": args.seed,
        "train_events": n_train,
        "evaluated_events": len(evaluated),
        "logged_mean_reward": logged,
        "confidence": args.confidence,
        "support": diagnostic.to_dict(),
        "estimates": {name: r.to_dict() for name, r in results.items()},
        "seconds": time.perf_counter() - started,
    }
    if not diagnostic.supported:  # --force
        print(f"bandit estimate: WARNING: {diagnostic.message()} (docs/offline.md, Support)", file=sys.stderr)
    print(
        f"{args.policy} {_format_params(params)} on {len(evaluated)} events (trained on {n_train}); "
        f"logging policy's mean reward {logged:.4f}"
    )
    for name, r in results.items():
        print(f"  {name:<5} {r.value:.4f}  [{r.ci_low:.4f}, {r.ci_high:.4f}] ({r.confidence:.0%} bootstrap)")
    _write_json(args.json, payload)
    return EXIT_OK


# ---- bandit simulate ---------------------------------------------------------------------------------
def _environment(args: argparse.Namespace) -> Environment:
    if args.csv is not None:
        if args.label_column is None:
            raise CliError("--csv needs --label-column COL")
        return ClassificationEnvironment(load_classification_csv(args.csv, args.label_column))
    if args.label_column is not None:
        raise CliError("--label-column needs --csv PATH")
    return SyntheticEnvironment.random(args.arms, args.dim, args.env, np.random.default_rng(args.env_seed))


@_clean_exit("simulate")
def _run_simulate(args: argparse.Namespace) -> int:
    _check_policy(args.policy)
    params = _params(args)
    seeds = _seeds(args)
    env = _environment(args)
    _build_policy(args.policy, env.d, params, seeds[0])  # invalid parameters fail before the runs
    runs = []
    with _progress_bar(args.rounds * len(seeds), args.no_progress, "round") as bar:
        for seed in seeds:
            bar.set_description(f"{args.policy} seed {seed}")
            policy = _build_policy(args.policy, env.d, params, seed)
            runs.append(simulate_run(policy, env, args.rounds, np.random.default_rng([seed, 2]),
                                     seed=seed, progress=bar.update))
    result = SimulationResult(runs=tuple(runs))
    source = (
        {"csv": str(args.csv), "label_column": args.label_column, "arms": list(env.arm_ids)}
        if args.csv is not None
        else {"env": args.env, "arms": args.arms, "dim": args.dim, "env_seed": args.env_seed}
    )
    payload = {
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
            {"seed": r.seed, "cumulative_regret": r.cumulative_regret, "cumulative_reward": r.cumulative_reward,
             "seconds": r.seconds}
            for r in runs
        ],
        "regret_curve": result.regret_curves.mean(axis=0).tolist(),
        "reward_curve": result.reward_curves.mean(axis=0).tolist(),
    }
    print(
        f"{args.policy} {_format_params(params)}: cumulative regret {result.cumulative_regret.mean:.2f} "
        f"+- {result.cumulative_regret.std:.2f}, cumulative reward {result.cumulative_reward.mean:.2f} "
        f"over {args.rounds} rounds, {len(seeds)} seed(s)"
    )
    _write_json(args.json, payload)
    if args.plot:
        _plot(
            args.plot,
            [("round", "cumulative regret", [(args.policy, result.regret_curves, {})]),
             ("round", "cumulative reward", [(args.policy, result.reward_curves, {})])],
            f"Simulation: {args.csv.name if args.csv else args.env + ' environment'}",
        )
    return EXIT_OK


# ---- bandit compare ------------------------------------------------------------------------------------
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
    _check_policy(name)
    params = dict(_parse_assignment(kv, "--policy") for kv in tail.split(",") if kv.strip()) if tail else {}
    _check_reserved(params, "--policy")
    return Variant(label or name, name, params)


def _grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    axes: list[tuple[str, list[Any]]] = []
    if args.alpha:
        axes.append(("alpha", list(args.alpha)))
    for item in args.grid:
        key, sep, values = item.partition("=")
        if not sep or not key.strip() or not values.strip():
            raise CliError(f"--grid takes KEY=V1,V2,..., but got {item!r}")
        axes.append((key.strip(), [_parse_value(v.strip()) for v in values.split(",")]))
    keys = [k for k, _ in axes]
    _check_reserved(dict.fromkeys(keys), "--grid")
    if len(set(keys)) != len(keys):
        raise CliError(f"each grid key may appear once, but got {keys}")
    return [dict(zip(keys, combo, strict=True)) for combo in product(*(v for _, v in axes))]


@contextmanager
def _executor(jobs: int, engine: str) -> Iterator[ProcessPoolExecutor | None]:
    if jobs == 1 or engine != "local":
        yield None
        return
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        yield pool


@_clean_exit("compare")
def _run_compare(args: argparse.Namespace) -> int:
    variants = [parse_policy_spec(s) for s in args.policy]
    common = _check_reserved(dict(_parse_assignment(p, "--param") for p in args.param), "--param")
    grid = _grid(args)
    rows = [
        Variant(v.label + "".join(f" {k}={g[k]}" for k in g), v.policy, {**common, **v.params, **g})
        for v in variants
        for g in grid
    ]
    # One colour per --policy, one line style per grid point.
    dashes = ["-", "--", ":", "-."]
    styles = [
        {"color": f"C{vi % 10}", "linestyle": dashes[gi % len(dashes)]}
        for vi in range(len(variants))
        for gi in range(len(grid))
    ]
    seeds = _seeds(args)
    spec = _log_spec(args)
    for row in rows:  # invalid parameters fail here, before any worker starts
        _, d = _load_log(spec, row.policy, row.params)
        _build_policy(row.policy, d, row.params, seeds[0])
    tasks = [(i, s) for i in range(len(rows)) for s in seeds]
    results: dict[tuple[int, int], ReplayResult] = {}
    started = time.perf_counter()
    engine = engine_of(args)
    with _progress_bar(len(tasks), args.no_progress, "run") as bar, _executor(args.jobs, engine.kind) as pool:
        if engine.kind == "ray":
            runs = [(spec, rows[i].policy, rows[i].params, s, args.rounds, args.rejection) for i, s in tasks]
            for (i, s), result in zip(tasks, engine.map(_replay_task, runs, lambda *_: bar.update(1)), strict=True):
                results[i, s] = result
        elif pool is None:
            for i, s in tasks:
                r = rows[i]
                results[i, s] = _replay_task(spec, r.policy, r.params, s, args.rounds, args.rejection)
                bar.update(1)
        else:
            futures = {
                pool.submit(_replay_task, spec, rows[i].policy, rows[i].params, s, args.rounds,
                            args.rejection): (i, s)
                for i, s in tasks
            }
            for fut in as_completed(futures):
                results[futures[fut]] = fut.result()
                bar.update(1)
    wall = time.perf_counter() - started
    per_row = [SeedReplays(seeds=tuple(seeds), results=tuple(results[i, s] for s in seeds)) for i in range(len(rows))]
    summaries = [
        {"label": row.label, "policy": row.policy, "params": row.params, **_replay_summary(runs)}
        for row, runs in zip(rows, per_row, strict=True)
    ]
    payload = {
        **_source_fields(spec),
        "protocol": _protocol(args.rejection),
        "rounds": args.rounds,
        "seeds": seeds,
        "jobs": args.jobs,
        "engine": engine.kind,
        "wall_seconds": wall,
        "results": summaries,
    }
    print(_table(summaries))
    where = "on the Ray cluster" if engine.kind == "ray" else f"with {args.jobs} process(es)"
    print(f"{len(tasks)} runs in {wall:.1f} s {where}")
    _write_json(args.json, payload)
    if args.plot:
        lines = [(row.label, runs.curves(), style) for row, runs, style in zip(rows, per_row, styles, strict=True)]
        title = f"Replay of {_source_title(spec)}: mean over {len(seeds)} seed(s), band +-1 sd"
        _plot(args.plot, [("matched round", "cumulative reward", lines)], title)
    return EXIT_OK


def _table(summaries: Sequence[dict[str, Any]]) -> str:
    header = ("policy", "cum. reward", "sd", "min", "max", "mean reward", "matched", "events seen", "s/run",
              "cpu s/run")
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
        return "  ".join(v.ljust(w) if c == 0 else v.rjust(w) for c, (v, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


# ---- registration ------------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``replay``, ``estimate``, ``simulate`` and ``compare`` to ``subparsers``."""
    names = ", ".join(sorted(POLICIES))
    fmt = argparse.RawDescriptionHelpFormatter

    p = subparsers.add_parser(
        "replay",
        help="evaluate a policy offline on a logged data set (replay method)",
        formatter_class=fmt,
        description=(
            "Replay a policy on a log (Li et al. 2011): events are read in order; when the policy picks the\n"
            "logged arm the reward counts and the policy learns from it, otherwise the event is skipped.\n"
            "Stops after --rounds matched events or at the end of the log. Valid for uniformly random logs;\n"
            "use --rejection for logs with known non-uniform propensities, such as the service's own event\n"
            "log (--format eventlog --data URL --log-policy NAME). With no --data, --format news replays\n"
            "the news data set shipped with bandit_core (the LNUCB-TA paper's Table 3).\n\n"
            "Re-featurizing: a policy with features logs its JSON as sent; --features JSON (or\n"
            "--features-file) replays the log under another featurizer config, the rows built for the\n"
            "evaluated policy's layout (its d follows); without it, under the logged policy's own config.\n\n"
            f"Policies: {names}.\n\n"
            "JSON keys: policy, params, protocol, cumulative_reward (mean over seeds), cumulative_reward_std,\n"
            "mean_reward, matched, events_seen, seconds and cpu_seconds (mean wall and CPU time per run),\nspread, per_seed, curve.\n\n"
            "example: bandit replay --format news --policy linucb --alpha 0.1 \\\n"
            "             --rounds 800 --seeds 1 --json r.json --plot r.png\n"
            "         bandit replay --format eventlog --data sqlite:///data/events.sqlite3 --log-policy home \\\n"
            "             --rejection --policy linucb --alpha 0.5 --json r.json\n"
            "         bandit replay --format eventlog --data sqlite:///storefront.sqlite3 --log-policy shop \\\n"
            "             --features '{\"bits\": 6, \"interactions\": [[\"*\", \"*\"]]}' --policy hybrid_linucb --alpha 0.5"
        ),
    )
    _add_log_source(p)
    p.add_argument("--policy", required=True, metavar="NAME", help=f"policy to evaluate, one of: {names}")
    _add_policy_params(p)
    _add_common(p, rounds_default=None)
    add_engine_options(p)
    p.set_defaults(run=_run_replay)

    p = subparsers.add_parser(
        "estimate",
        help="estimate a fixed policy's value from a log with propensities (IPS, SNIPS, DR)",
        formatter_class=fmt,
        description=(
            "Off-policy estimates of what a fixed target policy would earn per decision, from a log whose\n"
            "events carry the logging policy's propensities (the service's event log always does):\n"
            "  IPS    (1/n) sum w_i r_i,  w_i = pi(a_i | x_i) / pscore_i\n"
            "  SNIPS  sum w_i r_i / sum w_i\n"
            "  DR     (1/n) sum [sum_a pi(a | x_i) q_hat(x_i, a) + w_i (r_i - q_hat(x_i, a_i))]\n"
            "each with a percentile bootstrap interval (--bootstrap resamples of the events).\n\n"
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
            "Re-featurizing: a policy with features logs its JSON as sent; --features JSON (or\n"
            "--features-file) replays the log under another featurizer config, the rows built for the\n"
            "evaluated policy's layout (its d follows); without it, under the logged policy's own config.\n\n"
            f"Policies: {names}.\n\n"
            "JSON keys: policy, params, data, format (and log_policy, since, until, unrewarded, features for an\n"
            "event log), protocol, seed, train_events, evaluated_events, logged_mean_reward, confidence,\n"
            "support (n, deterministic_events, unsupported_mass, supported), estimates (ips, snips, dr:\n"
            "estimator, value, ci_low, ci_high, confidence, n_bootstrap, n, support), seconds.\n\n"
            "example: bandit estimate --format eventlog --data postgresql://postgres@127.0.0.1/bandit \\\n"
            "             --log-policy home --policy linucb --alpha 0 --train-fraction 0.5 --json e.json"
        ),
    )
    _add_log_source(p, rejection=False)
    p.add_argument("--policy", required=True, metavar="NAME", help=f"target policy, one of: {names}")
    _add_policy_params(p)
    p.add_argument("--train-fraction", type=_fraction, default=0.5, metavar="F",
                   help="share of the events (the earliest) the target learns from before it is fixed (default 0.5)")
    p.add_argument("--bootstrap", type=_positive_int, default=1000, metavar="B",
                   help="bootstrap resamples per estimator (default 1000)")
    p.add_argument("--confidence", type=_confidence, default=0.95, metavar="C",
                   help="coverage of the bootstrap interval (default 0.95)")
    p.add_argument("--ridge-lambda", type=_positive_float, default=1.0, metavar="L",
                   help="ridge penalty of DR's reward model (default 1)")
    p.add_argument("--folds", type=_at_least_two, default=2, metavar="F",
                   help="cross-fitting blocks of DR's reward model (default 2)")
    p.add_argument("--seed", type=int, default=0, metavar="SEED",
                   help="seed of the target policy's RNG and of the bootstrap (default 0)")
    p.add_argument("--force", action="store_true",
                   help="print the estimates even when the log does not support the target "
                   "(they are then biased; the warning still goes to stderr)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full result as JSON to PATH")
    p.set_defaults(run=_run_estimate)

    p = subparsers.add_parser(
        "simulate",
        help="run a policy on a simulated bandit with known ground truth",
        formatter_class=fmt,
        description=(
            "Run a policy for --rounds rounds on a bandit whose expected rewards are known and report the\n"
            "cumulative (pseudo-)regret sum_t [max_a mu_t(a) - mu_t(chosen)] and the cumulative reward.\n"
            "With --csv: a classification data set as a bandit (each class an arm, reward 1 for the true\n"
            "class, rows shuffled per seed, features scaled to unit L2 norm, every arm sees the row).\n"
            "Without --csv: a synthetic environment (--env linear: mu = (1 + x.theta)/2; nonlinear:\n"
            "mu = (x.theta)^2; x and theta on the unit sphere).\n\n"
            f"Policies: {names}.\n\n"
            "JSON keys: policy, params, environment, cumulative_regret, cumulative_regret_std,\n"
            "cumulative_reward, cumulative_reward_std, seconds, per_seed, regret_curve, reward_curve.\n\n"
            "example: bandit simulate --csv examples/flowers.csv --label-column species --policy linucb --rounds 2000 --seeds 5"
        ),
    )
    p.add_argument("--csv", type=Path, metavar="PATH", help="classification CSV with a header row")
    p.add_argument("--label-column", metavar="COL", help="name of the CSV's label column (with --csv)")
    p.add_argument("--env", choices=("linear", "nonlinear"), default="linear",
                   help="synthetic environment when no --csv is given (default linear)")
    p.add_argument("--arms", type=_positive_int, default=10, metavar="K", help="arms of the synthetic environment (default 10)")
    p.add_argument("--dim", type=_positive_int, default=10, metavar="D", help="feature length of the synthetic environment (default 10)")
    p.add_argument("--env-seed", type=int, default=0, metavar="SEED",
                   help="seed drawing the synthetic environment's theta (default 0)")
    p.add_argument("--policy", required=True, metavar="NAME", help=f"policy to run, one of: {names}")
    _add_policy_params(p)
    _add_common(p, rounds_default=1000)
    p.set_defaults(run=_run_simulate)

    p = subparsers.add_parser(
        "compare",
        help="replay several policies / parameter grids on one log in parallel and tabulate them",
        formatter_class=fmt,
        description=(
            "Replay every combination of --policy and grid values for every seed on one log, in parallel\n"
            "processes (--jobs), then print one table (mean, sd, min, max of the cumulative reward over\n"
            "seeds, mean reward, matched events, events seen, wall and CPU seconds per run) and draw one plot.\n\n"
            "A --policy is [LABEL=]NAME[:KEY=VALUE,...], e.g. 'kNN-UCB=lnucb_ta:use_linear=false'.\n"
            "--alpha A1 A2 ... and --grid KEY=V1,V2 form a grid crossed with every policy.\n\n"
            "Re-featurizing: a policy with features logs its JSON as sent; --features JSON (or\n"
            "--features-file) replays the log under another featurizer config, the rows built for the\n"
            "evaluated policy's layout (its d follows); without it, under the logged policy's own config.\n\n"
            "JSON keys: data, format, protocol, rounds, seeds, jobs, engine, wall_seconds, results (one per row:\n"
            "label, policy, params, cumulative_reward, cumulative_reward_std, mean_reward, matched,\n"
            "events_seen, seconds, cpu_seconds, spread, per_seed, curve).\n\n"
            "example: bandit compare --policy linucb --policy lnucb_ta \\\n"
            "             --alpha 0.1 1 10 --rounds 800 --seeds 20 --json table3.json --plot table3.png"
        ),
    )
    _add_log_source(p)
    p.add_argument("--policy", action="append", required=True, metavar="SPEC",
                   help="[LABEL=]NAME[:KEY=VALUE,...]; repeat for each policy to compare")
    _add_policy_params(p, alpha_nargs="+")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="another grid axis over a config field, e.g. --grid ridge_lambda=0.1,1; repeatable")
    p.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1, metavar="J",
                   help="worker processes (default: the number of CPUs; 1 runs in this process)")
    _add_common(p, rounds_default=None)
    add_engine_options(p)
    p.set_defaults(run=_run_compare)
