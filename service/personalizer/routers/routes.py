"""The Personalizer routes of one loop family: thin, each calls one :class:`Loops` method."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Request, Response

from service.personalizer.deps import LoopsDep
from service.personalizer.loops import Loops
from service.personalizer.routers.errors import PersonalizerRoute, personalizer_key
from service.personalizer.schemas import (
    EventId,
    PersonalizerErrorResponse,
    PersonalizerPolicy,
    PersonalizerRankRequest,
    PersonalizerRankResponse,
    PersonalizerReward,
    PersonalizerServiceConfiguration,
)
from service.routers.path_filter import PathFilteredRouter

ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": PersonalizerErrorResponse,
        "description": "invalid input; the message names the field",
    },
    401: {"model": PersonalizerErrorResponse, "description": "missing or invalid key"},
    404: {"model": PersonalizerErrorResponse, "description": "unknown loop"},
    503: {
        "model": PersonalizerErrorResponse,
        "description": "state store unavailable; retry after Retry-After",
    },
}
EventIdPath = Annotated[EventId, Path(alias="eventId")]
"""An event id in a route's path: matched across ``/`` (``{eventId:path}``), so an id
holding ``/`` works once the client percent-encodes it (``%2F``, which the server
decodes before routing)."""


def personalizer_router(
    prefix: str, responses: dict[int | str, dict[str, Any]] = ERRORS
) -> APIRouter:
    """An empty router of Personalizer routes under ``prefix``: the key and
    Personalizer's error shape on every route (``responses`` documents the errors)."""
    return PathFilteredRouter(
        prefix=prefix,
        tags=["personalizer"],
        route_class=PersonalizerRoute,
        dependencies=[Depends(personalizer_key)],
        responses=responses,
    )


def make_router(prefix: str, loop_of: Callable[..., Coroutine[Any, Any, str]]) -> APIRouter:
    """The routes under ``prefix``; ``loop_of`` is the dependency naming the loop (and
    taking the prefix's other parameters: version, api-version)."""
    router = personalizer_router(prefix)
    Loop = Depends(loop_of)

    @router.post("/rank", status_code=201, response_model=PersonalizerRankResponse)
    async def rank(body: PersonalizerRankRequest, request: Request, loop: str = Loop) -> Response:
        """Rank the actions for the context (Personalizer ``Rank``)."""
        # The busiest route takes its Loops from the request, not through ``LoopsDep``
        # (one dependency fewer for FastAPI to solve per request), and serializes once
        # from the use case's dict (``response_model`` documents it): a returned model
        # would be dumped, validated and serialized again by FastAPI.
        loops: Loops = request.app.state.loops
        ranked = await loops.rank(loop, body)
        return Response(orjson.dumps(ranked), status_code=201, media_type="application/json")

    @router.post("/events/{eventId:path}/reward", status_code=204)
    async def reward(
        body: PersonalizerReward, request: Request, event_id: EventIdPath, loop: str = Loop
    ) -> Response:
        """Reward an event (value in [-1, 1]; the earliest reward counts)."""
        loops: Loops = request.app.state.loops  # as rank: one dependency fewer
        await loops.reward(loop, event_id, body.value)
        return Response(status_code=204)

    @router.post("/events/{eventId:path}/activate", status_code=204)
    async def activate(loops: LoopsDep, event_id: EventIdPath, loop: str = Loop) -> Response:
        """Activate an event ranked with ``deferActivation``."""
        await loops.activate(loop, event_id)
        return Response(status_code=204)

    @router.get(
        "/configurations/service",
        response_model=PersonalizerServiceConfiguration,
        response_model_exclude_none=True,
    )
    async def get_service_configuration(
        loops: LoopsDep, loop: str = Loop
    ) -> PersonalizerServiceConfiguration:
        return await loops.service_configuration(loop)

    @router.put(
        "/configurations/service",
        response_model=PersonalizerServiceConfiguration,
        response_model_exclude_none=True,
    )
    async def update_service_configuration(
        body: PersonalizerServiceConfiguration, loops: LoopsDep, loop: str = Loop
    ) -> PersonalizerServiceConfiguration:
        """Change the reward wait, default reward and exploration (docs/personalizer.md)."""
        return await loops.update_service_configuration(loop, body)

    @router.get("/configurations/policy", response_model=PersonalizerPolicy)
    async def get_policy(loops: LoopsDep, loop: str = Loop) -> PersonalizerPolicy:
        return await loops.policy_configuration(loop)

    @router.put("/configurations/policy", response_model=PersonalizerPolicy)
    async def update_policy(
        body: PersonalizerPolicy, response: Response, loops: LoopsDep, loop: str = Loop
    ) -> PersonalizerPolicy:
        """Replace the learning policy: VW arguments or this service's JSON policy spec.
        VW arguments with no counterpart here are listed in a ``Warning`` header."""
        contract, ignored = await loops.update_policy_configuration(loop, body)
        if ignored:
            response.headers["Warning"] = f'299 - "ignored VW arguments: {" ".join(ignored)}"'
        return contract

    @router.delete("/configurations/policy", response_model=PersonalizerPolicy)
    async def reset_policy(loops: LoopsDep, loop: str = Loop) -> PersonalizerPolicy:
        """Back to the default learning policy."""
        return await loops.reset_policy_configuration(loop)

    return router
