"""The service's use cases, one module each, over the state store and the event log.

=====================  =====================================================================
module                 use case (public surface)
=====================  =====================================================================
``recommend``          ``Recommender.recommend``: ``POST /recommend``, the plain path
``recommend_batch``    ``Coalescer``: a policy's concurrent recommendations in batches
``recommendation``     ``Recommendation`` (the typed answer), ``ServingMode``, ``ServedDecision``
``event_ids``          ``EventIds``: a client's event id, a repeat answered the original
``rewards``            ``Rewards.reward`` / ``.activate``: ``POST /reward``, event activation
``sweeper``            ``Sweeper.sweep_once`` / ``.run``: default rewards and expiry
``finalizations``      ``Finalizations.finalize``: events leave ``pending``, a policy's in batches
``folds``              ``Folds.fold`` / ``.run``: a shared model's rewards folded in batches
``admin``              ``PolicyAdmin``: ``/policies`` (create, list, reset, arms, stats)
``snapshots``          ``Snapshots``: export, import, periodic save to the event log
``models``             ``Models``: the model file (export, import, reset, properties)
``importance``         ``FeatureRanking.features``: ``GET /policies/{name}/features``
``importance_jobs``    ``FeatureImportances``: feature-importance jobs over a log range
``feature_cardinality``  ``FeatureCardinalities``: distinct values per JSON feature (ids, timestamps)
``readiness``          ``Monitor``: ``/readyz``, ``/health/dependencies``, backlog, gauges
``probes``             ``Probe``: a dependency check answered within a bound, never queued
``policy_cache``       ``PolicyCache``: the cached engine policies and the store transactions
``events``             ``PendingEvent`` and its ``EventState``
``candidates``         a request's candidate ids and feature rows
``json_features``      the same for a policy with ``features`` (JSON feature objects)
``evaluation_jobs``    ``Evaluations``: offline evaluations of a loop's log, run in worker processes
``evaluations``        an evaluation's plan, replay and estimates (also ``bandit evaluate``)
``evaluation_views``   an evaluation record in the native API's shape
``auto_optimize``      ``AutoOptimizer``: scheduled evaluations, the better setting applied
``learning_settings``  ``LearningSettings``: the seam an API family reads settings through
``log_upkeep``         ``LogUpkeep``: event-log partitions, retention, ``logs`` routes
``audit``              ``AuditTrail``: who changed a policy, its model or its log; the history
``recovery``           ``Recovery``: rebuild the policies the store lost from the event log
``rebuild``            ``rebuild_policy``: a policy's state replayed from the event log
``retrain``            ``Retrains``: a new model relearned from the log while the old serves
``policies_file``      ``PoliciesFile``: the policies file applied at start (create, overrides)
``activity``           ``ActivityViews``: the console's aggregates and events from the event log
``drift_watch``        ``DriftWatch``: each policy's applied rewards watched for a change
``offline_engine``     ``OfflineEngine``: where offline work runs (this machine or Ray)
=====================  =====================================================================

Routers (``service.routers``) and any other API family call these public methods only;
:func:`build_use_cases` builds one set per process in the app's lifespan, which passes
the :class:`~service.usecases.learning_settings.LearningSettings` it is wired with and
builds the adapters (the Personalizer loops) over the set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from service.settings import Settings
from service.storage.base import EventLog, LogSink
from service.storage.state_store import StateStore
from service.usecases.activity import ActivityViews
from service.usecases.admin import PolicyAdmin
from service.usecases.audit import AuditTrail
from service.usecases.auto_optimize import AutoOptimizer
from service.usecases.contributions import ScoreContributions
from service.usecases.evaluation_jobs import Evaluations
from service.usecases.feature_cardinality import FeatureCardinalities
from service.usecases.finalizations import ServedTally
from service.usecases.folds import Folds
from service.usecases.importance import FeatureRanking
from service.usecases.importance_jobs import FeatureImportances
from service.usecases.learning_settings import LearningSettings
from service.usecases.log_upkeep import LogUpkeep
from service.usecases.models import Models
from service.usecases.policy_cache import PolicyCache
from service.usecases.readiness import Monitor
from service.usecases.recommend import Recommender
from service.usecases.recovery import Recovery
from service.usecases.retrain import Retrains
from service.usecases.rewards import Rewards
from service.usecases.snapshots import Snapshots
from service.usecases.sweeper import Sweeper

__all__ = [
    "ActivityViews",
    "AuditTrail",
    "AutoOptimizer",
    "Evaluations",
    "FeatureCardinalities",
    "FeatureImportances",
    "FeatureRanking",
    "Folds",
    "LogUpkeep",
    "Models",
    "Monitor",
    "PolicyAdmin",
    "PolicyCache",
    "Recommender",
    "Recovery",
    "Retrains",
    "Rewards",
    "Snapshots",
    "Sweeper",
    "UseCases",
    "build_use_cases",
]


@dataclass(frozen=True)
class UseCases:
    """One process's use cases and the stores they share."""

    store: StateStore
    sink: LogSink
    event_log: EventLog
    cache: PolicyCache
    recommender: Recommender
    rewards: Rewards
    folds: Folds
    sweeper: Sweeper
    admin: PolicyAdmin
    snapshots: Snapshots
    monitor: Monitor
    features: FeatureRanking
    models: Models
    feature_importances: FeatureImportances
    feature_cardinalities: FeatureCardinalities
    evaluations: Evaluations
    log_upkeep: LogUpkeep
    audit: AuditTrail
    recovery: Recovery
    activity: ActivityViews
    contributions: ScoreContributions
    retrains: Retrains
    auto_optimizer: AutoOptimizer


