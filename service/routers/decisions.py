"""``POST /recommend``, ``POST /reward`` and ``POST /events/{event_id}/activate``."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import Path, Response

from service.api.deps import ApiKey, RecommenderDep, RecommendKey, RewardsDep
from service.routers.json_route import JsonRoute
from service.routers.path_filter import PathFilteredRouter
from service.schemas import (
    ActivateResponse,
    ErrorDetail,
    RecommendRequest,
    RecommendResponse,
    RewardRequest,
    RewardResponse,
    StoredEventId,
)

router = PathFilteredRouter(tags=["decisions"], route_class=JsonRoute)
_errors: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "missing or invalid API key"},
    404: {"model": ErrorDetail, "description": "unknown policy or event"},
    409: {
        "model": ErrorDetail,
        "description": "event already finalized, or a client event_id reused with another body",
    },
    503: {
        "model": ErrorDetail,
        "description": "state store unavailable; retry after Retry-After seconds",
    },
}


@router.post(
    "/recommend",
    response_model=RecommendResponse,
    dependencies=[RecommendKey],
    responses=_errors,
    # the key is optional (required only with BANDIT_RECOMMEND_REQUIRES_KEY); recommend_key
    # reads it without declaring the bearer scheme as a dependency, so it is named here
    openapi_extra={"security": [{"HTTPBearer": []}, {}]},
)
async def recommend(body: RecommendRequest, recommender: RecommenderDep) -> Response:
    """Choose an arm for a context. A repeated client ``event_id`` with the same body
    returns the original decision; with another body it is 409. When the state store is down the decision is served from this process's
    cached model and flagged ``degraded`` (it cannot be rewarded)."""
    # Serialized here from the plain dict (``response_model`` documents it): a returned
    # model would be dumped, validated and serialized again by FastAPI.
    recommendation = await recommender.recommend(body)
    return Response(orjson.dumps(recommendation.as_response()), media_type="application/json")


@router.post("/reward", response_model=RewardResponse, dependencies=[ApiKey], responses=_errors)
async def reward(body: RewardRequest, rewards: RewardsDep) -> RewardResponse:
    """Apply a reward to the decision ``event_id`` exactly once. A repeat answers 200
    with ``applied: false, status: "already_rewarded"`` without changing the model (a
    repeat with another value: ``status: "conflicting_reward"``, the ignored value in
    ``ignored_reward``); an event finalized with the default reward (or expired) is 409; unknown is 404;
    the state store down is 503 with ``Retry-After`` (nothing applied: retry)."""
    return await rewards.reward(body)


@router.post(
    "/events/{event_id:path}/activate",
    response_model=ActivateResponse,
    dependencies=[ApiKey],
    responses=_errors,
)
async def activate(
    rewards: RewardsDep, event_id: Annotated[StoredEventId, Path()]
) -> ActivateResponse:
    """Activate a decision made with ``defer_activation``: only activated events are
    learned from (a deferred event never activated expires without a default reward)."""
    return await rewards.activate(event_id)
