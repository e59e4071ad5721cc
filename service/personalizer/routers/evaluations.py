"""Personalizer's offline evaluation routes of one loop family (docs/personalizer.md
"Offline evaluations"): thin, each calls one :class:`Evaluations` method and shapes the
answer for the family's API version -- ``/personalizer/{version}`` (v1.0,
v1.1-preview.N) answers ``policyResults``, ``/personalizer?api-version=...``
(2022-09-01-preview, the ``azure-ai-personalizer`` SDK) answers ``content`` time series."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from service.api.deps import ApplySettingDep, EvaluationsDep
from service.personalizer.evaluation_schemas import (
    EvaluationDetails,
    EvaluationList,
    PersonalizerEvaluation,
    PersonalizerEvaluationContract,
    PolicyReference,
    PreviewEvaluation,
)
from service.personalizer.evaluation_views import (
    evaluation_page,
    preview_details,
    preview_evaluation,
    v1_evaluation,
)
from service.personalizer.routers.routes import personalizer_router

EvaluationIdPath = Path(
    alias="evaluationId", min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.:\-]+$"
)

StartTimeQuery = Query(None, alias="startTime", description="start of the estimates' range")
EndTimeQuery = Query(None, alias="endTime", description="end of the estimates' range")


def make_evaluations_router(
    prefix: str, loop_of: Callable[..., Coroutine[Any, Any, str]]
) -> APIRouter:
    """The evaluation routes under ``prefix`` (``loop_of`` as in
    :func:`service.personalizer.routers.routes.make_router`)."""
    router = personalizer_router(prefix)
    Loop = Depends(loop_of)

    async def submit(
        evaluations: EvaluationsDep,
        loop: str,
        body: PersonalizerEvaluationContract,
        evaluation_id: str | None,
    ) -> Any:
        return await evaluations.create(
            loop,
            body.name,
            body.start_time,
            body.end_time,
            body.policies,
            body.enable_offline_experimentation or body.enable_policy_optimization,
            evaluation_id,
        )

    @router.post("/configurations/applyFromEvaluation", status_code=204, response_class=Response)
    async def apply_from_evaluation(
        body: PolicyReference,
        evaluations: EvaluationsDep,
        apply_setting: ApplySettingDep,
        loop: str = Loop,
    ) -> Response:
        """Make an evaluated learning setting the loop's (``configurations/policy``)."""
        await evaluations.apply(loop, body.evaluation_id, body.policy_name, apply_setting)
        return Response(status_code=204)

    @router.delete("/evaluations/{evaluationId}", status_code=204, response_class=Response)
    async def delete_evaluation(
        evaluations: EvaluationsDep, loop: str = Loop, evaluation_id: str = EvaluationIdPath
    ) -> Response:
        """Delete an evaluation (a running one stops)."""
        await evaluations.delete(loop, evaluation_id)
        return Response(status_code=204)

    if "{version}" in prefix:

        @router.post("/evaluations", status_code=201, response_model=PersonalizerEvaluation)
        async def create_evaluation(
            body: PersonalizerEvaluationContract,
            request: Request,
            response: Response,
            evaluations: EvaluationsDep,
            loop: str = Loop,
        ) -> PersonalizerEvaluation:
            """Submit an evaluation (v1.0): it runs in the background; read it until its
            status is ``completed``."""
            record = await submit(evaluations, loop, body, None)
            response.headers["Location"] = f"{request.url.path}/{record.evaluation_id}"
            return v1_evaluation(record)

        @router.put(
            "/evaluations/{evaluationId}",
            status_code=201,
            response_model=PersonalizerEvaluation,
            name="put_evaluation",
        )
        async def put_v1_evaluation(
            body: PersonalizerEvaluationContract,
            evaluations: EvaluationsDep,
            loop: str = Loop,
            evaluation_id: str = EvaluationIdPath,
        ) -> PersonalizerEvaluation:
            """Submit an evaluation under the given id."""
            return v1_evaluation(await submit(evaluations, loop, body, evaluation_id))

        @router.get(
            "/evaluations/{evaluationId}",
            response_model=PersonalizerEvaluation,
            name="get_evaluation",
        )
        async def get_v1_evaluation(
            evaluations: EvaluationsDep, loop: str = Loop, evaluation_id: str = EvaluationIdPath
        ) -> PersonalizerEvaluation:
            return v1_evaluation(await evaluations.get(loop, evaluation_id))

        @router.get(
            "/evaluations", response_model=list[PersonalizerEvaluation], name="list_evaluations"
        )
        async def list_v1_evaluations(
            evaluations: EvaluationsDep, loop: str = Loop
        ) -> list[PersonalizerEvaluation]:
            return [v1_evaluation(r) for r in await evaluations.list_evaluations(loop)]

        return router

    @router.put("/evaluations/{evaluationId}", response_model=EvaluationDetails)
    async def put_evaluation(
        body: PersonalizerEvaluationContract,
        evaluations: EvaluationsDep,
        loop: str = Loop,
        evaluation_id: str = EvaluationIdPath,
    ) -> EvaluationDetails:
        """Submit an evaluation (2022-09-01-preview): it runs in the background; read it
        until its status is ``Succeeded``."""
        return preview_details(await submit(evaluations, loop, body, evaluation_id))

    @router.get(
        "/evaluations/{evaluationId}",
        response_model=PreviewEvaluation,
        response_model_exclude_none=True,
    )
    async def get_evaluation(
        evaluations: EvaluationsDep,
        loop: str = Loop,
        evaluation_id: str = EvaluationIdPath,
        start_time: datetime | None = StartTimeQuery,
        end_time: datetime | None = EndTimeQuery,
        interval_in_minutes: int | None = Query(None, alias="intervalInMinutes"),
        window: str | None = Query(None, description="Expanding (default) or Rolling"),
    ) -> PreviewEvaluation:
        """The evaluation; once it succeeded, ``content`` holds each learning setting's
        estimate over ``[startTime, endTime)`` and its time series."""
        record = await evaluations.get(loop, evaluation_id)
        return preview_evaluation(record, start_time, end_time, interval_in_minutes, window)

    @router.get("/evaluations", response_model=EvaluationList, response_model_exclude_none=True)
    async def list_evaluations(
        request: Request,
        evaluations: EvaluationsDep,
        loop: str = Loop,
        top: int | None = Query(None, ge=0),
        skip: int = Query(0, ge=0),
        max_page_size: int | None = Query(None, alias="maxpagesize", ge=1),
        filter_expression: str | None = Query(
            None,
            alias="filter",
            description="<field> eq '<value>' joined by 'and'; fields id, name, status, "
            "evaluationType",
        ),
    ) -> EvaluationList:
        """The loop's evaluations, newest first: those ``filter`` keeps, from ``skip``, at
        most ``top``, ``maxpagesize`` (default 100) a page; ``nextLink`` reads the next."""
        records = await evaluations.list_evaluations(loop)
        page, following = evaluation_page(records, filter_expression, top, skip, max_page_size)
        next_link = (
            None if following is None else str(request.url.include_query_params(**following))
        )
        return EvaluationList(value=page, next_link=next_link)

    return router
