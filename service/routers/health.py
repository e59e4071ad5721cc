"""``/healthz`` (liveness), ``/readyz`` (readiness), ``/health/dependencies`` and
``/metrics`` (docs/operations.md, "Probes")."""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import JSONResponse

from service.api.deps import MonitorDep
from service.observability import metrics
from service.routers.json_route import JsonRoute
from service.routers.path_filter import PathFilteredRouter
from service.schemas import Dependencies, Health, Readiness

router = PathFilteredRouter(tags=["health"], route_class=JsonRoute)


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Liveness: the process serves HTTP. Touches no dependency."""
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(monitor: MonitorDep) -> JSONResponse:
    """Readiness: 200 when this process can serve decisions (every check of ``checks``
    ok: the state store answers), else 503. An event-log outage is reported
    (``event_log: degraded``) but is no unreadiness: records spool until it is back.
    Answers within ``BANDIT_PROBE_TIMEOUT_SECONDS`` whatever hangs behind it."""
    report = await monitor.readiness()
    return JSONResponse(
        status_code=200 if report.status == "ready" else 503, content=report.model_dump()
    )


@router.get("/health/dependencies", response_model=Dependencies)
async def dependencies(monitor: MonitorDep) -> Dependencies:
    """Each dependency's status, probe latency and error, the state store's circuit
    breaker, the event log's spool depth and lag; always 200 (readiness is ``/readyz``).
    Answers within ``BANDIT_PROBE_TIMEOUT_SECONDS`` whatever hangs behind it."""
    return await monitor.dependencies()


@router.get("/metrics", response_class=Response)
async def prometheus(monitor: MonitorDep) -> Response:
    """Prometheus exposition of :mod:`service.observability.metrics` (this worker's event-log backlog
    refreshed first; every other gauge by the lifespan's refresh loop), without the
    series of deleted policies."""
    monitor.sink_backlog()
    body, content_type = metrics.render(await monitor.live_policies())
    return Response(content=body, media_type=content_type)
