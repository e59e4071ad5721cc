"""Feature importance (``GET /policies/{name}/features``, docs/features.md "Feature
importance"): the input columns that move a linear policy's scores most, by name.

The weights come from the engine (``BasePolicy.feature_weights``); the traffic
statistics and the names come from the latest logged decisions
(``Settings.feature_importance_decisions`` of them, read from the event log when the
report is asked for). Nothing is computed or stored on the request path: the log
already keeps every decision's rows (float vectors) or raw JSON (policies with
``features``), it survives restarts, and a feature absent from recent traffic has no
deviation there, hence no importance to name.

With JSON features, every logged decision is featurized again with the policy's
featurizer (its candidates' rows, for the statistics) and the served candidate is
described feature by feature (``bandit_core.featurized.named_columns``) into a bounded
``BucketNames`` keyed by column. Only served rows ever get a weight (a ridge or
diagonal fit gives 0 to a column no reward touched), so the served candidates name
every column that can have an importance above 0.

:func:`scores_over_log` is the other method, over a time range of the log:
leave-one-feature-out with the offline estimator (the feature-importance jobs of
``service.usecases.importance_jobs`` run it in a worker process,
:func:`scores_over_log_in_worker`; docs/personalizer.md says why not the weights).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from bandit_core import BasePolicy
from bandit_core.errors import BanditError
from bandit_core.evaluation.lofo import (
    Feature,
    FeatureEffect,
    JsonEvent,
    LofoReplay,
    effects,
    features_of,
    leave_one_feature_out,
)
from bandit_core.features import BucketNames, Featurizer, FeaturizerConfig, SparseRows
from bandit_core.featurized import named_columns
from bandit_core.importance import ColumnImportance, FeatureWeights, feature_importance, stack_rows
from service.errors import InvalidRequest
from service.policies import build_policy, spec_of
from service.schemas import (
    IMPORTANCE_METHOD,
    FeatureImportance,
    FeatureImportanceReport,
    FeatureScore,
    PolicyInfo,
)
from service.settings import Settings
from service.storage.base import DecisionRecord, EventLog, LoggedDecision
from service.usecases.evaluation_streams import DecisionQuery
from service.usecases.json_features import logged_rows
from service.usecases.offline_engine import OfflineEngine
from service.usecases.policy_cache import PolicyCache

NO_TRAFFIC_METHOD = (
    "importance = |w_i|: no logged decision carries the columns yet, so every feature is "
    "taken to vary by 1; docs/features.md, Feature importance"
)
MAX_SAMPLE_ENTRIES = 4_000_000
"""Most nonzero entries the sampled rows may hold (64 MB as sparse rows); older decisions
beyond them are left out."""


@dataclass
class FeatureRanking:
    """The feature-importance use case; one per process."""

    cache: PolicyCache
    event_log: EventLog
    settings: Settings

    async def features(self, name: str, top: int) -> FeatureImportanceReport:
        """The ``top`` columns of policy ``name`` by importance (422 for a policy whose
        algorithm is not linear in its input)."""
        runtime, _ = await self.cache.load_all(name)
        weights = runtime.policy.feature_weights()  # copies: the cached policy moves on
        if weights is None:
            raise InvalidRequest(
                f"policy {name!r} uses {runtime.info.algorithm}, whose scores are not linear in "
                "its input; feature importance needs linucb, guardrailed_linucb, hybrid_linucb "
                "or diag_linucb",
                ["path", "name"],
            )
        logged = await asyncio.to_thread(
            self.event_log.recent_decisions, name, self.settings.feature_importance_decisions
        )
        return await asyncio.to_thread(_report, runtime.info, runtime.policy, weights, logged, top)


@dataclass(frozen=True)
class FeatureScores:
    """The scores over ``events`` rewarded decisions, by descending score, and the
    replay's value with every feature."""

    events: int
    value: float
    scores: list[FeatureScore]


def _report(
    info: PolicyInfo,
    policy: BasePolicy,
    weights: FeatureWeights,
    logged: Sequence[DecisionRecord],
    top: int,
) -> FeatureImportanceReport:
    """The report over ``logged`` (newest first); CPU work, run off the event loop."""
    d = policy.config.d
    if info.features is None:
        blocks, names = _float_rows(logged, d), None
    else:
        blocks, names = _json_rows(info, policy, logged)
    n_rows = sum(b.n_rows for b in blocks)
    ranked = feature_importance(weights, stack_rows(blocks, d) if n_rows else None).top(top)
    return FeatureImportanceReport(
        policy=info.name,
        algorithm=info.algorithm,
        method=IMPORTANCE_METHOD if n_rows else NO_TRAFFIC_METHOD,
        decisions=len(blocks),
        rows=n_rows,
        features=_entries(ranked, info, names),
    )


