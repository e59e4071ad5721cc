"""Readiness (``/readyz``) and the gauges: dependency probes, the event-log writer's
backlog, and the periodic refresh of every policy's gauges without API calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass, field

from service import metrics
from service.errors import NotFound
from service.schemas import Readiness
from service.settings import Settings
from service.storage.base import EventLog, LogSink, StateStore, StoreUnavailableError
from service.usecases.admin import PolicyAdmin
from service.usecases.periodic import every
from service.usecases.recovery import Recovery


@dataclass
class Monitor:
    """The readiness and gauge use cases; one per process."""

    store: StateStore
    sink: LogSink
    event_log: EventLog
    admin: PolicyAdmin
    settings: Settings
    recovery: Recovery
    _dead_letters_exported: int = field(default=0, init=False, repr=False)

    async def probe_dependencies(self) -> tuple[bool, bool]:
        """Ping the state store and the event log concurrently; ``(store_ok, log_ok)``,
        also published as ``bandit_dependency_up{dependency="redis"|"database"}``."""

        async def reachable(ping: Awaitable[None]) -> bool:
            try:
                await ping
            except StoreUnavailableError:
                return False
            return True

        store_ok, log_ok = await asyncio.gather(
            reachable(self.store.ping()), reachable(asyncio.to_thread(self.event_log.ping))
        )
        if not store_ok:
            metrics.STORE_ERRORS.labels("ping").inc()
        metrics.DEPENDENCY_UP.labels("redis").set(float(store_ok))
        metrics.DEPENDENCY_UP.labels("database").set(float(log_ok))
        return store_ok, log_ok

    async def readiness(self) -> Readiness:
        """Reachability of the state store and the event log, the writer's backlog, and
        the policies missing from the store (not ready while any is being rebuilt)."""
        store_ok, log_ok = await self.probe_dependencies()
        spool, lag = self.sink_backlog()
        missing = self.recovery.missing()
        return Readiness(
            status="ready" if store_ok and log_ok and not missing else "degraded",
            policies_missing=missing,
            state_store="ok" if store_ok else "unavailable",
            event_log="ok" if log_ok else "unavailable",
            spool_depth=spool,
            log_lag_seconds=lag,
        )

    def sink_backlog(self) -> tuple[int, float]:
        """``(spooled records, seconds the oldest unflushed record waited)``, also
        published as gauges, with the dead letters counted since the last call. Cheap
        (in-memory counters): ``/metrics`` calls it at every scrape."""
        spool, lag = int(self.sink.spool_depth), float(self.sink.lag_seconds)
        metrics.SPOOL_DEPTH.set(spool)
        metrics.LOG_LAG.set(lag)
        dead = int(self.sink.dead_letters)
        metrics.DEAD_LETTERS.inc(dead - self._dead_letters_exported)
        self._dead_letters_exported = dead
        return spool, lag

    async def refresh_gauges(self) -> None:
        """Probe the dependencies, then publish the backlog and every policy's gauges as
        :meth:`PolicyAdmin.stats` does, so dashboards and alerts see live values without
        API calls. A store outage is already published by the probe, so the per-policy
        part is skipped then."""
        store_ok, _ = await self.probe_dependencies()
        self.sink_backlog()
        if not store_ok:
            return
        for name in await self.store.list_policies():
            try:
                await self.admin.stats(name)
            except NotFound:
                continue

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh the gauges every ``metrics_refresh_seconds`` until ``stop`` is set."""
        await every(self.settings.metrics_refresh_seconds, stop, self.refresh_gauges, "gauges")
