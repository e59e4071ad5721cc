"""``bandit_core.exploring`` (docs/algorithms.md section 10.5, "Response to a
detection"): within the block a policy selects with its exploration knob raised, and
nothing of it changes."""

from __future__ import annotations

import numpy as np
import pytest

from bandit_core import exploring, make_policy
from bandit_core.errors import ConfigError

ROW = np.array([[1.0]])


def test_alpha_is_raised_inside_the_block_and_restored_after() -> None:
    policy = make_policy("linucb", d=1, alpha=0.5)
    policy.add_arm("a")
    for _ in range(3):
        policy.update("a", ROW[0], 1.0)
    twin = type(policy).from_bytes(policy.to_bytes())
    mean, width = 3 / 4, 1 / 2  # A = 1 + 3, b = 3
    with exploring(policy, 2.0):
        assert policy.select(["a"], ROW).scores[0] == pytest.approx(mean + 2.0 * width)
    assert policy.config.alpha == 0.5
    assert policy.select(["a"], ROW).scores[0] == pytest.approx(mean + 0.5 * width)
    # the boosted selection drew what a plain one draws and left the same state
    twin.select(["a"], ROW)
    twin.select(["a"], ROW)
    assert policy.to_bytes() == twin.to_bytes()


def test_a_higher_knob_is_kept_and_none_changes_nothing() -> None:
    policy = make_policy("linucb", d=1, alpha=3.0)
    config = policy.config
    for level in (1.0, None):
        with exploring(policy, level):
            assert policy.config is config


def test_the_setting_comes_back_when_the_block_raises() -> None:
    policy = make_policy("linucb", d=1, alpha=0.5)
    with pytest.raises(RuntimeError), exploring(policy, 2.0):
        raise RuntimeError("in the block")
    assert policy.config.alpha == 0.5


def test_epsilon_is_the_knob_of_the_baselines_and_stays_at_most_one() -> None:
    policy = make_policy("epsilon_greedy", d=1, epsilon=0.1, seed=3)
    assert policy.EXPLORATION_KNOB == "epsilon"
    with exploring(policy, 1.0):
        # every choice explores: two arms, each served with propensity 1/2
        assert policy.select(["a", "b"], np.zeros((2, 1))).propensity == pytest.approx(0.5)
    assert policy.config.epsilon == 0.1
    with pytest.raises(ConfigError, match="epsilon"), exploring(policy, 1.5):
        pass
    assert policy.config.epsilon == 0.1
