"""Personalizer's multi-slot routes of one loop family: ``multislot/rank`` and
``multislot/events/{eventId}/reward|activate``, thin over
:class:`~service.personalizer.multislot.MultiSlot` (docs/personalizer.md "Multi-slot")."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response

from service.personalizer.deps import LoopsDep
from service.personalizer.multislot import MultiSlot
from service.personalizer.routers.routes import EventIdPath, personalizer_router
from service.personalizer.schemas import (
    PersonalizerMultiSlotRankRequest,
    PersonalizerMultiSlotRankResponse,
    PersonalizerMultiSlotReward,
)


async def get_multislot(loops: LoopsDep) -> MultiSlot:
    return MultiSlot(loops)


MultiSlotDep = Annotated[MultiSlot, Depends(get_multislot)]


def make_multislot_router(
    prefix: str, loop_of: Callable[..., Coroutine[Any, Any, str]]
) -> APIRouter:
    """The multi-slot routes under ``prefix`` (arguments as :func:`make_router`'s)."""
    router = personalizer_router(prefix + "/multislot")
    Loop = Depends(loop_of)

    @router.post(
        "/rank",
        status_code=201,
        response_model=PersonalizerMultiSlotRankResponse,
        response_model_exclude_none=True,
    )
    async def rank_multi_slot(
        body: PersonalizerMultiSlotRankRequest, multislot: MultiSlotDep, loop: str = Loop
    ) -> PersonalizerMultiSlotRankResponse:
        """Fill the slots in order with distinct actions, each slot's features joined to
        the context (Personalizer ``Rank (MultiSlot)``)."""
        return await multislot.rank(loop, body)

    @router.post("/events/{eventId:path}/reward", status_code=204)
    async def reward_multi_slot(
        body: PersonalizerMultiSlotReward,
        multislot: MultiSlotDep,
        event_id: EventIdPath,
        loop: str = Loop,
    ) -> Response:
        """Reward slots of an event (values in [-1, 1]; each slot's earliest reward counts)."""
        await multislot.reward(loop, event_id, body)
        return Response(status_code=204)

    @router.post("/events/{eventId:path}/activate", status_code=204)
    async def activate_multi_slot(
        multislot: MultiSlotDep, event_id: EventIdPath, loop: str = Loop
    ) -> Response:
        """Activate every slot of an event ranked with ``deferActivation``."""
        await multislot.activate(loop, event_id)
        return Response(status_code=204)

    return router
