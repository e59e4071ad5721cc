"""bandit_core.evaluation.progressive: the per-window sums give the estimators' values and
the closed-form Gaussian intervals, add up over periods, the DR estimates with the
progressive reward models equal their closed form and are unbiased, and the progressive
replay is select-then-learn event by event."""

from __future__ import annotations

import math

import numpy as np
import pytest

import bandit_core
from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation import (
    RewardModels,
    WindowSums,
    baseline_distribution,
    importance_weights,
    ips,
    period_sums,
    progressive_distribution,
    snips,
    uniform_distribution,
)
from bandit_core.policy import AnyPolicy


def _log(
    seed: int, n: int = 400, k: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    logging = rng.dirichlet(np.ones(k), size=n)
    action = np.array([rng.choice(k, p=p) for p in logging])
    pscore = logging[np.arange(n), action]
    reward = (rng.random(n) < 0.2 + 0.15 * action).astype(float)
    target = rng.dirichlet(np.ones(k), size=n)
    return reward, action, pscore, target


@pytest.mark.parametrize("seed", range(5))
def test_sums_give_the_estimators_and_their_closed_form_intervals(seed: int) -> None:
    r, a, p, pi = _log(seed)
    s = WindowSums.of(r, a, p, pi)
    assert math.isclose(s.ips, ips(r, a, p, pi), rel_tol=1e-12)
    assert math.isclose(s.snips, snips(r, a, p, pi), rel_tol=1e-12)
    w = pi[np.arange(r.size), a] / p
    z = 1.959963984540054
    assert math.isclose(s.ips_half_width(), z * np.sqrt(np.var(w * r) / r.size), rel_tol=1e-9)
    v = s.snips
    delta = np.sqrt(np.sum(w**2 * (r - v) ** 2)) / np.sum(w)
    assert math.isclose(s.snips_half_width(), z * delta, rel_tol=1e-9)
    assert s.nonzero == np.count_nonzero(w)


def test_period_sums_add_up_to_the_whole_window() -> None:
    r, a, p, pi = _log(7)
    period = np.repeat(np.arange(8), 50)
    w = importance_weights(a, p, pi)
    parts = period_sums(period, w, r)
    assert sorted(parts) == list(range(8))
    whole = sum(parts.values(), WindowSums())
    assert np.allclose(whole.to_list(), WindowSums.of(r, a, p, pi).to_list(), rtol=1e-12)


def test_dr_equals_its_closed_form_on_a_tiny_log() -> None:
    """Two arms, four events; the predictions and terms worked by hand (docs/offline.md,
    "Evaluations"): ``q`` of an arm is its mean reward so far (``dr``) or its 1/p-weighted
    mean (``mtr``), 0 before it was served."""
    reward = np.array([1.0, 0.0, 1.0, 1.0])
    action = np.array([0, 0, 1, 0])
    pscore = np.array([0.5, 0.25, 0.5, 0.5])
    target = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [1.0, 0.0]])
    q_dr, q_mtr = RewardModels().predictions(
        [["a", "b"]] * 4, ["a", "a", "b", "a"], reward, pscore, 2
    )
    assert q_dr.tolist() == [[0, 0], [1, 0], [0.5, 0], [0.5, 1]]
    assert np.allclose(q_mtr, [[0, 0], [1, 0], [1 / 3, 0], [1 / 3, 1]], rtol=0, atol=1e-15)
    s = WindowSums.of(reward, action, pscore, target, (q_dr, q_mtr))
    # weights 2, 0, 1, 2; DR term = sum_a pi(a) q(a) + w (r - q(served))
    dr_terms = [0 + 2 * (1 - 0), 0 + 0, 0.25 + 1 * (1 - 0), 0.5 + 2 * (1 - 0.5)]
    mtr_terms = [2.0, 0.0, 1 / 6 + 1.0, 1 / 3 + 2 * (1 - 1 / 3)]
    assert (s.estimate("ips"), s.estimate("dr")) == (1.25, 4.75 / 4)
    assert math.isclose(s.estimate("mtr"), 29 / 24, rel_tol=1e-15)
    z = 1.959963984540054
    for name, terms in (("dr", dr_terms), ("mtr", mtr_terms)):
        assert math.isclose(s.estimate(name), np.mean(terms), rel_tol=1e-15)
        assert math.isclose(s.half_width(name), z * np.sqrt(np.var(terms) / 4), rel_tol=1e-12)
    assert math.isclose(s.half_width("ips"), s.ips_half_width(), rel_tol=1e-15)
    with pytest.raises(InvalidInputError, match="estimator must be one of"):
        s.estimate("snips")


