"""LNUCB-TA: linear + adaptive-k nearest-neighbour UCB with temporal attention.

Khosravi et al. 2025, "LNUCB-TA", as recorded in
docs/algorithms.md section 2. Score of candidate arm ``a`` with feature vector ``x_a``
(eq. 2 and 9):

    ucb_a = x_a^T mu_a + f_a(x_a) + alpha_a * sqrt(x_a^T Sigma_a^-1 x_a)

- ``x_a^T mu_a``: per-arm ridge regression, the state of :mod:`bandit_core.linear`
  (``Sigma_a`` is LinUCB's ``A_a``). It fits the reward (Algorithm 1, the default
  ``linear_target="reward"``) or the residual ``r - f_a(x)`` (eq. 18,
  ``linear_target="residual"``), with ``f_a`` evaluated on the memory before the point
  is added.
- ``f_a(x)``: adaptive-k nearest neighbours (Algorithm 2, eq. 3). Arm ``a`` keeps its
  most recent ``knn_window`` pairs ``(x, r)``;
  ``k_a = floor(theta_min + (theta_max - theta_min) * Var(z_a))`` with ``Var`` the
  population variance of the arm's rewards rescaled by ``reward_range`` to [0, 1] (0
  with fewer than 2 rewards, running sums over every reward, not only the window).
  If the memory holds at least ``k_a`` points, ``f_a(x)`` is the mean reward of the
  ``k_a`` stored points nearest to ``x`` (Euclidean), else 0 (Algorithm 2, line 6
  compares ``len(x_a)`` with ``k``; docs/algorithms.md reads it as the memory size, the
  condition eq. 3 needs). Ties at the ``k``-th
  distance go to the most recent points. ``knn_weights="distance"`` weights each
  neighbour by ``1/distance``; if any neighbour is at distance 0, only those count
  (scikit-learn's convention).
- ``alpha_a``: temporal attention (Algorithm 3, eq. 4/17, 101-102):
  ``alpha_a = alpha_0 / (N_a + 1) * (kappa * g + (1 - kappa) * n_a)``, ``N_a`` the
  arm's rewards, ``n_a`` their mean (0 if none), ``g`` the mean of ``n_a`` over the
  arms the policy knows (running totals in the shared part, never a data set's
  mean), clamped at 0.

Ablations of the paper's Table 3 / Figure 2 are configurations of this module:

=====================  ==========  =======  ====================  ====================================
row                    use_linear  use_knn  temporal_attention    score
=====================  ==========  =======  ====================  ====================================
LNUCB-TA               True        True     True                  ``x^T mu + f + alpha_a * w``
(Lin+kNN)-UCB          True        True     False                 ``x^T mu + f + alpha_0 * w``
kNN-UCB                False       True     False                 ``f + alpha_0 * w``
LinUCB + attention     True        False    True                  ``x^T mu + alpha_a * w``  (Fig. 2b)
=====================  ==========  =======  ====================  ====================================

``w = sqrt(x^T Sigma_a^-1 x)``. The paper gives no formula for its kNN-UCB row (it
cites Reeve et al. 2018, whose bonus is ``sqrt(theta log t / k) + Lipschitz term``);
here kNN-UCB keeps the ridge covariance only for the width ``w`` and drops the linear
mean, so all rows share one confidence width and differ only in the terms named.
(Lin+kNN)-UCB keeps the adaptive k; the paper's "vanilla combination" may use kNN-UCB's
own k search.

Scoring: the linear terms of all K candidates come from one batched matmul over
stacks the policy keeps between calls (:class:`bandit_core.linear.RidgeStack`); the
kNN term keeps the candidates' memories laid out side by side, rewrites only the
changed arm's rows after an update (:class:`KnnMemory`), and computes every distance
and neighbour set in one pass (:func:`knn_estimates`, ``O(M d)`` for
``M <= K * knn_window`` points). Brute force is fine up to ~10^4 points per arm; beyond
that an approximate nearest-neighbour index per arm (e.g. HNSW) would replace
:func:`knn_estimates`, at the cost of a state that no longer serializes as plain arrays.

>>> import numpy as np
>>> p = LNUCBTA(LNUCBTAConfig(d=2, alpha=1.0, seed=0))
>>> X = np.eye(2)
>>> _ = p.select(["a", "b"], X)
>>> for _ in range(3):
...     p.update("a", X[0], 1.0)
>>> p.select(["a", "b"], X).arm_id
'a'
>>> p.arm_stats("a").extras  # 1/(3+1) * (0.5*g + 0.5*1), g = (1+0)/2
{'alpha': 0.1875, 'k': 1.0}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from bandit_core.knn_memory import (
    KnnMemory,
    LNUCBTAArmState,
    Scratch,
    adaptive_k,
    arm_k,
    knn_estimates,
)
from bandit_core.linear import LinearArmState, RidgeStack, stacked_ucb_terms
from bandit_core.linucb import LinUCBConfig
from bandit_core.policy import ARM_PREFIX, SHARED_PART, BasePolicy, PolicyConfig, SelectContext
from bandit_core.state import ArrayState
from bandit_core.validation import check_bool, check_choice, check_int, check_real, check_true


@dataclass(frozen=True)
class LNUCBTAConfig(LinUCBConfig):
    """LNUCB-TA hyperparameters (defaults: paper Appendix B; docs/algorithms.md section 2).

    ``alpha`` is the paper's ``alpha_0``. ``ridge_lambda``, ``refactor_every``: the
    ridge state, as in LinUCB. ``theta_min``, ``theta_max``: range of the adaptive
    ``k``. ``kappa``: weight of the global attention ``g`` in eq. 4. ``knn_window``:
    most recent points kept per arm. ``linear_target``: ``"reward"`` (Algorithm 1) or
    ``"residual"`` (eq. 18). ``knn_weights``: ``"uniform"`` (eq. 3) or ``"distance"``.
    ``use_linear``, ``use_knn``, ``temporal_attention``: the ablation switches of the
    module docstring's table.
    """

    theta_min: int = 1
    theta_max: int = 5
    kappa: float = 0.5
    knn_window: int = 5000
    linear_target: Literal["reward", "residual"] = "reward"
    knn_weights: Literal["uniform", "distance"] = "uniform"
    use_linear: bool = True
    use_knn: bool = True
    temporal_attention: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("theta_min", "theta_max", "knn_window"):
            object.__setattr__(self, name, check_int(getattr(self, name), name, low=1))
        check_true(
            self.theta_max >= self.theta_min,
            f"theta_max must be >= theta_min = {self.theta_min}, but got {self.theta_max!r}",
        )
        object.__setattr__(self, "kappa", check_real(self.kappa, "kappa", low=0.0, high=1.0))
        check_choice(self.linear_target, "linear_target", ("reward", "residual"))
        check_choice(self.knn_weights, "knn_weights", ("uniform", "distance"))
        for name in ("use_linear", "use_knn", "temporal_attention"):
            object.__setattr__(self, name, check_bool(getattr(self, name), name))


def _mean(state: LinearArmState) -> float:
    """``n_a`` of eq. 102: the arm's mean reward, 0 if never rewarded."""
    return state.reward_sum / state.n if state.n else 0.0


