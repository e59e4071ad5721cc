"""Page 9, a policy's model (docs/console.md, "Model"): its properties, the model file's
export (a download) and import (an upload), a reset behind a confirmation, and the
whole-policy snapshot's export and import. Everything goes through
:class:`~service.usecases.Models` and :class:`~service.usecases.Snapshots`, as the
native API's ``/policies/{name}/model`` and ``/policies/{name}/snapshot`` routes."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import ValidationError

from service.console.forms import schema_errors
from service.console.pages import policy_name, signed_in, use_cases_of
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, change_form, change_upload
from service.errors import ApiError
from service.routers.policies import MODEL_MEDIA_TYPE
from service.schemas import Snapshot

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
FLASHES = {
    "imported": "Imported the model file: the policy serves it now.",
    "reset": "Reset: the model starts again from its prior.",
    "restored": "Imported the snapshot: the policy serves its state now.",
}


async def _model_page(
    request: Request,
    session: Session,
    name: str,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    times = await use_cases.models.model_times(name)
    stats = await use_cases.admin.stats(name)
    settings = request.app.state.settings
    done = request.query_params.get("done", "")
    return page(
        request,
        session,
        "model.html",
        {
            "info": info,
            "times": times,
            "stats": stats,
            "snapshot_interval_seconds": settings.snapshot_interval_seconds,
            "snapshot_keep": settings.snapshot_keep,
            "errors": errors or {},
            "flash": FLASHES.get(done),
            "done": done,
        },
        status,
    )


@router.get("/policies/{name}/model", name="console_model")
async def model(request: Request, name: str) -> Response:
    """The model's properties and the forms that export, import and reset it."""
    return await _model_page(request, signed_in(request), name)


def _download(body: bytes | str, media_type: str, filename: str) -> Response:
    return Response(
        body,
        media_type=media_type,
        headers={"Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}"},
    )


@router.get("/policies/{name}/model/file", name="console_model_export")
async def export_model(request: Request, name: str) -> Response:
    """The model file (``Models.export_model``, as ``GET /policies/{name}/model``)."""
    signed_in(request)
    data = await use_cases_of(request).models.export_model(policy_name(name))
    return _download(data, MODEL_MEDIA_TYPE, f"{name}.model")


@router.get("/policies/{name}/model/snapshot", name="console_snapshot_export")
async def export_snapshot(request: Request, name: str) -> Response:
    """The whole-policy snapshot as JSON (``Snapshots.export_snapshot``, as ``GET
    /policies/{name}/snapshot``)."""
    signed_in(request)
    snapshot = await use_cases_of(request).snapshots.export_snapshot(policy_name(name))
    return _download(snapshot.model_dump_json(), "application/json", f"{name}.snapshot.json")


def _done(name: str, what: str) -> Response:
    return RedirectResponse(f"/console/policies/{quote(name)}/model?done={what}", status_code=303)


async def _failed(
    request: Request, session: Session, name: str, field: str, exc: ApiError
) -> Response:
    """The page again with the use case's error beside ``field`` (a missing policy: the
    404 page)."""
    if exc.status == 404:
        raise exc
    return await _model_page(request, session, name, {field: exc.message}, exc.status)


@router.post("/policies/{name}/model/import", name="console_model_import")
async def import_model(request: Request, name: str) -> Response:
    """Replace the model with an uploaded model file (``Models.import_model``, as ``PUT
    /policies/{name}/model``); a file whose settings differ is refused unless
    ``replace_settings`` is ticked."""
    session, fields, files = await change_upload(request)
    data = files.get("model_file", b"")
    if not data:
        errors = {"model_file": "choose a model file exported from this page or the API"}
        return await _model_page(request, session, name, errors, 422)
    try:
        await use_cases_of(request).models.import_model(
            policy_name(name), data, fields.get("replace_settings") == "on"
        )
    except ApiError as exc:
        return await _failed(request, session, name, "model_file", exc)
    return _done(name, "imported")


@router.post("/policies/{name}/model/snapshot", name="console_snapshot_import")
async def import_snapshot(request: Request, name: str) -> Response:
    """Replace the learned state with an uploaded snapshot (``Snapshots.import_snapshot``,
    as ``PUT /policies/{name}/snapshot``): the file is what the export gives, the API's
    ``Snapshot``."""
    session, _, files = await change_upload(request)
    try:
        body = Snapshot.model_validate_json(files.get("snapshot_file", b"") or b"{}")
    except ValidationError as exc:
        message = "; ".join(f"{k or 'file'}: {v}" for k, v in schema_errors(exc).items())
        return await _model_page(request, session, name, {"snapshot_file": message}, 422)
    try:
        await use_cases_of(request).snapshots.import_snapshot(policy_name(name), body.data)
    except ApiError as exc:
        return await _failed(request, session, name, "snapshot_file", exc)
    return _done(name, "restored")


@router.post("/policies/{name}/model/reset", name="console_model_reset")
async def reset_model(request: Request, name: str) -> Response:
    """A fresh model of the same settings (``Models.reset_model``, as ``DELETE
    /policies/{name}/model``), only with the confirmation ticked."""
    session, form = await change_form(request)
    if form.get("confirm") != "on":
        errors = {"confirm": "tick the confirmation: a reset deletes everything the model learned"}
        return await _model_page(request, session, name, errors, 422)
    try:
        await use_cases_of(request).models.reset_model(policy_name(name))
    except ApiError as exc:
        return await _failed(request, session, name, "confirm", exc)
    return _done(name, "reset")
