"""Replay (Li et al. 2011), rejection-sampling replay and the IPS / SNIPS / DR estimators."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bandit_core
from bandit_core.datasets import BanditLog, LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation import (
    dr,
    estimate,
    ips,
    rejection_replay,
    replay,
    replay_seeds,
    snips,
    support,
)


@pytest.mark.parametrize(("alpha", "expected"), [(0.1, 567), (1.0, 424), (10.0, 98)])
def test_linucb_replay_reproduces_table_3(news: BanditLog, alpha: float, expected: int) -> None:
    result = replay(bandit_core.make_policy("linucb", d=10, alpha=alpha, seed=0), news, 800)
    assert result.cumulative_reward == expected
    assert result.matched == 800 and result.mean_reward == expected / 800
    assert result.curve.shape == (800,) and result.curve[-1] == expected
    assert (np.diff(result.curve) >= 0).all()


class Spy:
    """Wraps a policy and records what it was told to learn."""

    def __init__(self, policy: bandit_core.BasePolicy) -> None:
        self.policy = policy
        self.selected: list[str] = []
        self.updates: list[tuple[str, np.ndarray, float]] = []

    def select(self, arm_ids, X, **kw):  # type: ignore[no-untyped-def]
        dec = self.policy.select(arm_ids, X, **kw)
        self.selected.append(dec.arm_id)
        return dec

    def select_until(self, arm_ids, X_batch, targets, **kw):  # type: ignore[no-untyped-def]
        """The Protocol's definition: one select per row until the target is served."""
        for i, (X, t) in enumerate(zip(X_batch, targets, strict=True)):
            if self.select(arm_ids, X, **kw).arm_id == arm_ids[t]:
                return i
        return len(targets)

    def update(self, arm_id, x, reward, **kw):  # type: ignore[no-untyped-def]
        self.updates.append((arm_id, np.array(x), reward))
        self.policy.update(arm_id, x, reward, **kw)


def test_strict_replay_learns_only_from_matched_events_and_stops_at_n(news: BanditLog) -> None:
    spy = Spy(bandit_core.make_policy("linucb", d=10, alpha=1.0, seed=0))
    result = replay(spy, news, 50)  # type: ignore[arg-type]
    events = list(news)[: result.events_seen]
    matched = [e for e, s in zip(events, spy.selected, strict=True) if s == e.chosen]
    assert len(matched) == result.matched == len(spy.updates) == 50
    assert spy.selected[-1] == events[-1].chosen  # stopped right after the 50th match
    for e, (arm, x, r) in zip(matched, spy.updates, strict=True):
        assert arm == e.chosen and r == e.reward
        np.testing.assert_array_equal(x, e.X[e.action])
    assert result.cumulative_reward == sum(e.reward for e in matched)


def test_replay_runs_to_the_end_of_a_short_log(news: BanditLog) -> None:
    short = BanditLog(news.arm_ids, news.features[:200], news.action[:200], news.reward[:200])
    result = replay(bandit_core.make_policy("random", d=10, seed=1), short)
    assert result.events_seen == 200 and 0 < result.matched < 60


def test_rejection_replay_equals_replay_on_a_uniform_log(news: BanditLog) -> None:
    plain = replay(bandit_core.make_policy("linucb", d=10, alpha=1.0, seed=4), news, 300)
    rej = rejection_replay(
        bandit_core.make_policy("linucb", d=10, alpha=1.0, seed=4),
        news,
        np.random.default_rng(9),
        300,
    )
    assert (rej.cumulative_reward, rej.matched, rej.events_seen) == (
        plain.cumulative_reward,
        plain.matched,
        plain.events_seen,
    )
    np.testing.assert_array_equal(rej.curve, plain.curve)


