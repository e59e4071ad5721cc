"""The shared model's forgetting options (docs/algorithms.md section 10.3, "Shared
models"): ``hybrid_linucb`` with ``context_dim = 0`` and ``gamma``,
``half_life_seconds``, ``window`` or ``window_seconds`` scores every candidate, at any
later time, by the weighted (or windowed) ridge over every reward of the policy
recomputed from scratch, whichever arm ids the rewards came with."""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandit_core import clock_at, make_policy, policy_from_bytes
from bandit_core.errors import ConfigError
from bandit_core.forgetting import DiscountedArmState, WindowArmState

LAMBDA = 0.5
TOL = 1e-9
START = 1.7e9  # Unix time: the weights stay relative to the part's clock
CANDIDATES = np.array([[1.0, 0.5, -0.25], [0.3, -1.0, 0.7], [0.0, 0.0, 2.0]])

observations = st.lists(
    st.tuples(
        st.lists(st.floats(-2.0, 2.0), min_size=3, max_size=3),
        st.floats(0.0, 1.0),
        st.floats(0.0, 50.0),  # seconds since the previous reward (0: same instant)
        st.booleans(),  # whether the reward is late (its decision before the part's clock)
        st.sampled_from(["a", "b", "c"]),  # the arm id it came with: the model shares one part
    ),
    min_size=1,
    max_size=40,
)


def _feed(policy: Any, obs: list, timed: bool) -> tuple[list, list[float], float]:
    """Apply ``obs`` (timed: each at its decision's time); the rows, their times and the clock."""
    clock, rows, times = START, [], []
    for k, (x, r, gap, late, arm) in enumerate(obs):
        # k * 1e-6 keeps the times distinct: which of two equally old rows leaves a window is not specified
        at = (clock - gap if late else clock + gap) + k * 1e-6
        clock = max(clock, at) if times else at
        with clock_at(policy, at) if timed else nullcontext():
            policy.update(arm, np.array(x), r)
        rows.append((np.array(x), r))
        times.append(at)
    return rows, times, clock


def _scores(policy: Any, now: float | None) -> np.ndarray:
    ids = ["new-1", "new-2", "new-3"]  # never seen: scored by the shared part alone
    with clock_at(policy, now) if now is not None else nullcontext():
        decision = policy.select(ids, CANDIDATES)
    by_id = dict(zip(decision.ranking, decision.scores.tolist()))
    return np.array([by_id[i] for i in ids])


def _discounted_ucb(rows: list, weights: np.ndarray, alpha: float) -> np.ndarray:
    """(10.1) from scratch: ``V = lambda I + sum w z z'``, ``V~`` with ``w^2``, ``b = sum w r z``."""
    V, V_sq, b = LAMBDA * np.eye(3), LAMBDA * np.eye(3), np.zeros(3)
    for (z, r), w in zip(rows, weights):
        V += w * np.outer(z, z)
        V_sq += w * w * np.outer(z, z)
        b += w * r * z
    V_inv = np.linalg.inv(V)
    width = np.sqrt(np.einsum("ij,jk,kl,lm,im->i", CANDIDATES, V_inv, V_sq, V_inv, CANDIDATES))
    return CANDIDATES @ V_inv @ b + alpha * width


def _ridge_ucb(rows: list, alpha: float) -> np.ndarray:
    A, b = LAMBDA * np.eye(3), np.zeros(3)
    for z, r in rows:
        A += np.outer(z, z)
        b += r * z
    A_inv = np.linalg.inv(A)
    return CANDIDATES @ A_inv @ b + alpha * np.sqrt(
        np.einsum("ij,jk,ik->i", CANDIDATES, A_inv, CANDIDATES)
    )


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(0.5, 0.999))
def test_per_update_discounting_equals_the_weighted_ridge_from_scratch(obs, gamma: float) -> None:
    p = make_policy("hybrid_linucb", d=3, gamma=gamma, ridge_lambda=LAMBDA, alpha=1.5)
    rows, _, _ = _feed(p, obs, timed=False)
    n = len(rows)
    want = _discounted_ucb(rows, gamma ** (n - 1 - np.arange(n)), 1.5)
    np.testing.assert_allclose(_scores(p, None), want, rtol=TOL, atol=TOL)
    assert p.policy_stats()["rewarded"] == n


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(1.0, 500.0), st.floats(0.0, 300.0))
def test_half_life_discounting_equals_the_weighted_ridge_from_scratch_at_any_later_time(
    obs, half_life: float, later: float
) -> None:
    p = make_policy(
        "hybrid_linucb", d=3, half_life_seconds=half_life, ridge_lambda=LAMBDA, alpha=2.0
    )
    rows, times, clock = _feed(p, obs, timed=True)
    now = clock + later
    want = _discounted_ucb(rows, 0.5 ** ((now - np.array(times)) / half_life), 2.0)
    np.testing.assert_allclose(_scores(p, now), want, rtol=TOL, atol=TOL)


