"""``Annotated`` dependencies shared by the routers: one per use case, taken from the
:class:`~service.usecases.UseCases` the app's lifespan built."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.api.auth import recommend_key, require_key
from service.usecases import (
    AuditTrail,
    AutoOptimizer,
    Evaluations,
    FeatureImportances,
    FeatureRanking,
    LogUpkeep,
    Models,
    Monitor,
    PolicyAdmin,
    Recommender,
    Rewards,
    Snapshots,
)
from service.usecases.learning_settings import ApplySetting


# ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in its thread pool,
# a thread hop per request for an attribute lookup.
async def get_recommender(request: Request) -> Recommender:
    return request.app.state.use_cases.recommender


async def get_rewards(request: Request) -> Rewards:
    return request.app.state.use_cases.rewards


async def get_admin(request: Request) -> PolicyAdmin:
    return request.app.state.use_cases.admin


async def get_snapshots(request: Request) -> Snapshots:
    return request.app.state.use_cases.snapshots


async def get_monitor(request: Request) -> Monitor:
    return request.app.state.use_cases.monitor


async def get_features(request: Request) -> FeatureRanking:
    return request.app.state.use_cases.features


async def get_models(request: Request) -> Models:
    return request.app.state.use_cases.models


async def get_feature_importances(request: Request) -> FeatureImportances:
    return request.app.state.use_cases.feature_importances


async def get_evaluations(request: Request) -> Evaluations:
    return request.app.state.use_cases.evaluations


async def get_auto_optimizer(request: Request) -> AutoOptimizer:
    return request.app.state.use_cases.auto_optimizer


async def get_log_upkeep(request: Request) -> LogUpkeep:
    return request.app.state.use_cases.log_upkeep


async def get_audit(request: Request) -> AuditTrail:
    return request.app.state.use_cases.audit


async def get_apply_setting(request: Request) -> ApplySetting:
    """How an evaluated learning setting becomes a policy's: the API family's the app's
    lifespan wired (``app.state.apply_setting``)."""
    return request.app.state.apply_setting


RecommenderDep = Annotated[Recommender, Depends(get_recommender)]
RewardsDep = Annotated[Rewards, Depends(get_rewards)]
AdminDep = Annotated[PolicyAdmin, Depends(get_admin)]
SnapshotsDep = Annotated[Snapshots, Depends(get_snapshots)]
MonitorDep = Annotated[Monitor, Depends(get_monitor)]
FeaturesDep = Annotated[FeatureRanking, Depends(get_features)]
ModelsDep = Annotated[Models, Depends(get_models)]
FeatureImportancesDep = Annotated[FeatureImportances, Depends(get_feature_importances)]
EvaluationsDep = Annotated[Evaluations, Depends(get_evaluations)]
AutoOptimizerDep = Annotated[AutoOptimizer, Depends(get_auto_optimizer)]
LogUpkeepDep = Annotated[LogUpkeep, Depends(get_log_upkeep)]
AuditDep = Annotated[AuditTrail, Depends(get_audit)]
ApplySettingDep = Annotated[ApplySetting, Depends(get_apply_setting)]
ApiKey = Depends(require_key)
RecommendKey = Depends(recommend_key)
