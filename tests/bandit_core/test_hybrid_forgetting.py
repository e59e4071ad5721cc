"""Hybrid LinUCB with per-arm parts that forgets (docs/algorithms.md section 10.3,
"Hybrid model with per-arm parts"): after any sequence of (timed) rewards, ``beta``,
each ``theta_a`` and the scores at any later time equal D-LinUCB's weighted ridge (10.1)
over the stacked rows ``[z, x in the block of the arm]`` recomputed from scratch, every
part decayed by the policy's one clock (so an arm nobody pulled decays too)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandit_core import clock_at, make_policy, policy_from_bytes
from bandit_core.errors import InvalidInputError
from bandit_core.hybrid_forgetting import HybridDiscountedArmState
from tests.bandit_core.test_shared_forgetting import (
    CANDIDATES,
    LAMBDA,
    START,
    TOL,
    _feed,
    observations,
)

ARMS = ["a", "b", "c"]  # the arms of the observations, in the order of their blocks
K = 2  # shared features z = x[:2]; the arm's context is x[2:], one feature


def _stacked(row: np.ndarray, arm: str) -> np.ndarray:
    """``[z, 0, ..., x, ..., 0]``: the row of Li et al.'s hybrid model as one ridge."""
    phi = np.zeros(K + len(ARMS) * (len(row) - K))
    phi[:K] = row[:K]
    start = K + ARMS.index(arm) * (len(row) - K)
    phi[start : start + len(row) - K] = row[K:]
    return phi


