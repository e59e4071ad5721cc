"""Counterfactual evaluation of learning settings over time (docs/offline.md, "Evaluations").

An *evaluation* answers "what would each of these learning settings have earned per
decision on this log?" the way Azure Personalizer's offline evaluations did: each
setting is replayed over the log in time order with *progressive validation* -- at
event ``i`` the policy, trained on events ``0 .. i-1``, gives its action distribution
``pi_i`` (its exploration included: :meth:`~bandit_core.policy.BasePolicy.select`'s
propensities), then learns event ``i``'s logged reward for the served arm -- and the
importance weights ``w_i = pi_i(a_i) / p_i`` of the logged actions give IPS and SNIPS
estimates, and, with a reward model fit progressively from the log (:class:`RewardModels`),
doubly robust ones (:mod:`bandit_core.evaluation.estimators`, docs/algorithms.md section 6).

The estimates are kept as additive per-period sums (:class:`WindowSums`), so any window
or expanding series of periods is a sum of rows, with Gaussian (central limit)
intervals, the form Personalizer reported (``confidenceInterval``):

* IPS ``V = S_wr / n``, variance ``(S_(wr)^2 / n - V^2) / n``;
* SNIPS ``V = S_wr / S_w``, delta-method variance
  ``(S_w2r2 - 2 V S_w2r + V^2 S_w2) / S_w^2`` (``S_x`` the sum of ``x`` over the window);
* DR ``V = S_t / n`` of its per-event terms ``t_i = sum_a pi_i(a) q_i(a) + w_i (r_i -
  q_i(a_i))``, variance ``(S_(t^2) / n - V^2) / n``, with one of two reward models
  ``q`` (:class:`RewardModels`): ``dr``, the arm's mean logged reward so far; ``mtr``,
  its importance-weighted mean so far (the regression Vowpal Wabbit's ``--cb_type mtr``
  trains: the served arm's reward weighted ``1 / p``). :data:`ESTIMATORS` names the
  three an evaluation can report (:meth:`WindowSums.estimate`).

>>> import numpy as np
>>> d = np.array([[0.5, 0.5], [1.0, 0.0]])
>>> s = WindowSums.of(np.array([1.0, 0.0]), np.array([0, 0]), np.array([0.5, 0.5]), d)
>>> s.n, s.ips_numerator, s.ips, s.snips
(2.0, 1.0, 0.5, 0.3333333333333333)
>>> s.estimate("dr") == s.ips  # no reward model given: q = 0, so DR is IPS
True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from statistics import NormalDist

import numpy as np

from bandit_core.clock import clock_at
from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation.estimators import estimator_terms
from bandit_core.policy import AnyPolicy
from bandit_core.validation import check_choice, check_confidence


@dataclass(frozen=True)
class WindowSums:
    """The additive sums of one window of events (module docstring): ``n`` events,
    ``ips_numerator`` ``sum w r``, ``snips_denominator`` ``sum w``, ``sum_of_squares``
    ``sum (w r)^2``, ``w2`` ``sum w^2``, ``w2r`` ``sum w^2 r``, ``w2r2`` ``sum w^2 r^2``,
    ``nonzero`` (events where the target gives the logged action probability > 0), and
    the sums of the DR terms and of their squares under each reward model
    (``dr_numerator``, ``dr_sum_of_squares``, ``mtr_numerator``, ``mtr_sum_of_squares``)."""

    n: float = 0.0
    ips_numerator: float = 0.0
    snips_denominator: float = 0.0
    sum_of_squares: float = 0.0
    w2: float = 0.0
    w2r: float = 0.0
    w2r2: float = 0.0
    nonzero: float = 0.0
    dr_numerator: float = 0.0
    dr_sum_of_squares: float = 0.0
    mtr_numerator: float = 0.0
    mtr_sum_of_squares: float = 0.0

    @classmethod
    def of(
        cls,
        reward: np.ndarray,
        action: np.ndarray,
        pscore: np.ndarray,
        action_dist: np.ndarray,
        q_hat: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> WindowSums:
        """The sums over events with ``reward`` (n,), logged ``action`` (n,) int,
        ``pscore`` (n,) in (0, 1], the target's ``action_dist`` (n, K) and the reward
        models' ``q_hat`` (``dr``'s and ``mtr``'s, each (n, K); None: 0)."""
        w = importance_weights(action, pscore, action_dist)
        r = np.asarray(reward, dtype=np.float64)
        if r.shape != w.shape or not np.isfinite(r).all():
            raise InvalidInputError(f"reward must be finite of shape {w.shape}, but got {r.shape}")
        if q_hat is None or not r.size:
            return cls.from_terms(w, r)
        dr, mtr = (estimator_terms("dr", r, action, pscore, action_dist, q)[0] for q in q_hat)
        return cls.from_terms(w, r, dr, mtr)

    @classmethod
    def from_terms(
        cls,
        w: np.ndarray,
        r: np.ndarray,
        dr: np.ndarray | None = None,
        mtr: np.ndarray | None = None,
    ) -> WindowSums:
        """The sums of importance weights ``w`` (n,), rewards ``r`` (n,) and the DR terms
        of the two reward models (n,) each (None: the model 0, whose DR term is ``w r``)."""
        wr = w * r
        w2 = w * w
        dr = wr if dr is None else dr
        mtr = wr if mtr is None else mtr
        return cls(
            n=float(w.size),
            ips_numerator=float(wr.sum()),
            snips_denominator=float(w.sum()),
            sum_of_squares=float((wr * wr).sum()),
            w2=float(w2.sum()),
            w2r=float((w2 * r).sum()),
            w2r2=float((w2 * r * r).sum()),
            nonzero=float(np.count_nonzero(w)),
            dr_numerator=float(dr.sum()),
            dr_sum_of_squares=float((dr * dr).sum()),
            mtr_numerator=float(mtr.sum()),
            mtr_sum_of_squares=float((mtr * mtr).sum()),
        )

    def __add__(self, other: WindowSums) -> WindowSums:
        return WindowSums(*(getattr(self, f) + getattr(other, f) for f in SUM_FIELDS))

    def to_list(self) -> list[float]:
        return [getattr(self, f) for f in SUM_FIELDS]

    @property
    def ips(self) -> float:
        """``S_wr / n`` (0 for an empty window)."""
        return self.ips_numerator / self.n if self.n else 0.0

    @property
    def snips(self) -> float:
        """``S_wr / S_w`` (0 when the target gives every logged action weight 0)."""
        return self.ips_numerator / self.snips_denominator if self.snips_denominator > 0 else 0.0

    def ips_half_width(self, confidence: float = 0.95) -> float:
        """Half-width of the Gaussian interval of :attr:`ips` (module docstring)."""
        if self.n < 2:
            return 0.0
        variance = max(self.sum_of_squares / self.n - self.ips**2, 0.0) / self.n
        return _z(confidence) * math.sqrt(variance)

    def snips_half_width(self, confidence: float = 0.95) -> float:
        """Half-width of the delta-method Gaussian interval of :attr:`snips`."""
        if self.n < 2 or self.snips_denominator <= 0:
            return 0.0
        v = self.snips
        variance = (
            max(self.w2r2 - 2 * v * self.w2r + v * v * self.w2, 0.0) / self.snips_denominator**2
        )
        return _z(confidence) * math.sqrt(variance)

    def estimate(self, estimator: str) -> float:
        """The value ``estimator`` (one of :data:`ESTIMATORS`) gives: ``S_wr / n`` or
        ``S_t / n`` of its DR terms (0 for an empty window)."""
        numerator, _ = self._terms(estimator)
        return numerator / self.n if self.n else 0.0

    def half_width(self, estimator: str, confidence: float = 0.95) -> float:
        """Half-width of the Gaussian interval of :meth:`estimate` (module docstring)."""
        numerator, squares = self._terms(estimator)
        if self.n < 2:
            return 0.0
        mean = numerator / self.n
        return _z(confidence) * math.sqrt(max(squares / self.n - mean * mean, 0.0) / self.n)

    def _terms(self, estimator: str) -> tuple[float, float]:
        check_choice(estimator, "estimator", ESTIMATORS, error=InvalidInputError)
        if estimator == "dr":
            return self.dr_numerator, self.dr_sum_of_squares
        if estimator == "mtr":
            return self.mtr_numerator, self.mtr_sum_of_squares
        return self.ips_numerator, self.sum_of_squares


