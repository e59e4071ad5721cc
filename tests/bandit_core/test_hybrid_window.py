"""Hybrid LinUCB with per-arm parts over a sliding window (docs/algorithms.md section
10.3, "Hybrid model with per-arm parts"): after any sequence of rewards over several
arms, ``beta``, each ``theta_a`` and every score equal the hybrid ridge over exactly the
policy's last ``window`` rewards, computed from scratch and by a fresh hybrid model fed
those rewards; each part stays bounded by ``window`` rows however many rewards come.
With ``window_seconds`` the same holds at any read time over the rewards timed in the
window (docs/algorithms.md section 10.3, "Window in seconds with per-arm parts")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandit_core import make_policy, policy_from_bytes
from bandit_core.errors import ConfigError, InvalidInputError
from bandit_core.hybrid_window import (
    HybridWindowArmState,
    TimedWindowState,
    hybrid_window_memory_bytes,
)
from tests.bandit_core.test_hybrid_forgetting import ARMS, K, _check, _hybrid, _joint_ridge
from tests.bandit_core.test_shared_forgetting import CANDIDATES, LAMBDA, TOL, _feed, observations


def _in_window(n: int, window: int) -> np.ndarray:
    """The weights of ``n`` rewards in a window of ``window``: 1 for the last ones, else 0."""
    return (np.arange(n) >= n - window).astype(float)


def _fresh_scores(policy: Any, log: list, window: int) -> np.ndarray:
    """Scores of every arm on every candidate row by Algorithm 2 (no forgetting) fed the
    last ``window`` of ``log``'s ``(arm, row, reward)``."""
    fresh = _hybrid(alpha=policy.config.alpha)
    for arm, x, r in log[-window:]:
        fresh.update(arm, x, r)
    return np.array([[fresh.select([a], x[None, :]).scores[0] for x in CANDIDATES] for a in ARMS])


def _scores(policy: Any) -> np.ndarray:
    return np.array([[policy.select([a], x[None, :]).scores[0] for x in CANDIDATES] for a in ARMS])


