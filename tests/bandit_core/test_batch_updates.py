"""``update_batch`` (docs/algorithms.md section 8.1): a policy that folds its updates
(hybrid LinUCB without per-arm parts) applies m rewards as one rank-m update equal to
the updates one by one in any order and to the ridge closed form; every other policy
applies them one by one, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from bandit_core import POLICIES, make_policy
from bandit_core.errors import InvalidInputError, UnknownArmError
from bandit_core.hybrid_linucb import HybridLinUCB
from bandit_core.linear import LinearArmState

D = 257  # the default Personalizer loop's shared part


def _shared(policy: HybridLinUCB) -> LinearArmState:
    return policy.shared_state


def _close(a: LinearArmState, b: LinearArmState, atol: float = 1e-9) -> None:
    for name in ("A", "A_inv", "b", "theta"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=atol)
    assert a.n == b.n
    assert a.reward_sum == pytest.approx(b.reward_sum, abs=1e-9)


def _log(rng: np.random.Generator, m: int, d: int = D) -> tuple[list[str], np.ndarray, np.ndarray]:
    """m rewards of arms never registered, rows as hashed one-hot features are (sparse,
    non-negative) plus a bias column."""
    X = (rng.uniform(size=(m, d)) < 0.06) * rng.uniform(0.5, 1.0, size=(m, d))
    X[:, -1] = 1.0
    return [f"item-{i % 7}" for i in range(m)], X, rng.uniform(-1.0, 1.0, size=m)


def _folding(**params: object) -> HybridLinUCB:
    policy = make_policy("hybrid_linucb", d=D, alpha=0.0, reward_range=(-1.0, 1.0), **params)
    assert isinstance(policy, HybridLinUCB) and policy.folds_updates
    return policy


@pytest.mark.parametrize("m", [1, 3, 60, 128, 129, 400])
def test_a_fold_equals_the_updates_one_by_one_in_any_order(m: int) -> None:
    """Both ways of taking the inverse (Woodbury below d / 2 rows, Cholesky from there)."""
    rng = np.random.default_rng(m)
    prior_arms, prior_X, prior_r = _log(rng, 25)
    arms, X, r = _log(rng, m)
    folded, one_by_one = _folding(), _folding()
    for policy in (folded, one_by_one):
        for arm, x, reward in zip(prior_arms, prior_X, prior_r, strict=True):
            policy.update(arm, x, reward)
    folded.update_batch(arms, list(X), list(r))
    for i in rng.permutation(m):
        one_by_one.update(arms[i], X[i], r[i])
    _close(_shared(folded), _shared(one_by_one))


def test_folds_equal_the_ridge_closed_form() -> None:
    """Batches of several sizes end at A = lambda I + X'X, b = X'r, theta = A^-1 b."""
    rng = np.random.default_rng(7)
    arms, X, r = _log(rng, 700)
    policy = _folding(ridge_lambda=2.0)
    start = 0
    for size in (1, 5, 90, 200, 404):
        policy.update_batch(
            arms[start : start + size], list(X[start : start + size]), list(r[start : start + size])
        )
        start += size
    A = 2.0 * np.eye(D) + X.T @ X
    state = _shared(policy)
    np.testing.assert_allclose(state.A, A, rtol=0, atol=1e-9)
    np.testing.assert_allclose(state.A_inv, np.linalg.inv(A), rtol=0, atol=1e-9)
    np.testing.assert_allclose(state.theta, np.linalg.solve(A, X.T @ r), rtol=0, atol=1e-9)
    assert state.n == 700 and state.reward_sum == pytest.approx(r.sum())


def test_a_fold_across_the_refactor_period_equals_the_updates() -> None:
    rng = np.random.default_rng(3)
    arms, X, r = _log(rng, 50)
    folded, one_by_one = _folding(refactor_every=16), _folding(refactor_every=16)
    folded.update_batch(arms[:10], list(X[:10]), list(r[:10]))
    folded.update_batch(arms[10:], list(X[10:]), list(r[10:]))
    for arm, x, reward in zip(arms, X, r, strict=True):
        one_by_one.update(arm, x, reward)
    _close(_shared(folded), _shared(one_by_one))


def test_a_bad_row_or_reward_changes_nothing() -> None:
    rng = np.random.default_rng(1)
    arms, X, r = _log(rng, 4)
    policy = _folding()
    policy.update_batch(arms, list(X), list(r))
    before = policy.to_bytes()
    bad_row = [*X[:3], np.full(D, np.inf)]
    with pytest.raises(InvalidInputError, match="x"):
        policy.update_batch(arms, bad_row, list(r))
    with pytest.raises(InvalidInputError, match="reward"):
        policy.update_batch(arms, list(X), [*r[:3], 5.0])
    with pytest.raises(InvalidInputError, match="as many rows"):
        policy.update_batch(arms, list(X[:3]), list(r))
    huge = [X[0] * 1e200, *X[1:]]
    with np.errstate(over="ignore"), pytest.raises(InvalidInputError, match="overflow"):
        policy.update_batch(arms, huge, list(r))
    policy.retire_arm("item-2")
    with pytest.raises(UnknownArmError, match="item-2"):
        policy.update_batch(arms, list(X), list(r))
    policy.add_arm("item-2")
    assert policy.to_bytes() == before


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_the_default_is_update_one_by_one_bit_for_bit(name: str) -> None:
    """Every policy that does not fold (and hybrid LinUCB with per-arm parts) applies a
    batch as its updates in order: the same bytes."""
    params = {"context_dim": 2} if name == "hybrid_linucb" else {}
    rng = np.random.default_rng(5)
    batched, one_by_one = (make_policy(name, d=4, seed=0, **params) for _ in range(2))
    assert not batched.folds_updates or name == "hybrid_linucb" and not params
    arms = ["a", "b", "a", "c"]
    X = rng.uniform(size=(len(arms), 4))
    for policy in (batched, one_by_one):  # the arms known (cold-started) by a selection
        policy.select(["a", "b", "c"], X[:3])
    r = [0.25, 1.0, 0.0, 0.5]
    batched.update_batch(arms, list(X), r)
    for arm, x, reward in zip(arms, X, r, strict=True):
        one_by_one.update(arm, x, reward)
    assert batched.to_bytes() == one_by_one.to_bytes()


def test_diag_linucb_per_feature_fit_folds_in_any_order() -> None:
    """diag_linucb folds with its per-feature fit and no forgetting (a reward adds to its
    columns' sums): a batch equals the updates one by one in a random order, to 1e-9.
    Its joint fit and its forgetting variants do not fold; the joint fit's updates do
    not commute (two orders give weights apart by far more than rounding)."""
    rng = np.random.default_rng(9)
    arms, X, r = _log(rng, 200, d=64)
    folded, one_by_one = (
        make_policy("diag_linucb", d=64, fit="per_feature", reward_range=(-1.0, 1.0))
        for _ in range(2)
    )
    assert folded.folds_updates
    folded.update_batch(arms, list(X), list(r))
    for i in rng.permutation(len(arms)):
        one_by_one.update(arms[i], X[i], r[i])
    a, b = folded.shared_state, one_by_one.shared_state
    np.testing.assert_array_equal(a.index, b.index)
    for name in ("sum_sq", "w"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=0, atol=1e-9)
    assert a.n == b.n == len(arms)

    assert not make_policy("diag_linucb", d=64, gamma=0.99).folds_updates
    joint = [make_policy("diag_linucb", d=64, reward_range=(-1.0, 1.0)) for _ in range(2)]
    assert not joint[0].folds_updates
    for policy, order in zip(joint, (range(len(arms)), rng.permutation(len(arms))), strict=True):
        for i in order:
            policy.update(arms[i], X[i], r[i])
    assert np.abs(joint[0].shared_state.w - joint[1].shared_state.w).max() > 1e-3
