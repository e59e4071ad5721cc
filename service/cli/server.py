"""``bandit serve``, ``bandit rebuild``, ``bandit partitions`` and ``bandit openapi``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli.arguments import timestamp_argument
from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OPENAPI_PATH = ROOT / "openapi" / "openapi.json"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to ``subparsers``."""
    serve = subparsers.add_parser(
        "serve",
        help="run the HTTP service (uvicorn)",
        description="Run the HTTP service. Configuration comes from BANDIT_* environment "
        "variables (docs/operations.md); with none set it runs on the embedded default.",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    serve.add_argument(
        "--port", type=_port, default=8000, help="TCP port to listen on, 1-65535 (default 8000)"
    )
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        help="worker processes (default 1); more than 1 needs BANDIT_REDIS_URL",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
        help="log level (default info); BANDIT_LOG_FORMAT=json writes JSON lines with "
        "each request's id",
    )
    # One log line per request costs about 3% of a /recommend's CPU (py-spy, K = 50):
    # off unless asked for; errors and start-up messages still log at --log-level.
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="log every request (uvicorn's access log; default off)",
    )
    serve.epilog = (
        "A failure to start is one line on stderr naming the cause, and exit status 2 for a "
        "setting naming something unusable (a data directory, the policies file or a policy "
        "in it, a database URL) or 1 otherwise (Redis or the database unreachable, the "
        "event-log schema not the code's). docs/operations.md, 'Start-up failures'."
    )
    serve.set_defaults(run=_serve)

    rebuild = subparsers.add_parser(
        "rebuild",
        help="reconstruct a policy's state from the event log",
        description="Replay a policy's logged decisions and rewards into the state store "
        "(BANDIT_REDIS_URL and BANDIT_DATABASE_URL) and replace its whole state with the "
        "result: learned parts and counters (decisions, rewards, pulls per arm) equal what "
        "the log says; pending events are kept. A running service rebuilds a policy missing "
        "from the store by itself; this command is for a store restored from an older backup.",
    )
    which = rebuild.add_mutually_exclusive_group(required=True)
    which.add_argument("--policy", metavar="NAME", help="the policy whose state to rebuild")
    which.add_argument(
        "--all", action="store_true", help="every policy of the event log's policies table"
    )
    rebuild.set_defaults(run=_rebuild)

    partitions = subparsers.add_parser(
        "partitions",
        help="create the event log's day partitions ahead and list them (PostgreSQL)",
        description="Create the day partitions of decisions and rewards from yesterday to "
        "--days-ahead days ahead, move the rows of the default partitions into their days, "
        "and list the partitions (BANDIT_DATABASE_URL; the service does the same every "
        "BANDIT_LOG_UPKEEP_INTERVAL_SECONDS). With --explain, print the plan of a replay of "
        "POLICY over [--since, --until): the partitions it scans. docs/operations.md.",
    )
    partitions.add_argument(
        "--days-ahead",
        type=int,
        metavar="N",
        help="days of partitions ahead of today (default BANDIT_LOG_PARTITION_DAYS_AHEAD)",
    )
    partitions.add_argument("--explain", metavar="POLICY", help="print a replay's query plan")
    partitions.add_argument(
        "--since",
        type=timestamp_argument,
        metavar="TIME",
        help="start of the replay (ISO 8601, UTC unless it names an offset, or unix seconds)",
    )
    partitions.add_argument(
        "--until",
        type=timestamp_argument,
        metavar="TIME",
        help="end of the replay (ISO 8601, UTC unless it names an offset, or unix seconds)",
    )
    partitions.set_defaults(run=_partitions)

    export = subparsers.add_parser(
        "openapi",
        help="print the OpenAPI document of the service",
        description="Print the OpenAPI document the service serves at /openapi.json (no "
        "connection is opened). The repository's copy is refreshed with "
        "`bandit openapi --output openapi/openapi.json` from the repository root.",
    )
    export.add_argument(
        "--output",
        type=Path,
        metavar="PATH",
        help="write the document to PATH instead of standard output",
    )
    export.set_defaults(run=_export_openapi)