ESTIMATORS = ("ips", "dr", "mtr")
"""The estimators an evaluation reports its settings by (module docstring): IPS, and DR
with the ``dr`` or the ``mtr`` reward model (:class:`RewardModels`)."""

SUM_FIELDS = tuple(f.name for f in fields(WindowSums))
"""The sums' names in their stored order (:meth:`WindowSums.to_list`)."""


def _z(confidence: float) -> float:
    """The two-sided standard normal quantile of ``confidence`` (1.96 for 0.95)."""
    confidence = check_confidence(confidence)
    return NormalDist().inv_cdf((1 + confidence) / 2)


def importance_weights(
    action: np.ndarray, pscore: np.ndarray, action_dist: np.ndarray
) -> np.ndarray:
    """``w_i = action_dist[i, action_i] / pscore_i`` (n,)."""
    a = np.asarray(action, dtype=np.intp)
    p = np.asarray(pscore, dtype=np.float64)
    pi = np.asarray(action_dist, dtype=np.float64)
    if pi.ndim != 2 or pi.shape[0] != a.size or p.shape != a.shape:
        raise InvalidInputError(
            f"action (n,), pscore (n,) and action_dist (n, K) must agree, but got {a.shape}, {p.shape}, {pi.shape}"
        )
    if a.size and not ((p > 0) & (p <= 1)).all():
        raise InvalidInputError("pscore must lie in (0, 1]")
    return pi[np.arange(a.size), a] / p