@settings(max_examples=40, deadline=None)
@given(observations, st.integers(1, 12))
def test_a_window_of_updates_equals_the_ridge_over_the_last_rewards(obs, window: int) -> None:
    p = make_policy("hybrid_linucb", d=3, window=window, ridge_lambda=LAMBDA, alpha=1.0)
    rows, _, _ = _feed(p, obs, timed=False)
    np.testing.assert_allclose(
        _scores(p, None), _ridge_ucb(rows[-window:], 1.0), rtol=TOL, atol=TOL
    )


@settings(max_examples=40, deadline=None)
@given(observations, st.integers(1, 12), st.floats(1.0, 100.0), st.floats(0.0, 150.0))
def test_a_window_in_seconds_scores_as_the_disjoint_window_of_one_arm(
    obs, window: int, seconds: float, later: float
) -> None:
    """The shared part is ``sliding_window_linucb``'s window over every reward: its
    scores at any later time are those of that policy's one arm fed the same rewards
    (whose equality with the ridge over the young rewards from scratch is
    ``tests/bandit_core/test_forgetting.py``'s)."""
    params = {"window": window, "window_seconds": seconds, "ridge_lambda": LAMBDA, "alpha": 1.0}
    shared = make_policy("hybrid_linucb", d=3, **params)
    disjoint = make_policy("sliding_window_linucb", d=3, **params)
    disjoint.add_arm("a")
    _, times, clock = _feed(shared, obs, timed=True)
    for (x, r, *_), at in zip(obs, times):
        disjoint.update("a", np.array(x), r, now=at)
    now = clock + later
    one_arm = [disjoint.select(["a"], z[None, :], now=now).scores[0] for z in CANDIDATES]
    np.testing.assert_allclose(_scores(shared, now), one_arm, rtol=TOL, atol=TOL)


def test_a_long_horizon_keeps_the_shared_part_finite_and_exact() -> None:
    """8,000 rewards at ``gamma = 0.9`` (``gamma^-t = 10^366``): only the last few
    hundred weigh anything, and the scores are those of the weighted ridge."""
    rng = np.random.default_rng(7)
    p = make_policy("hybrid_linucb", d=3, gamma=0.9, ridge_lambda=LAMBDA, alpha=1.0)
    rows = [(rng.normal(size=3), float(rng.uniform())) for _ in range(8000)]
    for z, r in rows:
        p.update("a", z, r)
    tail = rows[-400:]  # 0.9^400 = 5e-19: the older rewards are below the tolerance
    want = _discounted_ucb(tail, 0.9 ** (399 - np.arange(400)), 1.0)
    np.testing.assert_allclose(_scores(p, None), want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize(
    "params, part",
    [
        ({"half_life_seconds": 60.0}, DiscountedArmState),
        ({"gamma": 0.95}, DiscountedArmState),
        ({"window": 5, "window_seconds": 30.0}, WindowArmState),
    ],
)
def test_the_forgetting_part_round_trips_and_decides_the_same(
    params: dict[str, Any], part: type
) -> None:
    rng = np.random.default_rng(3)
    p = make_policy("hybrid_linucb", d=3, alpha=1.0, **params)
    for k in range(12):
        with clock_at(p, START + 7.0 * k):
            p.update(f"arm-{k % 3}", rng.normal(size=3), float(k % 2))
    q = policy_from_bytes(p.to_bytes())
    assert p.part_names() == q.part_names() == ["shared"]
    assert q.to_bytes() == p.to_bytes()
    assert type(q.shared_state) is part
    later = START + 200.0
    np.testing.assert_array_equal(_scores(p, later), _scores(q, later))


@pytest.mark.parametrize(
    "params, field",
    [
        ({"gamma": 1.5}, "gamma"),
        ({"half_life_seconds": -1.0}, "half_life_seconds"),
        ({"window": 0}, "window"),
        ({"window_seconds": 0.0}, "window_seconds"),
        ({"gamma": 0.9, "half_life_seconds": 60.0}, "half_life_seconds"),
        ({"gamma": 0.9, "window": 10}, "window"),
    ],
)
def test_a_bad_forgetting_option_names_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        make_policy("hybrid_linucb", d=3, **params)


def test_without_an_option_the_shared_model_is_unchanged() -> None:
    p = make_policy("hybrid_linucb", d=2, alpha=0.0)
    for _ in range(3):
        p.update("seen", np.array([1.0, 0.0]), 1.0)
    assert p.beta == pytest.approx([3 / 4, 0.0])  # (lambda + 3)^-1 * 3
    assert math.isclose(p.policy_stats()["reward_sum"], 3.0)
