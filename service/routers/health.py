"""``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service import metrics
from service.deps import MonitorDep
from service.routers.json_route import JsonRoute
from service.schemas import Health, Readiness

router = APIRouter(tags=["health"], route_class=JsonRoute)


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is alive."""
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(monitor: MonitorDep) -> JSONResponse:
    """Whether the state store and the event log are reachable (503 if either is not:
    decisions are then degraded or spooled)."""
    report = await monitor.readiness()
    return JSONResponse(
        status_code=200 if report.status == "ready" else 503, content=report.model_dump()
    )


@router.get("/metrics", response_class=Response)
async def prometheus(monitor: MonitorDep) -> Response:
    """Prometheus exposition of :mod:`service.metrics` (this worker's event-log backlog
    refreshed first; every other gauge by the lifespan's refresh loop), without the
    series of deleted policies."""
    monitor.sink_backlog()
    body, content_type = metrics.render(await monitor.live_policies())
    return Response(content=body, media_type=content_type)
