"""Personalizer's feature-importance routes of one loop family (``PUT/GET/DELETE
featureImportances/{featureImportanceId}``, ``GET featureImportances``), each one call of
:class:`~service.usecases.importance_jobs.FeatureImportances` (docs/personalizer.md
"Feature importances")."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from service.api.deps import FeatureImportancesDep
from service.personalizer.routers.routes import personalizer_router
from service.personalizer.schemas import (
    PersonalizerFeatureImportance,
    PersonalizerFeatureImportanceContract,
    PersonalizerFeatureImportanceDetails,
    PersonalizerFeatureImportances,
    PersonalizerFeatureScore,
)
from service.schemas import FeatureImportanceJob

FeatureImportanceId = Path(alias="featureImportanceId", min_length=1, max_length=256)
DEFAULT_PAGE_SIZE = 100


def _unix(moment: datetime) -> float:
    """Unix seconds of ``moment`` (UTC when it carries no offset)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _details(job: FeatureImportanceJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "start_time": _utc(job.start_time),
        "end_time": _utc(job.end_time),
        "creation_time": _utc(job.creation_time),
        "status": job.status,
    }


def make_feature_importance_router(
    prefix: str, loop_of: Callable[..., Coroutine[Any, Any, str]]
) -> APIRouter:
    """The feature-importance routes under ``prefix`` (``make_router``'s arguments)."""
    router = personalizer_router(prefix)
    Loop = Depends(loop_of)

    @router.put("/featureImportances/{featureImportanceId}", status_code=200)
    async def create_feature_importance(
        body: PersonalizerFeatureImportanceContract,
        jobs: FeatureImportancesDep,
        loop: str = Loop,
        job_id: str = FeatureImportanceId,
    ) -> Response:
        """Start computing feature scores over ``[startTime, endTime)`` of the loop's log
        (in the background: ``GET`` it until ``status`` is ``Succeeded``)."""
        await jobs.create(loop, job_id, body.name, _unix(body.start_time), _unix(body.end_time))
        return Response(status_code=200)

    @router.get(
        "/featureImportances/{featureImportanceId}",
        response_model=PersonalizerFeatureImportance,
        response_model_exclude_none=True,
    )
    async def get_feature_importance(
        jobs: FeatureImportancesDep, loop: str = Loop, job_id: str = FeatureImportanceId
    ) -> PersonalizerFeatureImportance:
        job = await jobs.get(loop, job_id)
        return PersonalizerFeatureImportance(
            **_details(job),
            feature_scores=[
                PersonalizerFeatureScore(namespace=s.namespace, feature_name=s.name, score=s.score)
                for s in job.feature_scores
            ],
            description=job.description,
        )

    @router.delete("/featureImportances/{featureImportanceId}", status_code=204)
    async def delete_feature_importance(
        jobs: FeatureImportancesDep, loop: str = Loop, job_id: str = FeatureImportanceId
    ) -> Response:
        await jobs.delete(loop, job_id)
        return Response(status_code=204)

    @router.get(
        "/featureImportances",
        response_model=PersonalizerFeatureImportances,
        response_model_exclude_none=True,
    )
    async def list_feature_importances(
        request: Request,
        jobs: FeatureImportancesDep,
        loop: str = Loop,
        top: int | None = Query(None, ge=0, description="most jobs to return in all"),
        skip: int = Query(0, ge=0, description="jobs to skip, newest first"),
        maxpagesize: int = Query(DEFAULT_PAGE_SIZE, ge=1, description="most jobs per page"),
    ) -> PersonalizerFeatureImportances:
        """The loop's jobs, newest first, a page at a time (``nextLink`` names the next)."""
        wanted = maxpagesize if top is None else min(top, maxpagesize)
        found = await jobs.list_jobs(loop, wanted + 1, skip)
        page = found[:wanted]
        left = None if top is None else top - len(page)
        next_link = None
        if len(found) > wanted and left != 0:
            params = {"skip": str(skip + len(page)), "maxpagesize": str(maxpagesize)}
            if left is not None:
                params["top"] = str(left)
            next_link = str(request.url.include_query_params(**params))
        return PersonalizerFeatureImportances(
            value=[PersonalizerFeatureImportanceDetails(**_details(j)) for j in page],
            next_link=next_link,
        )

    return router
