"""Forgetting linear bandits for a world that changes (docs/algorithms.md section 10).

Two disjoint per-arm models, each a ridge regression that weighs recent rewards more:

* **D-LinUCB** (Russac, Vernade and Cappé, "Weighted Linear Bandits for Non-Stationary
  Environments", NeurIPS 2019, Algorithm 1): an observation made ``Δ`` clock units before
  the arm's clock weighs ``w = gamma^Δ``. With ``M = sum w x x^T``, ``M~ = sum w^2 x x^T``
  and ``b = sum w r x``, the arm keeps ``V = lambda*I + M``, ``V~ = lambda*I + M~``,
  ``theta = V^-1 b``, and scores ``x^T theta + alpha * sqrt(x^T V^-1 V~ V^-1 x)``
  (section 10.1). The weights are kept relative to the arm's clock (the paper's rescaled
  form), so every weight is at most 1 and no ``gamma^-t`` overflows at any horizon:
  moving the clock on by ``Δ`` multiplies ``M`` by ``g = gamma^Δ``, ``M~`` by ``g^2`` and
  ``b`` by ``g``, which is the paper's ``V <- gamma V + (1 - gamma) lambda I`` step.
* **SW-LinUCB** (Cheung, Simchi-Levi and Zhu, "Learning to Optimize under
  Non-Stationarity", AISTATS 2019): the ridge over the arm's last ``window`` observations
  (and, with ``window_seconds``, only those younger than that), scored as LinUCB
  (section 10.2). The window's observations are stored in the arm's part, so its memory
  is bounded: ``8 * (window * (d + 2) + 2 d^2 + 2 d)`` bytes per arm.

Two clocks. Per update (``gamma``; ``window``): the clock of an arm is its update count.
Wall-clock (``half_life_seconds``, ``gamma = 0.5^(1 / half_life_seconds)`` per second;
``window_seconds``): the time comes in as the ``now`` argument of
:meth:`ClockedPolicy.select` and :meth:`ClockedPolicy.update` (seconds on any fixed
origin, e.g. Unix time); nothing here reads a clock. The decay of an arm is applied when
its part is written (an update at ``now``) and, without changing the part, when it is
read (a selection at ``now`` scores every arm as of ``now``, so an arm nobody pulled
loses weight as time passes). A selection or update without ``now`` uses each arm's own
clock (its last update).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import InvalidInputError
from bandit_core.features import SparseRows
from bandit_core.linear import RidgeStack, cholesky_inverse, stacked_ucb_terms
from bandit_core.policy import BasePolicy, Decision, PolicyConfig, SelectContext
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite, check_int, check_real, check_true


def _check_now(now: float | None) -> float | None:
    if now is None:
        return None
    return check_real(now, "now", error=InvalidInputError)


class ClockedPolicy(BasePolicy):
    """A policy whose :meth:`select` and :meth:`update` take the time ``now`` (seconds)."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._now: float | None = None

    def select(
        self,
        arm_ids: Sequence[str],
        X: ArrayLike | SparseRows,
        *,
        user_id: str | None = None,
        features: Mapping[str, float] | None = None,
        explore: bool = True,
        now: float | None = None,
    ) -> Decision:
        """:meth:`BasePolicy.select`, every arm scored as of ``now`` (see the module docstring)."""
        self._now = _check_now(now)
        try:
            return super().select(arm_ids, X, user_id=user_id, features=features, explore=explore)
        finally:
            self._now = None

    def update(
        self,
        arm_id: str,
        x: ArrayLike | SparseRows,
        reward: float,
        *,
        user_id: str | None = None,
        now: float | None = None,
    ) -> None:
        """:meth:`BasePolicy.update` with the reward observed at ``now``."""
        self._now = _check_now(now)
        try:
            super().update(arm_id, x, reward, user_id=user_id)
        finally:
            self._now = None


# ---- D-LinUCB -------------------------------------------------------------------------


