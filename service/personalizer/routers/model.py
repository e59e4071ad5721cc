"""Personalizer's model routes of one loop family: export (``GET model``), import
(``PUT model``), reset (``DELETE model``) and ``GET model/properties``, each one call of
:class:`~service.usecases.models.Models` (docs/personalizer.md "Model export, import and
reset")."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from service.api.deps import ModelsDep
from service.personalizer.routers.routes import personalizer_router
from service.personalizer.schemas import PersonalizerModelProperties, PersonalizerRetrain
from service.routers.policies import MODEL_FILE, MODEL_MEDIA_TYPE


def make_model_router(prefix: str, loop_of: Callable[..., Coroutine[Any, Any, str]]) -> APIRouter:
    """The model routes under ``prefix`` (``make_router``'s arguments)."""
    router = personalizer_router(prefix)
    Loop = Depends(loop_of)

    @router.get(
        "/model",
        response_class=Response,
        responses={200: {"content": MODEL_FILE, "description": "the model file"}},
    )
    async def export_model(
        models: ModelsDep,
        loop: str = Loop,
        signed: bool = Query(
            False, description="accepted; the file carries a CRC-32, no signature"
        ),
    ) -> Response:
        """The loop's whole model as one file (importable with ``PUT model``)."""
        return Response(await models.export_model(loop), media_type=MODEL_MEDIA_TYPE)

    @router.put(
        "/model",
        status_code=204,
        openapi_extra={"requestBody": {"required": True, "content": MODEL_FILE}},
    )
    async def import_model(request: Request, models: ModelsDep, loop: str = Loop) -> Response:
        """Replace the loop's model (and its engine settings, as Personalizer did) with a
        file from ``GET model``; a bad file is a 400 naming the problem and changes
        nothing."""
        await models.import_model(loop, await request.body(), replace_settings=True)
        return Response(status_code=204)

    @router.delete("/model", status_code=204)
    async def reset_model(models: ModelsDep, loop: str = Loop) -> Response:
        """Start the loop's model over (same configuration)."""
        await models.reset_model(loop)
        return Response(status_code=204)

    # exclude_none: the specification's two fields alone when the model was never relearned
    @router.get(
        "/model/properties",
        response_model=PersonalizerModelProperties,
        response_model_exclude_none=True,
    )
    async def get_model_properties(
        models: ModelsDep, loop: str = Loop
    ) -> PersonalizerModelProperties:
        times = await models.model_times(loop)
        retrain = times.retrain
        return PersonalizerModelProperties(
            creation_time=datetime.fromtimestamp(times.created_at, UTC),
            last_modified_time=datetime.fromtimestamp(times.modified_at, UTC),
            retrain=None
            if retrain is None
            else PersonalizerRetrain(
                state=retrain.state,
                start_time=datetime.fromtimestamp(retrain.started_at, UTC),
                finish_time=None
                if retrain.finished_at is None
                else datetime.fromtimestamp(retrain.finished_at, UTC),
                window_start_time=datetime.fromtimestamp(retrain.since, UTC),
                events_used=retrain.events,
                message=retrain.message,
            ),
        )

    return router
