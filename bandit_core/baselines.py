"""Non-contextual baselines: uniform random and epsilon-greedy.

``random`` scores every candidate 0, so the shared tie-break serves a uniformly random
arm (propensity ``1/K``). ``epsilon_greedy`` serves the arm of highest mean reward
(unrewarded arms score the top of the reward range, so each is tried) and, with
probability ``epsilon`` (default 0.1), a uniformly random arm.

>>> import numpy as np
>>> p = RandomPolicy(PolicyConfig(d=1, seed=0))
>>> p.select(["a", "b", "c", "d"], np.zeros((4, 1))).propensity
0.25
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.policy import BasePolicy, PolicyConfig, SelectContext
from bandit_core.state import ArrayState


@dataclass
class CountArmState(ArrayState):
    """Reward counters of one arm: ``n`` rewards applied, ``reward_sum`` their sum."""

    KIND: ClassVar[str] = "count_arm"
    n: int = 0
    reward_sum: float = 0.0


class _CountingPolicy(BasePolicy[CountArmState, None, None]):
    ARM_STATE = CountArmState
    EXPLORATION_KNOB: ClassVar[str] = "epsilon"  # the scores have no confidence width

    def _new_arm_state(self) -> CountArmState:
        return CountArmState()

    def _update(
        self, arm_id: str, state: CountArmState, x: np.ndarray, reward: float, ctx: SelectContext
    ) -> None:
        state.n += 1
        state.reward_sum += reward


class RandomPolicy(_CountingPolicy):
    """Serves a uniformly random candidate."""

    NAME: ClassVar[str] = "random"

    def _score(
        self, arm_ids: list[str], states: list[CountArmState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, None]:
        return np.zeros(len(arm_ids)), None


@dataclass(frozen=True)
class EpsilonGreedyConfig(PolicyConfig):
    """Epsilon-greedy explores with probability ``epsilon`` (default 0.1)."""

    epsilon: float = 0.1


class EpsilonGreedy(_CountingPolicy):
    """Greedy on each arm's mean reward with an epsilon exploration floor."""

    NAME: ClassVar[str] = "epsilon_greedy"
    CONFIG: ClassVar[type[PolicyConfig]] = EpsilonGreedyConfig

    def _score(
        self, arm_ids: list[str], states: list[CountArmState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, None]:
        optimistic = self.config.reward_range[1]
        return np.array([s.reward_sum / s.n if s.n else optimistic for s in states]), None
