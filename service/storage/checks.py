"""Helpers shared by the two :class:`~service.storage.state_store.StateStore` implementations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bandit_core.errors import InvalidInputError


def checked_writes(
    keys: Sequence[str], writes: Mapping[str, bytes | None]
) -> dict[str, bytes | None]:
    """Validate what a transaction function returned: only keys among ``keys``, values
    bytes (or None to delete)."""
    allowed = set(keys)
    stray = [k for k in writes if k not in allowed]
    if stray:
        raise InvalidInputError(
            f"transaction writes must be among keys {sorted(allowed)}, but got {sorted(stray)}"
        )
    out: dict[str, bytes | None] = {}
    for key, value in writes.items():
        if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidInputError(
                f"transaction value for {key!r} must be bytes or None, but got {type(value).__name__}"
            )
        out[key] = None if value is None else bytes(value)
    return out


def check_ttl(ttl_seconds: float) -> None:
    """Reject a non-positive (or non-finite) event TTL."""
    if not (0 < ttl_seconds < float("inf")):
        raise InvalidInputError(f"ttl_seconds must be a finite number > 0, but got {ttl_seconds!r}")
