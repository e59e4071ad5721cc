"""Page 6, a loop's Apprentice mode (docs/console.md, "Apprentice"): while the loop
serves its baseline, how often the model's own choice matched it over the latest 1,000
decisions of the event log (``ActivityViews.baseline_matching``), the API family's
apprentice metrics since the mode began, and the switch to Online. The mode and the
switch are the API family's (:class:`~service.usecases.learning_settings.LearningModes`,
``app.state.learning_modes``: Personalizer's ``configurations/service``)."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import RedirectResponse

from service.console.pages import policy_name, signed_in, use_cases_of
from service.console.rendering import ConsoleRoute, page
from service.console.session import Session, change_form
from service.usecases.activity import MATCHING_DECISIONS
from service.usecases.learning_settings import LearningModes

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)
ONLINE = "Online"


def _modes(request: Request) -> LearningModes:
    modes: LearningModes = request.app.state.learning_modes
    return modes


async def _apprentice_page(
    request: Request, session: Session, name: str, error: str | None = None, status: int = 200
) -> Response:
    use_cases = use_cases_of(request)
    info = await use_cases.admin.get_policy(policy_name(name))
    view = await _modes(request).learning_mode(name)
    matching = None
    if view.mode != ONLINE:
        since = info.created_at if view.since is None else view.since
        matching = await use_cases.activity.baseline_matching(name, since)
    return page(
        request,
        session,
        "apprentice.html",
        {
            "info": info,
            "view": view,
            "matching": matching,
            "limit": MATCHING_DECISIONS,
            "error": error,
            "switched": request.query_params.get("switched"),
        },
        status,
    )


@router.get("/policies/{name}/apprentice", name="console_apprentice")
async def apprentice(request: Request, name: str) -> Response:
    """The loop's learning mode and, while it serves the baseline, how the model
    matches it."""
    return await _apprentice_page(request, signed_in(request), name)


@router.post("/policies/{name}/apprentice/online", name="console_apprentice_online")
async def switch_to_online(request: Request, name: str) -> Response:
    """Switch a loop in Apprentice mode to Online (``LearningModes.switch_to_online``,
    as ``PUT configurations/service`` with ``learningMode: Online``)."""
    session, _ = await change_form(request)
    view = await _modes(request).learning_mode(policy_name(name))
    if view.mode != "Apprentice":
        error = f"learning_mode: the loop is in {view.mode} mode, not Apprentice: nothing to switch"
        return await _apprentice_page(request, session, name, error, 409)
    await _modes(request).switch_to_online(name)
    return RedirectResponse(
        f"/console/policies/{quote(name)}/apprentice?switched=1", status_code=303
    )
