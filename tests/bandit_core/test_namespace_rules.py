"""The featurizer's namespace rules (bandit_core.namespace_rules; VW's ``--ignore``,
``--keep``, ``--ignore_linear``): which features and interactions the vectors hold."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bandit_core.errors import ConfigError
from bandit_core.features import Featurizer, FeaturizerConfig, feature_hash
from tests.bandit_core.test_features import ACTIONS, CONTEXT, assert_equals_the_reference

BITS = 16  # few collisions: a feature's bucket says which feature it is


def featurize(context: Any, actions: list[Any], **config: Any) -> Any:
    return Featurizer(FeaturizerConfig(bits=BITS, output="dense", **config)).featurize(
        context, actions
    )


def without(obj: Any, *namespaces: str) -> Any:
    """A feature object (or list of them) without these top-level keys."""
    if isinstance(obj, list):
        return [without(o, *namespaces) for o in obj]
    return {k: v for k, v in obj.items() if k not in namespaces}


def test_ignore_gives_the_vectors_of_the_input_without_those_namespaces() -> None:
    for ignore, context_keys, action_keys in (
        (["d*"], ("device",), ()),  # a context namespace
        (["s*"], (), ("seller",)),  # an action namespace
        (["u*", "i*"], ("user",), ("item",)),  # user.address starts with u too
    ):
        filtered = featurize(CONTEXT, ACTIONS, ignore=ignore)
        plain = featurize(without(CONTEXT, *context_keys), without(ACTIONS, *action_keys))
        np.testing.assert_array_equal(filtered.actions, plain.actions)
        np.testing.assert_array_equal(filtered.context, plain.context)
    ignored = Featurizer(FeaturizerConfig(bits=BITS, ignore=["d*"])).describe(CONTEXT, ACTIONS[0])
    assert not [f.name for f in ignored if "device|" in f.name]


def test_keep_reads_only_those_namespaces_and_wins_over_ignore() -> None:
    filtered = featurize(CONTEXT, ACTIONS, keep=["u*", "i*"])
    # "hour" is in the default namespace "", "device" and "seller" start with neither
    plain = featurize(without(CONTEXT, "device", "hour"), without(ACTIONS, "seller"))
    np.testing.assert_array_equal(filtered.actions, plain.actions)
    both = featurize(CONTEXT, ACTIONS, keep=["u*", "i*"], ignore=["u*"])
    np.testing.assert_array_equal(both.actions, plain.actions)
    everything = featurize(CONTEXT, ACTIONS, keep=["*"])
    np.testing.assert_array_equal(everything.actions, featurize(CONTEXT, ACTIONS).actions)


def test_ignoring_every_namespace_leaves_the_bias() -> None:
    batch = featurize(CONTEXT, ACTIONS, ignore=["*"])
    bias = np.zeros((len(ACTIONS), (1 << BITS) + 1))
    bias[:, 1 << BITS] = 1.0
    np.testing.assert_array_equal(batch.actions, bias)


def test_ignore_linear_drops_the_own_features_and_keeps_the_interactions() -> None:
    full = featurize(CONTEXT, ACTIONS)
    filtered = featurize(CONTEXT, ACTIONS, ignore_linear=["u*"])
    # closed form: every row loses exactly the user's own features, each in its bucket
    user = Featurizer(FeaturizerConfig(bits=BITS)).describe({"user": CONTEXT["user"]}, None)[
        :-1
    ]  # the bias aside
    own = np.zeros((1 << BITS) + 1)
    for name, bucket, value in user:
        assert name.startswith("user")
        assert bucket == feature_hash(name) & ((1 << BITS) - 1)
        own[bucket] += value
    np.testing.assert_allclose(filtered.actions, full.actions - own[None, :], rtol=0, atol=1e-12)
    np.testing.assert_allclose(filtered.context, full.context - own, rtol=0, atol=1e-12)
    names = [
        f.name
        for f in Featurizer(FeaturizerConfig(bits=BITS, ignore_linear=["u*"])).describe(
            CONTEXT, ACTIONS[0]
        )
    ]
    assert "user|interest=tech" not in names
    assert "user|interest=tech ^ item|category=food" in names
    assert "device|type=mobile" in names


@pytest.mark.parametrize("output", ["dense", "sparse"])
@pytest.mark.parametrize("bits", [3, 8])
def test_filtered_vectors_equal_the_scalar_reference_bit_for_bit(bits: int, output: str) -> None:
    featurizer = Featurizer(
        FeaturizerConfig(
            bits=bits,
            output=output,
            interactions=[["user*", "*"], ["", "seller"]],
            ignore=["d*"],
            ignore_linear=["u*", "s*"],
        )
    )
    rows, context = assert_equals_the_reference(featurizer)
    single = featurizer.featurize_context(CONTEXT)
    np.testing.assert_array_equal(single if output == "dense" else single.to_dense()[0], context)
    assert_the_hashed_path_gives(featurizer, rows)


def assert_the_hashed_path_gives(featurizer: Featurizer, rows: np.ndarray) -> None:
    """Asserts that ``featurize_hashed`` on CONTEXT and ACTIONS gives these dense rows."""
    hashed = featurizer.featurize_hashed(
        featurizer.hash_features(CONTEXT, ("context",)),
        [featurizer.hash_features(a) for a in ACTIONS],
    )
    dense = featurizer.config.output == "dense"
    np.testing.assert_array_equal(hashed.actions if dense else hashed.actions.to_dense(), rows)


def test_config_writes_the_rules_only_when_given_and_reads_them_back() -> None:
    assert "ignore" not in FeaturizerConfig(bits=8).to_dict()
    config = FeaturizerConfig(bits=8, ignore=["d*", "d*"], keep=["u*"], ignore_linear=["i*"])
    written = config.to_dict()
    assert (written["ignore"], written["keep"], written["ignore_linear"]) == (
        ["d*"],
        ["u*"],
        ["i*"],
    )
    assert FeaturizerConfig.from_dict(written) == config


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ignore": "d*"}, "ignore must be a list of namespace patterns"),
        ({"keep": [3]}, "each keep entry must be a namespace pattern"),
        ({"ignore_linear": ["x" * 257]}, "each ignore_linear entry must be a namespace pattern"),
    ],
)
def test_bad_rules_are_refused_with_the_field_named(kwargs: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FeaturizerConfig(bits=8, **kwargs)
