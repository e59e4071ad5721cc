"""``bandit serve``, ``bandit rebuild`` and ``bandit export-openapi`` (alias ``openapi``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_PATH = ROOT / "openapi" / "openapi.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to ``subparsers``."""
    serve = subparsers.add_parser("serve", help="run the HTTP service (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    # One log line per request costs about 3% of a /recommend's CPU (py-spy, K = 50):
    # off unless asked for; errors and start-up messages still log at --log-level.
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log every request (uvicorn's access log; default off)",
    )
    serve.set_defaults(run=_serve)

    rebuild = subparsers.add_parser(
        "rebuild", help="reconstruct a policy's state from the event log"
    )
    rebuild.add_argument("--policy", required=True)
    rebuild.set_defaults(run=_rebuild)

    for name in ("export-openapi", "openapi"):
        export = subparsers.add_parser(name, help="write the OpenAPI document of the service")
        export.add_argument("--output", type=Path, default=OPENAPI_PATH)
        export.set_defaults(run=_export_openapi)


def _settings() -> Settings | None:
    """The process's settings, or None after printing which ``BANDIT_*`` variable is
    invalid and why."""
    from pydantic import ValidationError

    from service.settings import get_settings

    try:
        return get_settings()
    except ValidationError as exc:
        for error in exc.errors():
            name = "BANDIT_" + str(error["loc"][0]).upper() if error["loc"] else "settings"
            print(f"invalid {name}: {error['msg']}", file=sys.stderr)
        return None


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = _settings()
    if settings is None:
        return 2
    if args.workers > 1 and settings.embedded:
        print(
            "--workers > 1 needs BANDIT_REDIS_URL: on the embedded default each worker would "
            "keep its own in-process state",
            file=sys.stderr,
        )
        return 2
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Metrics of every worker land in one directory that /metrics aggregates.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bandit-metrics-")
    uvicorn.run(
        "service.app:create_app",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        access_log=args.access_log,
    )
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    from service.app import make_event_log, make_store
    from service.rebuild import rebuild_policy

    settings = _settings()
    if settings is None:
        return 2
    if settings.embedded:
        print(
            "bandit rebuild needs BANDIT_REDIS_URL: the embedded default rebuilds at every start",
            file=sys.stderr,
        )
        return 2

    async def run() -> int:
        event_log = make_event_log(settings)
        store = make_store(settings)
        try:
            report = await rebuild_policy(event_log, store, args.policy)
        except KeyError as exc:
            print(exc.args[0], file=sys.stderr)
            return 1
        finally:
            await store.close()
            event_log.close()
        print(
            f"rebuilt {report.policy}: {report.rewards} rewards of {report.decisions} decisions "
            f"replayed into {report.parts} state parts"
        )
        return 0

    return asyncio.run(run())


def openapi_document() -> dict:
    """The OpenAPI document the app serves (no connection is opened)."""
    from service.app import create_app
    from service.settings import Settings

    return create_app(Settings()).openapi()


def render_openapi() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def _export_openapi(args: argparse.Namespace) -> int:
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(render_openapi())
    print(f"wrote {args.output}")
    return 0
