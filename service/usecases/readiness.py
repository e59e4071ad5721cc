"""Readiness (``/readyz``), the dependency report (``/health/dependencies``) and the
gauges: dependency probes, the event-log writer's backlog, and the periodic refresh of
every policy's gauges without API calls.

Readiness is a set of named checks (:attr:`Monitor.readiness_checks`), each a
:class:`~service.usecases.probes.Probe` that answers within
``probe_timeout_seconds``; the process is ready when every one is ok. The event log is
probed and reported but is no check: its outage is ridden out by the writer's spool.
One more condition is no probe: every policy of the event log is present in the store
(``policies_present``; a policy missing is being rebuilt, :mod:`service.usecases.recovery`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

from service.errors import NotFound
from service.observability import metrics
from service.schemas import Dependencies, DependencyReport, Readiness, ReadinessCheck
from service.settings import Settings
from service.storage.base import EventLog, LogSink, StoreUnavailableError
from service.storage.redis_urls import parse_redis_url
from service.storage.schema import database_url
from service.storage.state_store import PolicyDirectory, StoreConnection
from service.usecases.admin import PolicyAdmin
from service.usecases.periodic import every
from service.usecases.probes import Probe, ProbeResult
from service.usecases.recovery import Recovery

STATE_STORE = "state_store"
EVENT_LOG = "event_log"
POLICIES_PRESENT = "policies_present"


def _store_backend(settings: Settings) -> str:
    """``redis``, ``redis-cluster``, ``redis-sentinel`` or ``in-process``."""
    if settings.redis_url is None:
        return "in-process"
    kind = parse_redis_url(settings.redis_url).kind
    return "redis" if kind == "single" else f"redis-{kind}"


class MonitoredStore(StoreConnection, PolicyDirectory, Protocol):
    """The state store's roles readiness needs: its connection (probe, breaker) and the
    policy list (``service.storage.state_store``)."""


@dataclass
class Monitor:
    """The readiness and gauge use cases; one per process."""

    store: MonitoredStore
    sink: LogSink
    event_log: EventLog
    admin: PolicyAdmin
    settings: Settings
    recovery: Recovery
    _dead_letters_exported: int = field(default=0, init=False, repr=False)
    store_probe: Probe = field(init=False)
    log_probe: Probe = field(init=False)
    readiness_checks: dict[str, Probe] = field(init=False)

    def __post_init__(self) -> None:
        timeout = self.settings.probe_timeout_seconds
        self.store_probe = Probe(self.store.ping, timeout)
        self.log_probe = Probe(lambda: asyncio.to_thread(self.event_log.ping), timeout)
        # the conditions /readyz requires, by name: each a Probe whose check raises when
        # the condition is not met
        self.readiness_checks = {STATE_STORE: self.store_probe}

    async def probe_dependencies(self) -> tuple[ProbeResult, ProbeResult]:
        """Probe the state store and the event log concurrently (each answered within
        ``probe_timeout_seconds``), also published as
        ``bandit_dependency_up{dependency="redis"|"database"}``."""
        store, log = await asyncio.gather(self.store_probe.run(), self.log_probe.run())
        self._publish(store, log)
        return store, log

    def _publish(self, store: ProbeResult, log: ProbeResult) -> None:
        if not store.ok:
            metrics.STORE_ERRORS.labels("ping").inc()
        if not log.ok:
            metrics.EVENT_LOG_ERRORS.labels("ping").inc()
        metrics.DEPENDENCY_UP.labels("redis").set(float(store.ok))
        metrics.DEPENDENCY_UP.labels("database").set(float(log.ok))

    async def readiness(self) -> Readiness:
        """Every readiness check and the event log probed concurrently, the writer's
        backlog, and the policies missing from the store: ready when every check is ok
        and no policy is missing (being rebuilt), whatever the event log's state."""
        probes = {**self.readiness_checks, EVENT_LOG: self.log_probe}
        results = dict(zip(probes, await asyncio.gather(*(p.run() for p in probes.values()))))
        log = results.pop(EVENT_LOG)
        self._publish(results[STATE_STORE], log)
        spool, lag = self.sink_backlog()
        missing = self.recovery.missing()
        checks = {
            name: ReadinessCheck(ok=r.ok, seconds=r.seconds, error=r.error)
            for name, r in results.items()
        }
        checks[POLICIES_PRESENT] = ReadinessCheck(
            ok=not missing,
            seconds=0.0,
            error=f"being rebuilt from the event log: {', '.join(missing)}" if missing else None,
        )
        return Readiness(
            status="ready" if all(c.ok for c in checks.values()) else "not_ready",
            checks=checks,
            policies_missing=missing,
            state_store="ok" if results[STATE_STORE].ok else "unavailable",
            event_log="ok" if log.ok else "degraded",
            spool_depth=spool,
            log_lag_seconds=lag,
        )

    async def dependencies(self) -> Dependencies:
        """Each dependency's probe (status, latency, error), the store's circuit breaker
        and the event log's spool and lag."""
        store, log = await self.probe_dependencies()
        spool, lag = self.sink_backlog()
        breaker = self.store.breaker
        return Dependencies(
            dependencies=[
                DependencyReport(
                    name=STATE_STORE,
                    backend=_store_backend(self.settings),
                    required=True,
                    status="ok" if store.ok else "unavailable",
                    latency_seconds=store.seconds,
                    error=store.error,
                    breaker=None if breaker is None else breaker.state.value,
                ),
                DependencyReport(
                    name=EVENT_LOG,
                    backend=database_url(self.settings.log_url).get_backend_name(),
                    required=False,
                    status="ok" if log.ok else "unavailable",
                    latency_seconds=log.seconds,
                    error=log.error,
                    spool_depth=spool,
                    log_lag_seconds=lag,
                ),
            ]
        )

    async def close(self) -> None:
        """Cancel the probes still running (at shutdown)."""
        for probe in {self.store_probe, self.log_probe, *self.readiness_checks.values()}:
            await probe.close()

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

    async def live_policies(self) -> set[str] | None:
        """The policies in the store (``/metrics`` shows no other policy's series), or
        None when the store cannot be read."""
        try:
            return set(await self.store.list_policies())
        except StoreUnavailableError:
            return None

    async def refresh_gauges(self) -> None:
        """Probe the dependencies, then publish the backlog and every policy's gauges as
        :meth:`PolicyAdmin.stats` does, so dashboards and alerts see live values without
        API calls. A store outage is already published by the probe, so the per-policy
        part is skipped then."""
        store, _ = await self.probe_dependencies()
        self.sink_backlog()
        if not store.ok:
            return
        for name in await self.store.list_policies():
            try:
                # the gauges of the last folded model: a refresh is no reason to fold
                await self.admin.stats(name, fold_pending=False)
            except NotFound:
                continue

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh the gauges every ``metrics_refresh_seconds`` until ``stop`` is set."""
        await every(self.settings.metrics_refresh_seconds, stop, self.refresh_gauges, "gauges")
