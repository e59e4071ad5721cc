"""Leave-one-feature-out over a JSON log (bandit_core/evaluation/lofo.py): the feature
that decides the reward loses the most, a feature the reward never reads loses nothing
it did not gain by chance, and taking a feature out follows the featurizer's rules."""

from __future__ import annotations

import numpy as np

import bandit_core
from bandit_core.evaluation.lofo import (
    JsonEvent,
    json_features,
    leave_one_feature_out,
    replay_value,
    without_feature,
)
from bandit_core.features import Featurizer, FeaturizerConfig

FEATURIZER = Featurizer(FeaturizerConfig(bits=6, interactions=[["*", "*"]]))
ITEMS = {"x": {"item": {"kind": "x"}}, "y": {"item": {"kind": "y"}}}


def policy() -> bandit_core.BasePolicy:
    return bandit_core.make_policy(
        "hybrid_linucb", d=FEATURIZER.config.dim, alpha=0.0, context_dim=0
    )


def uniform_log(n: int, seed: int) -> list[JsonEvent]:
    """Users who like ``x`` or ``y`` (``user.likes``), a coin the rewards ignore
    (``session.coin``); a uniform logging policy (propensity 1/2)."""
    rng = np.random.default_rng(seed)
    events = []
    for _ in range(n):
        likes = str(rng.choice(["x", "y"]))
        context = [{"user": {"likes": likes}}, {"session": {"coin": int(rng.integers(2))}}]
        served = str(rng.choice(["x", "y"]))
        events.append(
            JsonEvent(
                context=context,
                arm_ids=["x", "y"],
                actions=[[ITEMS["x"]], [ITEMS["y"]]],
                arm_id=served,
                propensity=0.5,
                reward=float(served == likes),
            )
        )
    return events


def test_the_feature_deciding_the_reward_loses_the_most() -> None:
    events = uniform_log(400, seed=0)
    value, effects = leave_one_feature_out(policy, FEATURIZER, events)
    assert value > 0.9  # a learner with user.likes x item.kind serves the liked item
    by_feature = {f.feature: f for f in effects}
    assert set(by_feature) == {("user", "likes"), ("session", "coin"), ("item", "kind")}
    assert effects[0].feature in (("user", "likes"), ("item", "kind"))
    assert by_feature[("user", "likes")].drop > 0.3
    assert abs(by_feature[("session", "coin")].drop) < 0.05
    # without the taste the policy learns no preference: about half the rewards
    assert abs(by_feature[("user", "likes")].value_without - 0.5) < 0.1
    assert by_feature[("user", "likes")].value_without == replay_value(
        policy, FEATURIZER, events, ("user", "likes")
    )


def test_features_and_their_removal_follow_the_featurizer_rules() -> None:
    obj = {"age": 3, "_id": 7, "user": {"tags": ["a"], "address": {"city": "x", "zip": 1}}}
    assert json_features([obj, "not an object"]) == {
        ("", "age"),
        ("user", "tags"),
        ("user.address", "city"),
        ("user.address", "zip"),
    }
    assert without_feature(obj, ("user.address", "city")) == {
        "age": 3,
        "_id": 7,
        "user": {"tags": ["a"], "address": {"zip": 1}},
    }
    assert without_feature([obj], ("", "age"))[0].keys() == {"_id", "user"}
    assert without_feature(obj, ("", "user")) == obj  # a namespace is not a feature
    assert without_feature(obj, ("nope", "age")) == obj
    assert obj["user"]["address"] == {"city": "x", "zip": 1}  # the input is not changed
    assert replay_value(policy, FEATURIZER, []) == 0.0