def test_rejection_replay_corrects_non_uniform_logging() -> None:
    # Logging serves arms 0/1/2 with probabilities 0.7/0.2/0.1; arm means 0.1/0.5/0.9. The
    # uniformly random target policy is worth 0.5; plain replay weights the matched events by
    # the logging probabilities (0.7*0.1 + 0.2*0.5 + 0.1*0.9 = 0.26), rejection sampling does not.
    rng = np.random.default_rng(0)
    n, p_log, means = 20_000, np.array([0.7, 0.2, 0.1]), np.array([0.1, 0.5, 0.9])
    action = rng.choice(3, size=n, p=p_log)
    log = BanditLog(
        ("0", "1", "2"),
        np.ones((n, 3, 1)),
        action,
        (rng.random(n) < means[action]).astype(float),
        p_log[action],
    )
    plain = replay(bandit_core.make_policy("random", d=1, seed=0), log)
    rej = rejection_replay(
        bandit_core.make_policy("random", d=1, seed=0), log, np.random.default_rng(1)
    )
    # Standard errors: about 0.008 (plain, ~6700 matches) and 0.016 (rejection, ~2000 accepted).
    assert abs(plain.mean_reward - 0.26) < 0.03
    assert abs(rej.mean_reward - 0.5) < 0.05
    assert 1500 < rej.matched < 2500


def test_rejection_replay_needs_propensities() -> None:
    log = [LoggedEvent.build(["a", "b"], "a", 1.0, context=[1.0])]
    with pytest.raises(InvalidInputError, match="needs a pscore on every event"):
        rejection_replay(bandit_core.make_policy("random", d=1), log, np.random.default_rng(0))
    with pytest.raises(
        InvalidInputError, match=r"min_pscore must be a finite number in \(0, 1\], but got"
    ):
        rejection_replay(
            bandit_core.make_policy("random", d=1), log, np.random.default_rng(0), min_pscore=0.0
        )
    with pytest.raises(InvalidInputError, match="n_rounds must be a positive int"):
        replay(bandit_core.make_policy("random", d=1), log, 0)


def test_replay_seeds_reports_mean_and_spread(news: BanditLog) -> None:
    runs = replay_seeds(
        lambda s: bandit_core.make_policy("random", d=10, seed=s), news, [0, 1, 2], 100
    )
    values = [r.cumulative_reward for r in runs.results]
    assert (
        runs.seeds == (0, 1, 2) and len(set(values)) > 1
    )  # seeds change the random policy's picks
    assert runs.cumulative_reward.mean == pytest.approx(np.mean(values))
    assert runs.cumulative_reward.std == pytest.approx(np.std(values, ddof=1))
    assert runs.mean_curve().shape == (100,)


# ---- estimators ---------------------------------------------------------------------------------
N, K = 1000, 4


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def problem() -> dict[str, np.ndarray]:
    """Fixed contexts: true expected rewards q (N, K), a non-uniform logging policy and a
    different target policy; the target's true value on these contexts is sum pi*q / N."""
    rng = np.random.default_rng(42)
    feats = rng.standard_normal((N, 3))
    q = 1.0 / (1.0 + np.exp(-feats @ rng.standard_normal((3, K))))
    logging = _softmax(feats @ rng.standard_normal((3, K)))
    logging = 0.8 * logging + 0.2 / K  # every action has pscore >= 0.05
    target = _softmax(3.0 * q)
    return {"q": q, "logging": logging, "target": target, "value": float((target * q).sum() / N)}


