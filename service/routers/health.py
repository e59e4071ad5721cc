"""``/healthz``, ``/readyz`` and ``/metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from service import metrics
from service.deps import ServiceDep
from service.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is alive."""
    return Health(status="ok")


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(service: ServiceDep) -> JSONResponse:
    """Whether the state store and the event log are reachable (503 if either is not:
    decisions are then degraded or spooled)."""
    report = await service.readiness()
    return JSONResponse(
        status_code=200 if report.status == "ready" else 503, content=report.model_dump()
    )


@router.get("/metrics", response_class=Response)
async def prometheus() -> Response:
    """Prometheus exposition of :mod:`service.metrics`."""
    body, content_type = metrics.render()
    return Response(content=body, media_type=content_type)
