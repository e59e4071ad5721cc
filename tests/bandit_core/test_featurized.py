"""JSON features into every registered policy (bandit_core.featurized; docs/algorithms.md
sections 7 and 8): the rows each layout makes, the hashed seam a cache uses, and
guardrails that name a JSON feature."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import bandit_core
from bandit_core.errors import ConfigError, InvalidFeatureError
from bandit_core.features import Featurizer, FeaturizerConfig, HashedActions, SparseRows
from bandit_core.featurized import (
    context_feature_values,
    featurized_dimension,
    featurized_rows,
    named_columns,
)
from tests.bandit_core.test_features import ACTIONS, CONTEXT, SETTINGS, _feature_input

FEATURIZER = Featurizer(FeaturizerConfig(bits=5))
DIM = FEATURIZER.config.dim


def make(name: str, context_dim: int = 0, **params) -> bandit_core.BasePolicy:
    layout = bandit_core.policy_class(name).FEATURE_LAYOUT
    d = featurized_dimension(layout, FEATURIZER.config, context_dim)
    if context_dim:
        params["context_dim"] = context_dim
    return bandit_core.make_policy(name, d=d, **params)


# (algorithm, context_dim) for every registered algorithm, shared models with and without their context part
CASES = [(name, 0) for name in bandit_core.POLICIES] + [("hybrid_linucb", DIM), ("hare", DIM)]


@pytest.mark.parametrize(("name", "context_dim"), CASES)
def test_every_registered_algorithm_takes_json_features(name: str, context_dim: int) -> None:
    policy = make(name, context_dim)
    ids = [f"item-{k}" for k in range(len(ACTIONS))]
    X = featurized_rows(FEATURIZER, policy, CONTEXT, ACTIONS)
    assert X.shape == (len(ACTIONS), policy.config.d) and X.dtype == np.float64
    decision = policy.select(ids, X)
    policy.update(decision.arm_id, X[ids.index(decision.arm_id)], 1.0)
    again = featurized_rows(FEATURIZER, policy, CONTEXT, ACTIONS)
    np.testing.assert_array_equal(again, X)


def test_layouts_place_the_featurizer_vectors() -> None:
    batch = FEATURIZER.featurize(CONTEXT, ACTIONS)
    K = len(ACTIONS)
    per_arm = featurized_rows(FEATURIZER, make("linucb"), CONTEXT, ACTIONS)
    np.testing.assert_array_equal(per_arm, np.tile(batch.context, (K, 1)))
    shared = featurized_rows(FEATURIZER, make("hybrid_linucb"), CONTEXT, ACTIONS)
    np.testing.assert_array_equal(shared, batch.actions)
    hybrid = featurized_rows(FEATURIZER, make("hybrid_linucb", DIM), CONTEXT, ACTIONS)
    np.testing.assert_array_equal(
        hybrid, np.hstack([batch.actions, np.tile(batch.context, (K, 1))])
    )
    own = Featurizer(FeaturizerConfig(bits=5, interactions=[], context_in_actions=False))
    items = own.featurize(CONTEXT, ACTIONS).actions
    hare = featurized_rows(FEATURIZER, make("hare", DIM), CONTEXT, ACTIONS)
    np.testing.assert_array_equal(hare, np.hstack([np.tile(batch.context, (K, 1)), items]))
    np.testing.assert_array_equal(
        featurized_rows(FEATURIZER, make("hare"), CONTEXT, ACTIONS), items
    )


def test_a_shared_model_from_json_scores_items_it_never_saw() -> None:
    policy = make("hybrid_linucb", alpha=0.0)
    for segment, liked in (("a", "food"), ("b", "books")) * 30:
        context = {"user": {"segment": segment}}
        for category in ("food", "books"):
            x = featurized_rows(FEATURIZER, policy, context, [{"item": {"category": category}}])[0]
            policy.update(f"old-{category}", x, float(category == liked))
    new = [
        {"item": {"category": "books", "sku": "n1"}},
        {"item": {"category": "food", "sku": "n2"}},
    ]
    for segment, expected in (("a", "new-food"), ("b", "new-books")):
        X = featurized_rows(FEATURIZER, policy, {"user": {"segment": segment}}, new)
        assert policy.select(["new-books", "new-food"], X).arm_id == expected


@SETTINGS
@given(
    context=_feature_input,
    actions=st.lists(_feature_input, min_size=1, max_size=4),
    bits=st.integers(1, 12),
)
def test_hashed_forms_give_the_vectors_of_json_bit_for_bit(context, actions, bits) -> None:
    for output in ("dense", "sparse"):
        f = Featurizer(FeaturizerConfig(bits=bits, output=output))
        plain = f.featurize(context, actions)
        ctx = f.hash_features(context, ("context",))
        acts = [f.hash_features(a, ("actions", k)) for k, a in enumerate(actions)]
        dense = (lambda v: v) if output == "dense" else (lambda v: v.to_dense())
        for hashed in (
            f.featurize_hashed(ctx, acts),
            f.featurize_hashed(ctx, HashedActions.join(acts)),
        ):
            np.testing.assert_array_equal(dense(hashed.actions), dense(plain.actions))
            np.testing.assert_array_equal(dense(hashed.context), dense(plain.context))
        np.testing.assert_array_equal(
            dense(f.featurize_context(f.hash_features(context, ("context",)))),
            dense(f.featurize_context(context)),
        )


def test_rows_from_hashed_and_json_inputs_are_equal() -> None:
    policy = make("hybrid_linucb", DIM)
    hashed = [FEATURIZER.hash_features(a, ("actions", k)) for k, a in enumerate(ACTIONS)]
    np.testing.assert_array_equal(
        featurized_rows(FEATURIZER, policy, CONTEXT, [hashed[0], ACTIONS[1], hashed[2]]),
        featurized_rows(FEATURIZER, policy, CONTEXT, ACTIONS),
    )


@pytest.mark.parametrize(("name", "context_dim"), CASES)
def test_rows_from_joined_actions_equal_those_of_json(name: str, context_dim: int) -> None:
    """Every layout takes the actions' :class:`HashedActions` as it takes their JSON."""
    policy = make(name, context_dim)
    joined = HashedActions.join(
        [FEATURIZER.hash_features(a, ("actions", k)) for k, a in enumerate(ACTIONS)]
    )
    rows = featurized_rows(FEATURIZER, policy, CONTEXT, joined)
    np.testing.assert_array_equal(rows, featurized_rows(FEATURIZER, policy, CONTEXT, ACTIONS))
    assert rows.shape == (len(ACTIONS), policy.config.d)


