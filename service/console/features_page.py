"""Page 8, a policy's feature importances (docs/console.md, "Features"): the
feature-importance jobs over a range of the log (offered from what it holds), a job's
progress while it runs, and its result as bars ranked by score, each feature whose
cardinality suggests an id or a timestamp flagged. Jobs go through
:class:`~service.usecases.FeatureImportances` (the native API's
``/policies/{name}/feature-importances`` routes), the flags through
:class:`~service.usecases.FeatureCardinalities`."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import TypeAdapter, ValidationError

from service.console.charts import bar_chart
from service.console.forms import range_form, schema_errors, use_case_errors
from service.console.pages import policy_name, signed_in, use_cases_of
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, change_form
from service.errors import ApiError, NotFound
from service.schemas import FeatureImportanceRequest
from service.schemas.evaluations import RequestTime
from service.usecases.feature_cardinality import ID_SHARE, MIN_DESCRIBED
from service.usecases.importance_jobs import RUNNING

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
REQUEST_TIME: TypeAdapter[datetime] = TypeAdapter(RequestTime)
REFRESH_SECONDS = 2


def aware(when: datetime) -> datetime:
    """A form's time without an offset is UTC (as the evaluations read theirs)."""
    return when if when.tzinfo else when.replace(tzinfo=UTC)


async def _list_page(
    request: Request,
    session: Session,
    name: str,
    form: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status: int = 200,
) -> Response:
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    jobs = await use_cases.feature_importances.list_jobs(name, None, 0)
    span, values = await range_form(use_cases, name, form, ("since", "until"))
    return page(
        request,
        session,
        "features.html",
        {
            "info": info,
            "jobs": jobs,
            "span": span,
            "form": values,
            "errors": errors or {},
        },
        status,
    )


@router.get("/policies/{name}/features", name="console_features")
async def features(request: Request, name: str) -> Response:
    """The policy's feature-importance jobs, newest first, and the form that starts one."""
    return await _list_page(request, signed_in(request), name)


def _request(form: dict[str, str]) -> tuple[FeatureImportanceRequest | None, dict[str, str]]:
    """The API's ``FeatureImportanceRequest`` of the form (its times in ISO 8601, as the
    evaluations' are), or the errors by field."""
    errors: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for field in ("since", "until"):
        try:
            when = REQUEST_TIME.validate_python(form.get(field, "").strip())
        except ValidationError as exc:
            errors[field] = exc.errors()[0]["msg"]
            continue
        seconds[field] = aware(when).timestamp()
    if errors:
        return None, errors
    try:
        body = {"name": form.get("name", "").strip(), **seconds}
        return FeatureImportanceRequest.model_validate(body), {}
    except ValidationError as exc:
        return None, schema_errors(exc)


@router.post("/policies/{name}/features", name="console_features_create")
async def create(request: Request, name: str) -> Response:
    """Start a feature-importance job (``FeatureImportances.create``, as ``PUT
    /policies/{name}/feature-importances/{id}`` with a new id)."""
    session, form = await change_form(request)
    body, errors = _request(form)
    if body is None:
        return await _list_page(request, session, name, form, errors, 422)
    job_id = uuid.uuid4().hex
    try:
        await use_cases_of(request).feature_importances.create(
            policy_name(name), job_id, body.name, body.since, body.until, ("since", "until")
        )
    except NotFound:
        raise
    except ApiError as exc:
        return await _list_page(request, session, name, form, use_case_errors(exc), exc.status)
    return RedirectResponse(f"/console/policies/{quote(name)}/features/{job_id}", status_code=303)


@router.get("/policies/{name}/features/{job_id}", name="console_feature_job")
async def job(request: Request, name: str, job_id: str) -> Response:
    """One job: Running (the page reloads itself), then its features as ranked bars, the
    ones whose cardinality suggests an id or a timestamp flagged."""
    session = signed_in(request)
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    found = await use_cases.feature_importances.get(name, job_id)
    counted = {}
    if found.feature_scores:
        counted = await use_cases.feature_cardinalities.over(name, found.start_time, found.end_time)
    ranked = []
    for score in sorted(found.feature_scores, key=lambda s: -s.score):
        cardinality = counted.get((score.namespace, score.name))
        label = f"{score.namespace}.{score.name}" if score.namespace else score.name
        ranked.append((label, score, cardinality))
    chart = bar_chart([(label, s.score, bool(c and c.looks_like_id)) for label, s, c in ranked])
    return page(
        request,
        session,
        "feature_job.html",
        {
            "info": info,
            "job": found,
            "running": found.status == RUNNING,
            "refresh_seconds": REFRESH_SECONDS,
            "ranked": ranked,
            "chart": chart,
            "min_described": MIN_DESCRIBED,
            "id_share": ID_SHARE,
        },
    )
