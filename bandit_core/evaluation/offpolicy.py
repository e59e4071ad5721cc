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
* The estimates are sums over the events (:mod:`bandit_core.evaluation.mergeable`), so a
  log cut into time-ordered partitions is evaluated a partition at a time:
  :func:`ridge_sums` of every partition, added, give the folds' fits
  (:meth:`RidgeSums.fits`); :func:`partition_estimate_sums` of every partition, added,
  give the estimates (:meth:`EstimateSums.results`). :func:`off_policy_estimates` is that
  with one partition.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation.estimators import EstimateResult, estimator_terms, unsupported_terms
from bandit_core.evaluation.mergeable import EstimateSums, RidgeSums, bootstrap_weights
from bandit_core.policy import Policy
from bandit_core.validation import check_confidence, check_int, check_real


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


def fold_of(first_index: int, count: int, n_evaluated: int, folds: int) -> np.ndarray:
    """The cross-fitting fold (count,) of the evaluated events ``first_index ..
    first_index + count - 1`` of ``n_evaluated``: ``i * folds // n_evaluated``, so the
    folds are contiguous blocks in time order."""
    return (first_index + np.arange(count)) * folds // n_evaluated


def ridge_sums(events: Sequence[LoggedEvent], fold: np.ndarray) -> RidgeSums:
    """The reward model's sums (:class:`RidgeSums`) of ``events``, event ``i`` in fold
    ``fold[i]``: per fold and served arm, ``sum x x^T`` and ``sum r x`` of the served rows."""
    rows: dict[tuple[int, str], list[int]] = {}
    for i, e in enumerate(events):
        rows.setdefault((int(fold[i]), e.chosen), []).append(i)
    gram, moment = {}, {}
    for key, index in rows.items():
        x = np.stack([events[i].X[events[i].action] for i in index])
        r = np.array([events[i].reward for i in index])
        gram[key], moment[key] = x.T @ x, x.T @ r
    return RidgeSums(gram, moment)


def ridge_predictions(
    events: Sequence[LoggedEvent], fold: np.ndarray, fits: Sequence[dict[str, np.ndarray]]
) -> np.ndarray:
    """``q_hat`` (n, K_max): event ``i``'s candidates scored ``x^T theta_a`` by the fit of
    the folds other than ``fold[i]`` (:meth:`RidgeSums.fits`); 0 for an arm without one."""
    q = np.zeros((len(events), _k_max(events)))
    for i, e in enumerate(events):
        fit = fits[int(fold[i])]
        for j, a in enumerate(e.arm_ids):
            if a in fit:
                q[i, j] = e.X[j] @ fit[a]
    return q


def ridge_q_hat(
    events: Sequence[LoggedEvent], *, ridge_lambda: float = 1.0, folds: int = 2
) -> np.ndarray:
    """``q_hat`` (n, K_max): cross-fitted per-arm ridge predictions ``x^T theta_a`` of every
    candidate's reward (module docstring; ``A = lambda I + sum x x^T``, ``theta = A^-1 b``)."""
    n = len(events)
    folds, ridge_lambda = _check_ridge(n, folds, ridge_lambda)
    fold = fold_of(0, n, n, folds)
    return ridge_predictions(events, fold, ridge_sums(events, fold).fits(folds, ridge_lambda))


def _check_ridge(n: int, folds: int, ridge_lambda: float) -> tuple[int, float]:
    folds = check_int(folds, "folds", low=2, high=n, error=InvalidInputError)
    ridge_lambda = check_real(
        ridge_lambda, "ridge_lambda", low=0.0, low_open=True, error=InvalidInputError
    )
    return folds, ridge_lambda


def partition_estimate_sums(
    policy: Policy,
    events: Sequence[LoggedEvent],
    *,
    first_index: int,
    fold: np.ndarray,
    fits: Sequence[dict[str, np.ndarray]],
    key: int,
    n_bootstrap: int,
) -> EstimateSums:
    """The sums (:class:`EstimateSums`) of the fixed greedy ``policy``'s IPS, SNIPS and DR
    over ``events``, the evaluated events ``first_index ..`` of a log, in folds ``fold``
    with the reward model's ``fits``; bootstrap weights keyed by ``key``."""
    n_bootstrap = check_int(n_bootstrap, "n_bootstrap", low=1, error=InvalidInputError)
    missing = [i for i, e in enumerate(events) if e.pscore is None]
    if missing:
        raise InvalidInputError(
            f"every event needs a pscore, but event {first_index + missing[0]} has none"
        )
    reward = np.array([e.reward for e in events], dtype=np.float64)
    action = np.array([e.action for e in events], dtype=np.intp)
    pscore = np.array([e.pscore for e in events], dtype=np.float64)
    action_dist = target_distribution(policy, events)
    q_hat = ridge_predictions(events, fold, fits)
    _, weight = estimator_terms("snips", reward, action, pscore, action_dist)
    doubly_robust, _ = estimator_terms("dr", reward, action, pscore, action_dist, q_hat)
    deterministic, unsupported = unsupported_terms(action, pscore, action_dist)
    return EstimateSums.of(
        reward,
        weight,
        doubly_robust,
        deterministic,
        unsupported,
        bootstrap_weights(key, first_index, len(events), n_bootstrap),
    )


def bootstrap_key(rng: np.random.Generator) -> int:
    """The key of the Poisson bootstrap's generators, drawn from ``rng``."""
    return int(rng.integers(2**63))


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
    """IPS, SNIPS and DR estimates (with percentile Poisson-bootstrap intervals keyed by a
    draw from ``rng``) of the value of the fixed greedy ``policy`` on ``events``, which all
    need ``pscore``. Each result carries the log's support of the target; with
    ``require_support`` a log that does not support it raises :class:`UnsupportedLogError`
    instead. The sums of one partition holding every event (module docstring).

    >>> import bandit_core
    >>> ev = [LoggedEvent.build(["a", "b"], "ab"[i % 2], float(i % 2), context=[1.0], pscore=0.5)
    ...       for i in range(8)]
    >>> res = off_policy_estimates(bandit_core.make_policy("linucb", d=1), ev,
    ...                            rng=np.random.default_rng(0), n_bootstrap=50)
    >>> sorted(res), res["ips"].value  # untrained: a and b tie, each served half the time
    (['dr', 'ips', 'snips'], 0.5)
    """
    n = len(events)
    _k_max(events)
    folds, ridge_lambda = _check_ridge(n, folds, ridge_lambda)
    confidence = check_confidence(confidence)
    fold = fold_of(0, n, n, folds)
    sums = partition_estimate_sums(
        policy,
        events,
        first_index=0,
        fold=fold,
        fits=ridge_sums(events, fold).fits(folds, ridge_lambda),
        key=bootstrap_key(rng),
        n_bootstrap=n_bootstrap,
    )
    return sums.results(confidence, require_support=require_support)