def test_errors_name_the_json_path_and_a_wrong_dimension_is_a_config_error() -> None:
    with pytest.raises(InvalidFeatureError) as info:
        featurized_rows(
            FEATURIZER, make("linucb"), CONTEXT, [{"item": {}}, {"item": {"tags": [["x"]]}}]
        )
    assert info.value.loc == ("actions", 1, "item", "tags", 0)
    with pytest.raises(InvalidFeatureError) as info:
        featurized_rows(FEATURIZER, make("linucb"), {"user": {"age": float("nan")}}, ACTIONS)
    assert info.value.loc == ("context", "user", "age")
    with pytest.raises(ConfigError, match="rows of 33"):
        featurized_rows(FEATURIZER, bandit_core.make_policy("linucb", d=8), CONTEXT, ACTIONS)
    with pytest.raises(ConfigError, match="context_dim must be 0 or"):
        featurized_dimension("actions_context", FEATURIZER.config, 4)


def test_guardrails_name_json_features_through_the_featurizer() -> None:
    guardrails = (
        {
            "type": "feature_threshold",
            "name": "minors",
            "feature": "user.age",
            "op": "<",
            "value": 18,
            "arms": ["beer"],
        },
        {
            "type": "feature_threshold",
            "name": "mobile",
            "feature": "device.type=mobile",
            "op": "==",
            "value": 1,
            "arms": ["desktop-app"],
            "on_missing": "allow",
        },
    )
    policy = make("guardrailed_linucb", guardrails=guardrails, safe_arm="water")
    ids = ["beer", "desktop-app", "water"]
    actions = [{"item": {"id": a}} for a in ids]

    def blocked(context: dict) -> dict:
        X = featurized_rows(FEATURIZER, policy, context, actions)
        named = context_feature_values(FEATURIZER, context)
        return dict(policy.select(ids, X, features=named).guardrail.blocked)

    assert set(blocked({"user": {"age": 16}, "device": {"type": "mobile"}})) == {
        "beer",
        "desktop-app",
    }
    assert set(blocked({"user": {"age": 30}, "device": {"type": "desktop"}})) == set()
    assert set(blocked({"user": {"age": 30}, "device": {"type": "mobile"}})) == {"desktop-app"}
    # no age at all: the guardrail's on_missing (block) decides
    assert "beer" in blocked({"device": {"type": "desktop"}})


def test_a_sparse_rows_policy_gets_the_featurizers_sparse_form() -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=14))
    policy = bandit_core.make_policy("diag_linucb", d=featurizer.config.dim)
    X = featurized_rows(featurizer, policy, CONTEXT, ACTIONS)
    assert isinstance(X, SparseRows)
    expected = featurizer.featurize(CONTEXT, ACTIONS).actions
    np.testing.assert_array_equal(X.indices, expected.indices)
    np.testing.assert_array_equal(X.values, expected.values)
    ids = [f"n{k}" for k in range(len(ACTIONS))]
    decision = policy.select(ids, X)
    policy.update(decision.arm_id, X.one_row(ids.index(decision.arm_id)), 1.0)
    assert policy.policy_stats()["rewarded"] == 1.0


@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("linucb", {}),
        ("hybrid_linucb", {}),
        ("hybrid_linucb", {"context_dim": 17}),
        ("diag_linucb", {}),
    ],
)
def test_named_columns_are_the_nonzero_columns_of_the_row_the_policy_takes(
    algorithm: str, params: dict
) -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=4))
    cls = bandit_core.policy_class(algorithm)
    d = featurized_dimension(cls.FEATURE_LAYOUT, featurizer.config, params.get("context_dim", 0))
    policy = bandit_core.make_policy(algorithm, d=d, **params)
    context = {"user": {"segment": "a", "age": 3}, "device": {"type": "mobile"}}
    actions = [{"item": {"category": "food", "tags": ["x", "y"]}}, {"item": {"price": 2.5}}]
    rows = featurized_rows(featurizer, policy, context, actions)
    dense = rows.to_dense() if isinstance(rows, SparseRows) else rows
    for k, action in enumerate(actions):
        named = named_columns(featurizer, policy, context, action)
        summed = np.zeros(d)
        for _, column, value in named:
            summed[column] += value
        np.testing.assert_array_equal(summed, dense[k])
    hare = bandit_core.make_policy(
        "hare", d=featurized_dimension("context_item", featurizer.config, 0)
    )
    with pytest.raises(ConfigError, match="context_item"):
        named_columns(featurizer, hare, context, actions[0])
