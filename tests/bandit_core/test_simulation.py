"""Simulated environments with known ground truth and the regret they report."""

from __future__ import annotations

import numpy as np
import pytest

import bandit_core
from bandit_core.datasets import ClassificationData
from bandit_core.errors import InvalidInputError
from bandit_core.simulation import (
    ClassificationEnvironment,
    SyntheticEnvironment,
    simulate,
    simulate_run,
)


@pytest.mark.parametrize("link", ["linear", "nonlinear"])
def test_synthetic_expected_rewards_follow_the_link(link: str) -> None:
    env = SyntheticEnvironment.random(n_arms=4, d=6, link=link, rng=np.random.default_rng(0))
    for X, mu in env.rounds(50, np.random.default_rng(1)):
        assert X.shape == (4, 6)
        np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0)
        s = X @ env.theta
        np.testing.assert_allclose(mu, (1 + s) / 2 if link == "linear" else s**2)
        assert ((0 <= mu) & (mu <= 1)).all()


def _regret(name: str, env: SyntheticEnvironment, rounds: int) -> np.ndarray:
    res = simulate(
        lambda s: bandit_core.make_policy(name, d=env.d, alpha=0.5, seed=s), env, rounds, [0, 1, 2]
    )
    return res.regret_curves


def test_linucb_learns_the_linear_environment() -> None:
    env = SyntheticEnvironment.random(n_arms=5, d=5, link="linear", rng=np.random.default_rng(3))
    lin, rand = _regret("linucb", env, 1500), _regret("random", env, 1500)
    assert (np.diff(lin, axis=1) >= 0).all()
    # Random pays a constant regret per round; LinUCB's per-round regret falls: over the
    # last 500 rounds it is under a third of random's and under half its own first 500.
    late = (lin[:, -1] - lin[:, -501]).mean()
    assert late < (rand[:, -1] - rand[:, -501]).mean() / 3
    assert late < lin[:, 499].mean() / 2


def test_classification_environment_is_one_hot_and_covers_each_row_per_epoch() -> None:
    X = np.eye(3)[[0, 1, 2, 0, 1]] * 1.0
    data = ClassificationData(X=X, labels=np.array([0, 1, 2, 0, 1]), classes=("a", "b", "c"))
    env = ClassificationEnvironment(data)
    rounds = list(env.rounds(10, np.random.default_rng(0)))
    assert len(rounds) == 10 and env.arm_ids == ("a", "b", "c") and env.d == 3
    for Xr, mu in rounds:
        assert (Xr == Xr[0]).all()  # every arm sees the row itself
        np.testing.assert_array_equal(mu, np.eye(3)[int(np.argmax(Xr[0]))])
    first_epoch = sorted(tuple(Xr[0]) for Xr, _ in rounds[:5])
    assert first_epoch == sorted(tuple(x) for x in X)


def test_classification_regret_counts_the_mistakes() -> None:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 300)
    X = np.eye(3)[labels] + 0.05 * rng.random((300, 3))
    env = ClassificationEnvironment(
        ClassificationData(X / np.linalg.norm(X, axis=1, keepdims=True), labels, ("a", "b", "c"))
    )
    run = simulate_run(
        bandit_core.make_policy("linucb", d=3, alpha=0.1, seed=0),
        env,
        600,
        np.random.default_rng(1),
    )
    assert run.cumulative_regret + run.cumulative_reward == pytest.approx(600)
    assert run.cumulative_regret < 100  # separable classes: LinUCB stops erring quickly


def test_same_seeds_give_the_same_curves() -> None:
    env = SyntheticEnvironment.random(n_arms=3, d=4, link="nonlinear", rng=np.random.default_rng(0))

    def make(seed: int) -> bandit_core.BasePolicy:
        return bandit_core.make_policy("linucb", d=4, seed=seed)

    a, b = simulate(make, env, 200, [5, 6]), simulate(make, env, 200, [5, 6])
    np.testing.assert_array_equal(a.regret_curves, b.regret_curves)
    assert not np.array_equal(a.regret_curves[0], a.regret_curves[1])
    assert a.cumulative_regret.n == 2


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda: SyntheticEnvironment(theta=np.ones(3), n_arms=3), "theta must be a unit vector"),
        (lambda: SyntheticEnvironment(theta=np.eye(3)[0], n_arms=1), "n_arms must be >= 2"),
        (lambda: SyntheticEnvironment(theta=np.eye(3)[0], n_arms=2, link="cubic"), "link must be"),
        (
            lambda: ClassificationEnvironment(
                ClassificationData(np.ones((2, 1)), np.zeros(2, int), ("a",))
            ),
            ">= 2 classes",
        ),
        (
            lambda: simulate(
                lambda s: bandit_core.make_policy("random", d=3),
                SyntheticEnvironment(np.eye(3)[0], 2),
                0,
                [0],
            ),
            "rounds must be a positive int",
        ),
        (
            lambda: simulate(
                lambda s: bandit_core.make_policy("random", d=3),
                SyntheticEnvironment(np.eye(3)[0], 2),
                5,
                [],
            ),
            "seeds must hold at least one seed",
        ),
    ],
)
def test_invalid_simulations_are_rejected(build, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidInputError, match=match):
        build()
