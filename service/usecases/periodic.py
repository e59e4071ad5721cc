"""The loops behind the background jobs the lifespan starts (sweeper, gauges, snapshots)."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from service.observability import metrics
from service.storage.base import EventLogUnavailableError, StoreUnavailableError

log = logging.getLogger("bandit.service")


async def every(
    seconds: float, stop: asyncio.Event, job: Callable[[], Awaitable[Any]], what: str
) -> None:
    """Run ``job`` every ``seconds`` until ``stop``; a failure is logged and retried."""
    while not stop.is_set():
        await _run_once(job, what, seconds)
        await _sleep(stop, seconds)


async def each_period(
    seconds: float,
    stop: asyncio.Event,
    job: Callable[[int], Awaitable[Any]],
    what: str,
    clock: Callable[[], float] = time.time,
) -> None:
    """Run ``job(period)`` at the start of each period until ``stop``: period ``n`` is
    ``[n * seconds, (n + 1) * seconds)`` of ``clock`` (unix seconds), the same in every
    replica, so replicas that claim the period in the store do its work once between
    them (``PeriodClaims.claim_period``)."""
    while not stop.is_set():
        now = clock()
        period = math.floor(now / seconds)
        await _run_once(functools.partial(job, period), what, seconds)
        await _sleep(stop, (period + 1) * seconds - clock())


def count_unavailable(exc: BaseException, what: str) -> bool:
    """Count ``exc`` in ``bandit_event_log_errors_total`` or ``bandit_store_errors_total``
    (label ``what``) when it is an outage of the event log or the state store; whether it
    was one."""
    if isinstance(exc, EventLogUnavailableError):
        metrics.EVENT_LOG_ERRORS.labels(what).inc()
    elif isinstance(exc, StoreUnavailableError):
        metrics.STORE_ERRORS.labels(what).inc()
    else:
        return False
    return True


async def _run_once(job: Callable[[], Awaitable[Any]], what: str, seconds: float) -> None:
    """``job()``; a failure is logged (the loop retries next round)."""
    try:
        await job()
    except Exception as exc:  # a background loop must survive one bad round
        if count_unavailable(exc, what):
            log.warning("%s: %s", what, exc)
        else:
            log.exception("%s failed; retrying in %.1fs", what, seconds)


async def _sleep(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` (at least a moment) or until ``stop`` is set."""
    try:
        await asyncio.wait_for(stop.wait(), timeout=max(seconds, 0.001))
    except TimeoutError:
        pass
