"""The ``bandit`` command line: ``serve``, ``rebuild``, ``partitions`` and ``openapi`` (service),
``import-log`` and ``export-log`` (a loop's log in the Decision Service format),
``replay``, ``estimate``, ``simulate``, ``compare`` and ``evaluate`` (offline evaluation), ``bound``
(regret bounds), ``features`` (feature importance) and ``model`` (export, import,
reset), from a running server. Exit statuses: :mod:`service.cli.exit_codes`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from service.cli import (
    bound,
    compare,
    estimate,
    evaluate,
    features,
    model,
    replay,
    server,
    simulate,
)
from service.cli.exit_codes import EPILOG, EXIT_FAILURE, EXIT_USAGE
from service.personalizer import log_commands
from service.startup import SettingError, StartupError


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subcommand per task."""
    parser = argparse.ArgumentParser(
        prog="bandit",
        description="Self-hosted contextual-bandit recommendation service and offline evaluation.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    server.register(sub)
    for command in (replay, estimate, simulate, compare):
        command.register(sub)
    evaluate.register(sub)
    bound.register(sub)
    features.register(sub)
    model.register(sub)
    log_commands.register(sub)
    return parser


# Top-level modules of the optional dependencies -> the extra of pyproject.toml that
# installs them (bandit_core itself needs numpy only).
EXTRA_OF_MODULE = {
    **dict.fromkeys(
        (
            "fastapi",
            "starlette",
            "uvicorn",
            "pydantic",
            "pydantic_settings",
            "redis",
            "hiredis",
            "sqlalchemy",
            "alembic",
            "psycopg",
            "prometheus_client",
            "yaml",
            "orjson",
        ),
        "server",
    ),
    **dict.fromkeys(("tqdm", "matplotlib"), "offline"),
    "httpx": "client",
}


def missing_extra_message(command: str, exc: ModuleNotFoundError) -> str | None:
    """The one-line hint for a subcommand that needs an extra which is not installed, or
    ``None`` when the missing module is not an optional dependency (a real bug)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return (
        f"bandit {command}: needs the '{extra}' extra (module {top!r} is not installed); "
        f"install it with: pip install 'bandit-service[{extra}]'"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bandit`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except StartupError as exc:  # the service could not start (service/startup.py)
        print(f"bandit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, SettingError) else EXIT_FAILURE
    except ModuleNotFoundError as exc:
        message = missing_extra_message(args.command, exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
