"""``bandit evaluate``: an offline evaluation of a policy's event log from the command line,
computed here as the service computes it (``service.usecases.evaluations``; docs/offline.md
"Evaluations"), with a progress bar and a plot of the estimates over time.

Invalid input ends with one line on stderr and exit status 2, an unreachable event log
with status 1 (:mod:`service.cli.exit_codes`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bandit_core.errors import ConfigError
from service.cli.arguments import add_no_progress, timestamp_argument
from service.cli.engine_options import add_engine_options, engine_of
from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from service.usecases.offline_engine import OfflineEngineError

ESTIMATOR_NAMES = {"ips": "IPS", "dr": "DR", "mtr": "DR (mtr)"}
"""How the table names an evaluation's estimator (docs/offline.md, "Evaluations")."""


class UsageError(Exception):
    """Bad input: one line on stderr, exit status 2."""


def _policy(text: str) -> tuple[str, str]:
    name, sep, arguments = text.partition("=")
    if not sep or not name.strip() or not arguments.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=ARGUMENTS, but got {text!r}")
    return name.strip(), arguments.strip()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``evaluate`` to ``subparsers``."""
    p = subparsers.add_parser(
        "evaluate",
        help="evaluate learning settings offline on a policy's event log (Personalizer's evaluations)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "What would each learning setting have earned per decision on this log? The decisions of\n"
            "--log-policy made in [--since, --until) that have a reward are replayed in time order for:\n"
            "  Online    the policy's own settings (as logged in the event log's policies table)\n"
            "  Baseline  always the first candidate (the first action sent and not excluded)\n"
            "  Random    a uniform choice among the candidates\n"
            "  each --policy NAME=ARGUMENTS: VW arguments (--cb_explore_adf --epsilon E -q ab, as\n"
            "            PUT configurations/policy reads them) or a JSON policy spec\n"
            "  with --offline-experimentation, the best of a small grid (epsilon 0.05 / 0.2,\n"
            "            interactions off / on, ridge_lambda 0.3 / 3) around the policy's own settings,\n"
            "            and its own settings with a half-life of a day / a week (--half_life_seconds)\n"
            "            when the policy's log in [--since, --until) can span four half-lives or more.\n"
            "A learning setting is replayed with progressive validation: at each decision it gives its\n"
            "action probabilities (exploration included), then learns that decision's logged reward. The\n"
            "logged propensities turn them into IPS (sum w r / n) and SNIPS (sum w r / sum w) estimates,\n"
            "w = target probability / logged propensity, with 95% Gaussian intervals, in total and per\n"
            "5-minute period; a loop whose learning policy has --cb_type dr or mtr adds its doubly\n"
            "robust estimate and names the optimal policy by it. Prints a table, writes --json and plots the estimates over time (--plot:\n"
            "the IPS estimate of everything up to each period, with its interval as a band).\n\n"
            "example: bandit evaluate --data sqlite:///storefront.sqlite3 --log-policy shop \\\n"
            "             --policy 'interactions=--cb_explore_adf -q ::' --plot e.png --json e.json"
        ),
    )
    p.add_argument(
        "--data",
        required=True,
        metavar="URL",
        help="the event log's database: postgresql://user@host/db or sqlite:///path",
    )
    p.add_argument(
        "--log-policy", required=True, metavar="NAME", help="the policy whose decisions to evaluate"
    )
    p.add_argument(
        "--since",
        type=timestamp_argument,
        metavar="TIME",
        help="only decisions made at or after TIME (unix seconds or ISO 8601; default: all)",
    )
    p.add_argument(
        "--until",
        type=timestamp_argument,
        metavar="TIME",
        help="only decisions made before TIME (unix seconds or ISO 8601; default: all)",
    )
    p.add_argument(
        "--policy",
        type=_policy,
        action="append",
        default=[],
        metavar="NAME=ARGUMENTS",
        help="a learning setting to evaluate besides the policy's own; repeatable",
    )
    p.add_argument(
        "--offline-experimentation",
        action="store_true",
        help="also search the small grid of settings and report the best",
    )
    p.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="write the result (estimates per policy and period) as JSON",
    )
    p.add_argument(
        "--plot", type=Path, metavar="PATH", help="write a PNG of the estimates over time"
    )
    add_no_progress(p)
    add_engine_options(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _evaluate(args)
    except (UsageError, ConfigError) as exc:
        print(f"bandit evaluate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OfflineEngineError as exc:
        print(f"bandit evaluate: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def _evaluate(args: argparse.Namespace) -> int:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    from tqdm import tqdm

    from service.api.app import LEARNING_SETTINGS
    from service.errors import ApiError
    from service.policies import info_from_record
    from service.schemas.evaluations import EvaluationPolicy
    from service.storage.base import StoreUnavailableError
    from service.storage.sql_log import SqlEventLog
    from service.usecases.evaluation_streams import DecisionQuery, evaluate_on
    from service.usecases.evaluations import evaluate, load_decisions, logged_span, plan

    try:
        url = make_url(args.data)
    except ArgumentError:
        raise UsageError(
            f"--data must be a postgresql:// or sqlite:/// URL, but got {args.data!r}"
        ) from None
    if url.get_backend_name() not in ("postgresql", "sqlite"):
        raise UsageError(f"--data must be a postgresql:// or sqlite:/// URL, but got {args.data!r}")
    if url.get_backend_name() == "sqlite" and not (url.database and Path(url.database).is_file()):
        raise UsageError(f"--data {args.data}: no such SQLite file")
    engine = engine_of(args)
    event_log = SqlEventLog(args.data)
    try:
        configs = event_log.policies()
        if args.log_policy not in configs:
            raise UsageError(
                f"--log-policy {args.log_policy!r} has no config in the event log; known: {sorted(configs)}"
            )
        info = info_from_record(configs[args.log_policy])
        policies = [EvaluationPolicy(name=n, arguments=a) for n, a in args.policy]
        since = float("-inf") if args.since is None else args.since
        until = float("inf") if args.until is None else args.until
        span = logged_span(info, since, until, time.time())
        try:
            candidates, grid = plan(
                LEARNING_SETTINGS, info, policies, args.offline_experimentation, span
            )
        except ApiError as exc:
            raise UsageError(f"--policy: {exc.message}") from None
        estimator = LEARNING_SETTINGS.estimator(info)
        # on Ray, each actor reads the decisions itself
        decisions = (
            [] if engine.kind == "ray" else load_decisions(event_log, args.log_policy, since, until)
        )
    except StoreUnavailableError as exc:
        message = " ".join(str(exc).split())
        print(
            f"bandit evaluate: error: --data {url.render_as_string(hide_password=True)}: {message}",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    finally:
        event_log.close()
    nothing = f"no rewarded decision of {args.log_policy!r} in the time range"
    if engine.kind == "ray":
        query = DecisionQuery(args.data, args.log_policy, since, until)
        with tqdm(disable=args.no_progress, unit="event", file=sys.stderr) as bar:

            def advance_events(events: int, to_do: int) -> None:
                bar.total = to_do
                bar.update(events)

            result = evaluate_on(
                engine,
                query,
                candidates,
                grid,
                advance_events,
                describe=LEARNING_SETTINGS.arguments,
                estimator=estimator,
            )
        if not result["events"]:
            raise UsageError(nothing)
    else:
        if not decisions:
            raise UsageError(nothing)
        replayed = sum(c.spec is not None for c in candidates) + len(grid)
        with tqdm(
            total=replayed * len(decisions), disable=args.no_progress, unit="event", file=sys.stderr
        ) as bar:

            def advance(events: int) -> None:
                bar.update(events)

            result = evaluate(
                decisions,
                candidates,
                grid,
                advance,
                describe=LEARNING_SETTINGS.arguments,
                estimator=estimator,
            )
    rows = _rows(result)
    _print_table(rows, result)
    if args.json is not None:
        payload = {
            "log_policy": args.log_policy,
            "since": args.since,
            "until": args.until,
            **result,
            "estimates": rows,
        }
        try:
            args.json.write_text(json.dumps(payload, indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"--json {args.json}: {exc.strerror or exc}") from None
    if args.plot is not None:
        _plot(args.plot, result, args.log_policy)
    return EXIT_OK


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    from service.usecases.evaluations import total

    rows = []
    estimator = result["estimator"]
    for p in result["policies"]:
        sums = total(p["periods"])
        ips_h, snips_h = sums.ips_half_width(), sums.snips_half_width()
        value, half = sums.estimate(estimator), sums.half_width(estimator)
        rows.append(
            {
                "name": p["name"],
                "source": p["source"],
                "arguments": p["arguments"],
                "events": int(sums.n),
                "ips": sums.ips,
                "ips_low": sums.ips - ips_h,
                "ips_high": sums.ips + ips_h,
                "snips": sums.snips,
                "snips_low": sums.snips - snips_h,
                "snips_high": sums.snips + snips_h,
                "estimate": value,
                "estimate_low": value - half,
                "estimate_high": value + half,
            }
        )
    return rows


def _print_table(rows: list[dict[str, Any]], result: dict[str, Any]) -> None:
    """IPS and SNIPS of every setting, and the evaluation's own estimator when it is DR."""
    width = max(len(r["name"]) for r in rows)
    estimator = ESTIMATOR_NAMES[result["estimator"]]
    own = result["estimator"] != "ips"
    print(
        f"{'policy':<{width}}  {'source':<22}  {'events':>6}  {'IPS [95% interval]':<26}  "
        + f"{'SNIPS [95% interval]':<26}  {estimator} [95% interval]" * own
        + "SNIPS [95% interval]" * (not own)
    )
    for r in rows:
        print(
            f"{r['name']:<{width}}  {r['source']:<22}  {r['events']:>6}  "
            f"{r['ips']:.4f} [{r['ips_low']:.4f}, {r['ips_high']:.4f}]  "
            f"{r['snips']:.4f} [{r['snips_low']:.4f}, {r['snips_high']:.4f}]"
            + f"  {r['estimate']:.4f} [{r['estimate_low']:.4f}, {r['estimate_high']:.4f}]"
            * own
        )
    print(
        f"optimal policy (highest {estimator} among the learning settings): "
        f"{result['optimal_policy']}"
    )


def _plot(path: Path, result: dict[str, Any], log_policy: str) -> None:
    """The IPS estimate of everything up to each period's end, with its 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    from datetime import UTC, datetime

    import matplotlib.pyplot as plt
    from matplotlib.dates import date2num

    from bandit_core.evaluation import WindowSums

    fig, ax = plt.subplots(figsize=(8, 5))
    for p in result["policies"]:
        times, values, lows, highs = [], [], [], []
        so_far = WindowSums()
        for row in p["periods"]:
            so_far = so_far + WindowSums(*row[1:])
            half = so_far.ips_half_width()
            times.append(datetime.fromtimestamp(row[0] + result["period_seconds"], UTC))
            values.append(so_far.ips)
            lows.append(so_far.ips - half)
            highs.append(so_far.ips + half)
        days = date2num(times)
        (line,) = ax.plot(days, values, label=f"{p['name']} ({p['source']})", linewidth=1.4)
        ax.fill_between(days, lows, highs, alpha=0.15, color=line.get_color())
    ax.xaxis_date(UTC)
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("IPS estimate of the reward per decision, up to then")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"Offline evaluation of the event log of {log_policy} (95% Gaussian bands)")
    fig.autofmt_xdate()
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=110)
    except OSError as exc:
        raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
