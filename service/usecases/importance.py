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
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bandit_core import BasePolicy
from bandit_core.errors import BanditError
from bandit_core.features import BIAS_NAME, BucketNames, Featurizer, SparseRows
from bandit_core.featurized import named_columns
from bandit_core.importance import ColumnImportance, FeatureWeights, feature_importance, stack_rows
from service.errors import InvalidRequest
from service.policies import build_policy, spec_of
from service.schemas import (
    IMPORTANCE_METHOD,
    FeatureImportance,
    FeatureImportanceReport,
    PolicyInfo,
)
from service.settings import Settings
from service.storage.base import DecisionRecord, EventLog
from service.usecases.json_features import logged_rows
from service.usecases.policy_cache import PolicyCache
from service.usecases.replay import learn_logged_rewards

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
        runtime, _, _ = await self.cache.load_all(name)
        weights = _linear_weights(runtime.info, runtime.policy)  # copies: the cache moves on
        logged = await asyncio.to_thread(
            self.event_log.recent_decisions, name, self.settings.feature_importance_decisions
        )
        return await asyncio.to_thread(_report, runtime.info, runtime.policy, weights, logged, top)

    def scores_over_log(self, info: PolicyInfo, since: float, until: float) -> list[FeatureScore]:
        """Feature scores of policy ``info`` over its log's decisions in ``[since, until)``
        (docs/personalizer.md "Feature importances"): a fresh model of ``info``'s config
        learns the range's rewards in the order they were applied
        (:func:`~service.usecases.replay.learn_logged_rewards`), its columns are ranked over the
        range's candidate rows as :meth:`features` ranks them, and each column's importance
        is shared among the features its names involve (:func:`feature_scores`).
        Blocking (reads the log, CPU): run it on a worker thread. 422 for a policy whose
        scores are not linear."""
        events = [
            e for e in self.event_log.iter_events(info.name, since, until) if not e.decision.degraded
        ]
        rewarded = sorted(
            (e for e in events if e.reward is not None),
            key=lambda e: e.reward.created_at,  # type: ignore[union-attr]
        )
        policy = build_policy(spec_of(info))
        learn_logged_rewards(policy, info, rewarded)
        weights = _linear_weights(info, policy)
        newest_first = [e.decision for e in reversed(events)]
        report = _report(info, policy, weights, newest_first, policy.config.d)
        return feature_scores(report.features)


@dataclass(frozen=True)
class FeatureScore:
    """One input feature (a JSON key in a namespace) and its share of the score changes,
    normalized so that the top feature scores 1."""

    namespace: str
    name: str
    score: float


_POSITION = re.compile(r"\[\d+\]$")


def feature_of(name: str) -> tuple[str, str]:
    """``(namespace, key)`` of one featurizer name (docs/features.md, the rules):
    ``user|segment=parent`` -> ``("user", "segment")``, ``device|screen[0]`` ->
    ``("device", "screen")``, ``|age`` -> ``("", "age")``; a name without ``|`` (a
    float-vector policy's ``feature_names``) -> ``("", name)``.

    >>> feature_of("user.address|city=Paris"), feature_of("x[3]")
    (('user.address', 'city'), ('', 'x'))
    """
    namespace, bar, rest = name.partition("|")
    if not bar:
        namespace, rest = "", name
    return namespace, _POSITION.sub("", rest.split("=", 1)[0])


def feature_scores(columns: Sequence[FeatureImportance]) -> list[FeatureScore]:
    """Column importances summed by feature: a column's importance is shared equally
    among the names seen in it (hashed features that collided) and a name's share
    equally among the features it involves (an interaction ``a ^ b`` gives half to each
    side; the bias gives nothing). Sorted by descending score (ties by namespace and
    name), normalized by the top score (all 0 when nothing moved a score).

    >>> cols = [FeatureImportance(column=0, names=["u|s=a ^ i|c=x", "u|t"], importance=2.0,
    ...                           weight=1, mean=0, deviation=1)]
    >>> [(f.namespace, f.name, f.score) for f in feature_scores(cols)]
    [('u', 't', 1.0), ('i', 'c', 0.5), ('u', 's', 0.5)]
    """
    totals: dict[tuple[str, str], float] = {}
    for column in columns:
        names = [n for n in column.names if n != BIAS_NAME]
        for name in names:
            sides = name.split(" ^ ")
            share = column.importance / len(column.names) / len(sides)
            for side in sides:
                key = feature_of(side)
                totals[key] = totals.get(key, 0.0) + share
    top = max(totals.values(), default=0.0)
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))
    return [FeatureScore(ns, key, value / top if top > 0 else 0.0) for (ns, key), value in ranked]


def _linear_weights(info: PolicyInfo, policy: BasePolicy) -> FeatureWeights:
    """The policy's weights; 422 for a policy whose scores are not linear in its input."""
    weights = policy.feature_weights()
    if weights is None:
        raise InvalidRequest(
            f"policy {info.name!r} uses {info.algorithm}, whose scores are not linear in "
            "its input; feature importance needs linucb, guardrailed_linucb, hybrid_linucb "
            "or diag_linucb",
            ["path", "name"],
        )
    return weights


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
        rows = [c.get("features") for c in decision.candidates]  # type: ignore[union-attr]  # read back: a list
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
        candidates: list[dict[str, Any]] = decision.candidates  # type: ignore[assignment]  # read back: a list
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
            names=_float_names(info, c) if names is None else list(names.names(c)),
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


def _float_names(info: PolicyInfo, column: int) -> list[str]:
    """``feature_names`` name the context's (the first) columns; any other is ``x[i]``."""
    named = info.feature_names or []
    return [named[column]] if column < len(named) else [f"x[{column}]"]
