"""Forgetting linear bandits for a world that changes (docs/algorithms.md section 10).

Two disjoint per-arm models, each a ridge regression that weighs recent rewards more:

* **D-LinUCB** (Russac, Vernade and Cappé, "Weighted Linear Bandits for Non-Stationary
  Environments", NeurIPS 2019, Algorithm 1): an observation made ``Δ`` clock units before
  the arm's clock weighs ``w = gamma^Δ``; the arm keeps ``V = lambda*I + sum w x x^T``,
  ``V~ = lambda*I + sum w^2 x x^T``, ``b = sum w r x``, ``theta = V^-1 b``, and scores
  ``x^T theta + alpha * sqrt(x^T V^-1 V~ V^-1 x)`` (section 10.1), with the weights kept
  relative to the arm's clock (the rescaled form (10.2): none exceeds 1, nothing overflows).
* **SW-LinUCB** (Cheung, Simchi-Levi and Zhu, "Learning to Optimize under
  Non-Stationarity", AISTATS 2019): the ridge over the arm's last ``window`` observations
  (with ``window_seconds``, only those younger than that), scored as LinUCB (section
  10.2); the part stores the window's rows: ``8 * (window * (d + 2) + 2 d^2 + 2 d)`` bytes.

Two clocks. Per update (``gamma``; ``window``): the clock of an arm is its update count.
Wall-clock (``half_life_seconds``, ``gamma = 0.5^(1 / half_life_seconds)`` per second;
``window_seconds``): the time is the ``now`` of :meth:`ClockedPolicy.select` and
:meth:`ClockedPolicy.update`, or of :func:`bandit_core.clock.clock_at` for a block
(seconds on any fixed origin); nothing here reads a clock. An update at ``now`` writes the
decay into the arm's part; a selection at ``now`` scores every arm as of ``now`` without
changing its part. Without a time each arm is used at its own clock (its last update).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.clock import Clocked
from bandit_core.errors import InvalidInputError
from bandit_core.features import SparseRows
from bandit_core.linear import (
    RidgeStack,
    cholesky_inverse,
    sherman_morrison_downdate,
    sherman_morrison_term,
    stacked_ucb_terms,
)
from bandit_core.policy import BasePolicy, Decision, PolicyConfig, SelectContext
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite, check_int, check_real, check_true

# the arm states of the clocked policies (defined below)
ClockedArmT = TypeVar("ClockedArmT", "DiscountedArmState", "WindowArmState")


class ClockedPolicy(Clocked, BasePolicy[ClockedArmT, None, None]):
    """A policy whose :meth:`select` and :meth:`update` take the time ``now`` (seconds).

    Its arms' states are stacked in a :class:`~bandit_core.linear.RidgeStack`
    (:meth:`_new_stack`), whose matrix gives the width ``sqrt(x^T M x)`` at each arm's clock.
    """

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._wall_clock = self.uses_wall_clock()
        self._stack: RidgeStack[ClockedArmT] = self._new_stack()

    def _new_stack(self) -> RidgeStack[ClockedArmT]:
        """The stack the arms are scored from (LinUCB's by default)."""
        return RidgeStack()

    @abc.abstractmethod
    def uses_wall_clock(self) -> bool:
        """Whether the arms' clock is wall time in seconds (``now``) rather than their update count."""

    def _observation_time(self, n: int, clock: float) -> float:
        """The clock reading of the observation an update adds to an arm that has had
        ``n`` updates and is at ``clock``: ``n + 1`` on the per-update clock, else ``now``
        (the arm's own clock when the update carries no time)."""
        if not self._wall_clock:
            return n + 1.0
        return clock if self._now is None else self._now

    def _score_batch(
        self, arm_ids: list[str], states: list[ClockedArmT], X_batch: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        if self._wall_clock:  # each row scored as of now (or each arm at its own clock)
            scores, widths = np.empty(X_batch.shape[:2]), np.empty(X_batch.shape[:2])
            for i, X in enumerate(X_batch):
                scores[i], widths[i] = self._score(arm_ids, states, X, ctx)
            return scores, widths
        self._stack.sync(arm_ids, states, self._take_updated())
        mean, width = stacked_ucb_terms(self._stack.A_inv, self._stack.theta, X_batch)
        return mean + self.config.alpha * width, width

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
        select = super().select
        with nullcontext() if now is None else self.at(now):
            return select(arm_ids, X, user_id=user_id, features=features, explore=explore)

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
        update = super().update
        with nullcontext() if now is None else self.at(now):
            update(arm_id, x, reward, user_id=user_id)


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
    """One arm's weighted ridge at its ``clock`` (section 10.1): ``V = lambda*I + sum w x x^T``,
    ``V_tilde = lambda*I + sum w^2 x x^T``, ``b = sum w r x`` with ``w = gamma^(clock - t_s)``,
    and from them ``theta = V^-1 b`` and ``width_matrix = V^-1 V_tilde V^-1``. ``n`` counts
    rewards applied, ``reward_sum`` sums them (undiscounted)."""

    KIND: ClassVar[str] = "discounted_arm"
    V: np.ndarray
    V_tilde: np.ndarray
    b: np.ndarray
    theta: np.ndarray
    width_matrix: np.ndarray
    clock: float = 0.0
    n: int = 0
    reward_sum: float = 0.0

    @classmethod
    def prior(cls, d: int, ridge_lambda: float) -> DiscountedArmState:
        """The state before any reward: ``V = V_tilde = lambda*I``, ``b = 0``."""
        return cls(
            V=np.eye(d) * ridge_lambda,
            V_tilde=np.eye(d) * ridge_lambda,
            b=np.zeros(d),
            theta=np.zeros(d),
            width_matrix=np.eye(d) / ridge_lambda,
        )

    def add(
        self, x: np.ndarray, reward: float, at: float, log_decay: float, ridge_lambda: float
    ) -> None:
        """Add the observation ``(x, reward)`` made at clock ``at``: a later ``at`` moves
        the clock on (decaying what was there by ``g = gamma^(at - clock)``), an earlier
        one enters with the weight ``w`` of its age."""
        g, w, clock = clock_factors(self.clock, at, log_decay)
        # (10.2) then the row, into one buffer: one finiteness check before any field changes
        d = len(x)
        new = np.empty((2 * d + 1, d))
        V, V_tilde, b = new[:d], new[d:-1], new[-1]
        xx = np.multiply.outer(x, x)
        np.multiply(self.V, g, V)
        V.ravel()[:: d + 1] += (1.0 - g) * ridge_lambda
        V += xx if w == 1.0 else w * xx
        np.multiply(self.V_tilde, g * g, V_tilde)
        V_tilde.ravel()[:: d + 1] += (1.0 - g * g) * ridge_lambda
        V_tilde += xx if w == 1.0 else (w * w) * xx
        np.multiply(self.b, g, b)
        b += (w * reward) * x
        if not all_finite(new):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and reward {reward} overflow the ridge statistics"
            )
        V_inv = cholesky_inverse(V)
        self.V, self.V_tilde, self.b, self.clock = V, V_tilde, b, clock
        self.theta = V_inv @ b
        self.width_matrix = V_inv @ V_tilde @ V_inv
        self.n += 1
        self.reward_sum += reward


def clock_factors(clock: float, at: float, log_decay: float) -> tuple[float, float, float]:
    """``(g, w, clock')`` of an observation made at ``at`` entering a part at ``clock``
    (10.2): a later ``at`` decays the part by ``g = gamma^(at - clock)`` and moves its
    clock to ``at``; an earlier one leaves it (``g = 1``) and enters with the weight
    ``w = gamma^(clock - at)`` of its age."""
    if at >= clock:
        return math.exp(log_decay * (at - clock)), 1.0, at
    return 1.0, math.exp(log_decay * (clock - at)), clock


class DecayingStack(RidgeStack[DiscountedArmState]):
    """:class:`~bandit_core.linear.RidgeStack` of discounted states that also scores them
    as of a later time by (10.2a) (section 10.1, "Two clocks"): with ``V = Q diag(e) Q^T``,
    ``beta = Q^T b`` and ``T = Q^T V~ Q`` kept per arm (:func:`eigen_rows`), two stacked
    matrix-vector products per candidate, no ``d x d`` solve. An arm's decomposition is
    computed when its state changes and kept by arm id, so a changed candidate list stacks
    the kept ones (those of earlier lists are dropped once they outnumber the latest four
    to one).
    """

    def __init__(self) -> None:
        super().__init__(matrix="width_matrix")
        self._eigen: dict[str, tuple[DiscountedArmState, int, np.ndarray]] = {}
        self.eigen = np.zeros((0, 0, 0))  # per arm: rows e, Q^T (d), beta, T (d)

    def _arm_eigen(self, arm_id: str, state: DiscountedArmState) -> np.ndarray:
        """:func:`eigen_rows` of ``state``, kept by arm id."""
        kept = self._eigen.get(arm_id)
        if kept is not None and kept[0] is state and kept[1] == state.n:
            return kept[2]
        rows = eigen_rows(state)
        self._eigen[arm_id] = (state, state.n, rows)
        return rows

    def _rebuild(self) -> None:
        super()._rebuild()
        if len(self._eigen) > 4 * len(self._ids):
            self._eigen = {a: self._eigen[a] for a in self._ids if a in self._eigen}
        self.eigen = np.stack([self._arm_eigen(a, s) for a, s in zip(self._ids, self._states)])

    def _write(self, i: int, state: DiscountedArmState) -> None:
        super()._write(i, state)
        self.eigen[i] = self._arm_eigen(self._ids[i], state)

    def decayed_terms(
        self, X: np.ndarray, factors: np.ndarray, ridge_lambda: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`decayed_terms` of every stacked arm, after :meth:`sync`."""
        return decayed_terms(self.eigen, X, factors, ridge_lambda)


def eigen_rows(state: DiscountedArmState) -> np.ndarray:
    """``[e; Q^T; beta; T]`` of ``state`` (``V = Q diag(e) Q^T``, ``beta = Q^T b``,
    ``T = Q^T V~ Q``), shape ``(2 d + 2, d)``: what (10.2a) needs to score ``state`` at
    any later time."""
    e, Q = np.linalg.eigh(state.V)
    d = len(e)
    rows = np.empty((2 * d + 2, d))
    rows[0], rows[1 : d + 1] = e, Q.T
    np.matmul(Q.T, state.b, rows[d + 1])
    np.matmul(Q.T @ state.V_tilde, Q, rows[d + 2 :])
    return rows


def decayed_terms(
    eigen: np.ndarray, X: np.ndarray, factors: np.ndarray, ridge_lambda: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(x^T theta, sqrt(x^T V^-1 V~ V^-1 x))`` (10.2a) of each row ``x`` of ``X``
    (shape ``(K, d)``) under the state whose :func:`eigen_rows` are ``eigen[i]`` (shape
    ``(K, 2 d + 2, d)``) with its clock moved on by ``factors[i]`` (``g = gamma^Δ``,
    shape ``(K,)``); the states do not change."""
    d = X.shape[1]
    e, Q_T, beta, T = eigen[:, 0], eigen[:, 1 : d + 1], eigen[:, d + 1], eigen[:, d + 2 :]
    g = factors[:, None]
    y = np.matmul(Q_T, X[..., None])[..., 0] / (g * e + (1.0 - g) * ridge_lambda)
    mean = factors * np.add.reduce(beta * y, axis=-1)
    Ty = np.matmul(T, y[..., None])[..., 0]
    g2 = factors * factors
    quad = g2 * np.add.reduce(y * Ty, axis=-1) + (1.0 - g2) * ridge_lambda * np.add.reduce(
        y * y, axis=-1
    )
    return mean, np.sqrt(np.maximum(quad, 0.0, out=quad), out=quad)


class DiscountedLinUCB(ClockedPolicy[DiscountedArmState]):
    """D-LinUCB over per-arm discounted ridge states (:class:`DiscountedArmState`)."""

    NAME: ClassVar[str] = "discounted_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = DiscountedLinUCBConfig
    ARM_STATE = DiscountedArmState
    config: DiscountedLinUCBConfig

    def uses_wall_clock(self) -> bool:
        """True with ``half_life_seconds``, False with ``gamma``."""
        return self.config.half_life_seconds is not None

    def _new_stack(self) -> RidgeStack[DiscountedArmState]:
        # on wall-clock time a selection scores arms as of now: the decaying stack
        return DecayingStack() if self._wall_clock else RidgeStack(matrix="width_matrix")

    def _new_arm_state(self) -> DiscountedArmState:
        return DiscountedArmState.prior(self.config.d, self.config.ridge_lambda)

    def _score(
        self,
        arm_ids: list[str],
        states: list[DiscountedArmState],
        X: np.ndarray,
        ctx: SelectContext,
    ) -> tuple[np.ndarray, np.ndarray]:
        stack = self._stack
        if self._now is None or not isinstance(stack, DecayingStack):
            mean, width = stack.ucb_terms(arm_ids, states, X, self._take_updated())
            return mean + self.config.alpha * width, width
        stack.sync(arm_ids, states, self._take_updated())
        elapsed = self._now - np.array([s.clock for s in states])
        # an arm never rewarded has its prior at any time
        stale = np.flatnonzero((elapsed > 0.0) & np.array([s.n > 0 for s in states]))
        factors = np.exp(self.config.log_decay * np.maximum(elapsed, 0.0))
        if stale.size == len(states):
            mean, width = stack.decayed_terms(X, factors, self.config.ridge_lambda)
        else:
            mean, width = stacked_ucb_terms(stack.A_inv, stack.theta, X)
            if stale.size:
                decayed = stack.decayed_terms(X, factors, self.config.ridge_lambda)
                mean[stale], width[stale] = decayed[0][stale], decayed[1][stale]
        return mean + self.config.alpha * width, width

    def _update(
        self,
        arm_id: str,
        state: DiscountedArmState,
        x: np.ndarray,
        reward: float,
        ctx: SelectContext,
    ) -> None:
        at = self._observation_time(state.n, state.clock)
        state.add(x, reward, at, self.config.log_decay, self.config.ridge_lambda)


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
        if window_seconds is None:
            return np.ones(self.size, dtype=bool)
        return self.times[: self.size] > now - window_seconds

    def live_ridge(
        self, now: float, window_seconds: float, ridge_lambda: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(A, b)`` over the observations still in the window at ``now``, summed anew
        (the part does not change)."""
        live = self.live(now, window_seconds)
        xs, rewards = self.xs[: self.size][live], self.rewards[: self.size][live]
        return ridge_lambda * np.eye(xs.shape[1]) + xs.T @ xs, xs.T @ rewards

    def add(
        self, x: np.ndarray, reward: float, at: float, ridge_lambda: float, seconds: float | None
    ) -> None:
        """Add the observation ``(x, reward)`` made at ``at``, dropping the observations
        that left the window: those no longer younger than ``seconds`` (the policy's
        ``window_seconds``) and, when all ``window`` rows are taken, the oldest."""
        clock = max(self.clock, at)
        rows = self._writable_rows()
        A, b, size = self.A.copy(), self.b.copy(), self.size
        # A^-1 by Sherman-Morrison while rows only enter and leave one by one (None: anew)
        A_inv: np.ndarray | None = self.A_inv
        if seconds is not None:
            expired = self.times[:size] <= clock - seconds
            if expired.any():
                gone = self.xs[:size][expired]
                A -= gone.T @ gone
                b -= gone.T @ self.rewards[:size][expired]
                kept = ~expired
                new_size = int(kept.sum())
                for array in rows:
                    array[:new_size] = array[:size][kept]
                    array[new_size:size] = 0.0
                size = new_size
                # one downdate per row while cheaper than the inverse (the rule of add_batch)
                cheap = 2 * len(gone) < len(x)
                A_inv = sherman_morrison_downdate(self.A_inv, gone) if cheap else None
        young = seconds is None or at > clock - seconds
        if young:
            if size == len(self.times):  # full: the oldest observation leaves
                i = int(np.argmin(self.times))
                old = self.xs[i].copy()
                A -= np.multiply.outer(old, old)
                b -= self.rewards[i] * old
            else:
                i, size, old = size, size + 1, None
            A += np.multiply.outer(x, x)
            b += reward * x
            if A_inv is not None:
                A_inv = A_inv - sherman_morrison_term(A_inv, x)
                if old is not None:
                    A_inv = sherman_morrison_downdate(A_inv, old[None, :])
        if not (all_finite(A) and all_finite(b)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and reward {reward} overflow the ridge statistics"
            )
        if young:
            self.xs[i], self.rewards[i], self.times[i] = x, reward, at
        self.size, self.clock = size, clock
        self.n += 1
        self.reward_sum += reward
        self.since_rebuild += 1
        if self.since_rebuild >= len(self.times):  # bound the drift of the running sums
            xs = self.xs[:size]
            A = ridge_lambda * np.eye(len(x)) + xs.T @ xs
            b = xs.T @ self.rewards[:size]
            self.since_rebuild, A_inv = 0, None
        self.A, self.b = A, b
        self.A_inv = cholesky_inverse(A) if A_inv is None or not all_finite(A_inv) else A_inv
        self.theta = self.A_inv @ b

    def _writable_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``xs``, ``rewards`` and ``times``, copied first if they are read-only views
        (a state read from bytes)."""
        if not self.xs.flags.writeable:
            self.xs, self.rewards, self.times = map(np.copy, (self.xs, self.rewards, self.times))
        return self.xs, self.rewards, self.times


def _oldest(state: WindowArmState) -> float:
    """The time of the oldest observation in ``state``'s window (``inf`` when empty)."""
    return float(state.times[: state.size].min()) if state.size else math.inf


class WindowStack(RidgeStack[WindowArmState]):
    """:class:`~bandit_core.linear.RidgeStack` of window states scored at a later time
    (section 10.2): row ``i`` holds arm ``i``'s fit over its rows younger than a cutoff
    ``c = now - window_seconds``, the same for every ``c`` in ``[lo[i], hi[i])`` (the
    state's own fit below its oldest row), so :meth:`refit` re-fits an arm once per row
    that ages out, not at every selection."""

    def __init__(self) -> None:
        super().__init__()
        self.lo, self.hi = np.zeros(0), np.zeros(0)

    def _rebuild(self) -> None:
        super()._rebuild()
        self.lo = np.full(len(self._states), -math.inf)
        self.hi = np.array([_oldest(s) for s in self._states])

    def _write(self, i: int, state: WindowArmState) -> None:
        super()._write(i, state)
        self.lo[i], self.hi[i] = -math.inf, _oldest(state)

    def refit(self, now: float, window_seconds: float, ridge_lambda: float) -> None:
        """Bring every row to the fit over its arm's rows younger than ``window_seconds``
        at ``now`` (``-inf``: every row, the state's own fit), after :meth:`sync`."""
        cutoff = now - window_seconds
        for i in np.flatnonzero((cutoff < self.lo) | (cutoff >= self.hi)).tolist():
            state = self._states[i]
            if cutoff < _oldest(state):
                self._write(i, state)
                continue
            A, b = state.live_ridge(now, window_seconds, ridge_lambda)
            self.A_inv[i] = cholesky_inverse(A)
            np.matmul(self.A_inv[i], b, self.theta[i])
            times = state.times[: state.size]
            live = state.live(now, window_seconds)
            self.lo[i] = times[~live].max()
            self.hi[i] = times[live].min() if live.any() else math.inf


class SlidingWindowLinUCB(ClockedPolicy[WindowArmState]):
    """SW-LinUCB over per-arm windows (:class:`WindowArmState`)."""

    NAME: ClassVar[str] = "sliding_window_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = SlidingWindowLinUCBConfig
    ARM_STATE = WindowArmState
    config: SlidingWindowLinUCBConfig

    def uses_wall_clock(self) -> bool:
        """True with ``window_seconds``, False with ``window`` alone."""
        return self.config.window_seconds is not None

    def _new_arm_state(self) -> WindowArmState:
        return WindowArmState.prior(self.config.d, self.config.ridge_lambda, self.config.window)

    def _new_stack(self) -> RidgeStack[WindowArmState]:
        # with window_seconds a selection at now re-fits the arms whose rows aged out
        return WindowStack() if self._wall_clock else super()._new_stack()

    def _score(
        self, arm_ids: list[str], states: list[WindowArmState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        stack = self._stack
        stack.sync(arm_ids, states, self._take_updated())
        seconds = self.config.window_seconds
        if seconds is not None and isinstance(stack, WindowStack):
            # without a time each arm is scored at its own clock: its state's fit
            now = -math.inf if self._now is None else self._now
            stack.refit(now, seconds, self.config.ridge_lambda)
        mean, width = stacked_ucb_terms(stack.A_inv, stack.theta, X)
        return mean + self.config.alpha * width, width

    def _update(
        self, arm_id: str, state: WindowArmState, x: np.ndarray, reward: float, ctx: SelectContext
    ) -> None:
        at = self._observation_time(state.n, state.clock)
        state.add(x, reward, at, self.config.ridge_lambda, self.config.window_seconds)


def window_memory_bytes(d: int, window: int) -> int:
    """Bytes of float64 arrays one :class:`WindowArmState` holds:
    ``8 * (window * (d + 2) + 2 d^2 + 2 d)``."""
    return 8 * (window * (d + 2) + 2 * d * d + 2 * d)
