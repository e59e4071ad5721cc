"""The time a policy with a clock selects and updates at (docs/algorithms.md section
10.1, "Two clocks"): the engine reads no clock, the caller hands it the time.

A policy that forgets by wall-clock time (:mod:`bandit_core.forgetting`, and the shared
models with ``half_life_seconds`` or ``window_seconds``) is :class:`Clocked`: within
:meth:`Clocked.at` its selections and updates run at ``now`` (seconds on any fixed
origin, e.g. Unix time). :func:`clock_at` does the same for any policy, leaving one
without a clock alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from bandit_core.errors import InvalidInputError
from bandit_core.validation import check_real


class Clocked:
    """A policy with a clock: within :meth:`at` its selections and updates run at
    ``now``; outside, ``_now`` is None and each part is read at its own clock."""

    _now: float | None = None

    def uses_wall_clock(self) -> bool:
        """Whether the policy's clock is wall time in seconds (``now``), so that a
        caller must run each selection and update at its own time; by default it is not."""
        return False

    @contextmanager
    def at(self, now: float) -> Iterator[None]:
        """Within the block, every selection (``select``, ``select_batch``,
        ``select_until``) and update that names no ``now`` of its own runs at ``now``."""
        before, self._now = self._now, check_real(now, "now", error=InvalidInputError)
        try:
            yield
        finally:
            self._now = before


@contextmanager
def clock_at(policy: object, now: float) -> Iterator[None]:
    """Within the block, ``policy``'s selections and updates run at ``now`` (seconds)
    when it has a clock (:meth:`Clocked.at`); any other policy is unaffected. How a
    caller that knows the time of each decision and reward (the service) hands it to
    whichever policy it serves."""
    with policy.at(now) if isinstance(policy, Clocked) else nullcontext():
        yield