def _draw_log(
    problem: dict[str, np.ndarray], seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.random((N, 1))
    action = (u > np.cumsum(problem["logging"], axis=1)).sum(axis=1)
    reward = (rng.random(N) < problem["q"][np.arange(N), action]).astype(float)
    return reward, action, problem["logging"][np.arange(N), action]


@pytest.mark.parametrize("name", ["ips", "dr", "snips"])
def test_estimators_are_unbiased_and_intervals_cover(
    problem: dict[str, np.ndarray], name: str
) -> None:
    seeds = 100
    noisy_q = np.clip(problem["q"] + np.random.default_rng(7).normal(0, 0.2, (N, K)), 0, 1)
    values, covered = [], 0
    for seed in range(seeds):
        r, a, p = _draw_log(problem, seed)
        res = estimate(
            name,
            r,
            a,
            p,
            problem["target"],
            noisy_q if name == "dr" else None,
            rng=np.random.default_rng(seed),
            n_bootstrap=200,
        )
        values.append(res.value)
        covered += res.ci_low <= problem["value"] <= res.ci_high
    values_arr = np.array(values)
    se = values_arr.std(ddof=1) / np.sqrt(seeds)
    # Unbiased (IPS, DR) or nearly so at n = 1000 (SNIPS, bias O(1/n)): the mean over 100
    # seeds is within 4 standard errors; 95 % intervals cover the truth in >= 85 of 100 seeds.
    assert abs(values_arr.mean() - problem["value"]) < 4 * se
    assert covered >= 85


def test_dr_with_perfect_q_hat_is_exact(problem: dict[str, np.ndarray]) -> None:
    # Deterministic rewards equal to q: the correction term vanishes, DR = direct method.
    r, a, p = _draw_log(problem, 0)
    r = problem["q"][np.arange(N), a]
    assert dr(r, a, p, problem["target"], problem["q"]) == pytest.approx(
        problem["value"], abs=1e-12
    )
    assert abs(ips(r, a, p, problem["target"]) - problem["value"]) > 1e-6


def test_snips_is_self_normalised(problem: dict[str, np.ndarray]) -> None:
    r, a, p = _draw_log(problem, 1)
    pi = problem["target"]
    assert snips(r, a, 0.5 * p, pi) == pytest.approx(snips(r, a, p, pi), rel=1e-12)
    assert ips(r, a, 0.5 * p, pi) == pytest.approx(2 * ips(r, a, p, pi), rel=1e-12)
    assert snips(np.full(N, 0.3), a, p, pi) == pytest.approx(0.3, rel=1e-12)
    w = pi[np.arange(N), a] / p
    assert snips(r, a, p, pi) == pytest.approx((w * r).sum() / w.sum(), rel=1e-12)


@st.composite
def _logs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n, k = draw(st.integers(1, 30)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    logging = rng.dirichlet(np.ones(k), size=n) * 0.9 + 0.1 / k
    action = np.array([rng.choice(k, p=row) for row in logging])
    reward = rng.normal(size=n)
    return reward, action, logging[np.arange(n), action], logging


@settings(max_examples=100, deadline=None)
@given(_logs())
def test_estimator_identities(log: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> None:
    reward, action, pscore, logging = log
    n, k = logging.shape
    # Target = logging policy: every weight is 1, so IPS and SNIPS are the mean reward.
    assert ips(reward, action, pscore, logging) == pytest.approx(reward.mean(), abs=1e-9)
    assert snips(reward, action, pscore, logging) == pytest.approx(reward.mean(), abs=1e-9)
    # DR with q_hat = 0 is IPS; SNIPS is a weighted mean of the rewards.
    target = np.roll(logging, 1, axis=1)
    assert dr(reward, action, pscore, target, np.zeros((n, k))) == pytest.approx(
        ips(reward, action, pscore, target)
    )
    assert reward.min() - 1e-9 <= snips(reward, action, pscore, target) <= reward.max() + 1e-9


def test_ips_matches_a_hand_computed_value() -> None:
    r, a, p = np.array([1.0, 0.0, 1.0]), np.array([0, 1, 1]), np.array([0.5, 0.25, 0.25])
    pi = np.array([[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]])
    assert ips(r, a, p, pi) == pytest.approx((1.0 * 1.0 + 0.0 + 0.0) / 3)


def test_bootstrap_is_seeded_and_narrows_with_more_data(problem: dict[str, np.ndarray]) -> None:
    r, a, p = _draw_log(problem, 2)
    pi = problem["target"]
    one = estimate("snips", r, a, p, pi, rng=np.random.default_rng(5), n_bootstrap=300)
    two = estimate("snips", r, a, p, pi, rng=np.random.default_rng(5), n_bootstrap=300)
    assert one == two and one.ci_low < one.value < one.ci_high and one.n == N
    small = estimate(
        "snips", r[:100], a[:100], p[:100], pi[:100], rng=np.random.default_rng(5), n_bootstrap=300
    )
    assert small.ci_high - small.ci_low > 2 * (one.ci_high - one.ci_low)


GOOD = {
    "reward": np.ones(2),
    "action": np.array([0, 1]),
    "pscore": np.full(2, 0.5),
    "action_dist": np.full((2, 2), 0.5),
}


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"reward": np.ones((2, 1))}, "reward must be a non-empty 1D array"),
        ({"reward": np.array([1.0, np.nan])}, "reward must be finite"),
        ({"action": np.array([0.0, 1.0])}, "action must be an int array of shape"),
        ({"action": np.array([0, 2])}, r"action must lie in \[0, 2\)"),
        ({"pscore": np.array([0.5, 0.0])}, r"pscore must lie in \(0, 1\]"),
        ({"pscore": np.ones(3)}, r"pscore must have shape \(2,\)"),
        ({"action_dist": np.full((2, 2), 0.4)}, "rows that each sum to 1"),
        ({"action_dist": np.full(2, 0.5)}, r"action_dist must have shape \(2, K\)"),
    ],
)
def test_estimators_reject_bad_inputs(override: dict, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        ips(**{**GOOD, **override})


def test_estimate_rejects_bad_options() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidInputError, match="estimator must be one of"):
        estimate("dm", **GOOD, rng=rng)
    with pytest.raises(InvalidInputError, match="dr needs q_hat"):
        estimate("dr", **GOOD, rng=rng)
    with pytest.raises(InvalidInputError, match=r"q_hat must have shape \(2, 2\)"):
        dr(**GOOD, q_hat=np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match="n_bootstrap must be a positive int"):
        estimate("ips", **GOOD, rng=rng, n_bootstrap=0)
    with pytest.raises(
        InvalidInputError, match=r"confidence must be a finite number in \(0, 1\), but got"
    ):
        estimate("ips", **GOOD, rng=rng, confidence=1.0)
    with pytest.raises(InvalidInputError, match="snips is undefined"):
        snips(np.ones(2), np.array([0, 0]), np.full(2, 0.5), np.array([[0.0, 1.0], [0.0, 1.0]]))


