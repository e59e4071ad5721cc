"""The loop behind the background jobs the lifespan starts (sweeper, gauges, snapshots)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from service import metrics
from service.storage.base import StoreUnavailableError

log = logging.getLogger("bandit.service")


async def every(
    seconds: float, stop: asyncio.Event, job: Callable[[], Awaitable[Any]], what: str
) -> None:
    """Run ``job`` every ``seconds`` until ``stop``; a failure is logged and retried."""
    while not stop.is_set():
        try:
            await job()
        except StoreUnavailableError as exc:
            metrics.STORE_ERRORS.labels(what).inc()
            log.warning("%s: state store unavailable: %s", what, exc)
        except Exception:  # a background loop must survive one bad round
            log.exception("%s failed; retrying in %.1fs", what, seconds)
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except TimeoutError:
            pass
