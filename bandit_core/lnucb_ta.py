"""LNUCB-TA: linear + adaptive-k nearest-neighbour UCB with temporal attention.

Khosravi et al., "LNUCB-TA" (``seeds/lnucb-ta-paper.txt``), as recorded in
ALGORITHMS.md section 2. Score of candidate arm ``a`` with feature vector ``x_a``
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
  compares ``len(x_a)`` with ``k``; ALGORITHMS.md reads it as the memory size, the
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

Scoring: the linear terms of all K candidates are one batched einsum
(:func:`bandit_core.linear.linear_ucb_terms`); the kNN term concatenates the candidates'
memories and computes every distance and neighbour set in one pass
(:func:`knn_estimates`, ``O(M d + M log M)`` for ``M <= K * knn_window`` points). Brute force is fine up to ~10^4 points per arm; beyond that an
approximate nearest-neighbour index per arm (e.g. HNSW) would replace
:func:`knn_estimates`, at the cost of a state that no longer
serializes as plain arrays.

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

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from bandit_core.errors import ConfigError
from bandit_core.linear import LinearArmState, linear_ucb_terms
from bandit_core.linucb import LinUCBConfig
from bandit_core.policy import SHARED_PART, BasePolicy, PolicyConfig, SelectContext
from bandit_core.state import ArrayState


@dataclass(frozen=True)
class LNUCBTAConfig(LinUCBConfig):
    """LNUCB-TA hyperparameters (defaults: paper Appendix B; ALGORITHMS.md section 2).

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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive int, but got {value!r}")
        if self.theta_max < self.theta_min:
            raise ConfigError(
                f"theta_max must be >= theta_min = {self.theta_min}, but got {self.theta_max!r}"
            )
        if isinstance(self.kappa, bool) or not isinstance(self.kappa, (int, float)) or not 0.0 <= self.kappa <= 1.0:
            raise ConfigError(f"kappa must be a number in [0, 1], but got {self.kappa!r}")
        if self.linear_target not in ("reward", "residual"):
            raise ConfigError(f"linear_target must be 'reward' or 'residual', but got {self.linear_target!r}")
        if self.knn_weights not in ("uniform", "distance"):
            raise ConfigError(f"knn_weights must be 'uniform' or 'distance', but got {self.knn_weights!r}")
        for name in ("use_linear", "use_knn", "temporal_attention"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be a bool, but got {getattr(self, name)!r}")


@dataclass(kw_only=True)
class LNUCBTAArmState(LinearArmState):
    """One arm's ridge state (:class:`LinearArmState`) plus its kNN memory.

    ``X_mem``: shape ``(m, d)``, ``r_mem``: shape ``(m,)``, the ``m <= knn_window``
    most recent observations, stored as a ring once full (``head`` is the index of the
    oldest point); arrays hold exactly ``m`` rows, so the serialized size grows with
    the points stored, not with the window. ``reward_sq_sum`` sums squared rewards
    (the running variance of Algorithm 2).
    """

    KIND: ClassVar[str] = "lnucb_ta_arm"
    X_mem: np.ndarray
    r_mem: np.ndarray
    head: int = 0
    reward_sq_sum: float = 0.0

    @classmethod
    def prior(cls, d: int, ridge_lambda: float) -> LNUCBTAArmState:
        """The state before any reward: LinUCB's prior and an empty memory."""
        base = LinearArmState.prior(d, ridge_lambda)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(LinearArmState)}
        return cls(**fields, X_mem=np.zeros((0, d)), r_mem=np.zeros(0))

    def remember(self, x: np.ndarray, reward: float, window: int) -> None:
        """Store ``(x, reward)``, dropping the oldest point once ``window`` are held."""
        if len(self.r_mem) < window:
            self.X_mem = np.concatenate((self.X_mem, x[None, :]))
            self.r_mem = np.append(self.r_mem, reward)
            return
        self.X_mem[self.head] = x
        self.r_mem[self.head] = reward
        self.head = (self.head + 1) % window


def _mean(state: LinearArmState) -> float:
    """``n_a`` of eq. 102: the arm's mean reward, 0 if never rewarded."""
    return state.reward_sum / state.n if state.n else 0.0


def adaptive_k(
    states: Sequence[LNUCBTAArmState], theta_min: int, theta_max: int, reward_range: tuple[float, float]
) -> np.ndarray:
    """Algorithm 2, line 5, for each state: ``floor(theta_min + (theta_max - theta_min)
    * Var)``, shape ``(K,)``. ``Var`` is the population variance of the arm's rewards
    rescaled to [0, 1] by ``reward_range`` (0 with fewer than 2 rewards), from the
    running sums, so ``k`` stays inside ``[theta_min, theta_max]``.

    >>> s = LNUCBTAArmState.prior(1, 1.0)
    >>> s.n, s.reward_sum, s.reward_sq_sum = 4, 2.0, 2.0  # rewards 0, 0, 1, 1: Var 0.25
    >>> adaptive_k([s], 1, 9, (0.0, 1.0)).tolist()
    [3]
    """
    n = np.array([s.n for s in states], dtype=np.float64)
    total = np.array([s.reward_sum for s in states], dtype=np.float64)
    total_sq = np.array([s.reward_sq_sum for s in states], dtype=np.float64)
    per = np.maximum(n, 1.0)
    mean = total / per
    var = np.where(n >= 2, np.maximum(total_sq / per - mean * mean, 0.0), 0.0)
    var /= (reward_range[1] - reward_range[0]) ** 2
    return np.clip(np.floor(theta_min + (theta_max - theta_min) * var), theta_min, theta_max).astype(np.intp)