@dataclass(frozen=True)
class DiscountedLinUCBConfig(PolicyConfig):
    """D-LinUCB hyperparameters: ``ridge_lambda`` (the prior ``V = lambda*I``) and one
    clock: ``gamma`` in ``(0, 1)``, the weight kept per update of the arm (0.99 when
    neither is given), or ``half_life_seconds``, the age at which an observation weighs
    half."""

    ridge_lambda: float = 1.0
    gamma: float | None = None
    half_life_seconds: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "ridge_lambda",
            check_real(self.ridge_lambda, "ridge_lambda", low=0.0, low_open=True),
        )
        check_true(
            self.gamma is None or self.half_life_seconds is None,
            f"give gamma or half_life_seconds, not both, but got gamma={self.gamma!r} "
            f"and half_life_seconds={self.half_life_seconds!r}",
        )
        if self.half_life_seconds is None:
            gamma = 0.99 if self.gamma is None else self.gamma
            object.__setattr__(
                self,
                "gamma",
                check_real(gamma, "gamma", low=0.0, high=1.0, low_open=True, high_open=True),
            )
        else:
            half_life = check_real(
                self.half_life_seconds, "half_life_seconds", low=0.0, low_open=True
            )
            object.__setattr__(self, "half_life_seconds", half_life)

    @property
    def log_decay(self) -> float:
        """``ln gamma`` per clock unit (an update, or a second for ``half_life_seconds``)."""
        if self.half_life_seconds is not None:
            return -math.log(2.0) / self.half_life_seconds
        return math.log(self.gamma)  # type: ignore[arg-type]


@dataclass
class DiscountedArmState(ArrayState):
    """One arm's weighted ridge at its ``clock`` (section 10.1): ``M = sum w x x^T``,
    ``M_sq = sum w^2 x x^T``, ``b = sum w r x`` with ``w = gamma^(clock - t_s)``, and from
    them ``theta = V^-1 b`` and ``width_matrix = V^-1 V~ V^-1``. ``n`` counts rewards
    applied, ``reward_sum`` sums them (undiscounted)."""

    KIND: ClassVar[str] = "discounted_arm"
    M: np.ndarray
    M_sq: np.ndarray
    b: np.ndarray
    theta: np.ndarray
    width_matrix: np.ndarray
    clock: float = 0.0
    n: int = 0
    reward_sum: float = 0.0

    @classmethod
    def prior(cls, d: int, ridge_lambda: float) -> DiscountedArmState:
        """The state before any reward: ``V = V~ = lambda*I``, ``b = 0``."""
        return cls(
            M=np.zeros((d, d)),
            M_sq=np.zeros((d, d)),
            b=np.zeros(d),
            theta=np.zeros(d),
            width_matrix=np.eye(d) / ridge_lambda,
        )

    def add(
        self, x: np.ndarray, reward: float, at: float, log_decay: float, ridge_lambda: float
    ) -> None:
        """Add the observation ``(x, reward)`` made at clock ``at``: a later ``at`` moves
        the clock on (decaying what was there), an earlier one enters with the weight of
        its age."""
        if at >= self.clock:
            g, w, clock = math.exp(log_decay * (at - self.clock)), 1.0, at
        else:
            g, w, clock = 1.0, math.exp(log_decay * (self.clock - at)), self.clock
        xx = np.outer(x, x)
        M = g * self.M + w * xx
        M_sq = (g * g) * self.M_sq + (w * w) * xx
        b = g * self.b + (w * reward) * x
        if not (all_finite(M) and all_finite(b)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and reward {reward} overflow the ridge statistics"
            )
        self.M, self.M_sq, self.b, self.clock = M, M_sq, b, clock
        self.n += 1
        self.reward_sum += reward
        eye = ridge_lambda * np.eye(len(x))
        V_inv = cholesky_inverse(M + eye)
        self.theta = V_inv @ b
        self.width_matrix = V_inv @ (M_sq + eye) @ V_inv