def test_dr_is_unbiased_on_a_simulated_log_where_the_truth_is_known() -> None:
    """200 seeded logs of 300 events over three arms of known mean reward, each event
    logged with its own probabilities (so the ``dr`` and ``mtr`` models differ); the fixed
    target's true value is ``sum_a pi(a) mu(a)``. The mean of the
    200 estimates lies within 4 standard errors of it (their spread over the logs), and
    the reward models shrink the spread below IPS's."""
    mu = np.array([0.2, 0.5, 0.7])
    target = np.array([0.1, 0.1, 0.8])
    truth = float(target @ mu)
    n, logs = 300, 200
    estimates: dict[str, list[float]] = {"ips": [], "dr": [], "mtr": []}
    for seed in range(logs):
        rng = np.random.default_rng(seed)
        logging = rng.dirichlet([4.0, 3.0, 2.0], size=n)
        action = (rng.random((n, 1)) > logging.cumsum(axis=1)).sum(axis=1)
        reward = (rng.random(n) < mu[action]).astype(float)
        pscore = logging[np.arange(n), action]
        ids = [["a0", "a1", "a2"]] * n
        q_hat = RewardModels().predictions(ids, [f"a{a}" for a in action], reward, pscore, 3)
        s = WindowSums.of(reward, action, pscore, np.tile(target, (n, 1)), q_hat)
        for name, values in estimates.items():
            values.append(s.estimate(name))
    for name in ("dr", "mtr"):
        values = np.array(estimates[name])
        standard_error = values.std(ddof=1) / math.sqrt(logs)
        assert abs(values.mean() - truth) <= 4 * standard_error, (name, values.mean(), truth)
        assert values.std() < np.std(estimates["ips"])


def test_reward_models_carried_over_slices_predict_as_on_the_whole_log() -> None:
    rng = np.random.default_rng(3)
    ids = [["a", "b", "c"]] * 60
    chosen = list(rng.choice(["a", "b", "c"], size=60))
    reward, pscore = rng.random(60), rng.uniform(0.1, 1.0, size=60)
    whole = RewardModels().predictions(ids, chosen, reward, pscore, 3)
    models = RewardModels()
    parts = [
        models.predictions(
            ids[i : i + 20], chosen[i : i + 20], reward[i : i + 20], pscore[i : i + 20], 3
        )
        for i in range(0, 60, 20)
    ]
    for k in range(2):
        assert np.array_equal(np.concatenate([p[k] for p in parts]), whole[k])


def test_an_empty_window_is_zero_and_bad_propensities_are_refused() -> None:
    assert (WindowSums().ips, WindowSums().snips, WindowSums().ips_half_width()) == (0.0, 0.0, 0.0)
    with pytest.raises(InvalidInputError, match="pscore must lie in"):
        importance_weights(np.array([0]), np.array([0.0]), np.array([[1.0]]))
    with pytest.raises(InvalidInputError, match="confidence"):
        WindowSums(n=3, ips_numerator=1, sum_of_squares=1).ips_half_width(1.5)


def test_progressive_replay_is_select_then_learn() -> None:
    rng = np.random.default_rng(0)
    events = [
        LoggedEvent.build(
            ["a", "b", "c"],
            str(rng.choice(["a", "b", "c"])),
            float(rng.random() < 0.5),
            arm_features=rng.normal(size=(3, 2)),
            pscore=1 / 3,
        )
        for _ in range(50)
    ]
    dist = progressive_distribution(
        bandit_core.make_policy("linucb", d=2, alpha=0.0, epsilon=0.1), events, 3
    )
    assert dist.shape == (50, 3) and np.allclose(dist.sum(axis=1), 1.0)
    by_hand = bandit_core.make_policy("linucb", d=2, alpha=0.0, epsilon=0.1)
    for i, e in enumerate(events):
        d = by_hand.select(e.arm_ids, e.X)
        assert np.allclose([dist[i, e.arm_ids.index(arm)] for arm in d.ranking], d.propensities)
        by_hand.update(e.chosen, e.X[e.action], e.reward)
    assert dist.min() >= 0.1 / 3 - 1e-12  # the exploration floor is part of the distribution


def test_baseline_and_uniform_targets() -> None:
    assert baseline_distribution([2, 3]).tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert np.allclose(uniform_distribution([2, 4]), [[0.5, 0.5, 0, 0], [0.25] * 4])
    assert baseline_distribution([]).shape == (0, 0)


def test_a_wall_clock_policy_is_replayed_at_each_decision_time() -> None:
    """``half_life_seconds = 60``: "a" earns three rewards of 1 at ``t0`` (theta 3/4),
    "b" one at ``t0 + 600``. Ten half-lives later "a" weighs ``3 / 1024`` (theta
    ``(3/1024) / (1 + 3/1024) < 1/2``), so the greedy policy serves "b" at ``t0 + 600``,
    as the service would; replayed without the times it would still serve "a"."""
    t0 = 1.8e9

    def event(chosen: str, at: float) -> LoggedEvent:
        return LoggedEvent.build(
            ["a", "b"], chosen, 1.0, arm_features=np.ones((2, 1)), pscore=0.5, time=at
        )

    events = [event("a", t0)] * 3 + [event("b", t0 + 600.0), event("a", t0 + 600.0)]

    def policy() -> AnyPolicy:
        return bandit_core.make_policy(
            "discounted_linucb", d=1, alpha=0.0, epsilon=0.0, half_life_seconds=60.0
        )

    timed = progressive_distribution(policy(), events, 2)
    assert timed[3].tolist() == [1.0, 0.0] and timed[4].tolist() == [0.0, 1.0]
    untimed = [
        LoggedEvent.build(e.arm_ids, e.chosen, 1.0, arm_features=e.X, pscore=0.5) for e in events
    ]
    assert progressive_distribution(policy(), untimed, 2)[4].tolist() == [1.0, 0.0]