def knn_estimates(
    states: Sequence[LNUCBTAArmState], X: np.ndarray, ks: np.ndarray, weights: str = "uniform"
) -> np.ndarray:
    """``f_a(x_a)`` of eq. 3 for K candidates in one pass, shape ``(K,)``.

    ``X``: shape ``(K, d)``, row ``i`` scored against ``states[i]``'s memory; ``ks``:
    shape ``(K,)``, each arm's ``k``. ``f`` is the mean reward of the ``k`` stored
    points nearest to ``x`` (Euclidean), 0 when fewer than ``k`` are stored. Ties at the
    ``k``-th distance go to the most recent points. ``weights="distance"`` weights each
    neighbour by ``1/distance``, or uses only the neighbours at distance 0 if any.

    All candidates' memories are concatenated and sorted once by (candidate, distance,
    age): brute force, ``O(M d + M log M)`` for ``M`` stored points in total.

    >>> s = LNUCBTAArmState.prior(1, 1.0)
    >>> for x, r in [(0.0, 1.0), (1.0, 0.0), (3.0, 1.0)]:
    ...     s.remember(np.array([x]), r, window=10)
    >>> knn_estimates([s, s], np.array([[0.4], [2.9]]), np.array([2, 1])).tolist()
    [0.5, 1.0]
    """
    sizes = np.array([len(s.r_mem) for s in states])
    out = np.zeros(len(states))
    valid = np.flatnonzero(sizes >= ks)
    if len(valid) == 0:
        return out
    sizes_v, k_v = sizes[valid], ks[valid].astype(np.intp)
    mem = np.concatenate([states[i].X_mem for i in valid])
    rewards = np.concatenate([states[i].r_mem for i in valid])
    seg = np.repeat(np.arange(len(valid)), sizes_v)
    starts = np.cumsum(sizes_v) - sizes_v
    heads = np.array([states[i].head for i in valid])
    # age 0 = newest; rows are a ring whose oldest point sits at index `head`
    age = (heads[seg] - 1 - (np.arange(len(seg)) - starts[seg])) % sizes_v[seg]
    diff = mem - X[valid][seg]
    dist2 = np.einsum("md,md->m", diff, diff)
    order = np.lexsort((age, dist2, seg))
    k_starts = np.cumsum(k_v) - k_v
    within = np.arange(k_v.sum()) - np.repeat(k_starts, k_v)
    nearest = order[np.repeat(starts, k_v) + within]
    r = rewards[nearest]
    if weights == "uniform":
        w = np.ones(len(r))
    else:
        dist = np.sqrt(dist2[nearest])
        exact = dist == 0.0
        has_exact = np.add.reduceat(exact, k_starts) > 0
        with np.errstate(divide="ignore"):
            w = np.where(np.repeat(has_exact, k_v), exact.astype(np.float64), 1.0 / dist)
    out[valid] = np.add.reduceat(w * r, k_starts) / np.add.reduceat(w, k_starts)
    return out


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


class LNUCBTA(BasePolicy):
    """LNUCB-TA over :class:`LNUCBTAArmState` (see the module docstring).

    ``g`` comes from the shared :class:`AttentionTotals` part; a selection that
    cold-starts an arm changes it and lists ``"shared"`` in ``Decision.state_changed``.
    """

    NAME: ClassVar[str] = "lnucb_ta"
    CONFIG: ClassVar[type[PolicyConfig]] = LNUCBTAConfig
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
        return super()._parts_changed_by_new_arms(arm_ids) + (SHARED_PART,)

    def retire_arm(self, arm_id: str) -> None:
        """Forget ``arm_id`` and take it out of the totals behind ``g``."""
        state = self._known_arm(arm_id)
        self._shared.arms -= 1
        self._shared.mean_sum -= _mean(state)  # type: ignore[arg-type]
        super().retire_arm(arm_id)

    def global_attention(self) -> float:
        """``g`` of eq. 101: mean over the known arms of their mean rewards (0 if none)."""
        totals = self._shared
        return totals.mean_sum / totals.arms if totals.arms else 0.0

    def exploration_weights(self, states: list[LNUCBTAArmState]) -> np.ndarray:
        """``alpha_a`` of eq. 4/17 for each state, shape ``(K,)``, clamped at 0; the
        constant ``alpha_0`` when ``temporal_attention`` is off."""
        cfg = self.config
        if not cfg.temporal_attention:
            return np.full(len(states), cfg.alpha)
        N = np.array([s.n for s in states], dtype=np.float64)
        n_mean = np.array([_mean(s) for s in states])
        alpha = cfg.alpha / (N + 1.0) * (cfg.kappa * self.global_attention() + (1.0 - cfg.kappa) * n_mean)
        return np.maximum(alpha, 0.0)

    def _knn_terms(self, states: list[LNUCBTAArmState], X: np.ndarray) -> np.ndarray:
        cfg = self.config
        ks = adaptive_k(states, cfg.theta_min, cfg.theta_max, cfg.reward_range)
        return knn_estimates(states, X, ks, cfg.knn_weights)

    def _score(
        self, arm_ids: list[str], states: list, X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        mean, width = linear_ucb_terms(states, X)
        score = self.exploration_weights(states) * width
        if self.config.use_linear:
            score = score + mean
        if self.config.use_knn:
            score = score + self._knn_terms(states, X)
        return score, width

    def _update(self, arm_id: str, state, x: np.ndarray, reward: float, ctx: SelectContext) -> None:
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

    def _arm_stats_extras(self, arm_id: str, state) -> dict[str, float]:
        cfg = self.config
        return {
            "alpha": float(self.exploration_weights([state])[0]),
            "k": float(adaptive_k([state], cfg.theta_min, cfg.theta_max, cfg.reward_range)[0]),
        }
