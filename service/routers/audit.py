"""The audit trail (API key required): ``GET /audit`` and ``GET /policies/{name}/history``
(docs/operations.md, "Audit trail")."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from pydantic import BaseModel, ConfigDict, Field

from service.api.deps import ApiKey, AuditDep
from service.routers.json_route import JsonRoute
from service.routers.path_filter import PathFilteredRouter
from service.routers.policies import Name
from service.schemas import AuditHistory, ErrorDetail

router = PathFilteredRouter(tags=["audit"], dependencies=[ApiKey], route_class=JsonRoute)
_errors: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "missing or invalid API key"},
    422: {"model": ErrorDetail, "description": "a bad query parameter, named"},
    503: {"model": ErrorDetail, "description": "event log unavailable"},
}


class HistoryQuery(BaseModel):
    """The page of a history; a query parameter it does not name is a 422."""

    model_config = ConfigDict(extra="forbid")

    since: float | None = Field(
        None, ge=0, description="only records made at or after this time (unix seconds)"
    )
    after: str | None = Field(None, max_length=200, description="the 'next' of the previous page")
    limit: int = Field(100, ge=1, le=1000, description="most records in the page")


class AuditQuery(HistoryQuery):
    """A page of the whole audit trail, optionally of one policy."""

    policy: str | None = Field(None, max_length=128, description="only this policy's records")


@router.get("/audit", response_model=AuditHistory, responses=_errors)
async def audit(trail: AuditDep, query: Annotated[AuditQuery, Query()]) -> AuditHistory:
    """Changes to policies, their models and their logs, oldest first: who made each
    (a hash of the API key, never the key), what, when, the settings before and after."""
    return await trail.history(query.policy, query.since, query.after, query.limit)


@router.get("/policies/{name}/history", response_model=AuditHistory, responses=_errors)
async def policy_history(
    trail: AuditDep, query: Annotated[HistoryQuery, Query()], name: str = Name
) -> AuditHistory:
    """The policy's audit trail, oldest first (also after the policy was deleted)."""
    return await trail.history(name, query.since, query.after, query.limit)
