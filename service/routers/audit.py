"""The audit trail (API key required): ``GET /audit`` and ``GET /policies/{name}/history``
(docs/operations.md, "Audit trail")."""

from __future__ import annotations

from fastapi import APIRouter, Query

from service.deps import ApiKey, AuditDep
from service.routers.json_route import JsonRoute
from service.routers.policies import Name
from service.schemas import AuditHistory, ErrorDetail

router = APIRouter(tags=["audit"], dependencies=[ApiKey], route_class=JsonRoute)
_errors = {
    401: {"model": ErrorDetail, "description": "missing or invalid API key"},
    422: {"model": ErrorDetail, "description": "a bad query parameter, named"},
    503: {"model": ErrorDetail, "description": "event log unavailable"},
}
Since = Query(None, ge=0, description="only records made at or after this time (unix seconds)")
After = Query(None, max_length=200, description="the 'next' of the previous page")
Limit = Query(100, ge=1, le=1000, description="most records in the page")


@router.get("/audit", response_model=AuditHistory, responses=_errors)
async def audit(
    trail: AuditDep,
    policy: str | None = Query(None, max_length=128, description="only this policy's records"),
    since: float | None = Since,
    after: str | None = After,
    limit: int = Limit,
) -> AuditHistory:
    """Changes to policies, their models and their logs, oldest first: who made each
    (a hash of the API key, never the key), what, when, the settings before and after."""
    return await trail.history(policy, since, after, limit)


@router.get("/policies/{name}/history", response_model=AuditHistory, responses=_errors)
async def policy_history(
    trail: AuditDep,
    name: str = Name,
    since: float | None = Since,
    after: str | None = After,
    limit: int = Limit,
) -> AuditHistory:
    """The policy's audit trail, oldest first (also after the policy was deleted)."""
    return await trail.history(name, since, after, limit)