def _float_rows(logged: Sequence[DecisionRecord], d: int) -> list[SparseRows]:
    """Each logged float-vector decision's candidate rows, newest first, within
    :data:`MAX_SAMPLE_ENTRIES`; decisions whose rows have another length (logged before
    the policy's dimension changed) are left out."""
    blocks: list[SparseRows] = []
    total = 0
    for decision in logged:
        rows = [c.get("features") for c in decision.candidates]
        if not rows or not all(isinstance(r, list) and len(r) == d for r in rows):
            continue
        block = SparseRows.from_dense(np.array(rows, dtype=np.float64))
        total += len(block.values)
        if total > MAX_SAMPLE_ENTRIES:
            break
        blocks.append(block)
    return blocks


def _json_rows(
    info: PolicyInfo, policy: BasePolicy, logged: Sequence[DecisionRecord]
) -> tuple[list[SparseRows], BucketNames]:
    """Each logged JSON decision featurized again (its candidates' rows, newest first,
    within :data:`MAX_SAMPLE_ENTRIES`) and the names of the served
    candidates' columns. A decision the featurizer refuses now (logged under other
    limits) is left out."""
    config = info.featurizer_config
    assert config is not None
    featurizer = Featurizer(config)
    names = BucketNames()
    blocks: list[SparseRows] = []
    total = 0
    for decision in logged:
        candidates = decision.candidates
        assert isinstance(candidates, list)  # read back from the log: a list, never a Fragment
        served = next((c["features"] for c in candidates if c.get("id") == decision.arm_id), None)
        try:
            rows = logged_rows(featurizer, policy, decision.context, candidates)
            named = named_columns(featurizer, policy, decision.context, served)
        except (BanditError, KeyError, TypeError):
            continue
        block = rows if isinstance(rows, SparseRows) else SparseRows.from_dense(rows)
        total += len(block.values)
        if total > MAX_SAMPLE_ENTRIES:
            break
        blocks.append(block)
        names.observe(named)
    return blocks, names


def _entries(
    ranked: ColumnImportance, info: PolicyInfo, names: BucketNames | None
) -> list[FeatureImportance]:
    return [
        FeatureImportance(
            column=c,
            names=[float_column_name(info, c)] if names is None else list(names.names(c)),
            importance=float(i),
            weight=float(w),
            mean=float(m),
            deviation=float(v),
        )
        for c, i, w, m, v in zip(
            ranked.columns.tolist(),
            ranked.importance,
            ranked.weight,
            ranked.mean,
            ranked.deviation,
            strict=True,
        )
    ]


def float_column_name(info: PolicyInfo, column: int) -> str:
    """The name of a float-vector policy's ``column``: ``feature_names`` name the
    context's (the first) columns; any other is ``x[i]``."""
    named = info.feature_names or []
    return named[column] if column < len(named) else f"x[{column}]"


def log_range_featurizer(info: PolicyInfo) -> FeaturizerConfig:
    """The featurizer :func:`scores_over_log` featurizes ``info``'s logged JSON with;
    422 for a policy that takes float vectors."""
    config = info.featurizer_config
    if config is None:
        raise InvalidRequest(
            f"policy {info.name!r} takes float vectors; feature importance over a log "
            "range needs a policy with JSON features",
            ["path", "name"],
        )
    return config


def scores_over_log(
    event_log: EventLog, info: PolicyInfo, since: float, until: float
) -> FeatureScores:
    """Feature scores of policy ``info`` over the rewarded decisions of its log in
    ``[since, until)``, by leaving one feature out
    (:func:`bandit_core.evaluation.lofo.leave_one_feature_out`; docs/personalizer.md
    "Feature importances"): a fresh policy of ``info``'s config replays the range with
    every feature and without each, and a feature's score is what the replay's SNIPS
    value loses without it (0 when it loses nothing), divided by the largest loss.
    Blocking (reads the log, one replay per feature). 422 for a policy without JSON
    ``features``."""
    config = log_range_featurizer(info)
    events = json_events(event_log.iter_events(info.name, since, until))
    spec = spec_of(info)
    value, found = leave_one_feature_out(lambda: build_policy(spec), Featurizer(config), events)
    return _scores(len(events), value, found)


