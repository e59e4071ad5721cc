"""IPS / SNIPS / DR of a fixed greedy policy on logged events: the target's action
distribution, the cross-fitted ridge ``q_hat`` and zero-padding of varying candidate sets."""

from __future__ import annotations

import numpy as np
import pytest

import bandit_core
from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation import (
    UnsupportedLogError,
    dr,
    ips,
    off_policy_estimates,
    ridge_q_hat,
    snips,
    target_distribution,
)


def _events(n: int, rng: np.random.Generator, theta: np.ndarray, noise: float) -> list[LoggedEvent]:
    """Uniformly logged events over arms a, b, c (c sometimes missing), reward x . theta_a."""
    out = []
    for _ in range(n):
        ids = ["a", "b", "c"] if rng.random() < 0.7 else ["a", "b"]
        X = rng.normal(size=(len(ids), 2))
        j = int(rng.integers(len(ids)))
        r = float(X[j] @ theta["abc".index(ids[j])] + noise * rng.normal())
        out.append(LoggedEvent.build(ids, ids[j], r, arm_features=X, pscore=1 / len(ids)))
    return out


def test_target_distribution_is_the_greedy_choice_padded_to_k_max() -> None:
    policy = bandit_core.make_policy("linucb", d=1, alpha=0.0)
    policy.add_arm("a")
    policy.update("a", [1.0], 1.0)  # theta_a > 0, unseen b and c score 0
    events = [
        LoggedEvent.build(
            ["a", "b", "c"], "a", 0.0, arm_features=[[1.0], [1.0], [1.0]], pscore=0.5
        ),
        LoggedEvent.build(["b", "a"], "b", 0.0, arm_features=[[1.0], [-1.0]], pscore=0.5),
    ]
    pi = target_distribution(policy, events)
    # event 1: a wins; event 2: a scores < 0, so b (score 0) wins; the third column is padding
    np.testing.assert_array_equal(pi, [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])


