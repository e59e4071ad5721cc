"""Interactions of three or more namespaces (bandit_core.interaction_terms; VW's
``--cubic`` and ``--interactions abc``): each term's features equal a from-scratch scalar
computation, the vectorised path equals the scalar reference bit for bit, and the config
reads and writes its terms."""

from __future__ import annotations

import itertools
from typing import Any

import mmh3
import numpy as np
import pytest

from bandit_core.errors import ConfigError, InvalidFeatureError
from bandit_core.features import Featurizer, FeaturizerConfig
from tests.bandit_core.test_features import ACTIONS, CONTEXT, assert_equals_the_reference
from tests.bandit_core.test_namespace_rules import assert_the_hashed_path_gives

BITS = 16

SMALL_CONTEXT = {"user": {"age": 2.0, "tier": "gold"}, "device": {"os": "ios"}}
SMALL_ACTIONS = [
    {"item": {"price": 3.0}, "dealer": {"id": "x"}},
    {"item": {"price": 0.5, "kind": "tea"}},
]


def _hash32(h: int, g: int) -> int:
    """The pairwise hash, written out again: fmix32(h * 0x9E3779B1 + g mod 2**32)."""
    x = (h * 0x9E3779B1 + g) % 2**32
    for shift, multiplier in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        x = ((x ^ (x >> shift)) * multiplier) % 2**32
    return x ^ (x >> 16)


def _from_scratch(
    features: list[tuple[str, float]], term: list[str], bits: int
) -> dict[int, float]:
    """The bucket sums of one row's term features: every combination of one feature per
    letter (a feature's namespace is the text before ``|``), hashed by chaining."""
    sums: dict[int, float] = {}
    per_letter = [[f for f in features if f[0].startswith(letter)] for letter in term]
    for combo in itertools.product(*per_letter):
        h = mmh3.hash(combo[0][0], 0, signed=False)
        value = combo[0][1]
        for name, v in combo[1:]:
            h = _hash32(h, mmh3.hash(name, 0, signed=False))
            value *= v
        bucket = h & ((1 << bits) - 1)
        sums[bucket] = sums.get(bucket, 0.0) + value
    return sums


ROWS = [
    [("user|age", 2.0), ("user|tier=gold", 1.0), ("device|os=ios", 1.0)]
    + [("item|price", 3.0), ("dealer|id=x", 1.0)],
    [("user|age", 2.0), ("user|tier=gold", 1.0), ("device|os=ios", 1.0)]
    + [("item|kind=tea", 1.0), ("item|price", 0.5)],
]


@pytest.mark.parametrize(
    "term",
    [
        ["u", "d", "i"],  # two context namespaces and an action one
        ["u", "i", "i"],  # an action namespace twice: every ordered combination
        ["i", "u", "d"],  # the order of the letters is the order of the chain
        ["u", "d", "i", "d"],  # four namespaces, one of them taken twice
        ["", "", ""],  # every namespace: context and action features alike
    ],
)
def test_terms_equal_a_from_scratch_scalar_computation(term: list[str]) -> None:
    patterns = [letter + "*" for letter in term]
    config = FeaturizerConfig(
        bits=BITS, output="dense", interactions=(), interaction_terms=[patterns]
    )
    plain = FeaturizerConfig(bits=BITS, output="dense", interactions=())
    rows = Featurizer(config).featurize(SMALL_CONTEXT, SMALL_ACTIONS).actions
    base = Featurizer(plain).featurize(SMALL_CONTEXT, SMALL_ACTIONS).actions
    for k in range(len(SMALL_ACTIONS)):
        expected = np.zeros(config.dim)
        for bucket, value in _from_scratch(ROWS[k], term, BITS).items():
            expected[bucket] += value
        assert np.count_nonzero(expected) > 0
        np.testing.assert_allclose(rows[k] - base[k], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("output", ["dense", "sparse"])
@pytest.mark.parametrize("bits", [3, 8])
def test_vectors_with_terms_equal_the_scalar_reference_bit_for_bit(bits: int, output: str) -> None:
    featurizer = Featurizer(
        FeaturizerConfig(
            bits=bits,
            output=output,
            interactions=[["user*", "*"]],
            interaction_terms=[["user*", "device*", "*"], ["*", "seller*", "user*", "*"]],
            ignore=["user.address*"],
            ignore_linear=["device*"],
        )
    )
    rows, _ = assert_equals_the_reference(featurizer)
    assert_the_hashed_path_gives(featurizer, rows)


def test_no_terms_leave_the_vectors_as_they_were() -> None:
    config = FeaturizerConfig(bits=BITS, output="dense", interactions=[["user*", "*"]])
    assert "interaction_terms" not in config.to_dict()
    unmatched = FeaturizerConfig(
        bits=BITS,
        output="dense",
        interactions=[["user*", "*"]],
        interaction_terms=[["nowhere*", "*", "*"]],
    )
    np.testing.assert_array_equal(
        Featurizer(config).featurize(CONTEXT, ACTIONS).actions,
        Featurizer(unmatched).featurize(CONTEXT, ACTIONS).actions,
    )


def test_too_many_term_features_are_refused_naming_the_actions() -> None:
    limits = {"max_interactions": 10}
    featurizer = Featurizer(
        FeaturizerConfig(
            bits=BITS, interactions=(), interaction_terms=[["*", "*", "*"]], limits=limits
        )
    )
    with pytest.raises(InvalidFeatureError) as caught:
        featurizer.featurize(SMALL_CONTEXT, SMALL_ACTIONS)
    assert caught.value.path == "actions"
    assert "at most 10 interactions of three or more namespaces" in str(caught.value)
    assert "make 250" in str(caught.value)  # 5**3 in each row


def test_config_writes_its_terms_and_reads_them_back() -> None:
    config = FeaturizerConfig(
        bits=BITS, interaction_terms=[["u*", "d*", "i*"], ("u*", "d*", "i*"), ["*"] * 4]
    )
    assert config.interaction_terms == (("u*", "d*", "i*"), ("*", "*", "*", "*"))
    assert config.to_dict()["interaction_terms"] == [["u*", "d*", "i*"], ["*"] * 4]
    assert FeaturizerConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    ("terms", "message"),
    [
        ("udi", "interaction_terms must be a list"),
        ([["u*", "i*"]], "three or more namespace patterns"),
        ([["u*", "d*", 3]], "three or more namespace patterns"),
        ([["u*", "d*", "x" * 257]], "three or more namespace patterns"),
    ],
)
def test_bad_terms_are_refused_with_the_field_named(terms: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        FeaturizerConfig(interaction_terms=terms)
