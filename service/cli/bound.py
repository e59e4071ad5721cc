"""Subcommands of the bandit CLI (filled in by the owning issue)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this module's subcommands to ``subparsers``."""
