"""Feature importance (``GET /policies/{name}/features``, docs/features.md "Feature
importance"): the input columns that move a linear policy's scores most, by name.

The weights come from the engine (``BasePolicy.feature_weights``); the traffic
statistics and the names come from the latest logged decisions
(``Settings.feature_importance_decisions`` of them, read from the event log when the
report is asked for). Nothing is computed or stored on the request path: the log
already keeps every decision's rows (float vectors) or raw JSON (policies with
``features``), it survives restarts, and a feature absent from recent traffic has no
deviation there, hence no importance to name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bandit_core.importance import feature_importance
from service.errors import InvalidRequest
from service.schemas import (
    IMPORTANCE_METHOD,
    FeatureImportance,
    FeatureImportanceReport,
    PolicyInfo,
)
from service.settings import Settings
from service.storage.base import DecisionRecord, EventLog
from service.usecases.policy_cache import PolicyCache

NO_TRAFFIC_METHOD = (
    "importance = |w_i|: no logged decision carries the columns yet, so every feature is "
    "taken to vary by 1; docs/features.md, Feature importance"
)


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
        weights = runtime.policy.feature_weights()
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
        d = runtime.policy.config.d
        rows = logged_rows(logged, d)
        ranked = feature_importance(weights, rows if len(rows) else None).top(top)
        names = column_names(runtime.info, ranked.columns)
        return FeatureImportanceReport(
            policy=name,
            algorithm=runtime.info.algorithm,
            method=IMPORTANCE_METHOD if len(rows) else NO_TRAFFIC_METHOD,
            decisions=len(logged),
            rows=len(rows),
            features=[
                FeatureImportance(
                    column=int(c),
                    names=n,
                    importance=float(i),
                    weight=float(w),
                    mean=float(m),
                    deviation=float(v),
                )
                for c, n, i, w, m, v in zip(
                    ranked.columns,
                    names,
                    ranked.importance,
                    ranked.weight,
                    ranked.mean,
                    ranked.deviation,
                    strict=True,
                )
            ],
        )


def logged_rows(logged: Sequence[DecisionRecord], d: int) -> np.ndarray:
    """The candidate rows of logged float-vector decisions, ``(n, d)``; rows of another
    length (logged before the policy's dimension changed) are left out."""
    rows = [
        c["features"]
        for decision in logged
        for c in decision.candidates  # type: ignore[union-attr]  # read back: a list
        if isinstance(c.get("features"), list) and len(c["features"]) == d
    ]
    return np.array(rows, dtype=np.float64).reshape(len(rows), d)


def column_names(info: PolicyInfo, columns: np.ndarray) -> list[list[str]]:
    """Names of float-vector columns: ``feature_names`` name the context's (the first)
    columns; any other column is ``x[i]``."""
    named = info.feature_names or []
    return [[named[c]] if c < len(named) else [f"x[{c}]"] for c in columns.tolist()]