@settings(max_examples=60, deadline=None)
@given(observations, st.integers(1, 12), st.floats(0.0, 3.0))
def test_a_window_equals_the_hybrid_ridge_over_the_last_window_rewards(
    obs, window: int, alpha: float
) -> None:
    """Against the stacked ridge from scratch (weights 1 in the window, 0 before it) and
    against Algorithm 2 fed only the window's rewards."""
    p = _hybrid(window=window, alpha=alpha)
    rows, _, _ = _feed(p, obs, timed=False)
    _check(p, obs, rows, _in_window(len(rows), window), None)
    log = [(arm, x, r) for (x, r), (*_, arm) in zip(rows, obs)]
    np.testing.assert_allclose(_scores(p), _fresh_scores(p, log, window), rtol=TOL, atol=TOL)
    assert p.policy_stats()["rewarded"] == len(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_long_run_stays_exact_and_each_part_bounded_by_the_window(seed: int) -> None:
    """3,000 rewards, window 25, arms drawn unevenly (arm "c" rarely, so its rows leave
    the window long before its next update): after every 150th reward the scores equal
    a fresh model's over the last 25, and every part's bytes stay what 25 rows take."""
    rng = np.random.default_rng(seed)
    window = 25
    p = _hybrid(window=window, alpha=1.0)
    log, sizes = [], set()
    for t in range(3000):
        arm = str(rng.choice(ARMS, p=[0.6, 0.38, 0.02]))
        x, r = rng.normal(size=3), float(rng.uniform())
        p.update(arm, x, r)
        log.append((arm, x, r))
        if t % 150 == 149:
            np.testing.assert_allclose(
                _scores(p), _fresh_scores(p, log, window), rtol=TOL, atol=TOL
            )
            sizes.add(len(p.to_bytes()))
            for arm_id in ARMS:
                part = p.arm_state(arm_id)
                assert int((part.seqs > 0).sum()) <= window
                arrays = sum(v.nbytes for v in vars(part).values() if isinstance(v, np.ndarray))
                assert arrays == hybrid_window_memory_bytes(1, 2, window)
    # the serialized state does not grow with the rewards (only the counts' digits in its meta)
    assert max(sizes) - min(sizes) < 50


def test_reads_between_every_reward_follow_the_rows_that_leave() -> None:
    """A selection after every reward (the kept blocks of the arms not rewarded lose the
    rows that left since the previous read) scores as a fresh model over the window."""
    rng = np.random.default_rng(7)
    window = 6
    p = _hybrid(window=window, alpha=0.8)
    log = []
    for _ in range(300):
        arm = str(rng.choice(ARMS, p=[0.7, 0.25, 0.05]))
        x, r = rng.normal(size=3), float(rng.uniform())
        p.update(arm, x, r)
        log.append((arm, x, r))
        np.testing.assert_allclose(_scores(p), _fresh_scores(p, log, window), rtol=TOL, atol=TOL)


def test_an_arm_whose_rows_all_left_scores_as_one_never_rewarded() -> None:
    p = _hybrid(window=3, alpha=1.0)
    p.update("b", np.array([1.0, 0.0, 2.0]), 1.0)
    for _ in range(3):
        p.update("a", np.array([0.0, 1.0, 1.0]), 0.5)
    log = [("a", np.array([0.0, 1.0, 1.0]), 0.5)] * 3
    np.testing.assert_allclose(_scores(p), _fresh_scores(p, log, 3), rtol=TOL, atol=TOL)
    assert p.arm_state("b").seqs.max() == 1.0  # the part keeps the row until "b" is updated
    p.update("b", np.array([1.0, 1.0, 1.0]), 0.0)
    assert sorted(p.arm_state("b").seqs[p.arm_state("b").seqs > 0]) == [5.0]


def test_a_retired_arm_leaves_its_rewards_in_the_window_as_rows_of_shared_features() -> None:
    """As with discounting (docs/algorithms.md 10.3): retiring "b" drops its part, its
    rewards in the window stay in the shared sums with its contexts set to 0."""
    rng = np.random.default_rng(3)
    p = _hybrid(window=5, alpha=1.0)
    obs = [([*rng.normal(size=3)], float(rng.uniform()), 0.0, False, ARMS[t % 3]) for t in range(9)]
    rows, _, _ = _feed(p, obs, timed=False)
    p.select(ARMS, CANDIDATES)  # the fit keeps every arm's blocks, "b"'s too
    p.retire_arm("b")
    kept = [
        (np.where(arm == "b", [1.0, 1.0, 0.0], 1.0) * x, r) for (x, r), (*_, arm) in zip(rows, obs)
    ]
    theta, _ = _joint_ridge(obs, kept, _in_window(9, 5))
    np.testing.assert_allclose(p.beta, theta[:K], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(p.theta("a"), theta[K : K + 1], rtol=TOL, atol=TOL)


def test_the_parts_round_trip_and_learn_the_same() -> None:
    rng = np.random.default_rng(5)
    p = _hybrid(window=4, alpha=1.0)
    for k in range(11):
        p.update(ARMS[k % 3], rng.normal(size=3), float(k % 2))
    q = policy_from_bytes(p.to_bytes())
    assert q.to_bytes() == p.to_bytes()
    assert type(q.arm_state("a")) is HybridWindowArmState
    np.testing.assert_array_equal(_scores(q), _scores(p))
    for k in range(6):  # the read-only arrays of q's parts are copied before a write
        x = rng.normal(size=3)
        p.update(ARMS[k % 2], x, 1.0)
        q.update(ARMS[k % 2], x, 1.0)
    assert q.to_bytes() == p.to_bytes()


def test_a_selection_reads_every_arm_and_an_update_its_own_part() -> None:
    p = _hybrid(window=5)
    assert sorted(p.parts_for_select(["a"])) == ["arm:a", "arm:b", "arm:c", "shared"]
    assert sorted(p.parts_for_update("b")) == ["arm:b", "shared"]


def test_a_row_that_overflows_changes_no_part() -> None:
    p = _hybrid(window=2)
    for _ in range(3):
        p.update("a", np.ones(3), 1.0)
    before = p.to_bytes()
    with pytest.raises(InvalidInputError, match="overflow"), np.errstate(over="ignore"):
        p.update("a", np.array([1e200, 1.0, 1.0]), 1.0)
    assert p.to_bytes() == before


def _fresh_at(policy: Any, log: list, window: int, seconds: float, now: float) -> np.ndarray:
    """Scores of every arm by Algorithm 2 (no forgetting) fed the rewards of ``log``'s
    ``(arm, row, reward, time)`` in the window at ``now``: of the last ``window``, those
    timed after ``max(now, latest time) - seconds``."""
    since = max(now, max(t for *_, t in log)) - seconds
    kept = [(arm, x, r) for arm, x, r, t in log[-window:] if t > since]
    return _fresh_scores(policy, kept, len(kept))


def _timed_scores(policy: Any, now: float) -> np.ndarray:
    with policy.at(now):
        return _scores(policy)


@pytest.mark.parametrize("seed, window", [(0, 1000), (1, 1000), (2, 40), (3, 40), (4, 7)])
def test_a_window_in_seconds_equals_a_fresh_model_over_the_rewards_in_it(
    seed: int, window: int
) -> None:
    """600 rewards over unevenly drawn arms, some at the same instant and some late
    (timed before the latest), with ``window_seconds = 30``: at reads every 7 rewards,
    at the latest time and up to a window later, the scores and ``beta`` equal a fresh
    hybrid model's fed exactly the rewards in the window; every part stays within
    ``window`` rows and the formula's bytes."""
    rng = np.random.default_rng(seed)
    seconds = 30.0
    p = _hybrid(window=window, window_seconds=seconds, alpha=0.9)
    log: list = []
    clock = 1.7e9
    for t in range(600):
        arm = str(rng.choice(ARMS, p=[0.6, 0.36, 0.04]))
        x, r = rng.normal(size=3), float(rng.uniform())
        clock += float(rng.choice([0.0, rng.exponential(3.0)]))
        at = clock - float(rng.uniform(0.0, 40.0)) if rng.uniform() < 0.1 else clock
        with p.at(at):
            p.update(arm, x, r)
        log.append((arm, x, r, at))
        if t % 7 == 6:
            now = clock + float(rng.choice([0.0, rng.uniform(0.0, 1.2 * seconds)]))
            fresh = _fresh_at(p, log, window, seconds, now)
            np.testing.assert_allclose(_timed_scores(p, now), fresh, rtol=TOL, atol=TOL)
    for part in (p.shared_state, *(p.arm_state(a) for a in ARMS)):
        assert int((part.seqs > 0).sum()) <= window
    arrays = sum(v.nbytes for v in vars(p.arm_state("a")).values() if isinstance(v, np.ndarray))
    assert arrays == hybrid_window_memory_bytes(1, 2, window, timed=True)


def test_a_read_after_every_row_aged_out_is_the_prior() -> None:
    rng = np.random.default_rng(11)
    p = _hybrid(window_seconds=10.0, alpha=1.0)
    for k in range(20):
        with p.at(100.0 + k):
            p.update(ARMS[k % 3], rng.normal(size=3), float(rng.uniform()))
    prior = _scores(_hybrid(alpha=1.0))
    assert not np.allclose(_timed_scores(p, 119.0), prior)
    np.testing.assert_allclose(_timed_scores(p, 129.0), prior, rtol=TOL, atol=TOL)
    with p.at(129.0):
        assert np.allclose(p.beta, 0.0, atol=TOL)
    assert p.policy_stats()["rewarded"] == 20


def test_a_late_reward_already_out_of_the_window_changes_no_fit() -> None:
    """Timed at or before ``latest - window_seconds``, the reward is counted but
    holds no row, in its arm's part or in ``"shared"``."""
    p = _hybrid(window_seconds=10.0, alpha=1.0)
    with p.at(50.0):
        p.update("a", np.array([1.0, 0.5, 1.0]), 1.0)
    before = _timed_scores(p, 50.0)
    with p.at(40.0):
        p.update("b", np.array([0.0, 1.0, 2.0]), 1.0)
    np.testing.assert_array_equal(_timed_scores(p, 50.0), before)
    assert int((p.arm_state("b").seqs > 0).sum()) == int((p.shared_state.seqs > 0).sum()) - 1 == 0
    assert p.arm_state("b").n == 1 and p.shared_state.n == 2


def test_the_timed_parts_round_trip_and_learn_the_same() -> None:
    rng = np.random.default_rng(5)
    p = _hybrid(window=6, window_seconds=20.0, alpha=1.0)
    for k in range(14):
        with p.at(10.0 + 3.0 * k):
            p.update(ARMS[k % 3], rng.normal(size=3), float(k % 2))
    _timed_scores(p, 60.0)  # p keeps its blocks; q sums them anew
    q = policy_from_bytes(p.to_bytes())
    assert q.to_bytes() == p.to_bytes()
    assert type(q.arm_state("a")) is type(q.shared_state) is TimedWindowState
    for now in (60.0, 70.0, 75.0):
        np.testing.assert_array_equal(_timed_scores(q, now), _timed_scores(p, now))
    for k in range(6):  # the read-only arrays of q's parts are copied before a write
        x = rng.normal(size=3)
        for policy in (p, q):
            with policy.at(80.0 + k):
                policy.update(ARMS[k % 2], x, 1.0)
    assert q.to_bytes() == p.to_bytes()


def test_a_window_is_checked_as_the_disjoint_models_check_it() -> None:
    with pytest.raises(ConfigError, match="window"):
        make_policy("hybrid_linucb", d=3, context_dim=1, ridge_lambda=LAMBDA, window=0)