def _joint_ridge(obs: list, rows: list, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(10.1) from scratch over the stacked rows: ``(V^-1 b, V^-1 V~ V^-1)``."""
    Phi = np.array([_stacked(x, arm) for (x, _), (*_, arm) in zip(rows, obs)])
    r = np.array([reward for _, reward in rows])
    eye = LAMBDA * np.eye(Phi.shape[1])
    V_inv = np.linalg.inv(eye + Phi.T @ (weights[:, None] * Phi))
    V_sq = eye + Phi.T @ ((weights * weights)[:, None] * Phi)
    return V_inv @ (Phi.T @ (weights * r)), V_inv @ V_sq @ V_inv


def _check(policy: Any, obs: list, rows: list, weights: np.ndarray, now: float | None) -> None:
    """Scores of every arm on every candidate row, ``beta`` and each ``theta_a`` against
    the weighted joint ridge."""
    theta, width_matrix = _joint_ridge(obs, rows, weights)
    with clock_at(policy, now) if now is not None else nullcontext():
        for arm in ARMS:
            phis = np.array([_stacked(x, arm) for x in CANDIDATES])
            quad = np.einsum("ij,jk,ik->i", phis, width_matrix, phis)
            want = phis @ theta + policy.config.alpha * np.sqrt(quad)
            got = [policy.select([arm], x[None, :]).scores[0] for x in CANDIDATES]
            np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(policy.beta, theta[:K], rtol=TOL, atol=TOL)
        rows = [np.concatenate([theta[:K], theta[K + i : K + i + 1]]) for i in range(len(ARMS))]
        for i, arm in enumerate(ARMS):
            np.testing.assert_allclose(
                policy.theta(arm), theta[K + i : K + i + 1], rtol=TOL, atol=TOL
            )
            np.testing.assert_allclose(policy.arm_weights(arm).weights[0], rows[i], atol=TOL)
        np.testing.assert_allclose(policy.feature_weights().weights, rows, rtol=TOL, atol=TOL)


def _hybrid(**params: Any) -> Any:
    """The model over rows ``[z (2), x (1)]`` with the arms of :data:`ARMS` registered."""
    policy = make_policy("hybrid_linucb", d=3, context_dim=1, ridge_lambda=LAMBDA, **params)
    for arm in ARMS:
        policy.add_arm(arm)
    return policy


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(0.5, 0.999))
def test_per_update_discounting_equals_the_weighted_joint_ridge_from_scratch(
    obs, gamma: float
) -> None:
    """Every reward of the policy is one tick of every part's clock, whichever arm it
    came with: the ``k``-th latest reward weighs ``gamma^(k-1)`` in every block."""
    p = _hybrid(gamma=gamma, alpha=1.5)
    rows, _, _ = _feed(p, obs, timed=False)
    n = len(rows)
    _check(p, obs, rows, gamma ** (n - 1 - np.arange(n)), None)
    assert p.policy_stats()["rewarded"] == n


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(1.0, 500.0), st.floats(0.0, 300.0))
def test_half_life_discounting_equals_the_weighted_joint_ridge_at_any_later_time(
    obs, half_life: float, later: float
) -> None:
    """Rewards at random gaps, some late; scored at a later time, every block (the arms
    pulled long ago too) weighs a reward by its age then."""
    p = _hybrid(half_life_seconds=half_life, alpha=2.0)
    rows, times, clock = _feed(p, obs, timed=True)
    now = clock + later
    _check(p, obs, rows, 0.5 ** ((now - np.array(times)) / half_life), now)


def test_an_arm_nobody_pulls_loses_its_weight_in_the_shared_estimate() -> None:
    """Arm "b" rewarded once long ago, arm "a" just now: at a later time both decay; ten
    thousand half-lives on, every block is back to its prior and every score is 0."""
    p = _hybrid(half_life_seconds=10.0, alpha=1.0)
    with clock_at(p, START):
        p.update("b", np.array([1.0, 0.0, 1.0]), 1.0)
    with clock_at(p, START + 100.0):
        p.update("a", np.array([0.0, 1.0, 1.0]), 1.0)
    prior_width = np.sqrt(np.sum(CANDIDATES**2, axis=1) / LAMBDA)
    with clock_at(p, START + 1e5):
        for arm in ("a", "b"):
            got = [p.select([arm], x[None, :]).scores[0] for x in CANDIDATES]
            np.testing.assert_allclose(got, prior_width, rtol=TOL)


def test_a_long_horizon_keeps_every_part_finite_and_exact() -> None:
    """8,000 rewards at ``gamma = 0.9`` over three arms (``gamma^-t = 10^366``)."""
    rng = np.random.default_rng(11)
    p = _hybrid(gamma=0.9, alpha=1.0)
    obs = [
        ([*rng.normal(size=3)], float(rng.uniform()), 0.0, False, ARMS[t % 3]) for t in range(8000)
    ]
    rows = []
    for x, r, _, _, arm in obs:
        p.update(arm, np.array(x), r)
        rows.append((np.array(x), r))
    tail = 400  # 0.9^400 = 5e-19: the older rewards are below the tolerance
    _check(p, obs[-tail:], rows[-tail:], 0.9 ** (tail - 1 - np.arange(tail)), None)


def test_a_selection_reads_every_arm_and_an_update_its_own_part() -> None:
    p = _hybrid(gamma=0.9)
    assert sorted(p.parts_for_select(["a"])) == ["arm:a", "arm:b", "arm:c", "shared"]
    assert sorted(p.parts_for_update("b")) == ["arm:b", "shared"]


@pytest.mark.parametrize("params", [{"gamma": 0.95}, {"half_life_seconds": 60.0}])
def test_the_parts_round_trip_and_decide_the_same(params: dict[str, Any]) -> None:
    rng = np.random.default_rng(5)
    p = _hybrid(alpha=1.0, **params)
    for k in range(12):
        with clock_at(p, START + 7.0 * k):
            p.update(ARMS[k % 3], rng.normal(size=3), float(k % 2))
    q = policy_from_bytes(p.to_bytes())
    assert q.to_bytes() == p.to_bytes()
    assert type(q.arm_state("a")) is HybridDiscountedArmState
    for arm in ARMS:
        with clock_at(p, START + 200.0), clock_at(q, START + 200.0):
            np.testing.assert_array_equal(
                p.select([arm], CANDIDATES[:1]).scores, q.select([arm], CANDIDATES[:1]).scores
            )


def test_a_row_that_overflows_changes_no_part() -> None:
    p = _hybrid(gamma=0.9)
    p.update("a", np.ones(3), 1.0)
    before = p.to_bytes()
    with pytest.raises(InvalidInputError, match="overflows"), np.errstate(over="ignore"):
        p.update("a", np.array([1e200, 1.0, 1.0]), 1.0)
    assert p.to_bytes() == before


def test_a_retired_arm_leaves_its_rewards_as_rows_of_shared_features() -> None:
    """Retiring "b" drops its part; its rewards stay in the shared sums, so ``beta`` is
    the weighted joint ridge with "b"'s contexts set to 0 (docs/algorithms.md 10.3)."""
    rng = np.random.default_rng(2)
    p = _hybrid(gamma=0.8, alpha=1.0)
    obs = [([*rng.normal(size=3)], float(rng.uniform()), 0.0, False, ARMS[t % 3]) for t in range(9)]
    rows, _, _ = _feed(p, obs, timed=False)
    p.retire_arm("b")
    kept = [
        (np.where(arm == "b", [1.0, 1.0, 0.0], 1.0) * x, r) for (x, r), (*_, arm) in zip(rows, obs)
    ]
    theta, _ = _joint_ridge(obs, kept, 0.8 ** (8 - np.arange(9)))
    np.testing.assert_allclose(p.beta, theta[:K], rtol=TOL, atol=TOL)
