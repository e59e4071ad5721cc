"""Hybrid LinUCB: a shared model, so new items get a sensible score (docs/algorithms.md section 8).

Li, Chu, Langford, Schapire 2010, "A contextual-bandit approach to personalized news
article recommendation", Algorithm 2. Each candidate's row of ``X`` is ``[z_a, x]``:
``z_a`` (length ``k = shared_dim``) holds the shared features (action features and
context x action interactions), ``x`` (length ``d = context_dim``) the context, the
same for every candidate. One shared ridge part over ``z`` (``A_0 = lambda*I + ...``,
``b_0``, ``beta = A_0^-1 b_0``) and, per arm, ``A_a = lambda*I + sum x x^T``,
``B_a = sum x z^T``, ``b_a = sum r x`` with ``theta_a = A_a^-1 (b_a - B_a beta)``.

Score: ``z^T beta + x^T theta_a + alpha * sqrt(s)`` with

    s = z'A_0^-1 z - 2 z'A_0^-1 B_a'A_a^-1 x + x'A_a^-1 x + x'A_a^-1 B_a A_0^-1 B_a'A_a^-1 x,

the variance of the joint ridge estimate; the argmax is served (epsilon floor and
propensities by docs/algorithms.md section 5, in :class:`BasePolicy`). The width
``sqrt(s)`` is computed only when it enters the score: at ``alpha = 0`` (the greedy
shared model of the default Personalizer loop) the score is the mean, the K quadratic
forms over ``A_0^-1`` (K k^2 multiplications) are skipped and the decision has no
widths (``None``).

With ``context_dim = 0`` there is no per-arm part: the policy is LinUCB with one matrix
over ``z`` (Vowpal Wabbit's ``--cb_explore_adf`` shape). Its arms carry no state at all,
so any arm id may be served or rewarded without registration (a catalog that changes
every hour) and the only state part is ``"shared"``.

>>> import numpy as np
>>> p = HybridLinUCB(HybridLinUCBConfig(d=2, alpha=0.0))  # context_dim 0: z = the whole row
>>> for _ in range(3):
...     p.update("seen", np.array([1.0, 0.0]), 1.0)
>>> p.select(["new-1", "new-2"], np.array([[0.0, 1.0], [1.0, 0.0]])).arm_id  # never seen, scored by z
'new-2'
>>> p.part_names()
['shared']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias, cast

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.clock import Clocked
from bandit_core.errors import InvalidInputError
from bandit_core.features import SparseRows
from bandit_core.forgetting import DiscountedArmState, WindowArmState
from bandit_core.hybrid_forgetting import HybridDiscountedArmState, HybridFit, joint_fit
from bandit_core.hybrid_window import HybridWindowArmState, TimedWindowState, WindowFits
from bandit_core.importance import FeatureWeights
from bandit_core.linear import LinearArmState, RidgeStack
from bandit_core.linucb import LinUCBConfig
from bandit_core.parts import ARM_PREFIX, SHARED_PART
from bandit_core.policy import PolicyConfig, SelectContext
from bandit_core.shared_forgetting import (
    FORGETTING_OPTIONS,
    ForgettingOptions,
    ForgettingState,
    SharedForgetting,
)
from bandit_core.shared_model import SharedModelPolicy
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite, check_int, check_reward, check_vector


@dataclass(frozen=True)
class HybridLinUCBConfig(LinUCBConfig):
    """Hybrid LinUCB hyperparameters: LinUCB's, plus ``context_dim``, the length ``d`` of
    the per-arm part at the end of each row; the first ``shared_dim = d - context_dim``
    entries are the shared features ``z``. ``context_dim = 0`` (the default): no per-arm
    part. ``ridge_lambda`` is the prior of both parts (the paper's ``A_0 = I_k``,
    ``A_a = I_d`` at 1). The model may forget: ``gamma`` or ``half_life_seconds``
    (D-LinUCB; with per-arm parts as :mod:`bandit_core.hybrid_forgetting` describes),
    or ``window`` and/or ``window_seconds`` (SW-LinUCB over the policy's last
    ``window`` rewards, younger than ``window_seconds`` when given; with per-arm parts
    as :mod:`bandit_core.hybrid_window` describes), as
    :mod:`bandit_core.shared_forgetting` describes."""

    context_dim: int = 0
    gamma: float | None = None
    half_life_seconds: float | None = None
    window: int | None = None
    window_seconds: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        # the row is [z, x] with at least one shared feature: context_dim < d
        object.__setattr__(
            self, "context_dim", check_int(self.context_dim, "context_dim", low=0, high=self.d - 1)
        )
        options = self.forgetting.checked(self.ridge_lambda)
        for name in FORGETTING_OPTIONS:
            object.__setattr__(self, name, getattr(options, name))

    @property
    def forgetting(self) -> ForgettingOptions:
        """How the model forgets (docs/algorithms.md section 10.3); none by default."""
        return ForgettingOptions(
            self.gamma, self.half_life_seconds, self.window, self.window_seconds
        )

    @property
    def shared_dim(self) -> int:
        """``k``, the length of the shared features ``z`` at the start of each row."""
        return self.d - self.context_dim


@dataclass
class HybridSharedState(LinearArmState):
    """The shared part: ``A`` is the paper's ``A_0`` (k x k), ``A_inv`` its inverse, ``b``
    is ``b_0`` and ``theta`` is ``beta = A_0^-1 b_0``; ``n`` and ``reward_sum`` count every
    reward the policy learned from."""

    KIND: ClassVar[str] = "hybrid_shared"


@dataclass(kw_only=True)
class HybridArmState(LinearArmState):
    """One arm's part: ``A`` (d x d) is ``A_a``, ``b`` is ``b_a``, ``B`` (d x k) is
    ``B_a = sum x z^T``; ``theta`` holds ``A_a^-1 b_a`` (the paper's ``theta_a`` also
    needs ``beta``: :meth:`HybridLinUCB.theta`)."""

    KIND: ClassVar[str] = "hybrid_arm"
    B: np.ndarray


# the shared part: Algorithm 2's, a forgetting one (bandit_core.shared_forgetting) or, with
# per-arm parts and window_seconds, a timed window one (bandit_core.hybrid_window)
SharedPart: TypeAlias = HybridSharedState | ForgettingState | TimedWindowState
# an arm's part: Algorithm 2's, a discounted one (bandit_core.hybrid_forgetting) or a
# windowed one (bandit_core.hybrid_window)
ArmPart: TypeAlias = HybridArmState | HybridDiscountedArmState | HybridWindowArmState


class HybridStack(RidgeStack[LinearArmState]):
    """:class:`RidgeStack` of hybrid arms: besides ``A_inv`` and ``theta`` (``A_a^-1 b_a``)
    it keeps ``A_inv_B`` (K, d, k), ``A_a^-1 B_a``, which every score of the arm needs and
    which changes only when the arm is updated."""

    def __init__(self) -> None:
        super().__init__()
        self.A_inv_B = np.zeros((0, 0, 0))

    def _rebuild(self) -> None:
        super()._rebuild()
        # a HybridStack only ever stacks the states of hybrid arms
        self.A_inv_B = np.matmul(
            self.A_inv, np.stack([cast(HybridArmState, s).B for s in self._states])
        )

    def _write(self, i: int, state: LinearArmState) -> None:
        super()._write(i, state)
        np.matmul(state.A_inv, cast(HybridArmState, state).B, out=self.A_inv_B[i])


class HybridLinUCB(Clocked, SharedModelPolicy[ArmPart, SharedPart, None]):
    """Hybrid LinUCB (Li et al. 2010, Algorithm 2); with ``context_dim = 0`` a shared-matrix
    LinUCB whose arms keep no state. It may forget (:mod:`bandit_core.shared_forgetting`,
    and with per-arm parts :mod:`bandit_core.hybrid_forgetting`). See the module docstring."""

    NAME: ClassVar[str] = "hybrid_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = HybridLinUCBConfig
    ARM_STATE = HybridArmState
    SHARED_STATE = HybridSharedState
    config: HybridLinUCBConfig

    def __init__(self, config: PolicyConfig) -> None:
        # the shared prior (made in super().__init__) depends on how the part forgets
        self._forgetting = (
            SharedForgetting(config.forgetting, config.ridge_lambda)
            if isinstance(config, HybridLinUCBConfig) and config.forgetting.forgets
            else None
        )
        # with per-arm parts a forgetting model is the weighted joint ridge of all parts
        self._joint = isinstance(config, HybridLinUCBConfig) and (
            config.forgetting.forgets and config.context_dim > 0
        )
        # with per-arm parts and window_seconds every part is a TimedWindowState
        self._timed = isinstance(config, HybridLinUCBConfig) and (
            config.context_dim > 0 and config.window_seconds is not None
        )
        super().__init__(config)
        self._stack = HybridStack()
        self._window_fits = WindowFits()  # used with per-arm parts and a window

    def uses_wall_clock(self) -> bool:
        """True with ``half_life_seconds`` or ``window_seconds``."""
        return self._forgetting is not None and self._forgetting.wall_clock

    def _decode_part(self, name: str, data: bytes | None) -> ArrayState | None:
        if self._forgetting is None or data is None:
            return super()._decode_part(name, data)
        if self._timed and (name == SHARED_PART or name.startswith(ARM_PREFIX)):
            return TimedWindowState.from_bytes(data)
        if name == SHARED_PART:
            return self._forgetting.state_class.from_bytes(data)
        if self._joint and name.startswith(ARM_PREFIX):
            windowed = not self._forgetting.discounted
            return (HybridWindowArmState if windowed else HybridDiscountedArmState).from_bytes(data)
        return super()._decode_part(name, data)

    def parts_for_select(self, arm_ids: Sequence[str], user_id: str | None = None) -> list[str]:
        """The parts a selection reads; with per-arm parts and forgetting every arm's
        part, since each arm's decay enters the shared estimate (docs/algorithms.md
        section 10.3)."""
        if self._joint:
            arm_ids = list(dict.fromkeys([*self._arms, *arm_ids]))
        return super().parts_for_select(arm_ids, user_id)

    @property
    def selects_every_arm(self) -> bool:
        """True with per-arm parts and forgetting: the joint fit (10.5) reads every arm."""
        return self._joint

    def parts_for_update(self, arm_id: str, user_id: str | None = None) -> list[str]:
        """The parts an update of ``arm_id`` writes: its own and ``"shared"``."""
        return super().parts_for_select([arm_id], user_id)

    def _keeps_arm_parts(self) -> bool:
        return self.config.context_dim > 0

    # ---- the model ---------------------------------------------------------------------
    def _new_shared_state(self) -> SharedPart:
        c = self.config
        if self._timed and c.window is not None:  # rows z as the part's x (k = 0)
            return TimedWindowState.empty(c.shared_dim, 0, c.window, c.ridge_lambda)
        if self._forgetting is not None:
            return self._forgetting.prior(self.config.shared_dim)
        return HybridSharedState(**_prior(self.config.shared_dim, self.config.ridge_lambda))

    def _new_arm_state(self) -> ArmPart:
        c = self.config
        if self._joint and c.window is not None:
            windowed = TimedWindowState if self._timed else HybridWindowArmState
            return windowed.empty(c.context_dim, c.shared_dim, c.window, c.ridge_lambda)
        if self._joint:
            return HybridDiscountedArmState.empty(c.context_dim, c.shared_dim, c.ridge_lambda)
        return HybridArmState(
            **_prior(c.context_dim, c.ridge_lambda), B=np.zeros((c.context_dim, c.shared_dim))
        )

    @property
    def beta(self) -> np.ndarray:
        """The shared coefficients ``beta = A_0^-1 b_0`` (length ``shared_dim``), a copy;
        with per-arm parts and forgetting (10.5) as of the policy's time."""
        return self._coefficients([])[0]

    def theta(self, arm_id: str) -> np.ndarray:
        """The per-arm coefficients ``theta_a = A_a^-1 (b_a - B_a beta)`` of ``arm_id``
        (length ``context_dim``; empty without a per-arm part)."""
        if self._known_arm(arm_id) is None:
            return np.zeros(0)
        return self._coefficients([arm_id])[1][0]

    def _coefficients(self, arm_ids: list[str]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``beta`` and the ``theta_a`` of each of ``arm_ids`` (arms with parts)."""
        if self._joint:
            fit, index = self._fit()
            return fit.beta, [fit.theta[index[a]] for a in arm_ids]
        beta = cast(HybridSharedState | ForgettingState, self._shared).theta.copy()
        states = [cast(HybridArmState, self._known_arm(a)) for a in arm_ids]
        return beta, [s.A_inv @ (s.b - s.B @ beta) for s in states]

    def _fit(self) -> tuple[HybridFit, dict[str, int]]:
        """The weighted joint ridge of every part (10.5) as of the policy's time (its
        shared part's clock when none is set or it is earlier), or the ridge over the
        window, and each arm's row in it."""
        assert self._forgetting is not None  # only a forgetting model has a joint fit
        if self._timed:
            timed = cast(dict[str, TimedWindowState], self._arms)
            return self._timed_fit(cast(TimedWindowState, self._shared), timed), {
                a: i for i, a in enumerate(timed)
            }
        if self.config.window is not None:
            windows = cast(dict[str, HybridWindowArmState], self._arms)
            window = cast(WindowArmState, self._shared)
            fit = self._window_fits.fit(window, windows, self.config.window)
            return fit, {a: i for i, a in enumerate(windows)}
        shared = cast(DiscountedArmState, self._shared)
        at = shared.clock
        if self._forgetting.wall_clock and self._now is not None:
            at = max(at, self._now)
        arms = cast(dict[str, HybridDiscountedArmState], self._arms)
        fit = joint_fit(
            shared, list(arms.values()), at, self._forgetting.log_decay, self.config.ridge_lambda
        )
        return fit, {a: i for i, a in enumerate(arms)}

    def feature_weights(self) -> FeatureWeights:
        """The weights of the score's mean ``z^T beta + x^T theta_a`` over the row
        ``[z, x]``: one row ``[beta, theta_a]`` per known arm, counted by the arm's
        rewards; a single row ``[beta, 0]`` counted by every reward when no arm has a
        part (``context_dim`` 0, or none rewarded yet)."""
        c = self.config
        shared = self._shared
        arms = list(self._arms) if not self._arm_free else []
        beta, thetas = self._coefficients(arms)
        if not arms:
            row = np.concatenate([beta, np.zeros(c.context_dim)])
            return FeatureWeights(np.arange(c.d), row[None, :], np.array([float(shared.n)]))
        rows = [np.concatenate([beta, theta]) for theta in thetas]
        counts = [float(self._arms[a].n) for a in arms]
        return FeatureWeights(np.arange(c.d), np.array(rows), np.array(counts))

    def arm_weights(self, arm_id: str) -> FeatureWeights:
        """``[beta, theta_a]`` over the row ``[z, x]``: the mean ``z^T beta + x^T
        theta_a`` of ``arm_id``'s score (docs/algorithms.md section 8), counted by its
        rewards; ``[beta, 0]`` counted by every reward when no arm has a part."""
        c = self.config
        shared = self._shared
        state = self._known_arm(arm_id)
        if state is None:  # no per-arm parts
            row = np.concatenate([shared.theta, np.zeros(c.context_dim)])
            return FeatureWeights(np.arange(c.d), row[None, :], np.array([float(shared.n)]))
        beta, [theta] = self._coefficients([arm_id])
        row = np.concatenate([beta, theta])
        return FeatureWeights(np.arange(c.d), row[None, :], np.array([float(state.n)]))

    def _score(
        self, arm_ids: list[str], states: list[ArmPart], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray | None]:
        shared = self._shared
        k = self.config.shared_dim
        alpha = self.config.alpha
        Z = X[:, :k]
        if self._joint:  # forgetting with per-arm parts: the joint fit as of now
            self._take_updated()
            fit, index = self._fit()
            rows = np.array([index[a] for a in arm_ids], dtype=np.intp)
            mean, width = fit.terms(rows, Z, X[:, k:])
            return (mean + alpha * width, width) if alpha else (mean + 0.0, None)
        if isinstance(shared, DiscountedArmState | WindowArmState):  # a forgetting shared model
            mean, width = self._forgetting_terms(shared, Z)
            return (mean + alpha * width, width) if alpha else (mean + 0.0, None)
        assert isinstance(shared, HybridSharedState)  # a timed part is joint: scored above
        mean = Z @ shared.theta
        if self._arm_free:
            if not alpha:
                return mean + 0.0, None  # + 0.0: the -0.0 of a mean as mean + 0 * width
            quad = np.einsum("ij,ij->i", Z @ shared.A_inv, Z)
        else:
            stack = self._stack
            stack.sync(arm_ids, cast(list[LinearArmState], states), self._take_updated())
            x = X[:, k:]  # (K, d), d >= 1: no contraction below runs over an empty axis
            theta = stack.theta - np.matmul(stack.A_inv_B, shared.theta)
            mean += np.einsum("ij,ij->i", x, theta)
            if not alpha:
                return mean + 0.0, None
            g = np.matmul(x[:, None, :], stack.A_inv_B)[:, 0]  # B_a' A_a^-1 x, (K, k)
            v = Z - g
            # s = (z - B'A^-1 x)' A_0^-1 (z - B'A^-1 x) + x'A^-1 x: the paper's four terms,
            # the first, second and fourth of them gathered in one quadratic form.
            quad = np.einsum("ij,ij->i", v @ shared.A_inv, v)
            quad += np.einsum("ij,ij->i", np.matmul(stack.A_inv, x[:, :, None])[:, :, 0], x)
        width = np.sqrt(np.maximum(quad, 0.0, out=quad), out=quad)
        return mean + alpha * width, width

    def _forgetting_terms(
        self, shared: ForgettingState, Z: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        assert self._forgetting is not None  # the only way to a forgetting part
        return self._forgetting.terms(shared, Z, self._now)

    def _update(
        self,
        arm_id: str,
        state: ArmPart | None,
        x: np.ndarray,
        reward: float,
        ctx: SelectContext,
    ) -> None:
        c = self.config
        shared = self._shared
        # forgetting with per-arm parts
        if isinstance(state, HybridDiscountedArmState | HybridWindowArmState):
            self._joint_update(state, x, reward)
            return
        if isinstance(shared, DiscountedArmState | WindowArmState):  # a forgetting shared model
            assert self._forgetting is not None  # the only way to a forgetting part
            self._forgetting.add(shared, x, reward, self._now)
            return
        assert isinstance(shared, HybridSharedState)  # a timed part is joint: updated above
        if state is None:  # no per-arm part: LinUCB over z (A_0 += z z', b_0 += r z)
            shared.add(x, reward, reward, c.refactor_every)
            return
        _hybrid_update(
            shared,
            state,
            x[: c.shared_dim],
            x[c.shared_dim :],
            reward,
            c.refactor_every,
        )

    def _joint_update(
        self, state: HybridDiscountedArmState | HybridWindowArmState, row: np.ndarray, reward: float
    ) -> None:
        """Add ``([z, x], reward)`` to the arm's blocks and the shared one, both at the
        policy's time (docs/algorithms.md section 10.3); refused whole if it overflows."""
        assert self._forgetting is not None  # only a forgetting model has these parts
        shared = cast(ForgettingState, self._shared)
        with np.errstate(over="ignore"):  # overflow is refused here
            outer = np.multiply.outer(row, row)
        if not all_finite(outer):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(row).max()} overflows the ridge statistics"
            )
        k = self.config.shared_dim
        if isinstance(state, TimedWindowState):
            self._timed_update(state, row[:k], row[k:], reward)
            return
        forgetting = self._forgetting
        at = forgetting.observation_time(shared, self._now)
        if isinstance(state, HybridWindowArmState):  # on the per-update clock: at = shared.n + 1
            state.add_row(row[:k], row[k:], reward, int(at), self.config.ridge_lambda)
        else:
            state.add_row(
                row[:k], row[k:], reward, at, forgetting.log_decay, self.config.ridge_lambda
            )
        forgetting.add(shared, row[:k], reward, self._now)

    def _timed_fit(self, shared: TimedWindowState, arms: dict[str, TimedWindowState]) -> HybridFit:
        """The fit over the window in seconds as of the policy's time: ``now``, or the
        shared part's clock when none is set or it is earlier (docs/algorithms.md
        section 10.3, "Window with per-arm parts")."""
        c = self.config
        assert c.window is not None and c.window_seconds is not None  # checked: a timed window
        now = shared.clock if self._now is None else max(shared.clock, self._now)
        since = now - c.window_seconds
        return self._window_fits.fit_timed(shared, arms, c.window, since)

    def _timed_update(
        self, state: TimedWindowState, z: np.ndarray, x: np.ndarray, reward: float
    ) -> None:
        """Add ``([z, x], reward)``, the policy's next reward, at the policy's time (the
        shared part's clock without one) to the arm's part and ``"shared"``, both
        dropping the rows out of the window after it."""
        c = self.config
        assert c.window_seconds is not None  # checked: a timed window
        shared = cast(TimedWindowState, self._shared)
        at = shared.clock if self._now is None else self._now
        since = shared.next_clock(at) - c.window_seconds
        seq = shared.n + 1
        state.add_row(z, x, reward, seq, c.ridge_lambda, at, since)
        shared.add_row(np.zeros(0), z, reward, seq, c.ridge_lambda, at, since)

    @property
    def folds_updates(self) -> bool:
        """True without per-arm parts and without forgetting: every reward adds a row to
        the one shared ridge part, in any order (docs/algorithms.md section 8.1); a
        forgetting part decays to each row's time first, so its rows stay one by one."""
        return self._arm_free and self._forgetting is None

    def update_batch(
        self,
        arm_ids: Sequence[str],
        rows: Sequence[ArrayLike | SparseRows],
        rewards: Sequence[float],
    ) -> None:
        """Learn ``m`` rewards at once (:meth:`BatchUpdates.update_batch`); without
        per-arm parts as one rank-``m`` update of the shared part (``A_0 += Z^T Z``,
        ``b_0 += Z^T r``, :meth:`LinearArmState.add_batch`), checked whole before any
        state changes, equal to the updates one by one in any order to rounding."""
        shared = self._shared
        if (
            not self.folds_updates
            or not isinstance(shared, HybridSharedState)
            or not len(arm_ids) == len(rows) == len(rewards)
        ):
            # one by one (a length mismatch is refused there, naming the lengths)
            super().update_batch(arm_ids, rows, rewards)
            return
        c = self.config
        for arm_id in arm_ids:
            self._known_arm(arm_id)
        Z = np.array([check_vector(x, c.d) for x in rows]).reshape(len(rows), c.d)
        r = np.array([check_reward(v, c.reward_range) for v in rewards], dtype=np.float64)
        shared.add_batch(Z, r, r, c.refactor_every)