def settings_or_none() -> Settings | None:
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


def _port(text: str) -> int:
    """A TCP port to listen on (argparse type)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-65535)")
    return port


def _positive(text: str) -> int:
    """An integer of at least 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


class _HeldRecords(logging.Handler):
    """The root logger's only handler while the service starts: keeps the records, which
    :meth:`hand_on` gives to the root's own handlers (Python's last resort when it has
    none) once the service has started. A failed start drops them: its one line says why."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def hand_on(self, handlers: list[logging.Handler]) -> None:
        for record in self.records:
            for handler in handlers or [h for h in [logging.lastResort] if h is not None]:
                if record.levelno >= handler.level:
                    handler.handle(record)


async def _start(app: Any, stack: AsyncExitStack) -> None:
    """Enter the app's lifespan on ``stack``: a failure to start raised as a
    :class:`~service.startup.StartupError` (an unreachable store or database included),
    the start's log records held back until it has started."""
    from service.api.app import lifespan
    from service.startup import StartupError
    from service.storage.base import StoreUnavailableError

    root = logging.getLogger()
    held = _HeldRecords()
    handlers, root.handlers = root.handlers, [held]
    try:
        await stack.enter_async_context(lifespan(app))
    except StoreUnavailableError as exc:
        raise StartupError(f"cannot start: {exc}") from None
    finally:
        root.handlers = handlers
    held.hand_on(handlers)


def _serve_one(settings: Settings, options: dict[str, Any]) -> None:
    """Serve with one process (uvicorn's ``options``): uvicorn's server entering the
    app's lifespan itself, so that a failure to start is an exception of this call, not
    a logged traceback."""
    import uvicorn

    from service.api.app import create_app

    app = create_app(settings)

    class Server(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            self.lifespan_stack = AsyncExitStack()
            async with self.lifespan_stack:  # closed here when serving failed
                await _start(app, self.lifespan_stack)
                await super().serve(sockets)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets)
            # before serve() ends: uvicorn then raises the signal that stopped it again
            await self.lifespan_stack.aclose()

    config = uvicorn.Config(app, lifespan="off", **options)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C while starting
        Server(config).run()


def _check_start(settings: Settings) -> None:
    """Start the service once and stop it (what each of several workers does at start):
    a failure to start raised as a :class:`~service.startup.StartupError`."""
    from service.api.app import create_app

    async def start_and_stop() -> None:
        async with AsyncExitStack() as stack:
            await _start(create_app(settings), stack)

    asyncio.run(start_and_stop())


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    settings = settings_or_none()
    if settings is None:
        return EXIT_USAGE
    if args.workers > 1 and settings.embedded:
        print(
            "--workers > 1 needs BANDIT_REDIS_URL: on the embedded default each worker would "
            "keep its own in-process state",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Metrics of every worker land in one directory that /metrics aggregates.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="bandit-metrics-")
    from service.observability.logs import json_log_config

    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": args.log_level,
        "access_log": args.access_log,
    }
    if settings.log_format == "json":
        options["log_config"] = json_log_config(args.log_level)
    try:
        if args.workers == 1:
            _serve_one(settings, options)
            return EXIT_OK
        _check_start(settings)  # once here: a worker failing to start is a logged traceback
    except SystemExit as exc:  # uvicorn could not listen (the port taken): it logged why
        return EXIT_FAILURE if exc.code == STARTUP_FAILURE else int(exc.code or 0)
    uvicorn.run("service.api.app:create_app", factory=True, workers=args.workers, **options)
    return EXIT_OK


