"""Page 7, a policy's offline evaluations (docs/console.md, "Evaluations"): the list, a
form that creates one over a range of the log (offered from what the log holds), its
progress while it runs, and its result: each candidate's IPS and SNIPS with their 95%
intervals as a chart, the effective sample size, and Apply, which says what applying a
candidate changes. Everything goes through :class:`~service.usecases.Evaluations` (the
native API's ``/policies/{name}/evaluations`` routes) and ``PolicyAdmin``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import TypeAdapter, ValidationError

from bandit_core.evaluation import WindowSums
from service.console.charts import interval_chart
from service.console.forms import range_form, schema_errors, use_case_errors
from service.console.pages import policy_name, signed_in, use_cases_of
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, change_form
from service.errors import ApiError, NotFound
from service.policies import engine_changed, spec_of
from service.schemas import PolicyInfo, PolicySpec
from service.schemas.evaluations import EvaluationId, EvaluationRequest, EvaluationView
from service.storage.evaluations import FINAL
from service.usecases.audit import settings_diff, settings_of
from service.usecases.evaluation_views import native_view
from service.usecases.evaluations import BASELINE, ONLINE, RANDOM, total

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
EVALUATION_ID: TypeAdapter[str] = TypeAdapter(EvaluationId)
CANDIDATE_ROWS = 3  # empty candidate rows offered by the form
REFRESH_SECONDS = 2  # how often the page of a running evaluation reloads itself


def effective_sample_size(sums: WindowSums) -> float:
    """Kish's effective sample size of the importance weights, ``(Σw)² / Σw²``
    (docs/console.md, "Evaluations"): how many logged events the estimate is worth; 0
    when the candidate gives no logged action any weight."""
    return sums.snips_denominator**2 / sums.w2 if sums.w2 > 0 else 0.0


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
    records = await use_cases.evaluations.list_evaluations(name)
    span, values = await range_form(use_cases, name, form, ("start_time", "end_time"))
    return page(
        request,
        session,
        "evaluations.html",
        {
            "info": info,
            "evaluations": [native_view(r) for r in records],
            "span": span,
            "form": values,
            "errors": errors or {},
            "candidate_rows": range(CANDIDATE_ROWS),
        },
        status,
    )


@router.get("/policies/{name}/evaluations", name="console_evaluations")
async def evaluations(request: Request, name: str) -> Response:
    """The policy's evaluations, newest first, and the form that creates one."""
    return await _list_page(request, signed_in(request), name)


def _request_body(form: dict[str, str]) -> dict[str, Any]:
    """The body of ``POST /policies/{name}/evaluations`` the form describes (candidate
    rows left empty are left out)."""
    candidates = []
    for i in range(CANDIDATE_ROWS):
        candidate_name = form.get(f"policies.{i}.name", "").strip()
        arguments = form.get(f"policies.{i}.arguments", "").strip()
        if candidate_name or arguments:
            candidates.append({"name": candidate_name, "arguments": arguments})
    return {
        "name": form.get("name", "").strip(),
        "start_time": form.get("start_time", "").strip(),
        "end_time": form.get("end_time", "").strip(),
        "policies": candidates,
        "offline_experimentation": form.get("offline_experimentation") == "on",
    }


@router.post("/policies/{name}/evaluations", name="console_evaluation_create")
async def create(request: Request, name: str) -> Response:
    """Create an evaluation (``Evaluations.create``, as ``POST
    /policies/{name}/evaluations``): the form is validated by the API's
    ``EvaluationRequest`` and the use case, their errors shown beside the fields."""
    session, form = await change_form(request)
    try:
        body = EvaluationRequest.model_validate(_request_body(form))
    except ValidationError as exc:
        return await _list_page(request, session, name, form, schema_errors(exc), 422)
    try:
        record = await use_cases_of(request).evaluations.create(
            policy_name(name),
            body.name,
            body.start_time,
            body.end_time,
            body.policies,
            body.offline_experimentation,
            None,
            ("start_time", "end_time"),
        )
    except NotFound:
        raise
    except ApiError as exc:
        return await _list_page(request, session, name, form, use_case_errors(exc), exc.status)
    target = f"/console/policies/{quote(name)}/evaluations/{quote(record.evaluation_id)}"
    return RedirectResponse(target, status_code=303)