def build_use_cases(
    store: StateStore,
    sink: LogSink,
    event_log: EventLog,
    settings: Settings,
    learning: LearningSettings,
    clock: Callable[[], float] = time.time,
    tally: ServedTally | None = None,
) -> UseCases:
    """Every use case over one shared :class:`PolicyCache` of ``store``; ``learning``:
    how the API family the service is wired with reads learning settings (evaluations,
    rebuilds); ``tally``: the counts an API family keeps of events served other than by
    the model (:class:`~service.usecases.finalizations.ServedTally`)."""
    cache = PolicyCache(store, settings.metrics_arm_series)
    rewards = Rewards(cache, store, sink, settings, clock, tally=tally)
    folds = Folds(cache, store, settings, clock)
    rewards.finalizations.deltas_written = folds.accepted
    audit = AuditTrail(sink, event_log, clock)
    rewards.drift.audit = audit
    retrains = Retrains(cache, store, event_log, sink, settings, audit, learning, clock)
    admin = PolicyAdmin(cache, store, event_log, settings, audit, clock, retrains, folds)
    recommender = Recommender(cache, store, sink, settings, clock, rewards.drift)
    features = FeatureRanking(cache, event_log, settings)
    recovery = Recovery(cache, store, sink, event_log, settings, audit, learning)
    evaluations = Evaluations(admin, settings, learning, clock)
    return UseCases(
        store=store,
        sink=sink,
        event_log=event_log,
        cache=cache,
        recommender=recommender,
        rewards=rewards,
        folds=folds,
        sweeper=Sweeper(cache, store, rewards, settings, clock),
        admin=admin,
        snapshots=Snapshots(cache, store, event_log, settings, audit, folds, clock),
        monitor=Monitor(store, sink, event_log, admin, settings, recovery),
        features=features,
        models=Models(admin, store, event_log, folds, clock),
        feature_importances=FeatureImportances(admin, store, settings, clock),
        feature_cardinalities=FeatureCardinalities(event_log),
        evaluations=evaluations,
        log_upkeep=LogUpkeep(admin, event_log, settings, clock),
        audit=audit,
        recovery=recovery,
        activity=ActivityViews(event_log, clock),
        contributions=ScoreContributions(cache),
        retrains=retrains,
        auto_optimizer=AutoOptimizer(admin, evaluations, learning, clock),
    )