def _rebuild(args: argparse.Namespace) -> int:
    from service.api.app import LEARNING_SETTINGS, make_event_log, make_store
    from service.storage.base import StoreUnavailableError
    from service.usecases.audit import CLI, acting_as, rebuild_record
    from service.usecases.rebuild import rebuild_policy

    settings = settings_or_none()
    if settings is None:
        return EXIT_USAGE
    if settings.embedded:
        print(
            "bandit rebuild needs BANDIT_REDIS_URL: the embedded default rebuilds at every start",
            file=sys.stderr,
        )
        return EXIT_USAGE

    async def run() -> int:
        event_log = make_event_log(settings)
        store = make_store(settings)
        try:
            names = sorted(event_log.policies()) if args.all else [args.policy]
            for name in names:
                report = await rebuild_policy(event_log, store, name, learning=LEARNING_SETTINGS)
                with acting_as(CLI):
                    event_log.append([], [], [rebuild_record(report, time.time())])
                print(
                    f"rebuilt {report.policy}: {report.rewards} rewards of {report.decisions} "
                    f"decisions replayed into {report.parts} state parts"
                )
        except KeyError as exc:
            print(f"bandit rebuild: error: {exc.args[0]}", file=sys.stderr)
            return EXIT_USAGE
        except StoreUnavailableError as exc:
            print(f"bandit rebuild: error: {' '.join(str(exc).split())}", file=sys.stderr)
            return EXIT_FAILURE
        finally:
            await store.close()
            event_log.close()
        return EXIT_OK

    return asyncio.run(run())


def _partitions(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from service.storage.base import StoreUnavailableError
    from service.storage.migrate import upgrade_head
    from service.storage.partitions import list_partitions
    from service.storage.schema import PARTITIONED_TABLES
    from service.storage.sql_log import SqlEventLog

    settings = settings_or_none()
    if settings is None:
        return EXIT_USAGE
    days_ahead = settings.log_partition_days_ahead if args.days_ahead is None else args.days_ahead
    if days_ahead < 1:
        print("bandit partitions: error: --days-ahead must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    event_log = None
    try:
        if settings.run_migrations:
            upgrade_head(settings.log_url)
        event_log = SqlEventLog(settings.log_url)
        if not event_log.partitioned:
            print("the event log is not partitioned (SQLite keeps plain tables): nothing to do")
            return EXIT_OK
        if args.explain is not None and args.explain not in event_log.policies():
            print(
                f"bandit partitions: error: --explain: policy {args.explain!r} is not in the "
                "event log",
                file=sys.stderr,
            )
            return EXIT_USAGE
        for name in event_log.prepare_partitions(datetime.now(UTC).timestamp(), days_ahead):
            print(f"created {name}")
        with event_log.engine.connect() as conn:
            for table in PARTITIONED_TABLES:
                for part in list_partitions(conn, table):
                    span = (
                        "DEFAULT"
                        if part.start is None or part.end is None
                        else f"[{datetime.fromtimestamp(part.start, UTC):%Y-%m-%d}, "
                        f"{datetime.fromtimestamp(part.end, UTC):%Y-%m-%d})"
                    )
                    print(f"{table:<10} {part.name:<22} {span}")
        if args.explain is not None:
            print(event_log.explain_events(args.explain, args.since, args.until))
    except StoreUnavailableError as exc:
        print(f"bandit partitions: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        if event_log is not None:
            event_log.close()
    return EXIT_OK


def openapi_document() -> dict:
    """The OpenAPI document the app serves (no connection is opened)."""
    from service.api.app import create_app
    from service.settings import Settings

    return create_app(Settings()).openapi()


def render_openapi() -> str:
    """The document as the repository stores it (sorted keys, two-space indent)."""
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def _export_openapi(args: argparse.Namespace) -> int:
    if args.output is None:
        sys.stdout.write(render_openapi())
        return EXIT_OK
    try:
        args.output.write_text(render_openapi())
    except OSError as exc:
        print(
            f"bandit openapi: error: --output {args.output}: {exc.strerror or exc}", file=sys.stderr
        )
        return EXIT_USAGE
    print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK
