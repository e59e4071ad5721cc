"""``bandit features``: the features that move a policy's scores most, asked of a
running server (``GET /policies/{name}/features`` through :class:`service.client.BanditClient`).

``bandit features --policy shop --url http://127.0.0.1:8000 --top 10`` prints a table
(rank, importance, weight, deviation, names); ``--json`` prints the report as JSON.

With ``--since`` (and ``--until``, default now) it runs a feature-importance job over that
range of the log instead (leave one feature out, ``/policies/{name}/feature-importances``;
docs/personalizer.md "Feature importances"), waits for it and prints its scores.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from service.cli.arguments import timestamp_argument
from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from service.client import BanditClient


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
    cmd.add_argument(
        "--since",
        type=timestamp_argument,
        help="run a leave-one-feature-out job over the log from this time (ISO 8601 or unix seconds)",
    )
    cmd.add_argument(
        "--until",
        type=timestamp_argument,
        help="end of the job's range (ISO 8601 or unix seconds; default now)",
    )
    cmd.set_defaults(run=_features)


# where the container image keeps the key it generated (deploy/docker/entrypoint.py)
IMAGE_KEY_FILE = "api-key"


def add_server_arguments(cmd: argparse.ArgumentParser) -> None:
    """``--policy``, ``--url`` and ``--api-key``: the options of a command that asks a
    running server about one policy (the key: :func:`api_key`)."""
    cmd.add_argument("--policy", required=True, help="policy name")
    cmd.add_argument("--url", default="http://127.0.0.1:8000", help="the server's base URL")
    cmd.add_argument(
        "--api-key",
        help="API key; default: $BANDIT_API_KEY, else the first of $BANDIT_API_KEYS (the "
        "server's comma-separated keys), else the key the container image generated in "
        "$BANDIT_DATA_DIR/api-key, else none (a server without keys answers loopback clients)",
    )


def api_key(given: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The key a command sends: ``given`` (``--api-key``), else ``$BANDIT_API_KEY``, else
    the first of ``$BANDIT_API_KEYS`` (what the server reads), else the one in
    ``$BANDIT_DATA_DIR/api-key`` (the image's generated key, for ``docker compose exec api
    bandit ...``), else None."""
    if given is not None:
        return given
    if environ.get("BANDIT_API_KEY"):
        return environ["BANDIT_API_KEY"]
    keys = [k.strip() for k in environ.get("BANDIT_API_KEYS", "").split(",") if k.strip()]
    if keys:
        return keys[0]
    data_dir = environ.get("BANDIT_DATA_DIR")
    key_file = Path(data_dir) / IMAGE_KEY_FILE if data_dir else None
    if key_file is not None and key_file.is_file():
        return key_file.read_text().strip() or None
    return None


def _job(client: BanditClient, args: argparse.Namespace) -> int:
    """Run a feature-importance job and print its scores (``--since``)."""
    until = time.time() if args.until is None else args.until
    job_id = f"cli-{uuid.uuid4().hex[:12]}"
    job = client.start_feature_importance(args.policy, job_id, args.since, until, "bandit features")
    while job.status == "Running":
        time.sleep(0.5)
        job = client.feature_importance_job(args.policy, job_id)
    if args.json:
        print(job.model_dump_json(indent=2))
    else:
        print(f"job {job.id} of policy {args.policy}: {job.status}: {job.description}")
        print(f"{'rank':>4}  {'score':>6}  feature")
        for rank, f in enumerate(job.feature_scores[: args.top], 1):
            print(f"{rank:>4}  {f.score:>6.3f}  {f.namespace}.{f.name}")
    return EXIT_OK if job.status == "Succeeded" else EXIT_FAILURE


def _features(args: argparse.Namespace) -> int:
    import httpx

    from service.client import BanditAPIError, BanditClient

    try:
        with BanditClient(args.url, api_key=api_key(args.api_key)) as client:
            if args.since is not None:
                return _job(client, args)
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
