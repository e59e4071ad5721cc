"""Offline evaluations of a policy's log in the native API (API key required;
docs/offline.md "Evaluations"): thin, each calls one :class:`Evaluations` method."""

from __future__ import annotations

from typing import Any

from fastapi import Path, Response
from pydantic import BaseModel, ConfigDict, Field

from service.api.deps import ApiKey, ApplySettingDep, AutoOptimizerDep, EvaluationsDep
from service.routers.json_route import JsonRoute
from service.routers.path_filter import PathFilteredRouter
from service.routers.policies import Name
from service.schemas import ErrorDetail
from service.schemas.evaluations import (
    AutoOptimizeRun,
    EvaluationPolicy,
    EvaluationRequest,
    EvaluationView,
)
from service.usecases.evaluation_views import native_view

router = PathFilteredRouter(
    prefix="/policies", tags=["evaluations"], dependencies=[ApiKey], route_class=JsonRoute
)
_errors: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "missing or invalid API key"},
    404: {"model": ErrorDetail, "description": "unknown policy or evaluation"},
    503: {"model": ErrorDetail, "description": "state store or event log unavailable"},
}
EvaluationId = Path(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.:\-]+$")


class ApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy_name: str = Field(
        min_length=1, max_length=256, description="an evaluated learning setting"
    )


@router.post(
    "/{name}/evaluations", status_code=202, response_model=EvaluationView, responses=_errors
)
async def create_evaluation(
    body: EvaluationRequest, evaluations: EvaluationsDep, name: str = Name
) -> EvaluationView:
    """Evaluate the policy's log over ``[start_time, end_time)`` in the background: its
    own learning settings, the baseline (first candidate), random and ``policies``."""
    record = await evaluations.create(
        name,
        body.name,
        body.start_time,
        body.end_time,
        body.policies,
        body.offline_experimentation,
        body.evaluation_id,
        ("start_time", "end_time"),
    )
    return native_view(record)


@router.get("/{name}/evaluations", response_model=list[EvaluationView], responses=_errors)
async def list_evaluations(evaluations: EvaluationsDep, name: str = Name) -> list[EvaluationView]:
    """The policy's evaluations, newest first (without results)."""
    return [native_view(r) for r in await evaluations.list_evaluations(name)]


@router.get("/{name}/evaluations/{evaluation_id}", response_model=EvaluationView, responses=_errors)
async def get_evaluation(
    evaluations: EvaluationsDep, name: str = Name, evaluation_id: str = EvaluationId
) -> EvaluationView:
    """Status, progress and, once succeeded, IPS and SNIPS estimates with 95% intervals."""
    return native_view(await evaluations.get(name, evaluation_id))


@router.delete("/{name}/evaluations/{evaluation_id}", status_code=204, responses=_errors)
async def delete_evaluation(
    evaluations: EvaluationsDep, name: str = Name, evaluation_id: str = EvaluationId
) -> Response:
    await evaluations.delete(name, evaluation_id)
    return Response(status_code=204)


@router.post(
    "/{name}/evaluations/{evaluation_id}/apply",
    response_model=EvaluationPolicy,
    responses=_errors,
)
async def apply_evaluated_policy(
    body: ApplyRequest,
    evaluations: EvaluationsDep,
    apply_setting: ApplySettingDep,
    name: str = Name,
    evaluation_id: str = EvaluationId,
) -> EvaluationPolicy:
    """Make an evaluated learning setting the policy's; answers its learning policy."""
    return await evaluations.apply(name, evaluation_id, body.policy_name, apply_setting)


@router.get("/{name}/auto-optimizations", response_model=list[AutoOptimizeRun], responses=_errors)
async def list_auto_optimizations(
    auto_optimizer: AutoOptimizerDep, name: str = Name
) -> list[AutoOptimizeRun]:
    """The policy's Auto-Optimize runs: when, the settings' estimates with their 95%
    intervals, and whether the best was applied and why (docs/personalizer.md,
    "Auto-Optimize")."""
    return await auto_optimizer.runs(name)
