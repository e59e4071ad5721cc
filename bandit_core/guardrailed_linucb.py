"""Guardrailed LinUCB (docs/algorithms.md section 3; Theorem 1 in section 3.2).

LinUCB whose argmax runs only over the candidates that pass every guardrail predicate
(:mod:`bandit_core.guardrails`). When every candidate but the safe arm is blocked the
safe arm is served and the decision says so (assumption 5); when every candidate is
blocked and the safe arm is not among them, :class:`NoEligibleArmError`. Every decision
carries a :class:`GuardrailOutcome`, and the policy keeps the running delta_G
(assumption 4): the share of decisions whose unconstrained UCB argmax was blocked,
overall and per guardrail (:meth:`GuardrailedLinUCB.policy_stats`). Guardrail state
that changes when an arm is served (exposure window, budget spent) and the counters
live in the ``shared`` state part, so every decision lists it in ``state_changed``.

>>> import numpy as np
>>> p = GuardrailedLinUCB(GuardrailedLinUCBConfig(d=2, safe_arm="water", guardrails=(
...     {"type": "feature_threshold", "feature": "age", "op": "<", "value": 18,
...      "arms": ["beer"]},)))
>>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
>>> dec = p.select(["beer", "water"], X, features={"age": 16})
>>> dec.arm_id, dec.guardrail.safe_arm_served, "shared" in dec.state_changed
('water', True, True)
>>> p.select(["beer", "water"], X, features={"age": 30}).guardrail.blocked
{}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from bandit_core.errors import ConfigError
from bandit_core.guardrails import (
    GuardrailContext,
    GuardrailSet,
    GuardrailState,
    check_specs_jsonable,
)
from bandit_core.linucb import LinUCB, LinUCBConfig
from bandit_core.policy import SHARED_PART, Decision, GuardrailOutcome, PolicyConfig, SelectContext


@dataclass(frozen=True)
class GuardrailedLinUCBConfig(LinUCBConfig):
    """LinUCB's hyperparameters plus ``guardrails`` (JSON-able specs, see
    :mod:`bandit_core.guardrails`; empty means plain LinUCB) and ``safe_arm`` (the arm
    served when every other candidate is blocked; it passes every guardrail). The specs
    are built here, so an invalid spec or a safe arm a guardrail names raises
    :class:`ConfigError` when the policy is created."""

    guardrails: tuple[Mapping[str, Any], ...] = ()
    safe_arm: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "guardrails", check_specs_jsonable(self.guardrails))
        if self.safe_arm is not None and (not isinstance(self.safe_arm, str) or not self.safe_arm):
            raise ConfigError(
                f"safe_arm must be a non-empty arm id or None, but got {self.safe_arm!r}"
            )
        GuardrailSet(self.guardrails, self.safe_arm)


class GuardrailedLinUCB(LinUCB[GuardrailState]):
    """Disjoint LinUCB with guardrail filtering, a safe arm and delta_G accounting."""

    NAME: ClassVar[str] = "guardrailed_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = GuardrailedLinUCBConfig
    SHARED_STATE = GuardrailState
    config: GuardrailedLinUCBConfig

    @cached_property
    def guardrails(self) -> GuardrailSet:
        """The configured guardrails and safe arm."""
        return GuardrailSet(self.config.guardrails, self.config.safe_arm)

    def _new_shared_state(self) -> GuardrailState:
        return self.guardrails.new_state()

    def _filter(
        self,
        arm_ids: list[str],
        X: np.ndarray,
        scores: np.ndarray,
        widths: np.ndarray | None,
        order: np.ndarray,
        ctx: SelectContext,
    ) -> tuple[np.ndarray, GuardrailOutcome, tuple[str, ...]]:
        assert widths is not None  # LinUCB always has confidence widths
        states = [self._arms[a] for a in arm_ids]
        pulls = np.array([s.n for s in states], dtype=np.int64)
        sums = np.array([s.reward_sum for s in states])
        gctx = GuardrailContext(
            arm_ids=arm_ids,
            X=X,
            features=ctx.features,
            means=scores - self.config.alpha * widths,
            widths=widths,
            alpha=self.config.alpha,
            pulls=pulls,
            mean_rewards=np.divide(sums, pulls, out=np.zeros(len(arm_ids)), where=pulls > 0),
        )
        screening = self.guardrails.screen(gctx, order, self._shared)
        return screening.eligible, screening.outcome, (SHARED_PART,)

    def _finish_select(self, decision: Decision) -> Decision:
        """The served arm is recorded in the stateful guardrails (exposure window, budget)."""
        self.guardrails.record(self._shared, decision.arm_id)
        return decision

    def policy_stats(self) -> dict[str, float]:
        """``decisions``, ``delta_g`` (share of decisions whose unconstrained UCB argmax
        was blocked), ``delta_g:<name>`` per guardrail, ``safe_arm_served`` (share) and
        ``budget_remaining:<name>:<arm>`` for budget guardrails."""
        return self.guardrails.stats(self._shared)
