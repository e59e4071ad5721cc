"""Page 10, the event log (docs/console.md, "Log"): its day partitions with their ranges,
estimated rows and sizes (from the database's catalog, no table scanned), each policy's
logged range and retention, and the deletion of a policy's log behind a confirmation.
Everything goes through :class:`~service.usecases.LogUpkeep` (the routes ``GET
/policies/{name}/logs`` and ``DELETE /policies/{name}/logs``) and ``PolicyAdmin``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from service.console.pages import policy_name, signed_in, use_cases_of
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, change_form
from service.errors import ApiError
from service.storage.partitions import DAY_SECONDS
from service.usecases.log_upkeep import retention_days

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


async def _log_page(
    request: Request,
    session: Session,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    use_cases = use_cases_of(request)
    upkeep = use_cases.log_upkeep
    partitions = await upkeep.partitions()
    tables: dict[str, dict[str, Any]] = {}
    for p in partitions:
        total = tables.setdefault(p.table, {"partitions": 0, "rows": 0.0, "size_bytes": 0})
        total["partitions"] += 1
        total["rows"] += p.rows or 0.0
        total["size_bytes"] += p.size_bytes or 0
    policies = []
    now = use_cases.admin.clock()
    for info in await use_cases.admin.list_policies():
        days = retention_days(info)
        policies.append(
            {
                "info": info,
                "span": await upkeep.properties(info.name),
                "retention_days": days,
                "cutoff": now - days * DAY_SECONDS if days >= 0 else None,
            }
        )
    settings = request.app.state.settings
    return page(
        request,
        session,
        "log.html",
        {
            "partitions": partitions,
            "tables": tables,
            "policies": policies,
            "upkeep_seconds": settings.log_upkeep_interval_seconds,
            "days_ahead": settings.log_partition_days_ahead,
            "errors": errors or {},
            "deleted": request.query_params.get("deleted"),
            "rows": request.query_params.get("rows"),
        },
        status,
    )


@router.get("/log", name="console_log")
async def event_log(request: Request) -> Response:
    """The event log's partitions, each policy's logged range and retention."""
    return await _log_page(request, signed_in(request))


@router.post("/log/delete", name="console_log_delete")
async def delete_log(request: Request) -> Response:
    """Delete every logged decision and reward of one policy (``LogUpkeep.delete_logs``,
    as ``DELETE /policies/{name}/logs``), only when ``confirm`` repeats its name."""
    session, form = await change_form(request)
    name = form.get("policy", "")
    await use_cases_of(request).admin.get_policy(policy_name(name))  # else the 404 page
    if form.get("confirm", "") != name:
        message = f"type the policy's name, {name!r}, to confirm: its whole log is deleted"
        return await _log_page(request, session, {f"confirm:{name}": message}, 422)
    try:
        deleted = await use_cases_of(request).log_upkeep.delete_logs(name)
    except ApiError as exc:
        if exc.status == 404:
            raise
        return await _log_page(request, session, {f"confirm:{name}": exc.message}, exc.status)
    return RedirectResponse(f"/console/log?deleted={quote(name)}&rows={deleted}", status_code=303)