def test_ridge_q_hat_is_cross_fitted_and_recovers_a_linear_model() -> None:
    rng = np.random.default_rng(0)
    theta = np.array([[1.0, -0.5], [0.2, 0.8], [-1.0, 0.3]])
    events = _events(600, rng, theta, noise=0.0)
    q = ridge_q_hat(events, ridge_lambda=1e-6, folds=3)
    for i, e in enumerate(events):
        truth = np.einsum("kd,kd->k", e.X, theta[["abc".index(a) for a in e.arm_ids]])
        np.testing.assert_allclose(q[i, : len(e.arm_ids)], truth, atol=1e-4)
        assert (q[i, len(e.arm_ids) :] == 0).all()
    # Cross-fitting: changing one event's reward does not change its own prediction.
    changed = list(events)
    e = events[0]
    changed[0] = LoggedEvent(e.arm_ids, e.X, e.action, e.reward + 100.0, e.pscore)
    q2 = ridge_q_hat(changed, ridge_lambda=1e-6, folds=3)
    np.testing.assert_array_equal(q2[: 600 // 3], q[: 600 // 3])
    assert not np.allclose(q2[600 // 3 :], q[600 // 3 :])


def test_estimates_equal_the_array_estimators_and_dr_is_exact_without_noise() -> None:
    rng = np.random.default_rng(1)
    theta = np.array([[1.0, -0.5], [0.2, 0.8], [-1.0, 0.3]])
    events = _events(400, rng, theta, noise=0.0)
    policy = bandit_core.make_policy("linucb", d=2, alpha=0.0, reward_range=(-10.0, 10.0))
    for a, th in zip("abc", theta, strict=True):
        policy.add_arm(a)
        policy.update(a, th, float(th @ th))  # theta_a fitted towards th: some fixed greedy target
    res = off_policy_estimates(policy, events, rng=np.random.default_rng(2), n_bootstrap=100)
    pi = target_distribution(policy, events)
    r = np.array([e.reward for e in events])
    a = np.array([e.action for e in events])
    p = np.array([e.pscore for e in events])
    q = ridge_q_hat(events)
    assert res["ips"].value == pytest.approx(ips(r, a, p, pi))
    assert res["snips"].value == pytest.approx(snips(r, a, p, pi))
    assert res["dr"].value == pytest.approx(dr(r, a, p, pi, q))
    truth = np.mean(
        [
            pi[i, : len(e.arm_ids)]
            @ np.einsum("kd,kd->k", e.X, theta[["abc".index(x) for x in e.arm_ids]])
            for i, e in enumerate(events)
        ]
    )
    # Noiseless linear rewards: the (nearly unpenalised) ridge q_hat is nearly perfect.
    q_exact = ridge_q_hat(events, ridge_lambda=1e-9)
    assert dr(r, a, p, pi, q_exact) == pytest.approx(truth, abs=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"folds": 1}, "folds must be an int in"),
        ({"folds": 10_000}, "folds must be an int in"),
        ({"folds": True}, "folds must be an int in"),
        ({"ridge_lambda": 0.0}, "ridge_lambda must be a finite number > 0, but got 0.0"),
        ({"ridge_lambda": float("nan")}, "ridge_lambda must be a finite number > 0, but got nan"),
    ],
)
def test_ridge_q_hat_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    events = _events(10, np.random.default_rng(0), np.ones((3, 2)), noise=0.0)
    with pytest.raises(InvalidInputError, match=message):
        ridge_q_hat(events, **kwargs)  # type: ignore[arg-type]


def test_off_policy_estimates_need_events_with_pscores() -> None:
    policy = bandit_core.make_policy("linucb", d=1)
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidInputError, match="at least one event"):
        off_policy_estimates(policy, [], rng=rng)
    no_pscore = [LoggedEvent.build(["a", "b"], "a", 1.0, context=[1.0])] * 3
    with pytest.raises(InvalidInputError, match="event 0 has none"):
        off_policy_estimates(policy, no_pscore, rng=rng)


def _logged_by(epsilon: float, n: int = 300) -> list[LoggedEvent]:
    """Events served by LinUCB (alpha 1) with ``epsilon``, with its logged propensities."""
    rng = np.random.default_rng(11)
    logger = bandit_core.make_policy("linucb", d=2, epsilon=epsilon, seed=3)
    theta = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]])
    out = []
    for _ in range(n):
        X = rng.normal(size=(3, 2))
        dec = logger.select(["a", "b", "c"], X)
        j = "abc".index(dec.arm_id)
        r = float(rng.random() < 1 / (1 + np.exp(-X[j] @ theta[j])))
        logger.update(dec.arm_id, X[j], r)
        out.append(
            LoggedEvent.build(["a", "b", "c"], dec.arm_id, r, arm_features=X, pscore=dec.propensity)
        )
    return out


def test_a_deterministic_logger_cannot_evaluate_another_policy_and_epsilon_fixes_it() -> None:
    target = bandit_core.make_policy(
        "linucb", d=2, alpha=5.0, seed=0
    )  # explores what the logger did not
    deterministic = _logged_by(0.0)
    assert sum(e.pscore == 1.0 for e in deterministic) > 0.9 * len(deterministic)
    with pytest.raises(UnsupportedLogError, match="does not support the target policy") as exc:
        off_policy_estimates(
            target,
            deterministic,
            rng=np.random.default_rng(0),
            n_bootstrap=20,
            require_support=True,
        )
    assert exc.value.support.unsupported_mass > 0
    loose = off_policy_estimates(
        target, deterministic, rng=np.random.default_rng(0), n_bootstrap=20
    )
    assert not loose["ips"].support.supported  # without require_support: reported, not raised
    exploring = off_policy_estimates(
        target, _logged_by(0.05), rng=np.random.default_rng(0), n_bootstrap=20, require_support=True
    )
    assert all(r.support.supported for r in exploring.values())
