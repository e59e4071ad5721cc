"""``bandit features``: the features that move a policy's scores most, asked of a
running server (``GET /policies/{name}/features`` through :class:`service.client.BanditClient`).

``bandit features --policy shop --url http://127.0.0.1:8000 --top 10`` prints a table
(rank, importance, weight, deviation, names); ``--json`` prints the report as JSON.
"""

from __future__ import annotations

import argparse
import os
import sys

from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``features`` to ``subparsers``."""
    cmd = subparsers.add_parser(
        "features",
        help="the features that move a policy's scores most (asks a running server)",
        description=(
            "Feature importance of a linear policy: |weight| times the feature's mean "
            "absolute deviation over the latest logged decisions (docs/features.md)."
        ),
    )
    add_server_arguments(cmd)
    cmd.add_argument("--top", type=int, default=20, help="how many features (default 20)")
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    cmd.set_defaults(run=_features)


def add_server_arguments(cmd: argparse.ArgumentParser) -> None:
    """``--policy``, ``--url`` and ``--api-key``: the options of a command that asks a
    running server about one policy."""
    cmd.add_argument("--policy", required=True, help="policy name")
    cmd.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
    cmd.add_argument(
        "--api-key",
        default=os.environ.get("BANDIT_API_KEY"),
        help="API key (default: $BANDIT_API_KEY)",
    )


def _features(args: argparse.Namespace) -> int:
    import httpx

    from service.client import BanditAPIError, BanditClient

    try:
        with BanditClient(args.url, api_key=args.api_key) as client:
            report = client.features(args.policy, args.top)
    except BanditAPIError as exc:  # 404 unknown policy, 422 not linear or bad --top: usage
        print(f"bandit features: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.status in (404, 422) else EXIT_FAILURE
    except httpx.HTTPError as exc:
        print(f"bandit features: cannot reach {args.url}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    if args.json:
        print(report.model_dump_json(indent=2))
        return EXIT_OK
    print(
        f"policy {report.policy} ({report.algorithm}): {report.decisions} logged decisions, "
        f"{report.rows} candidate rows\nmethod: {report.method}"
    )
    print(f"{'rank':>4}  {'importance':>10}  {'weight':>9}  {'deviation':>9}  names")
    for rank, f in enumerate(report.features, 1):
        names = " | ".join(f.names) or f"(column {f.column}, no name seen)"
        print(f"{rank:>4}  {f.importance:>10.4g}  {f.weight:>9.3g}  {f.deviation:>9.3g}  {names}")
    return EXIT_OK