def _deterministic_log(problem: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The argmax of the logging policy, served with propensity 1 (as LinUCB logs with
    epsilon 0), Bernoulli rewards with the true means."""
    action = problem["logging"].argmax(axis=1)
    r = (np.random.default_rng(3).random(N) < problem["q"][np.arange(N), action]).astype(float)
    return r, action, np.ones(N)


def test_a_deterministic_log_is_reported_as_not_supporting_the_target(
    problem: dict[str, np.ndarray],
) -> None:
    r, a, p = _deterministic_log(problem)
    target = problem["target"]
    results = {
        name: estimate(
            name,
            r,
            a,
            p,
            target,
            problem["q"] if name == "dr" else None,
            rng=np.random.default_rng(0),
            n_bootstrap=200,
        )
        for name in ("ips", "snips", "dr")
    }
    expected_mass = float(np.mean(1.0 - target[np.arange(N), a]))
    for res in results.values():
        assert res.support.deterministic_events == N and not res.support.supported
        assert res.support.unsupported_mass == pytest.approx(expected_mass)
        assert "does not support" in res.support.message()
        assert res.to_dict()["support"]["supported"] is False
    # what the diagnostic guards against: tight intervals that exclude the truth and each other
    assert not results["ips"].ci_low <= problem["value"] <= results["ips"].ci_high
    assert results["ips"].ci_high < results["snips"].ci_low


def test_an_exploring_log_supports_every_target(problem: dict[str, np.ndarray]) -> None:
    r, a, p = _draw_log(problem, 0)
    res = estimate("ips", r, a, p, problem["target"], rng=np.random.default_rng(0), n_bootstrap=50)
    assert res.support.supported and res.support.deterministic_events == 0
    assert res.support.unsupported_mass == 0.0


def test_support_counts_only_target_mass_away_from_a_deterministic_action() -> None:
    # event 0: deterministic, target agrees; event 1: deterministic, target half elsewhere;
    # event 2: logged with 0.5, whatever the target does is not known to lack support
    diag = support([0, 1, 0], [1.0, 1.0, 0.5], [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])
    assert (diag.n, diag.deterministic_events, diag.unsupported_mass) == (
        3,
        2,
        pytest.approx(0.5 / 3),
    )
    # a single candidate served with certainty is fully supported
    assert support([0], [1.0], [[1.0]]).supported