def period_sums(
    period: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    dr: np.ndarray | None = None,
    mtr: np.ndarray | None = None,
) -> dict[int, WindowSums]:
    """:class:`WindowSums` per distinct value of ``period`` (n,) int, from the weights
    ``w`` (n,), rewards ``r`` (n,) and DR terms ``dr`` and ``mtr`` (n,) each
    (:meth:`WindowSums.from_terms`)."""
    out: dict[int, WindowSums] = {}
    for p in np.unique(period):
        mask = period == p
        out[int(p)] = WindowSums.from_terms(
            w[mask],
            r[mask],
            None if dr is None else dr[mask],
            None if mtr is None else mtr[mask],
        )
    return out


@dataclass
class RewardModels:
    """The reward models of the DR estimates (module docstring), fit progressively from
    the log: per arm id, its served count ``n``, ``sum r``, ``sum 1/p`` and ``sum r/p``
    over the events seen so far. Event ``i``'s predictions come from events ``0 .. i-1``
    only (no event's own reward enters its prediction); an arm not served before
    predicts 0. The state carries over from one slice of a log to the next, so a log
    read in time-ordered parts gets the predictions of the whole.

    >>> m = RewardModels()
    >>> q_dr, q_mtr = m.predictions([["a", "b"]] * 3, ["a", "a", "b"], [1.0, 0.0, 1.0],
    ...                             [0.5, 0.25, 0.5], 2)
    >>> q_dr.tolist(), q_mtr.tolist()  # a: mean (1 + 0) / 2; weighted (2 + 0) / (2 + 4)
    ([[0.0, 0.0], [1.0, 0.0], [0.5, 0.0]], [[0.0, 0.0], [1.0, 0.0], [0.3333333333333333, 0.0]])
    """

    sums: dict[str, list[float]] = field(default_factory=dict)

    def predictions(
        self,
        candidates: Sequence[Sequence[str]],
        chosen: Sequence[str],
        reward: Sequence[float] | np.ndarray,
        pscore: Sequence[float] | np.ndarray,
        k_max: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``q_hat`` of ``dr`` and of ``mtr`` (n, ``k_max``) for events with ``candidates``
        (arm ids, in order), served arm ``chosen``, ``reward`` and ``pscore`` (n,) each,
        in time order; each event is learned after its row is predicted."""
        n = len(candidates)
        q_dr, q_mtr = np.zeros((n, k_max)), np.zeros((n, k_max))
        for i, ids in enumerate(candidates):
            for j, a in enumerate(ids):
                s = self.sums.get(a)
                if s is not None:
                    q_dr[i, j], q_mtr[i, j] = s[1] / s[0], s[3] / s[2]
            s = self.sums.setdefault(chosen[i], [0.0, 0.0, 0.0, 0.0])
            r, inverse = float(reward[i]), 1.0 / float(pscore[i])
            s[0] += 1.0
            s[1] += r
            s[2] += inverse
            s[3] += r * inverse
        return q_dr, q_mtr


def progressive_distribution(
    policy: AnyPolicy,
    events: Iterable[LoggedEvent],
    k_max: int,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """``action_dist`` (n, ``k_max``) of ``policy`` learning as it goes (module
    docstring): row ``i`` is its select distribution on event ``i`` (epsilon included, in
    ``arm_ids`` order, zero-padded) before it learns event ``i``'s reward. ``events`` is
    read once (a generator building each event's rows on the fly keeps memory flat);
    ``progress`` is called with 1 after each event. The policy is trained in place; a
    policy with a wall clock (:class:`~bandit_core.clock.Clocked`) runs each event at
    its ``time``.

    >>> import bandit_core
    >>> p = bandit_core.make_policy("linucb", d=1, alpha=0.0, epsilon=0.2, seed=0)
    >>> ev = [LoggedEvent.build(["a", "b"], "a", 1.0, context=[1.0], pscore=0.5)] * 2
    >>> progressive_distribution(p, ev, 2).round(2).tolist()  # a tie, then "a" learned
    [[0.5, 0.5], [0.9, 0.1]]
    """
    rows = []
    for e in events:
        # a policy with a wall clock selects and learns at the decision's time, as it
        # did when served (docs/algorithms.md section 10.3)
        with nullcontext() if e.time is None else clock_at(policy, e.time):
            decision = policy.select(e.arm_ids, e.X, user_id=e.user_id)
            index = {a: j for j, a in enumerate(e.arm_ids)}
            row = np.zeros(k_max)
            row[[index[a] for a in decision.ranking]] = decision.propensities
            rows.append(row)
            policy.add_arm(e.chosen)
            policy.update(e.chosen, e.X[e.action], e.reward, user_id=e.user_id)
        if progress is not None:
            progress(1)
    return np.array(rows).reshape(len(rows), k_max)


def baseline_distribution(sizes: Sequence[int]) -> np.ndarray:
    """``action_dist`` (n, K_max) of the baseline: always the first candidate (the first
    action the application sent that was not excluded)."""
    out = np.zeros((len(sizes), max(sizes, default=0)))
    if out.size:
        out[:, 0] = 1.0
    return out


def uniform_distribution(sizes: Sequence[int]) -> np.ndarray:
    """``action_dist`` (n, K_max) of the uniformly random policy over each event's
    ``sizes[i]`` candidates."""
    out = np.zeros((len(sizes), max(sizes, default=0)))
    for i, k in enumerate(sizes):
        out[i, :k] = 1.0 / k
    return out


__all__ = [
    "ESTIMATORS",
    "SUM_FIELDS",
    "RewardModels",
    "WindowSums",
    "baseline_distribution",
    "importance_weights",
    "period_sums",
    "progressive_distribution",
    "uniform_distribution",
]
