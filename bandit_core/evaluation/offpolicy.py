"""IPS, SNIPS and DR estimates of a fixed target policy's value on a log of
:class:`~bandit_core.datasets.LoggedEvent` objects with propensities (docs/algorithms.md
section 6), built on the array estimators of :mod:`bandit_core.evaluation.estimators`.

* The target's action distribution (``action_dist``, :func:`target_distribution`) is what
  ``policy.select(..., explore=False)`` serves on each logged candidate set: the greedy
  (UCB) choice, ties split evenly -- the policy's own ``Decision.propensities``. The policy
  is not updated, so it stays fixed over the log.
* DR's reward model (``q_hat``, :func:`ridge_q_hat`) is a per-arm ridge regression of the
  logged reward on the served arm's feature row (``linear.LinearArmState``, the estimator
  LinUCB uses for its mean), cross-fitted: the events are cut into ``folds`` contiguous
  blocks in time order, and each block's ``q_hat`` comes from the ridge fit on the other
  blocks, so no event's own reward enters its prediction. An arm with no data in the other
  blocks predicts 0 (the ridge prior).
* Events may have different candidate sets: arrays are padded to the largest ``K`` with
  probability 0 and ``q_hat`` 0, which leaves every estimator unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation.estimators import (
    EstimateResult,
    UnsupportedLogError,
    estimate,
    support,
)
from bandit_core.linear import LinearArmState
from bandit_core.policy import Policy
from bandit_core.validation import check_int, check_real

ESTIMATORS = ("ips", "snips", "dr")


def _k_max(events: Sequence[LoggedEvent]) -> int:
    if not events:
        raise InvalidInputError("events must hold at least one event, but got none")
    return max(len(e.arm_ids) for e in events)


def target_distribution(policy: Policy, events: Sequence[LoggedEvent]) -> np.ndarray:
    """``action_dist`` (n, K_max): row i is the probability the greedy ``policy`` serves each
    of event i's candidates (in ``arm_ids`` order, zero-padded)."""
    out = np.zeros((len(events), _k_max(events)))
    for i, e in enumerate(events):
        decision = policy.select(e.arm_ids, e.X, user_id=e.user_id, explore=False)
        index = {a: j for j, a in enumerate(e.arm_ids)}
        out[i, [index[a] for a in decision.ranking]] = decision.propensities
    return out


def ridge_q_hat(
    events: Sequence[LoggedEvent], *, ridge_lambda: float = 1.0, folds: int = 2
) -> np.ndarray:
    """``q_hat`` (n, K_max): cross-fitted per-arm ridge predictions ``x^T theta_a`` of every
    candidate's reward (module docstring; ``A = lambda I + sum x x^T``, ``theta = A^-1 b``)."""
    n, k = len(events), _k_max(events)
    folds = check_int(folds, "folds", low=2, high=n, error=InvalidInputError)
    ridge_lambda = check_real(
        ridge_lambda, "ridge_lambda", low=0.0, low_open=True, error=InvalidInputError
    )
    fold = np.arange(n) * folds // n
    q = np.zeros((n, k))
    for f in range(folds):
        arms: dict[str, LinearArmState] = {}
        for i in np.flatnonzero(fold != f).tolist():
            e = events[i]
            state = arms.get(e.chosen) or arms.setdefault(
                e.chosen, LinearArmState.prior(e.X.shape[1], ridge_lambda)
            )
            state.add(e.X[e.action], e.reward, e.reward, refactor_every=1000)
        for i in np.flatnonzero(fold == f).tolist():
            e = events[i]
            for j, a in enumerate(e.arm_ids):
                if a in arms:
                    q[i, j] = e.X[j] @ arms[a].theta
    return q


def off_policy_estimates(
    policy: Policy,
    events: Sequence[LoggedEvent],
    *,
    rng: np.random.Generator,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
    ridge_lambda: float = 1.0,
    folds: int = 2,
    require_support: bool = False,
) -> dict[str, EstimateResult]:
    """IPS, SNIPS and DR estimates (with percentile bootstrap intervals drawn from ``rng``)
    of the value of the fixed greedy ``policy`` on ``events``, which all need ``pscore``.
    Each result carries the log's support of the target; with ``require_support`` a log
    that does not support it raises :class:`UnsupportedLogError` instead.

    >>> import bandit_core
    >>> ev = [LoggedEvent.build(["a", "b"], "ab"[i % 2], float(i % 2), context=[1.0], pscore=0.5)
    ...       for i in range(8)]
    >>> res = off_policy_estimates(bandit_core.make_policy("linucb", d=1), ev,
    ...                            rng=np.random.default_rng(0), n_bootstrap=50)
    >>> sorted(res), res["ips"].value  # untrained: a and b tie, each served half the time
    (['dr', 'ips', 'snips'], 0.5)
    """
    missing = [i for i, e in enumerate(events) if e.pscore is None]
    if missing:
        raise InvalidInputError(f"every event needs a pscore, but event {missing[0]} has none")
    reward = np.array([e.reward for e in events], dtype=np.float64)
    action = np.array([e.action for e in events], dtype=np.intp)
    pscore = np.array([e.pscore for e in events], dtype=np.float64)
    action_dist = target_distribution(policy, events)
    if require_support:
        diagnostic = support(action, pscore, action_dist)
        if not diagnostic.supported:
            raise UnsupportedLogError(diagnostic)
    q_hat = ridge_q_hat(events, ridge_lambda=ridge_lambda, folds=folds)
    return {
        name: estimate(
            name,
            reward,
            action,
            pscore,
            action_dist,
            q_hat if name == "dr" else None,
            rng=rng,
            n_bootstrap=n_bootstrap,
            confidence=confidence,
        )
        for name in ESTIMATORS
    }