def discounted_ucb_terms(
    states: Sequence[DiscountedArmState], X: np.ndarray, factors: np.ndarray, ridge_lambda: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(x^T theta, sqrt(x^T V^-1 V~ V^-1 x))`` of each arm with its state decayed by
    ``factors`` (``g = gamma^Δ`` per arm, shape ``(K,)``; ``X`` shape ``(K, d)``), without
    changing the states: ``V = lambda*I + g M``, ``V~ = lambda*I + g^2 M~``, ``b <- g b``."""
    M = np.stack([s.M for s in states])
    M_sq = np.stack([s.M_sq for s in states])
    b = np.stack([s.b for s in states])
    V = factors[:, None, None] * M + ridge_lambda * np.eye(X.shape[1])
    Z = np.linalg.solve(V, X[..., None])[..., 0]  # V^-1 x per arm
    mean = factors * np.einsum("kd,kd->k", Z, b)
    quad = ridge_lambda * np.einsum("kd,kd->k", Z, Z) + factors**2 * np.einsum(
        "kd,kde,ke->k", Z, M_sq, Z
    )
    return mean, np.sqrt(np.maximum(quad, 0.0))


class DiscountedLinUCB(ClockedPolicy):
    """D-LinUCB over per-arm discounted ridge states (:class:`DiscountedArmState`)."""

    NAME: ClassVar[str] = "discounted_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = DiscountedLinUCBConfig
    ARM_STATE = DiscountedArmState
    config: DiscountedLinUCBConfig

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._stack = RidgeStack(matrix="width_matrix")
        self._wall_clock = self.config.half_life_seconds is not None

    def _new_arm_state(self) -> DiscountedArmState:
        return DiscountedArmState.prior(self.config.d, self.config.ridge_lambda)

    def _score(
        self, arm_ids: list[str], states: list, X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        mean, width = self._stack.ucb_terms(arm_ids, states, X, self._take_updated())
        if self._wall_clock and self._now is not None:
            elapsed = self._now - np.array([s.clock for s in states])
            # an arm never rewarded has its prior at any time
            stale = np.flatnonzero((elapsed > 0.0) & np.array([s.n > 0 for s in states]))
            if stale.size:
                factors = np.exp(self.config.log_decay * elapsed[stale])
                mean[stale], width[stale] = discounted_ucb_terms(
                    [states[i] for i in stale], X[stale], factors, self.config.ridge_lambda
                )
        return mean + self.config.alpha * width, width

    def _score_batch(
        self, arm_ids: list[str], states: list, X_batch: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        # Batched selections carry no time: every arm is scored at its own clock.
        self._stack.sync(arm_ids, states, self._take_updated())
        mean, width = stacked_ucb_terms(self._stack.A_inv, self._stack.theta, X_batch)
        return mean + self.config.alpha * width, width

    def _update(self, arm_id: str, state, x: np.ndarray, reward: float, ctx: SelectContext) -> None:
        if not self._wall_clock:
            at = state.n + 1.0
        else:
            at = state.clock if self._now is None else self._now
        state.add(x, reward, at, self.config.log_decay, self.config.ridge_lambda)


# ---- SW-LinUCB ------------------------------------------------------------------------


@dataclass(frozen=True)
class SlidingWindowLinUCBConfig(PolicyConfig):
    """SW-LinUCB hyperparameters: ``ridge_lambda`` (the prior ``A = lambda*I``),
    ``window`` (the most observations an arm keeps: its last ``window`` updates) and
    ``window_seconds`` (when given, only observations younger than that count)."""

    ridge_lambda: float = 1.0
    window: int = 1000
    window_seconds: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "ridge_lambda",
            check_real(self.ridge_lambda, "ridge_lambda", low=0.0, low_open=True),
        )
        object.__setattr__(self, "window", check_int(self.window, "window", low=1))
        if self.window_seconds is not None:
            seconds = check_real(self.window_seconds, "window_seconds", low=0.0, low_open=True)
            object.__setattr__(self, "window_seconds", seconds)


@dataclass
class WindowArmState(ArrayState):
    """One arm's ridge over its window (section 10.2): the first ``size`` rows of ``xs``,
    ``rewards`` and ``times`` are the observations in it (capacity ``window``);
    ``A = lambda*I + sum x x^T``, ``A_inv``, ``b = sum r x`` and ``theta = A^-1 b`` over
    them. ``n`` counts rewards applied, ``reward_sum`` sums them; ``since_rebuild`` counts
    updates since ``A`` and ``b`` were last summed anew from the rows."""

    KIND: ClassVar[str] = "window_arm"
    A: np.ndarray
    A_inv: np.ndarray
    b: np.ndarray
    theta: np.ndarray
    xs: np.ndarray
    rewards: np.ndarray
    times: np.ndarray
    size: int = 0
    clock: float = 0.0
    n: int = 0
    reward_sum: float = 0.0
    since_rebuild: int = 0

    @classmethod
    def prior(cls, d: int, ridge_lambda: float, window: int) -> WindowArmState:
        """The state before any reward: an empty window, ``A = lambda*I``, ``b = 0``."""
        return cls(
            A=np.eye(d) * ridge_lambda,
            A_inv=np.eye(d) / ridge_lambda,
            b=np.zeros(d),
            theta=np.zeros(d),
            xs=np.zeros((window, d)),
            rewards=np.zeros(window),
            times=np.zeros(window),
        )

    def live(self, now: float, window_seconds: float | None) -> np.ndarray:
        """Mask over the first ``size`` rows of the observations still in the window at ``now``."""
        times = self.times[: self.size]
        if window_seconds is None:
            return np.ones(self.size, dtype=bool)
        return times > now - window_seconds

    def add(
        self,
        x: np.ndarray,
        reward: float,
        at: float,
        ridge_lambda: float,
        window_seconds: float | None,
    ) -> None:
        """Add the observation ``(x, reward)`` made at ``at``, dropping the observations
        that left the window (too old, or beyond the last ``window``)."""
        clock = max(self.clock, at)
        keep = self.live(clock, window_seconds)
        xs, rewards, times = (
            self.xs[: self.size][keep],
            self.rewards[: self.size][keep],
            self.times[: self.size][keep],
        )
        A, b = self.A.copy(), self.b.copy()
        dropped = ~keep
        if dropped.any():
            gone = self.xs[: self.size][dropped]
            A -= gone.T @ gone
            b -= gone.T @ self.rewards[: self.size][dropped]
        young = window_seconds is None or at > clock - window_seconds
        if young:
            if len(times) == len(self.times):  # full: the oldest observation leaves
                oldest = int(np.argmin(times))
                A -= np.outer(xs[oldest], xs[oldest])
                b -= rewards[oldest] * xs[oldest]
                xs, rewards, times = (np.delete(a, oldest, axis=0) for a in (xs, rewards, times))
            xs, rewards, times = (
                np.vstack([xs, x]),
                np.append(rewards, reward),
                np.append(times, at),
            )
            A += np.outer(x, x)
            b += reward * x
        if not (all_finite(A) and all_finite(b)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and reward {reward} overflow the ridge statistics"
            )
        size = len(times)
        self.xs[:size], self.rewards[:size], self.times[:size] = xs, rewards, times
        self.xs[size:], self.rewards[size:], self.times[size:] = 0.0, 0.0, 0.0
        self.size, self.clock = size, clock
        self.n += 1
        self.reward_sum += reward
        self.since_rebuild += 1
        if self.since_rebuild >= len(self.times):  # bound the drift of the running sums
            A = ridge_lambda * np.eye(len(x)) + xs.T @ xs
            b = xs.T @ rewards
            self.since_rebuild = 0
        self.A, self.b = A, b
        self.A_inv = cholesky_inverse(A)
        self.theta = self.A_inv @ b


class SlidingWindowLinUCB(ClockedPolicy):
    """SW-LinUCB over per-arm windows (:class:`WindowArmState`)."""

    NAME: ClassVar[str] = "sliding_window_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = SlidingWindowLinUCBConfig
    ARM_STATE = WindowArmState
    config: SlidingWindowLinUCBConfig

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._stack = RidgeStack()

    def _new_arm_state(self) -> WindowArmState:
        return WindowArmState.prior(self.config.d, self.config.ridge_lambda, self.config.window)

    def _score(
        self, arm_ids: list[str], states: list, X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        mean, width = self._stack.ucb_terms(arm_ids, states, X, self._take_updated())
        seconds, now = self.config.window_seconds, self._now
        if seconds is not None and now is not None:
            for i, state in enumerate(states):
                live = state.live(now, seconds)
                if not live.all():
                    xs, rewards = state.xs[: state.size][live], state.rewards[: state.size][live]
                    A = self.config.ridge_lambda * np.eye(self.config.d) + xs.T @ xs
                    z = np.linalg.solve(A, X[i])
                    mean[i], width[i] = z @ (xs.T @ rewards), math.sqrt(max(float(z @ X[i]), 0.0))
        return mean + self.config.alpha * width, width

    def _score_batch(
        self, arm_ids: list[str], states: list, X_batch: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        # Batched selections carry no time: every window is taken at its arm's clock.
        self._stack.sync(arm_ids, states, self._take_updated())
        mean, width = stacked_ucb_terms(self._stack.A_inv, self._stack.theta, X_batch)
        return mean + self.config.alpha * width, width

    def _update(self, arm_id: str, state, x: np.ndarray, reward: float, ctx: SelectContext) -> None:
        if self.config.window_seconds is None:
            at = state.n + 1.0
        else:
            at = state.clock if self._now is None else self._now
        state.add(x, reward, at, self.config.ridge_lambda, self.config.window_seconds)


def window_memory_bytes(d: int, window: int) -> int:
    """Bytes of float64 arrays one :class:`WindowArmState` holds:
    ``8 * (window * (d + 2) + 2 d^2 + 2 d)``."""
    return 8 * (window * (d + 2) + 2 * d * d + 2 * d)
