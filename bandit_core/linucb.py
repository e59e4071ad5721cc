"""Disjoint LinUCB (Li et al. 2010; docs/algorithms.md section 1).

Score of arm ``a``: ``x_a^T theta_a + alpha * sqrt(x_a^T A_a^-1 x_a)``; the argmax is
served, ties broken uniformly at random.

>>> import numpy as np
>>> p = LinUCB(LinUCBConfig(d=2, alpha=0.0))
>>> X = np.eye(2)
>>> _ = p.select(["a", "b"], X)  # cold start: both arms get the prior state
>>> for _ in range(3):
...     p.update("a", X[0], 1.0)
>>> p.select(["a", "b"], X).arm_id
'a'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.importance import FeatureWeights
from bandit_core.linear import LinearArmState, RidgeStack
from bandit_core.parts import SharedT
from bandit_core.policy import BasePolicy, PolicyConfig, SelectContext
from bandit_core.validation import check_int, check_real


@dataclass(frozen=True)
class LinUCBConfig(PolicyConfig):
    """LinUCB hyperparameters: ``ridge_lambda`` (the prior ``A = lambda*I``) and
    ``refactor_every`` (updates between Cholesky re-derivations of ``A^-1``)."""

    ridge_lambda: float = 1.0
    refactor_every: int = 1000

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "ridge_lambda",
            check_real(self.ridge_lambda, "ridge_lambda", low=0.0, low_open=True),
        )
        object.__setattr__(
            self, "refactor_every", check_int(self.refactor_every, "refactor_every", low=1)
        )


class LinUCB(BasePolicy[LinearArmState, SharedT, None]):
    """Disjoint LinUCB over per-arm ridge states (:class:`LinearArmState`); generic over
    its ``"shared"`` part, which only a subclass adds (guardrail counters)."""

    NAME: ClassVar[str] = "linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = LinUCBConfig
    ARM_STATE = LinearArmState
    config: LinUCBConfig

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._stack: RidgeStack[LinearArmState] = RidgeStack()

    @property
    def score_cache(self) -> RidgeStack[LinearArmState]:
        """The stacked arrays of the last candidate list scored, to read (the cache
        rules are in :mod:`bandit_core.policy`)."""
        return self._stack

    def feature_weights(self) -> FeatureWeights:
        """Every known arm's ``theta_a = A_a^-1 b_a`` over all ``d`` columns, one row per
        arm, counted by the arm's rewards."""
        states = list(self._arms.values())
        return FeatureWeights(
            columns=np.arange(self.config.d),
            weights=np.array([s.theta for s in states]).reshape(len(states), self.config.d),
            rewards=np.array([float(s.n) for s in states]),
        )

    def arm_weights(self, arm_id: str) -> FeatureWeights:
        """``theta_a = A_a^-1 b_a`` of ``arm_id`` over all ``d`` columns, the mean
        ``x^T theta_a`` of its score (docs/algorithms.md section 1), counted by its
        rewards."""
        state = self._known_arm(arm_id)
        return FeatureWeights(
            columns=np.arange(self.config.d),
            weights=np.array(state.theta).reshape(1, self.config.d),
            rewards=np.array([float(state.n)]),
        )

    def _new_arm_state(self) -> LinearArmState:
        return LinearArmState.prior(self.config.d, self.config.ridge_lambda)

    def _score(
        self, arm_ids: list[str], states: list[LinearArmState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        mean, width = self._stack.ucb_terms(arm_ids, states, X, self._take_updated())
        return mean + self.config.alpha * width, width

    def _score_batch(
        self,
        arm_ids: list[str],
        states: list[LinearArmState],
        X_batch: np.ndarray,
        ctx: SelectContext,
    ) -> tuple[np.ndarray, np.ndarray]:
        return self._score(arm_ids, states, X_batch, ctx)

    def _update(
        self, arm_id: str, state: LinearArmState, x: np.ndarray, reward: float, ctx: SelectContext
    ) -> None:
        state.add(x, reward, reward, self.config.refactor_every)
