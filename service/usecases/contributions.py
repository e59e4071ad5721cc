"""Each feature's part in a logged decision's score (docs/console.md, "Event"): for a
policy whose score is linear in its input, the mean of the chosen arm's score is
``sum_j w_j x_j`` over its row ``x`` (``BasePolicy.arm_weights``, docs/algorithms.md
sections 1 and 8), and ``w_j x_j`` is column ``j``'s contribution.

The row is the logged one: a float-vector policy's row as sent (named by
``feature_names`` for the context's columns, ``x[j]`` otherwise); a JSON-features
policy's served candidate featurized again with the policy's featurizer, each feature by
name (``bandit_core.featurized.named_columns``) with ``w`` at its column times its own
value, so the features hashed into one column share its product as their values do.
The weights are the model's now, which has learned since the decision.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from bandit_core import BasePolicy
from bandit_core.errors import BanditError
from bandit_core.features import Featurizer
from bandit_core.featurized import named_columns
from service.errors import NotFound
from service.schemas import PolicyInfo
from service.storage.base import DecisionRecord
from service.usecases.importance import float_column_name
from service.usecases.policy_cache import PolicyCache


@dataclass(frozen=True)
class FeatureContribution:
    """One feature of the chosen arm's row: its value ``x_j``, the weight ``w_j`` at its
    column and their product, its part of the mean score."""

    name: str
    value: float
    weight: float
    contribution: float


@dataclass(frozen=True)
class ScoreParts:
    """The contributions to the chosen arm's mean score, largest in magnitude first,
    and their sum (the mean the model gives that row now)."""

    features: list[FeatureContribution]

    @property
    def mean(self) -> float:
        return sum(f.contribution for f in self.features)


@dataclass
class ScoreContributions:
    """The contributions use case; one per process."""

    cache: PolicyCache

    async def of(self, decision: DecisionRecord) -> ScoreParts | None:
        """The parts of ``decision``'s chosen arm's score under its policy's model now;
        None when the policy is gone, its score is not linear in its input, the arm is
        no longer known or the logged row no longer fits the policy."""
        try:
            runtime, _ = await self.cache.load_all(decision.policy)
        except NotFound:
            return None
        return await asyncio.to_thread(_parts, runtime.info, runtime.policy, decision)


def _parts(info: PolicyInfo, policy: BasePolicy, decision: DecisionRecord) -> ScoreParts | None:
    candidates = decision.candidates
    assert isinstance(candidates, list)  # read back from the log: a list, never a Fragment
    served = next((c for c in candidates if c.get("id") == decision.arm_id), None)
    try:
        weights = policy.arm_weights(decision.arm_id)
        if weights is None or served is None:
            return None
        w = np.zeros(policy.config.d)
        w[weights.columns] = weights.weights[0]
        if info.featurizer_config is None:
            row = np.asarray(served["features"], dtype=np.float64)
            if row.shape != w.shape:
                return None
            named = [(float_column_name(info, j), j, float(v)) for j, v in enumerate(row) if v]
        else:
            featurizer = Featurizer(info.featurizer_config)
            named = list(named_columns(featurizer, policy, decision.context, served["features"]))
    except (BanditError, KeyError, TypeError, ValueError, IndexError):
        return None
    features = [
        FeatureContribution(name, value, float(w[column]), float(w[column]) * value)
        for name, column, value in named
    ]
    features.sort(key=lambda f: (-abs(f.contribution), f.name))
    return ScoreParts(features)
