"""The console's pages (docs/console.md, "Pages"): each a GET at a stable URL over the
use cases the API calls, and the forms that change something, each a POST checked for
its CSRF token and the session's role before it runs."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse
from pydantic import TypeAdapter, ValidationError

from service.console.charts import latency_chart, reward_chart, share_chart
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, SignInRequired, change_form, current_session
from service.errors import ApiError, NotFound
from service.schemas import ArmsChange
from service.schemas.common import PolicyName
from service.usecases import UseCases

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

HOME_WINDOW_SECONDS = 3600.0
HOME_BUCKETS = 12  # 5-minute buckets: the last two give the per-minute rates
ARMS_WINDOW_SECONDS = 86_400.0
ARMS_BUCKETS = 24
# each window's length and buckets: whole minutes (the event log's rollups answer for
# those), of 15 minutes and 2 hours for the 24-hour and 7-day views (their rollups)
WINDOWS = {
    "1h": (3600.0, 60),
    "6h": (6 * 3600.0, 72),
    "24h": (86_400.0, 96),
    "7d": (7 * 86_400.0, 84),
}
Window = Literal["1h", "6h", "24h", "7d"]
POLICY_NAME: TypeAdapter[str] = TypeAdapter(PolicyName)


def use_cases_of(request: Request) -> UseCases:
    use_cases: UseCases = request.app.state.use_cases
    return use_cases


def signed_in(request: Request) -> Session:
    session = current_session(request)
    if not session.signed_in:
        raise SignInRequired
    return session


def policy_name(name: str) -> str:
    """404 for a name no policy can have (the API's pattern), before any store read."""
    try:
        POLICY_NAME.validate_python(name)
    except ValidationError:
        raise NotFound(f"no policy {name!r}", reason="policy") from None
    return name


@router.get("/", name="console_home")
async def home(request: Request) -> Response:
    """Page 1: every policy with its algorithm, decisions and rewards per minute (the
    last 5 to 10 minutes), its mean reward over the last hour, and the stores' health."""
    session = signed_in(request)
    use_cases = use_cases_of(request)
    rows = []
    for info in await use_cases.admin.list_policies():
        activity = await use_cases.activity.policy_activity(
            info.name, HOME_WINDOW_SECONDS, HOME_BUCKETS
        )
        decisions_per_minute, rewards_per_minute = activity.recent_rates()
        rows.append(
            {
                "info": info,
                "activity": activity,
                "decisions_per_minute": decisions_per_minute,
                "rewards_per_minute": rewards_per_minute,
            }
        )
    dependencies = await use_cases.monitor.dependencies()
    return page(
        request,
        session,
        "home.html",
        {"rows": rows, "dependencies": dependencies.dependencies},
    )


@router.get("/policies/{name}", name="console_policy")
async def policy(
    request: Request, name: str, window: Annotated[Window, Query()] = "1h"
) -> Response:
    """Page 2: the reward over time with 95% intervals beside the baseline's and uniform
    random's IPS estimates, and the drift detections, each arm's share of the decisions
    over ``window``, the exploration share, the counters, a folded model's staleness
    and the settings."""
    session = signed_in(request)
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    # as GET /policies/{name}/model/properties reports it; read before the counters,
    # which fold nothing (viewing the page leaves the rewards pending for their fold)
    times = None
    if info.model_update_interval is not None:
        times = await use_cases.models.model_times(name)
    stats = await use_cases.admin.stats(name, fold_pending=False)
    activity = await use_cases.activity.policy_activity(name, *WINDOWS[window])
    drift_at = await use_cases.activity.drift_detections(name, activity.since, activity.until)
    return page(
        request,
        session,
        "policy.html",
        {
            "info": info,
            "stats": stats,
            "times": times,
            "activity": activity,
            "window": window,
            "windows": list(WINDOWS),
            "reward_chart": reward_chart(activity, drift_at),
            "share_chart": share_chart(activity),
            "latency_chart": latency_chart(activity),
            "settings": info.model_dump(mode="json", exclude={"name", "declared"}),
        },
    )


async def _arms_page(
    request: Request,
    session: Session,
    name: str,
    errors: dict[str, str] | None = None,
    status: int = 200,
    value: str = "",
) -> Response:
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    stats = await use_cases.admin.stats(name)
    activity = await use_cases.activity.policy_activity(name, ARMS_WINDOW_SECONDS, ARMS_BUCKETS)
    registered = set(info.arms or [])
    arms: list[dict[str, Any]] = []
    for arm in sorted(registered | set(stats.arms) | set(activity.arm_decisions)):
        chosen = activity.arm_decisions.get(arm, {})
        arms.append(
            {
                "id": arm,
                "stats": stats.arms.get(arm),
                "logged": activity.arm_rewards.get(arm),
                "chosen": sum(chosen.values()),
                "last_chosen": min(max(chosen) + activity.bucket_seconds, activity.now)
                if chosen
                else None,
                "registered": arm in registered,
                "learned": arm in stats.arms,
            }
        )
    return page(
        request,
        session,
        "arms.html",
        {
            "info": info,
            "arms": arms,
            "activity": activity,
            "errors": errors or {},
            "value": value,
            "retired": request.query_params.get("retired"),
        },
        status,
    )


@router.get("/policies/{name}/arms", name="console_arms")
async def arms(request: Request, name: str) -> Response:
    """Page 4: each arm's pulls, the mean reward the log holds for it over the last 24
    hours with its 95% interval, when it was last chosen, and the retire form."""
    return await _arms_page(request, signed_in(request), name)


@router.post("/policies/{name}/arms/retire", name="console_retire")
async def retire(request: Request, name: str) -> Response:
    """Retire one arm (``PolicyAdmin.change_arms``, as ``POST
    /policies/{name}/arms/retire``); the form's value is validated by the API's
    ``ArmsChange`` and its error shown beside the field, nothing changed."""
    session, form = await change_form(request)
    arm = form.get("arm", "")
    try:
        change = ArmsChange.model_validate({"arms": [arm]})
    except ValidationError as exc:
        message = exc.errors()[0]["msg"]
        return await _arms_page(request, session, name, {"arm": message}, 422, arm)
    try:
        await use_cases_of(request).admin.change_arms(policy_name(name), retire=change.arms)
    except NotFound as exc:
        if exc.reason == "policy":
            raise
        return await _arms_page(request, session, name, {"arm": exc.message}, 404, arm)
    except ApiError as exc:
        return await _arms_page(request, session, name, {"arm": exc.message}, exc.status, arm)
    target = f"/console/policies/{quote(name)}/arms?retired={quote(arm)}"
    return RedirectResponse(target, status_code=303)


@router.get("/events", name="console_event_search")
async def event_search(
    request: Request, event_id: Annotated[str, Query(max_length=256)] = ""
) -> Response:
    """The search box: to the event's page, or back to the home page when empty."""
    signed_in(request)
    event_id = event_id.strip()
    target = f"/console/events/{quote(event_id, safe='')}" if event_id else "/console/"
    return RedirectResponse(target, status_code=303)


@router.get("/events/{event_id:path}", name="console_event")
async def event(request: Request, event_id: str) -> Response:
    """Page 3: one logged decision: context and candidates as sent, the scores in the
    decision's ranking (the served arm's first), the propensity and the chosen arm, the
    guardrail's verdict, the rewards, and each feature's part in the chosen arm's score
    for a linear policy."""
    session = signed_in(request)
    use_cases = use_cases_of(request)
    trail = await use_cases.activity.event(event_id)
    decision = trail.decision
    candidates = decision.candidates if isinstance(decision.candidates, list) else []
    ids = [candidate.get("id") for candidate in candidates]
    parts = await use_cases.contributions.of(decision)
    return page(
        request,
        session,
        "event.html",
        {"trail": trail, "candidate_ids": ids, "parts": parts},
    )


@router.get("/{rest:path}", name="console_not_found")
async def not_found(request: Request, rest: str) -> Response:
    """Any other path under /console/: the 404 page."""
    signed_in(request)
    raise NotFound(f"no console page /console/{rest}", reason="route")
