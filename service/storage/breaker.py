"""A circuit breaker in front of the state store's calls.

A hung store (a SIGSTOPped Redis, a dead network path) costs each call its full socket
timeout. The breaker stops paying it after ``failures`` consecutive calls failed that
way (the caller says which failures count: the Redis store counts timeouts):

- **closed**: calls go through; a call that failed because the store did not answer
  (the caller says which failures count) adds one to the count, any other outcome resets
  it. The ``failures``-th in a row opens the breaker.
- **open**: every call fails at once with :class:`BreakerOpenError` (a
  :class:`~service.storage.base.StoreUnavailableError`, so the service degrades exactly
  as when the store is down) for ``open_seconds``.
- **half_open**: then the next call is let through as the probe while the others keep
  failing fast; its success (any answer of the store) closes the breaker, its failure
  opens it again for another ``open_seconds``. A probe cancelled before it ended leaves
  the breaker half open and the next call probes.

The breaker is per process (each replica and worker learns the store's state by its own
calls). asyncio only: its state changes between awaits, never concurrently. No library
fits: ``purgatory`` (the maintained asyncio one) lets every call through while half open
and reads the wall clock.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import TypeVar

from bandit_core.errors import InvalidInputError
from service.storage.base import StoreUnavailableError

T = TypeVar("T")


class BreakerState(StrEnum):
    """Where a :class:`CircuitBreaker` is (its value is the ``state`` label of the metrics)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerOpenError(StoreUnavailableError):
    """A call refused without trying: the breaker is open (or half open with its probe
    call in flight)."""


class CircuitBreaker:
    """Fail fast after ``failures`` consecutive failed calls, for ``open_seconds``, then
    let one call probe (see the module docstring). ``on_change(state)`` is called at every
    transition (the service counts them in its metrics); ``clock`` is monotonic seconds."""

    def __init__(
        self,
        failures: int,
        open_seconds: float,
        *,
        on_change: Callable[[BreakerState], None] = lambda state: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failures < 1:
            raise InvalidInputError(f"failures must be >= 1, but got {failures}")
        if open_seconds <= 0:
            raise InvalidInputError(f"open_seconds must be > 0, but got {open_seconds}")
        self.failures = failures
        self.open_seconds = open_seconds
        self._on_change = on_change
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probing = False

    @property
    def state(self) -> BreakerState:
        """The state now (open until a call after ``open_seconds`` starts probing)."""
        return self._state

    @property
    def consecutive_failures(self) -> int:
        """Failed calls in a row since the last answer of the store."""
        return self._consecutive

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a probe call through (0 when not open)."""
        if self._state is not BreakerState.OPEN:
            return 0.0
        return max(0.0, self._opened_at + self.open_seconds - self._clock())

    async def call(self, awaitable: Awaitable[T], counts: Callable[[Exception], bool]) -> T:
        """Await ``awaitable`` unless the breaker refuses it (:class:`BreakerOpenError`;
        a refused coroutine is closed, never run). An exception for which ``counts`` is
        true is a failure of the store; any other outcome is an answer."""
        probe = self._admit()
        if probe is None:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise BreakerOpenError(
                f"state store circuit breaker {self._state.value} after "
                f"{self.failures} consecutive failures; next try in {self.retry_in():.1f}s"
            )
        try:
            result = await awaitable
        except Exception as exc:
            self._record(counts(exc), probe)
            raise
        except BaseException:  # cancelled: neither an answer nor a failure of the store
            if probe:
                self._probing = False
            raise
        self._record(False, probe)
        return result

    def _admit(self) -> bool | None:
        """None: refuse the call; True: let it through as the half-open probe; False:
        let it through (closed)."""
        if self._state is BreakerState.CLOSED:
            return False
        if self._state is BreakerState.OPEN:
            if self.retry_in() > 0:
                return None
            self._set(BreakerState.HALF_OPEN)
        if self._probing:
            return None
        self._probing = True
        return True

    def _record(self, failed: bool, probe: bool) -> None:
        if probe:
            self._probing = False
        if not failed:
            self._consecutive = 0
            if self._state is not BreakerState.CLOSED:
                self._set(BreakerState.CLOSED)
            return
        self._consecutive += 1
        if self._state is BreakerState.HALF_OPEN or self._consecutive >= self.failures:
            self._opened_at = self._clock()
            if self._state is not BreakerState.OPEN:
                self._set(BreakerState.OPEN)

    def _set(self, state: BreakerState) -> None:
        self._state = state
        self._on_change(state)