def _attention_factors(state: LinearArmState, alpha: float, kappa: float) -> tuple[float, float]:
    """The factors of eq. 4 that depend on the arm alone, ``alpha_0 / (N_a + 1)`` and
    ``(1 - kappa) * n_a``: ``alpha_a = max(scale * (kappa * g + own), 0)``."""
    return alpha / (state.n + 1.0), (1.0 - kappa) * _mean(state)


class LNUCBTAStack(RidgeStack[LNUCBTAArmState]):
    """:class:`~bandit_core.linear.RidgeStack` plus, for the candidates, the factors of
    ``alpha_a`` that depend on the arm alone (:func:`_attention_factors`, shape
    ``(K,)`` each) and their :class:`KnnMemory` (with ``use_knn``); like the ridge
    stacks, these are rewritten for the changed candidates only. ``alpha`` caches
    ``alpha_a`` while ``g`` equals ``alpha_g``; ``kept`` holds the rows last scored by
    :meth:`terms` with ``keep``, their terms and their neighbours; ``appended``, the
    candidates whose memory the last :meth:`sync` grew by one point, ``k`` unchanged."""

    def __init__(self, config: LNUCBTAConfig) -> None:
        super().__init__()
        self.config = config
        self.knn: KnnMemory | None = None
        self.scratch = Scratch()
        self.alpha: np.ndarray | None = None
        self.alpha_g = 0.0
        self.kept: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None = None
        self.appended: set[int] = set()

    def _rebuild(self) -> None:
        super()._rebuild()
        cfg = self.config
        states = self._states
        factors = np.array([_attention_factors(s, cfg.alpha, cfg.kappa) for s in states])
        self.scale, self.own = factors[:, 0].copy(), factors[:, 1].copy()
        self.alpha = None
        if cfg.use_knn:
            ks = adaptive_k(states, cfg.theta_min, cfg.theta_max, cfg.reward_range)
            self.knn = KnnMemory(states, ks, cfg.knn_window, self.scratch)

    def _write(self, i: int, state: LNUCBTAArmState) -> None:
        super()._write(i, state)
        cfg = self.config
        self.scale[i], self.own[i] = _attention_factors(state, cfg.alpha, cfg.kappa)
        self.alpha = None
        if self.knn is not None:
            arm = state
            k = arm_k(arm, cfg.theta_min, cfg.theta_max, cfg.reward_range)
            if self.knn.write(i, arm, k):
                self.appended.add(i)

    def terms(
        self, X: np.ndarray, written: list[int] | None, keep: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(x^T mu, w, f)`` of the rows ``X`` (shape ``(B, K, d)``) against the stacks
        :meth:`sync` just brought up to date, rewriting the rows ``written`` (``None``:
        rebuilt); each of shape ``(B, K)``, ``f`` ``None`` without ``use_knn``.

        With ``keep``, the rows, their terms and their neighbours are kept for the next
        call. If that call scores the last rows kept again (a replay scoring the rest of
        its read-ahead after an update), only the columns of the rows ``written`` since
        are computed, a candidate's terms depending on its own row and state alone, and
        a memory that grew by one point only takes that point into account
        (:meth:`KnnMemory.with_newest`): bit-identical to computing everything again.
        """
        cfg, knn, kept, appended = self.config, self.knn, self.kept, self.appended
        self.kept, self.appended = None, set()
        B = len(X)
        reused = (
            kept
            if kept is not None
            and written is not None
            and B <= len(kept[0])
            and np.array_equal(kept[0][len(kept[0]) - B :], X)
            else None
        )
        rewritten = written if written is not None else []  # read only when reused
        if reused is not None:
            start = len(reused[0]) - B
            X, mean, width = reused[0][start:], reused[1][start:], reused[2][start:]
            for i in rewritten:
                m, w = stacked_ucb_terms(
                    self.A_inv[i : i + 1], self.theta[i : i + 1], X[:, i : i + 1]
                )
                mean[:, i], width[:, i] = m[:, 0], w[:, 0]
        else:
            mean, width = stacked_ucb_terms(self.A_inv, self.theta, X)
            X = X.copy() if keep else X
        found = None
        if knn is not None:
            passes = knn.passes()
            kept_found = None if reused is None else reused[3]  # not None: knn was on then too
            if reused is not None and kept_found is not None:
                found = kept_found[:passes, len(reused[0]) - B :]  # pass j needs no later pass
                if len(found) < passes:
                    # only a written candidate needs the passes added (a k or a memory
                    # grew); the others' k stayed at most len(found): their added passes
                    # are not taken, whatever they hold
                    found = np.concatenate(
                        [found, np.full((passes - len(found), *found.shape[1:]), np.nan + 0j)]
                    )
                for i in rewritten:
                    column = found[:, :, i : i + 1]
                    column[...] = (
                        knn.with_newest(column, X, i) if i in appended else knn.search(X, i)
                    )
            else:
                found = knn.search(X)
        if keep:
            self.kept = (X, mean, width, found)
        if knn is None or found is None:
            return mean, width, None
        return mean, width, knn.estimates_from(found, cfg.knn_weights)


@dataclass
class AttentionTotals(ArrayState):
    """The policy's shared part: running totals behind ``g`` of eq. 101.

    ``arms``: arms the policy knows (cold-started or added, minus retired);
    ``mean_sum``: sum of their mean rewards ``n_a`` (0 for an arm never rewarded).
    Kept as totals so one reward updates one arm part plus this part, and a store
    never needs every arm to compute ``g``.
    """

    KIND: ClassVar[str] = "lnucb_ta_totals"
    arms: int = 0
    mean_sum: float = 0.0


class LNUCBTA(BasePolicy[LNUCBTAArmState, AttentionTotals, None]):
    """LNUCB-TA over :class:`LNUCBTAArmState` (see the module docstring).

    ``g`` comes from the shared :class:`AttentionTotals` part; a selection that
    cold-starts an arm changes it and lists ``"shared"`` in ``Decision.state_changed``.
    """

    NAME: ClassVar[str] = "lnucb_ta"
    CONFIG: ClassVar[type[PolicyConfig]] = LNUCBTAConfig
    _SELECT_ROWS: ClassVar[int | None] = None  # _score_batch keeps its rows' terms
    ARM_STATE = LNUCBTAArmState
    SHARED_STATE = AttentionTotals
    config: LNUCBTAConfig
    _shared: AttentionTotals

    def _new_shared_state(self) -> AttentionTotals:
        return AttentionTotals()

    def _new_arm_state(self) -> LNUCBTAArmState:
        self._shared.arms += 1
        return LNUCBTAArmState.prior(self.config.d, self.config.ridge_lambda)

    def _parts_changed_by_new_arms(self, arm_ids: tuple[str, ...]) -> tuple[str, ...]:
        # the arm count behind g includes them: their parts are saved with it, so that
        # another process loads them instead of counting them a second time
        return tuple(ARM_PREFIX + a for a in arm_ids) + (SHARED_PART,)

    def retire_arm(self, arm_id: str) -> None:
        """Forget ``arm_id`` and take it out of the totals behind ``g``."""
        state = self._known_arm(arm_id)
        self._shared.arms -= 1
        self._shared.mean_sum -= _mean(state)
        super().retire_arm(arm_id)

    def global_attention(self) -> float:
        """``g`` of eq. 101: mean over the known arms of their mean rewards (0 if none)."""
        totals = self._shared
        return totals.mean_sum / totals.arms if totals.arms else 0.0

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._stack = LNUCBTAStack(self.config)

    @property
    def score_cache(self) -> LNUCBTAStack:
        """The stacked arrays of the last candidate list scored, to read (the cache
        rules are in :mod:`bandit_core.policy`)."""
        return self._stack

    def exploration_weights(self, states: list[LNUCBTAArmState]) -> np.ndarray:
        """``alpha_a`` of eq. 4/17 for each state, shape ``(K,)``, clamped at 0; the
        constant ``alpha_0`` when ``temporal_attention`` is off."""
        cfg = self.config
        factors = np.array([_attention_factors(s, cfg.alpha, cfg.kappa) for s in states]).reshape(
            -1, 2
        )
        return self._exploration_weights(factors[:, 0], factors[:, 1])

    def _exploration_weights(self, scale: np.ndarray, own: np.ndarray) -> np.ndarray:
        cfg = self.config
        if not cfg.temporal_attention:
            return np.full(len(scale), cfg.alpha)
        return np.maximum(scale * (cfg.kappa * self.global_attention() + own), 0.0)

    def _knn_terms(self, states: list[LNUCBTAArmState], X: np.ndarray) -> np.ndarray:
        cfg = self.config
        ks = adaptive_k(states, cfg.theta_min, cfg.theta_max, cfg.reward_range)
        return knn_estimates(states, X, ks, cfg.knn_weights)

    def _score(
        self, arm_ids: list[str], states: list[LNUCBTAArmState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        score, width = self._scores(arm_ids, states, X[None])
        return score[0], width[0]

    def _score_batch(
        self,
        arm_ids: list[str],
        states: list[LNUCBTAArmState],
        X_batch: np.ndarray,
        ctx: SelectContext,
    ) -> tuple[np.ndarray, np.ndarray]:
        return self._scores(arm_ids, states, X_batch, keep=True)

    def _scores(
        self, arm_ids: list[str], states: list[LNUCBTAArmState], X: np.ndarray, keep: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and widths, each of shape ``(B, K)``, of B feature sets ``X`` (shape
        ``(B, K, d)``) against the same candidates; :meth:`_score` is the case ``B = 1``,
        and every term is computed row by row, so a batch row is bit-identical to it.
        ``keep``: keep the rows' terms for the next call (:meth:`LNUCBTAStack.terms`)."""
        cfg, stack = self.config, self._stack
        mean, width, knn = stack.terms(X, stack.sync(arm_ids, states, self._take_updated()), keep)
        g = self.global_attention()
        if stack.alpha is None or stack.alpha_g != g:
            stack.alpha, stack.alpha_g = self._exploration_weights(stack.scale, stack.own), g
        score = stack.alpha * width
        if cfg.use_linear:
            score = score + mean
        if knn is not None:
            score = score + knn
        return score, width

    def _update(
        self, arm_id: str, state: LNUCBTAArmState, x: np.ndarray, reward: float, ctx: SelectContext
    ) -> None:
        cfg = self.config
        target = reward
        if cfg.use_knn and cfg.linear_target == "residual":
            target = reward - self._knn_terms([state], x[None, :])[0]
        old_mean = _mean(state)
        state.add(x, target, reward, cfg.refactor_every)
        state.reward_sq_sum += reward * reward
        self._shared.mean_sum += _mean(state) - old_mean
        if cfg.use_knn:
            state.remember(x, reward, cfg.knn_window)

    def _arm_stats_extras(self, arm_id: str, state: LNUCBTAArmState) -> dict[str, float]:
        cfg = self.config
        return {
            "alpha": float(self.exploration_weights([state])[0]),
            "k": float(adaptive_k([state], cfg.theta_min, cfg.theta_max, cfg.reward_range)[0]),
        }