def _prior(dim: int, ridge_lambda: float) -> dict[str, Any]:
    """Fields of a ridge part before any reward: ``A = lambda*I``, ``b = 0``."""
    return vars(LinearArmState.prior(dim, ridge_lambda))


def _hybrid_update(
    shared: HybridSharedState,
    arm: HybridArmState,
    z: np.ndarray,
    x: np.ndarray,
    reward: float,
    refactor_every: int,
) -> None:
    """One reward of arm ``a`` with shared features ``z`` and context ``x``: Algorithm 2,
    lines 17-22, in the paper's order (docs/algorithms.md section 8).

    ``A_a^-1`` follows by Sherman-Morrison. ``A_0`` changes by lines 17 and 22 as a whole
    by a rank-one matrix: with ``v = z - B_a'A_a^-1 x`` and ``c = 1 + x'A_a^-1 x`` (old
    ``A_a``, ``B_a``), ``A_0`` grows by ``v v' / c`` (``A_0`` is the Schur complement of
    the stacked ridge matrix, whose inverse moves by Sherman-Morrison on ``[z, x]``), so
    ``A_0^-1`` follows by Sherman-Morrison too: O(k^2 + d k) instead of a fresh O(k^3)
    inverse. Both inverses are re-derived from their matrices every ``refactor_every``
    updates. Every new array is checked finite before any field changes.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
        P, B, b = arm.A_inv, arm.B, arm.b
        P_B = P @ B
        A0 = shared.A + B.T @ P_B  # A_0 += B_a'A_a^-1 B_a
        b0 = shared.b + P_B.T @ b  # b_0 += B_a'A_a^-1 b_a
        Px = P @ x
        c = 1.0 + x @ Px
        v = z - P_B.T @ x
        A = arm.A + np.outer(x, x)  # A_a += x x'
        P_new = P - np.outer(Px, Px) / c
        B_new = B + np.outer(x, z)  # B_a += x z'
        b_new = b + reward * x  # b_a += r x
        P_B = P_new @ B_new
        A0 += np.outer(z, z) - B_new.T @ P_B  # A_0 += z z' - B_a'A_a^-1 B_a
        b0 += reward * z - P_B.T @ b_new  # b_0 += r z - B_a'A_a^-1 b_a
        A0_inv_v = shared.A_inv @ v
        A0_inv = shared.A_inv - np.outer(A0_inv_v, A0_inv_v) / (c + v @ A0_inv_v)
    if not all(all_finite(a) for a in (A0, b0, A, P_new, B_new, b_new, A0_inv)):
        raise InvalidInputError(
            f"x with max |x| = {max(np.abs(z).max(), np.abs(x).max())} overflows the ridge statistics"
        )
    arm.commit(A, P_new, b_new, reward, refactor_every)
    arm.B = B_new
    shared.commit(A0, A0_inv, b0, reward, refactor_every)
