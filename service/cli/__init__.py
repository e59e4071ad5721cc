"""The ``bandit`` command line: ``serve``, ``rebuild`` and ``openapi`` (service),
``replay``, ``estimate``, ``simulate`` and ``compare`` (offline evaluation), ``bound``
(regret bounds). Exit statuses: :mod:`service.cli.exit_codes`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from service.cli import bound, offline, server
from service.cli.exit_codes import EPILOG


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
    offline.register(sub)
    bound.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bandit`` console script."""
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)
