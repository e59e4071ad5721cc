"""diag_linucb with ``gamma`` or ``half_life_seconds`` (docs/algorithms.md section 10.3,
"Diagonal model"): at any later time, the weights, precisions and scores are (10.4) over
the per-feature sums weighted by ``w_s = gamma^(t - t_s)``, recomputed from scratch over
dense rows, however the lazy scale of the part moved."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandit_core import clock_at, make_policy, policy_from_bytes
from bandit_core.diag_forgetting import DiagDiscountedState
from bandit_core.diag_linucb import DiagLinUCBConfig
from bandit_core.errors import ConfigError, InvalidInputError
from bandit_core.features import SparseRows

LAMBDA = 0.5
TOL = 1e-9
START = 1.7e9  # Unix time: the weights stay relative to the part's reference time
D = 6
CANDIDATES = np.array(
    [[1.0, 0.5, 0.0, -0.25, 0.0, 0.0], [0.0, -1.0, 0.7, 0.0, 0.0, 0.3], [0.0] * 5 + [2.0]]
)

observations = st.lists(
    st.tuples(
        st.lists(st.sampled_from([0.0, 0.0, -1.5, 0.5, 1.0, 2.0]), min_size=D, max_size=D),
        st.floats(0.0, 1.0),
        st.floats(0.0, 50.0),  # seconds since the previous reward (0: same instant)
        st.booleans(),  # whether the reward is late (its decision before the part's clock)
    ),
    min_size=1,
    max_size=40,
)


def _feed(policy: Any, obs: list, timed: bool) -> tuple[np.ndarray, np.ndarray, list[float], float]:
    """Apply ``obs`` (timed: each at its decision's time); the dense rows, rewards, times and clock."""
    clock, times = START, list[float]()
    for x, r, gap, late in obs:
        at = clock - gap if late else clock + gap
        clock = max(clock, at) if times else at
        with clock_at(policy, at) if timed else nullcontext():
            policy.update("any", np.array(x), r)
        times.append(at)
    return np.array([x for x, *_ in obs]), np.array([r for _, r, *_ in obs]), times, clock


def _from_scratch(Z: np.ndarray, r: np.ndarray, w: np.ndarray, alpha: float) -> tuple:
    """(10.4) over dense rows: ``(V_ii, b_i / V_ii, scores of CANDIDATES)``."""
    V = LAMBDA + (w[:, None] * Z**2).sum(axis=0)
    V_sq = LAMBDA + ((w * w)[:, None] * Z**2).sum(axis=0)
    weights = (w * r) @ Z / V
    width = np.sqrt(CANDIDATES**2 @ (V_sq / V**2))
    return V, weights, CANDIDATES @ weights + alpha * width


def _scores(policy: Any, now: float | None) -> np.ndarray:
    ids = ["new-1", "new-2", "new-3"]
    with clock_at(policy, now) if now is not None else nullcontext():
        decision = policy.select(ids, CANDIDATES)
    by_id = dict(zip(decision.ranking, decision.scores.tolist()))
    return np.array([by_id[i] for i in ids])


def _check(
    policy: Any, Z: np.ndarray, r: np.ndarray, w: np.ndarray, alpha: float, now: Any
) -> None:
    V, weights, scores = _from_scratch(Z, r, w, alpha)
    with clock_at(policy, now) if now is not None else nullcontext():
        np.testing.assert_allclose(policy.precisions(np.arange(D)), V, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(policy.weights(np.arange(D)), weights, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(_scores(policy, now), scores, rtol=TOL, atol=TOL)


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(0.5, 0.999))
def test_per_update_discounting_equals_the_weighted_sums_from_scratch(obs, gamma: float) -> None:
    p = make_policy("diag_linucb", d=D, gamma=gamma, ridge_lambda=LAMBDA, alpha=1.5)
    Z, r, _, _ = _feed(p, obs, timed=False)
    n = len(r)
    _check(p, Z, r, gamma ** (n - 1 - np.arange(n)), 1.5, None)
    assert p.policy_stats() == {"rewarded": n, "reward_sum": pytest.approx(r.sum(), abs=1e-12)}


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(1.0, 500.0), st.floats(0.0, 300.0))
def test_half_life_discounting_equals_the_weighted_sums_from_scratch_at_any_later_time(
    obs, half_life: float, later: float
) -> None:
    p = make_policy("diag_linucb", d=D, half_life_seconds=half_life, ridge_lambda=LAMBDA, alpha=2.0)
    Z, r, times, clock = _feed(p, obs, timed=True)
    now = clock + later
    _check(p, Z, r, 0.5 ** ((now - np.array(times)) / half_life), 2.0, now)
    # without a time, or at a time before its clock, the part is read at its clock
    at_clock = 0.5 ** ((clock - np.array(times)) / half_life)
    _check(p, Z, r, at_clock, 2.0, None)
    _check(p, Z, r, at_clock, 2.0, clock - 10.0)


def test_a_long_horizon_moves_the_reference_time_and_stays_exact() -> None:
    """8,000 rewards at ``gamma = 0.9`` (``gamma^-t = 10^366``): the part moves its
    reference time on (the stored sums would overflow otherwise), stays finite, and its
    scores are those of the weighted sums over the last 400 rewards (0.9^400 = 5e-19)."""
    rng = np.random.default_rng(7)
    p = make_policy("diag_linucb", d=D, gamma=0.9, ridge_lambda=LAMBDA, alpha=1.0)
    rows = rng.choice([0.0, 0.0, 1.0, -0.5, 2.0], size=(8000, D))
    rewards = rng.uniform(size=8000)
    for z, reward in zip(rows, rewards):
        p.update("a", z, float(reward))
    part = p.shared_state
    assert isinstance(part, DiagDiscountedState) and part.ref > 7000.0
    assert np.isfinite(part.m2).all()
    _check(p, rows[-400:], rewards[-400:], 0.9 ** (399 - np.arange(400)), 1.0, None)


def test_an_untouched_feature_and_a_long_silence_score_the_prior() -> None:
    """2,000 half-lives after its last reward every weight is 0 and every width is the
    prior's ``sqrt(sum z^2 / lambda)``: an idle model forgets everything."""
    p = make_policy("diag_linucb", d=D, half_life_seconds=60.0, ridge_lambda=LAMBDA, alpha=1.0)
    with clock_at(p, START):
        p.update("a", CANDIDATES[0], 1.0)
    prior = np.sqrt((CANDIDATES**2).sum(axis=1) / LAMBDA)
    np.testing.assert_allclose(_scores(p, START + 2000 * 60.0), prior, rtol=TOL)
    assert _scores(p, START)[0] > prior[0] + 0.1  # at its clock the reward still counts


def test_sparse_and_dense_rows_decide_the_same() -> None:
    rng = np.random.default_rng(2)
    dense = make_policy("diag_linucb", d=D, gamma=0.95, alpha=1.0, epsilon=0.1, seed=3)
    sparse = make_policy("diag_linucb", d=D, gamma=0.95, alpha=1.0, epsilon=0.1, seed=3)
    for _ in range(50):
        X = rng.choice([0.0, 1.0, -2.0], size=(4, D))
        rows = SparseRows.from_dense(X)
        a, b = dense.select(["w", "x", "y", "z"], X), sparse.select(["w", "x", "y", "z"], rows)
        assert a.arm_id == b.arm_id and np.array_equal(a.scores, b.scores)
        i = ["w", "x", "y", "z"].index(a.arm_id)
        dense.update(a.arm_id, X[i], 1.0)
        sparse.update(b.arm_id, rows.one_row(i), 1.0)
    assert dense.to_bytes() == sparse.to_bytes()


@pytest.mark.parametrize("params", [{"half_life_seconds": 60.0}, {"gamma": 0.95}])
def test_the_discounted_part_round_trips_and_decides_the_same(params: dict[str, Any]) -> None:
    rng = np.random.default_rng(3)
    p = make_policy("diag_linucb", d=D, alpha=1.0, **params)
    for k in range(12):
        with clock_at(p, START + 7.0 * k):
            p.update(f"arm-{k % 3}", rng.choice([0.0, 1.0, 2.0], size=D), float(k % 2))
    q = policy_from_bytes(p.to_bytes())
    assert q.to_bytes() == p.to_bytes()
    assert type(q.shared_state) is DiagDiscountedState
    later = START + 200.0
    np.testing.assert_array_equal(_scores(p, later), _scores(q, later))
    with clock_at(q, later):  # the decoded part (read-only views) learns too
        q.update("arm-0", CANDIDATES[2], 1.0)
    assert q.policy_stats()["rewarded"] == 13


def test_an_overflowing_row_is_refused_and_changes_nothing() -> None:
    p = make_policy("diag_linucb", d=D, gamma=0.9)
    p.update("a", CANDIDATES[0], 1.0)
    before = p.to_bytes()
    with pytest.raises(InvalidInputError, match="overflow"):
        p.update("a", np.full(D, 1e200), 1.0)
    assert p.to_bytes() == before


@pytest.mark.parametrize(
    "params, field",
    [
        ({"gamma": 1.5}, "gamma"),
        ({"half_life_seconds": -1.0}, "half_life_seconds"),
        ({"gamma": 0.9, "half_life_seconds": 60.0}, "half_life_seconds"),
        ({"gamma": 0.9, "fit": "joint"}, "fit"),
        ({"window": 10}, "window"),
    ],
)
def test_a_bad_option_names_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        make_policy("diag_linucb", d=D, **params)


def test_discounting_defaults_to_the_per_feature_fit() -> None:
    for params, fit in (({"gamma": 0.9}, "per_feature"), ({}, "joint")):
        config = make_policy("diag_linucb", d=D, **params).config
        assert isinstance(config, DiagLinUCBConfig) and config.fit == fit
