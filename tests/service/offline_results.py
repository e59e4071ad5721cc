"""Offline commands' JSON results compared across runs: without the fields that differ
by run (wall and CPU times)."""

from __future__ import annotations

from typing import Any

TIMING = {"seconds", "cpu_seconds", "wall_seconds"}
"""The fields of an offline command's JSON result that differ by run."""


def untimed(value: Any) -> Any:
    """``value`` without its wall and CPU times (the only fields that differ by run)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value
