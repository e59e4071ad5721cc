"""Personalizer's log routes of one loop family: ``DELETE logs`` and ``GET logs/properties``
(docs/personalizer.md, "Logs"), over :class:`~service.usecases.log_upkeep.LogUpkeep`."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Depends, Response

from service.api.deps import LogUpkeepDep
from service.personalizer.routers.routes import personalizer_router
from service.personalizer.schemas import (
    PersonalizerDateRange,
    PersonalizerErrorResponse,
    PersonalizerLogsProperties,
)

LOG_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": PersonalizerErrorResponse, "description": "missing or invalid key"},
    404: {"model": PersonalizerErrorResponse, "description": "unknown loop"},
    503: {"model": PersonalizerErrorResponse, "description": "event log unavailable"},
}


def make_logs_router(prefix: str, loop_of: Callable[..., Coroutine[Any, Any, str]]) -> APIRouter:
    """The log routes under ``prefix`` (arguments as :func:`routes.make_router`'s)."""
    router = personalizer_router(prefix, LOG_ERRORS)
    Loop = Depends(loop_of)

    @router.delete("/logs", status_code=204)
    async def delete_logs(upkeep: LogUpkeepDep, loop: str = Loop) -> Response:
        """Delete every logged decision and reward of the loop (its model is kept)."""
        await upkeep.delete_logs(loop)
        return Response(status_code=204)

    @router.get("/logs/properties", response_model=PersonalizerLogsProperties)
    async def get_logs_properties(
        upkeep: LogUpkeepDep, loop: str = Loop
    ) -> PersonalizerLogsProperties:
        """The date range of the loop's log: its first and last decision (null when empty)."""
        span = await upkeep.properties(loop)
        return PersonalizerLogsProperties(
            date_range=PersonalizerDateRange(start=span.first, to=span.last)
        )

    return router
