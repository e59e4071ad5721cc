"""Policy administration (API key required)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import Path, Query, Request, Response

from service.api.deps import (
    AdminDep,
    ApiKey,
    FeatureImportancesDep,
    FeaturesDep,
    LogUpkeepDep,
    ModelsDep,
    SnapshotsDep,
)
from service.routers.json_route import JsonRoute
from service.routers.path_filter import PathFilteredRouter
from service.schemas import (
    ArmsChange,
    ErrorDetail,
    FeatureImportanceJob,
    FeatureImportanceJobs,
    FeatureImportanceReport,
    FeatureImportanceRequest,
    LogProperties,
    ModelProperties,
    PolicyInfo,
    PolicyList,
    PolicySpec,
    PolicyStats,
    RetrainProperties,
    Snapshot,
    SnapshotImport,
)

router = PathFilteredRouter(
    prefix="/policies", tags=["policies"], dependencies=[ApiKey], route_class=JsonRoute
)
_errors: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorDetail, "description": "missing or invalid API key"},
    404: {"model": ErrorDetail, "description": "unknown policy or arm"},
    503: {"model": ErrorDetail, "description": "state store or event log unavailable"},
}
Name = Path(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")


@router.get("", response_model=PolicyList, responses=_errors)
async def list_policies(admin: AdminDep) -> PolicyList:
    return PolicyList(policies=await admin.list_policies())


@router.put("/{name}", response_model=PolicyInfo, responses=_errors)
async def put_policy(body: PolicySpec, admin: AdminDep, name: str = Name) -> PolicyInfo:
    """Create or replace a policy. Changing ``algorithm``, ``dimension``, ``params``,
    ``reward_range``, ``epsilon``, ``guardrails`` or ``safe_arm`` resets its learned state."""
    return await admin.put_policy(name, body)


@router.get("/{name}", response_model=PolicyInfo, responses=_errors)
async def get_policy(admin: AdminDep, name: str = Name) -> PolicyInfo:
    return await admin.get_policy(name)


@router.delete("/{name}", status_code=204, responses=_errors)
async def delete_policy(admin: AdminDep, name: str = Name) -> Response:
    await admin.delete_policy(name)
    return Response(status_code=204)


@router.post("/{name}/arms", response_model=PolicyInfo, responses=_errors)
async def add_arms(body: ArmsChange, admin: AdminDep, name: str = Name) -> PolicyInfo:
    """Register arms (served when a request omits ``arms``)."""
    return await admin.change_arms(name, add=body.arms)


@router.post("/{name}/arms/retire", response_model=PolicyInfo, responses=_errors)
async def retire_arms(body: ArmsChange, admin: AdminDep, name: str = Name) -> PolicyInfo:
    """Delete what was learned about arms (state and pull count) and unregister them:
    registered arms and any arm with state, such as ids a request sent as candidates;
    404 for the arms that are neither. An arm sent again later starts from the prior."""
    return await admin.change_arms(name, retire=body.arms)


@router.post("/{name}/reset", response_model=PolicyInfo, responses=_errors)
async def reset(admin: AdminDep, name: str = Name) -> PolicyInfo:
    """Forget the learned state and the pending events; keep the configuration."""
    return await admin.reset(name)


@router.get("/{name}/stats", response_model=PolicyStats, responses=_errors)
async def stats(admin: AdminDep, name: str = Name) -> PolicyStats:
    return await admin.stats(name)


@router.get(
    "/{name}/features",
    response_model=FeatureImportanceReport,
    responses={**_errors, 422: {"model": ErrorDetail, "description": "the policy is not linear"}},
)
async def features(
    ranking: FeaturesDep,
    name: str = Name,
    top: int = Query(20, ge=1, le=1000, description="how many features, most important first"),
) -> FeatureImportanceReport:
    """The features that move the policy's scores most: |weight| times the feature's mean
    absolute deviation over the latest logged decisions (docs/features.md)."""
    return await ranking.features(name, top)


@router.get("/{name}/snapshot", response_model=Snapshot, responses=_errors)
async def export_snapshot(snapshots: SnapshotsDep, name: str = Name) -> Snapshot:
    return await snapshots.export_snapshot(name)


@router.put("/{name}/snapshot", response_model=Snapshot, responses=_errors)
async def import_snapshot(
    body: SnapshotImport, snapshots: SnapshotsDep, name: str = Name
) -> Snapshot:
    """Replace the learned state with an exported snapshot of the same algorithm and dimension."""
    return await snapshots.import_snapshot(name, body.data)


MODEL_MEDIA_TYPE = "application/octet-stream"
MODEL_FILE = {MODEL_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}}


@router.get(
    "/{name}/model",
    response_class=Response,
    responses={**_errors, 200: {"content": MODEL_FILE, "description": "the model file"}},
)
async def export_model(models: ModelsDep, name: str = Name) -> Response:
    """The whole model as one file: engine fields and every state part
    (docs/personalizer.md, Model export, import and reset)."""
    return Response(await models.export_model(name), media_type=MODEL_MEDIA_TYPE)


@router.put(
    "/{name}/model",
    response_model=PolicyInfo,
    responses={
        **_errors,
        409: {
            "model": ErrorDetail,
            "description": "the file's algorithm, dimension, features, guardrails or safe arm "
            "differ from the policy's (each difference named) and replace_settings is false",
        },
        422: {"model": ErrorDetail, "description": "not a usable model file"},
    },
    openapi_extra={"requestBody": {"required": True, "content": MODEL_FILE}},
)
async def import_model(
    request: Request,
    models: ModelsDep,
    name: str = Name,
    replace_settings: bool = Query(
        False,
        description="give the policy the file's algorithm, dimension, features, guardrails "
        "and safe arm where they differ (false: such a file is a 409)",
    ),
) -> PolicyInfo:
    """Replace the model with a file from ``GET /policies/{name}/model`` (its engine
    fields become the policy's); a bad file is a 422, a file whose settings differ from
    the policy's a 409 unless ``replace_settings``; either changes nothing."""
    return await models.import_model(name, await request.body(), replace_settings)


@router.delete("/{name}/model", response_model=PolicyInfo, responses=_errors)
async def reset_model(models: ModelsDep, name: str = Name) -> PolicyInfo:
    """A fresh model of the same configuration (as ``POST /policies/{name}/reset``)."""
    return await models.reset_model(name)


@router.get("/{name}/model/properties", response_model=ModelProperties, responses=_errors)
async def model_properties(models: ModelsDep, name: str = Name) -> ModelProperties:
    """When the model started and was last rewarded, its latest relearning, and its
    staleness: the rewards still waiting for a fold and how long the oldest waited
    (docs/architecture.md, "Folded model updates")."""
    times = await models.model_times(name)
    retrain = times.retrain
    return ModelProperties(
        policy=name,
        created_at=times.created_at,
        modified_at=times.modified_at,
        retrain=None if retrain is None else RetrainProperties.model_validate(asdict(retrain)),
        pending_rewards=times.pending_rewards,
        staleness_seconds=times.staleness_seconds,
    )


JobId = Path(min_length=1, max_length=256)


@router.put(
    "/{name}/feature-importances/{job_id}", response_model=FeatureImportanceJob, responses=_errors
)
async def create_feature_importance(
    body: FeatureImportanceRequest,
    jobs: FeatureImportancesDep,
    name: str = Name,
    job_id: str = JobId,
) -> FeatureImportanceJob:
    """Start a feature-importance job over ``[since, until)`` of the log: leave one
    feature out with the offline estimator, in the background (docs/personalizer.md,
    Feature importances); 409 when the id exists."""
    return await jobs.create(
        name, job_id, body.name, body.since, body.until, fields=("since", "until")
    )


@router.get(
    "/{name}/feature-importances/{job_id}", response_model=FeatureImportanceJob, responses=_errors
)
async def get_feature_importance(
    jobs: FeatureImportancesDep, name: str = Name, job_id: str = JobId
) -> FeatureImportanceJob:
    return await jobs.get(name, job_id)


@router.get("/{name}/feature-importances", response_model=FeatureImportanceJobs, responses=_errors)
async def list_feature_importances(
    jobs: FeatureImportancesDep, name: str = Name
) -> FeatureImportanceJobs:
    """The policy's jobs, newest first."""
    return FeatureImportanceJobs(jobs=await jobs.list_jobs(name, None, 0))


@router.delete("/{name}/feature-importances/{job_id}", status_code=204, responses=_errors)
async def delete_feature_importance(
    jobs: FeatureImportancesDep, name: str = Name, job_id: str = JobId
) -> Response:
    await jobs.delete(name, job_id)
    return Response(status_code=204)


@router.get("/{name}/logs", response_model=LogProperties, responses=_errors)
async def log_properties(upkeep: LogUpkeepDep, name: str = Name) -> LogProperties:
    """The span of the policy's event log: its first and last decision."""
    return await upkeep.properties(name)


@router.delete("/{name}/logs", status_code=204, responses=_errors)
async def delete_logs(upkeep: LogUpkeepDep, name: str = Name) -> Response:
    """Delete every logged decision and reward of the policy, in bounded batches (its
    learned state is kept; docs/operations.md, "Log retention")."""
    await upkeep.delete_logs(name)
    return Response(status_code=204)