def _what_applying_changes(info: PolicyInfo, spec: PolicySpec | None) -> dict[str, Any]:
    """The settings applying ``spec`` changes (the policy's own API-family settings,
    ``personalizer``, are kept) and whether the learned model starts again."""
    if spec is None:
        return {"changes": [], "resets": False}
    current = settings_of(info)
    before, after = settings_diff(current, spec.model_dump(mode="json", exclude={"personalizer"}))
    return {
        "changes": [(key, before[key], after[key]) for key in after],
        "resets": engine_changed(spec_of(info), spec),
    }


def _candidate_spec(request: Request, info: PolicyInfo, policy: dict[str, Any]) -> PolicySpec:
    """The spec a learning candidate of a result stands for, read as applying reads it."""
    if policy.get("spec") is not None:
        return PolicySpec.model_validate(policy["spec"])
    learning = use_cases_of(request).evaluations.learning
    return learning.spec_from_arguments(spec_of(info), policy["arguments"])


def _candidates(
    request: Request, info: PolicyInfo, view: EvaluationView, result: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each evaluated candidate's estimates, effective sample size and, for a learning
    setting, what applying it changes."""
    rows = []
    for policy, estimated in zip(result["policies"], view.results or [], strict=True):
        row: dict[str, Any] = {
            "view": estimated,
            "effective_sample_size": effective_sample_size(total(policy["periods"])),
            "applicable": policy["source"] not in (BASELINE, RANDOM),
            "online": policy["source"] == ONLINE,
        }
        if row["applicable"] and not row["online"]:
            try:
                row["applying"] = _what_applying_changes(
                    info, _candidate_spec(request, info, policy)
                )
            except (ApiError, ValidationError, ValueError) as exc:
                row["applying"] = {"error": str(exc)}
        rows.append(row)
    return rows


async def _evaluation_page(
    request: Request,
    session: Session,
    name: str,
    evaluation_id: str,
    error: str | None = None,
    status: int = 200,
) -> Response:
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    try:
        EVALUATION_ID.validate_python(evaluation_id)
    except ValidationError:
        raise NotFound(f"no evaluation {evaluation_id!r}", reason="evaluation") from None
    record = await use_cases.evaluations.get(name, evaluation_id)
    view = native_view(record)
    candidates = [] if record.result is None else _candidates(request, info, view, record.result)
    chart = interval_chart(
        [
            (
                c["view"].name,
                {
                    "IPS": (c["view"].ips.value, c["view"].ips.ci_low, c["view"].ips.ci_high),
                    "SNIPS": (
                        c["view"].snips.value,
                        c["view"].snips.ci_low,
                        c["view"].snips.ci_high,
                    ),
                },
            )
            for c in candidates
        ]
    )
    return page(
        request,
        session,
        "evaluation.html",
        {
            "info": info,
            "evaluation": view,
            "running": record.status not in FINAL,
            "refresh_seconds": REFRESH_SECONDS,
            "candidates": candidates,
            "chart": chart,
            "error": error,
            "applied": request.query_params.get("applied"),
        },
        status,
    )


@router.get("/policies/{name}/evaluations/{evaluation_id}", name="console_evaluation")
async def evaluation(request: Request, name: str, evaluation_id: str) -> Response:
    """One evaluation: its progress while it runs (the page reloads itself), then its
    result."""
    return await _evaluation_page(request, signed_in(request), name, evaluation_id)


@router.post("/policies/{name}/evaluations/{evaluation_id}/apply", name="console_evaluation_apply")
async def apply(request: Request, name: str, evaluation_id: str) -> Response:
    """Make an evaluated learning setting the policy's (``Evaluations.apply``, as ``POST
    /policies/{name}/evaluations/{id}/apply``, with the API family's way of applying)."""
    session, form = await change_form(request)
    chosen = form.get("policy_name", "")
    use_cases = use_cases_of(request)
    await use_cases.evaluations.get(policy_name(name), evaluation_id)  # else the 404 page
    try:
        await use_cases.evaluations.apply(
            name, evaluation_id, chosen, request.app.state.apply_setting
        )
    except ApiError as exc:
        message = f"policy_name: {exc.message}"
        return await _evaluation_page(request, session, name, evaluation_id, message, exc.status)
    target = (
        f"/console/policies/{quote(name)}/evaluations/{quote(evaluation_id)}"
        f"?applied={quote(chosen)}"
    )
    return RedirectResponse(target, status_code=303)
