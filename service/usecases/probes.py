"""A probe of one dependency that answers within a bound whatever hangs behind it.

``/readyz``, ``/health/dependencies`` and the gauge refresh ask the same
:class:`Probe` objects (``usecases/readiness.py``). A probe runs its check as a task of
its own: a call starts the check unless one is running already, and waits for it at most
``timeout`` seconds after that check started. A check that answered in time gives its
result; one still running past ``timeout`` gives a failure ("no answer within ...") at
once, and nobody waits on it or starts another: a hung dependency holds one check (one
thread, for a synchronous client), never a queue of them. Once it ends, the next call
checks again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeResult:
    """One answer of a :class:`Probe`: ``ok``, the ``seconds`` the check took (or has
    been running without an answer), the ``error`` when not ok."""

    ok: bool
    seconds: float
    error: str | None = None


class Probe:
    """``check()`` (which raises when the dependency is not usable), answered within
    ``timeout`` seconds (see the module docstring)."""

    def __init__(
        self,
        check: Callable[[], Awaitable[object]],
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._check = check
        self._timeout = timeout
        self._clock = clock
        self._task: asyncio.Task[ProbeResult] | None = None
        self._started = 0.0

    async def run(self) -> ProbeResult:
        """The running check's result if it answers within ``timeout`` of its start
        (a new check is started when none runs), else a failure at once."""
        if self._task is None or self._task.done():
            self._started = self._clock()
            self._task = asyncio.create_task(self._timed())
        remaining = self._started + self._timeout - self._clock()
        if remaining > 0:
            await asyncio.wait({self._task}, timeout=remaining)  # never cancels the check
        if self._task.done():
            return self._task.result()
        running = self._clock() - self._started
        return ProbeResult(
            False, running, f"no answer within {self._timeout:g}s (checking for {running:.1f}s)"
        )

    async def _timed(self) -> ProbeResult:
        start = self._clock()
        try:
            await self._check()
        except Exception as exc:  # noqa: BLE001 -- any failure is the probe's answer
            return ProbeResult(False, self._clock() - start, f"{type(exc).__name__}: {exc}")
        return ProbeResult(True, self._clock() - start)

    async def close(self) -> None:
        """Cancel a check still running (at shutdown)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
