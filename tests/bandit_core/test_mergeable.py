"""Off-policy estimates over partitions (``bandit_core.evaluation.mergeable``): exact sums
whose value never depends on the order of the additions, Poisson bootstrap weights that
depend on an event's index only, and the sums of any split of a log into time-ordered
partitions, added in any order, equal to the single pass."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bandit_core
from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation import off_policy_estimates
from bandit_core.evaluation.mergeable import (
    BOOTSTRAP_BLOCK,
    EstimateSums,
    ExactSum,
    RidgeSums,
    bootstrap_weights,
)
from bandit_core.evaluation.offpolicy import (
    bootstrap_key,
    fold_of,
    partition_estimate_sums,
    ridge_sums,
)

finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, max_size=40), st.integers(0, 40), st.randoms(use_true_random=False))
def test_an_exact_sum_is_the_correctly_rounded_sum_in_any_order(
    values: list[float], cut: int, random: object
) -> None:
    exact = float(sum((Fraction(v) for v in values), Fraction(0)))
    shuffled = list(values)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    halves = ExactSum.of(shuffled[cut:]) + ExactSum.of(shuffled[:cut])
    assert ExactSum.of(values).value == exact
    assert halves.value == exact
    assert halves.partials == ExactSum.of(values).partials  # the same representation


def test_bootstrap_weights_depend_on_the_event_index_only() -> None:
    whole = bootstrap_weights(7, 0, 3 * BOOTSTRAP_BLOCK, 5)
    cuts = [0, 10, BOOTSTRAP_BLOCK + 1, 2 * BOOTSTRAP_BLOCK, 3 * BOOTSTRAP_BLOCK]
    pieces = [bootstrap_weights(7, a, b - a, 5) for a, b in itertools.pairwise(cuts)]
    np.testing.assert_array_equal(np.hstack(pieces), whole)
    assert abs(whole.mean() - 1.0) < 0.02 and abs(whole.var() - 1.0) < 0.05  # Poisson(1)
    assert not np.array_equal(bootstrap_weights(8, 0, 10, 5), whole[:, :10])


def _logged(n: int, seed: int) -> list[LoggedEvent]:
    """Events served by LinUCB with epsilon 0.2 over arms a, b, c (c sometimes missing),
    with its logged propensities and Bernoulli rewards."""
    rng = np.random.default_rng(seed)
    logger = bandit_core.make_policy("linucb", d=2, epsilon=0.2, seed=seed)
    theta = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0]), "c": np.array([-1.0, 0.5])}
    out = []
    for _ in range(n):
        ids = ["a", "b", "c"] if rng.random() < 0.7 else ["a", "b"]
        X = rng.normal(size=(len(ids), 2))
        dec = logger.select(ids, X)
        j = ids.index(dec.arm_id)
        r = float(rng.random() < 1 / (1 + np.exp(-X[j] @ theta[dec.arm_id])))
        logger.update(dec.arm_id, X[j], r)
        out.append(LoggedEvent.build(ids, dec.arm_id, r, arm_features=X, pscore=dec.propensity))
    return out


def _target() -> bandit_core.BasePolicy:
    target = bandit_core.make_policy("linucb", d=2, alpha=0.0, seed=1)
    for e in _logged(200, 5):
        target.add_arm(e.chosen)
        target.update(e.chosen, e.X[e.action], e.reward)
    return target


@pytest.mark.parametrize("n_parts", [2, 5, 13])
def test_partition_sums_added_in_any_order_equal_the_single_pass(n_parts: int) -> None:
    events, target = _logged(2 * BOOTSTRAP_BLOCK + 300, 0), _target()
    n, folds, ridge_lambda = len(events), 3, 0.5
    single = off_policy_estimates(
        target, events, rng=np.random.default_rng(3), n_bootstrap=40, folds=folds,
        ridge_lambda=ridge_lambda,
    )  # fmt: skip
    rng = np.random.default_rng(n_parts)
    cuts = [0, *sorted(rng.choice(np.arange(1, n), n_parts - 1, replace=False).tolist()), n]
    parts = [(a, events[a:b], fold_of(a, b - a, n, folds)) for a, b in itertools.pairwise(cuts)]
    order = rng.permutation(len(parts)).tolist()
    ridge = ridge_sums(*parts[order[0]][1:])
    for i in order[1:]:
        ridge = ridge + ridge_sums(*parts[i][1:])
    fits = ridge.fits(folds, ridge_lambda)
    key = bootstrap_key(np.random.default_rng(3))
    sums = [
        partition_estimate_sums(target, part, first_index=a, fold=fold, fits=fits, key=key, n_bootstrap=40)
        for a, part, fold in parts
    ]  # fmt: skip
    merged = sums[order[0]]
    for i in order[1:]:
        merged = merged + sums[i]
    results = merged.results(0.95)
    for name in ("ips", "snips"):  # exact sums: the same bits
        assert results[name] == single[name]
    dr, one = results["dr"], single["dr"]
    assert dr.support == one.support and dr.n == one.n == n
    for field in ("value", "ci_low", "ci_high"):
        assert getattr(dr, field) == pytest.approx(getattr(one, field), rel=1e-12, abs=0)
    assert results["ips"].ci_low < results["ips"].value < results["ips"].ci_high


def test_sums_with_different_resample_counts_do_not_add() -> None:
    events, target = _logged(50, 1), _target()
    fold = fold_of(0, 50, 50, 2)
    fits = ridge_sums(events, fold).fits(2, 1.0)

    def sums(n_bootstrap: int) -> EstimateSums:
        return partition_estimate_sums(
            target, events, first_index=0, fold=fold, fits=fits, key=0, n_bootstrap=n_bootstrap
        )

    with pytest.raises(InvalidInputError, match="10 and 20 bootstrap resamples cannot be added"):
        sums(10) + sums(20)


def test_ridge_fits_leave_out_their_own_fold() -> None:
    x = np.array([[1.0, 0.0], [0.0, 2.0]])
    ridge = RidgeSums(
        {(0, "a"): x.T @ x, (1, "b"): np.eye(2)}, {(0, "a"): x.T @ [1.0, 2.0], (1, "b"): np.ones(2)}
    )
    fits = ridge.fits(2, 1.0)
    assert sorted(fits[0]) == ["b"] and sorted(fits[1]) == ["a"]
    np.testing.assert_allclose(fits[0]["b"], [0.5, 0.5])
    np.testing.assert_allclose(fits[1]["a"], np.linalg.solve(np.eye(2) + x.T @ x, x.T @ [1.0, 2.0]))
    assert math.isclose(float(fits[1]["a"] @ [0.0, 1.0]), 0.8)