def json_events(logged: Iterable[LoggedDecision]) -> list[JsonEvent]:
    """The rewarded, non-degraded decisions of ``logged`` as
    :class:`~bandit_core.evaluation.lofo.JsonEvent` objects, in their order."""
    return [
        JsonEvent(
            context=d.context,
            arm_ids=[c["id"] for c in d.candidates],
            actions=[c["features"] for c in d.candidates],
            arm_id=d.arm_id,
            propensity=d.propensity,
            reward=e.reward.value,
            user_id=d.user_id,
        )
        for e in logged
        if e.reward is not None and not (d := e.decision).degraded
    ]


def _scores(events: int, value: float, found: Sequence[FeatureEffect]) -> FeatureScores:
    """The scores of the effects ``found``: a drop divided by the largest (0 when none
    drops)."""
    top = max((f.drop for f in found), default=0.0)
    return FeatureScores(
        events=events,
        value=value,
        scores=[
            FeatureScore(
                namespace=f.feature[0],
                name=f.feature[1],
                score=max(f.drop, 0.0) / top if top > 0 else 0.0,
            )
            for f in found
        ],
    )


def scores_over_log_in_worker(
    log_url: str, info_json: str, since: float, until: float
) -> FeatureScores:
    """Worker entry point (a spawned process): :func:`scores_over_log` over the event
    log at ``log_url`` for the policy ``info_json`` (a ``PolicyInfo`` as JSON)."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    try:
        info = PolicyInfo.model_validate_json(info_json)
        return scores_over_log(event_log, info, since, until)
    finally:
        event_log.close()


def scores_over_log_on(
    engine: OfflineEngine, log_url: str, info_json: str, since: float, until: float
) -> FeatureScores:
    """Worker entry point (a spawned process): :func:`scores_over_log_in_worker` here,
    or on Ray :func:`scores_over_days` (an actor per replay, each reading the days of
    the log itself). Equal results either way."""
    if engine.kind == "local":
        return scores_over_log_in_worker(log_url, info_json, since, until)
    return scores_over_days(engine, log_url, info_json, since, until)


def features_in(query: DecisionQuery) -> tuple[int, set[Feature]]:
    """How many decisions ``query`` covers and their features (a task: read where it
    runs, not kept)."""
    events = json_events(query.load())
    return len(events), features_of(events)


@dataclass(frozen=True)
class LofoStream:
    """The replay of :func:`scores_over_log` with every feature (``dropped`` None) or
    without one, over the day partitions ``parts`` in time order (a
    :class:`~service.usecases.offline_engine.PartitionStream`)."""

    parts: tuple[DecisionQuery, ...]
    info_json: str
    dropped: Feature | None

    @property
    def partitions(self) -> int:
        return len(self.parts)

    def begin(self) -> LofoReplay:
        info = PolicyInfo.model_validate_json(self.info_json)
        return LofoReplay(build_policy(spec_of(info)), self.dropped)

    def advance(self, state: LofoReplay, partition: int) -> int:
        info = PolicyInfo.model_validate_json(self.info_json)
        events = json_events(self.parts[partition].load())
        state.feed(Featurizer(log_range_featurizer(info)), events)
        return len(events)

    def finished(self, state: LofoReplay) -> bool:
        return False

    def result(self, state: LofoReplay) -> float:
        return state.value


def scores_over_days(
    engine: OfflineEngine, log_url: str, info_json: str, since: float, until: float
) -> FeatureScores:
    """:func:`scores_over_log_in_worker` over the log's UTC days: the features found by
    a task per day, then one :class:`LofoStream` per replay (with every feature, then
    without each) on ``engine``, the driver reading no event. The values are summed
    in the same order as over the whole range, so the scores are equal bit for bit."""
    info = PolicyInfo.model_validate_json(info_json)
    log_range_featurizer(info)  # a policy of float vectors: 422 before any work
    parts = tuple(DecisionQuery(log_url, info.name, since, until).days())
    found = engine.map(features_in, [(p,) for p in parts])
    features = sorted(set().union(*(f for _, f in found)))
    dropped: list[Feature | None] = [None, *features]
    values = engine.stream([LofoStream(parts, info_json, f) for f in dropped])
    without = dict(zip(features, values[1:], strict=True))
    return _scores(sum(n for n, _ in found), values[0], effects(values[0], without))
