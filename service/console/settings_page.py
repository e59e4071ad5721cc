"""Page 5, a policy's settings (docs/console.md, "Settings"): the settings as the JSON
``PUT /policies/{name}`` takes, a preview of a change (the fields it changes, and a
warning when it resets the learned state) before it is saved, and the versions of the
audit trail (``GET /policies/{name}/history``), each of which can be rolled back to
through the same preview."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import ValidationError

from service.console.pages import policy_name, signed_in, use_cases_of
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, change_form
from service.errors import ApiError
from service.policies import engine_changed, spec_of
from service.schemas import AuditEntry, PolicyInfo, PolicySpec
from service.usecases.audit import AuditTrail, settings_diff, settings_of, settings_versions

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
HISTORY_PAGE = 1000


async def _history(trail: AuditTrail, name: str) -> list[AuditEntry]:
    """Every audit record of ``name``, oldest first."""
    records: list[AuditEntry] = []
    after = None
    while True:
        history = await trail.history(name, None, after, HISTORY_PAGE)
        records.extend(history.records)
        if history.next is None:
            return records
        after = history.next


async def _settings_page(
    request: Request,
    session: Session,
    name: str,
    *,
    text: str | None = None,
    error: str | None = None,
    preview: dict[str, Any] | None = None,
    status: int = 200,
) -> Response:
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    records = await _history(use_cases.audit, name)
    versions = settings_versions(records)
    return page(
        request,
        session,
        "settings.html",
        {
            "info": info,
            "text": text if text is not None else json.dumps(settings_of(info), indent=2),
            "error": error,
            "preview": preview,
            "records": list(reversed(records)),
            "versions": versions,
            "saved": request.query_params.get("saved"),
        },
        status,
    )


def _parse(text: str) -> tuple[PolicySpec | None, str | None]:
    """The settings ``text`` as the API's ``PolicySpec``, or the error naming the field."""
    try:
        return PolicySpec.model_validate(json.loads(text)), None
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc}"
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or "settings"
        return None, f"{where}: {error['msg']}"


def _preview(info: PolicyInfo, spec: PolicySpec) -> dict[str, Any]:
    before, after = settings_diff(settings_of(info), spec.model_dump(mode="json"))
    return {
        "changes": [(key, before[key], after[key]) for key in after],
        "resets": engine_changed(spec_of(info), spec),
        "text": json.dumps(spec.model_dump(mode="json"), indent=2),
    }


@router.get("/policies/{name}/settings", name="console_settings")
async def settings(request: Request, name: str) -> Response:
    """The settings in force, the edit form and the version history."""
    return await _settings_page(request, signed_in(request), name)


async def _previewed(request: Request, session: Session, name: str, text: str) -> Response:
    """The page with the preview of saving ``text``, or with its error (422)."""
    spec, error = _parse(text)
    if spec is None:
        return await _settings_page(request, session, name, text=text, error=error, status=422)
    info = await use_cases_of(request).admin.get_policy(policy_name(name))
    return await _settings_page(request, session, name, text=text, preview=_preview(info, spec))


@router.post("/policies/{name}/settings/preview", name="console_settings_preview")
async def preview(request: Request, name: str) -> Response:
    """What saving the edited settings would change; nothing is saved."""
    session, form = await change_form(request)
    return await _previewed(request, session, name, form.get("settings", ""))


@router.post("/policies/{name}/settings/rollback", name="console_settings_rollback")
async def rollback(request: Request, name: str) -> Response:
    """The preview of going back to the settings of one version of the history."""
    session, form = await change_form(request)
    history = await _history(use_cases_of(request).audit, policy_name(name))
    version = settings_versions(history).get(form.get("version", ""))
    if version is None:
        missing = "version: not a version of this policy's settings history"
        return await _settings_page(request, session, name, error=missing, status=422)
    return await _previewed(request, session, name, json.dumps(version, indent=2))


@router.post("/policies/{name}/settings", name="console_settings_save")
async def save(request: Request, name: str) -> Response:
    """Save the settings (``PolicyAdmin.put_policy``, as ``PUT /policies/{name}``)."""
    session, form = await change_form(request)
    text = form.get("settings", "")
    spec, error = _parse(text)
    if spec is None:
        return await _settings_page(request, session, name, text=text, error=error, status=422)
    try:
        await use_cases_of(request).admin.put_policy(policy_name(name), spec)
    except ApiError as exc:
        if exc.status == 404:
            raise
        where = ".".join(str(part) for part in exc.loc or []) or "settings"
        message = f"{where}: {exc.message}"
        return await _settings_page(
            request, session, name, text=text, error=message, status=exc.status
        )
    return RedirectResponse(f"/console/policies/{quote(name)}/settings?saved=1", status_code=303)
