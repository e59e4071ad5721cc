"""The JSON featurizer (bandit_core.features; docs/algorithms.md section 7)."""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bandit_core.errors import ConfigError, InvalidFeatureError, InvalidInputError
from bandit_core.features import (
    BIAS_NAME,
    BucketNames,
    FeatureLimits,
    Featurizer,
    FeaturizerConfig,
    NamedFeature,
    SparseRows,
    feature_hash,
    interaction_hash,
    sort_stably,
)

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CONTEXT = {
    "user": {
        "interest": "tech",
        "tenureYears": 2,
        "tags": ["sale", "new"],
        "address": {"city": "Paris"},
    },
    "device": {"type": "mobile", "dark": True},
    "hour": 13,
}
ACTIONS = [
    {"item": {"category": "food", "price": 25, "tags": ["vegan"]}},
    [{"item": {"category": "books", "price": 12.5}}, {"seller": {"rating": 4.5}}],
    {"item": {"category": "toys", "embedding": [0.25, 0, -1.5]}},
]


def vector(features: dict[str, float], bits: int) -> np.ndarray:
    """Closed form of section 7: each named feature's value in bucket hash & mask, plus the bias."""
    out = np.zeros((1 << bits) + 1)
    for name, value in features.items():
        out[feature_hash(name) & ((1 << bits) - 1)] += value
    out[1 << bits] = 1.0
    return out


def shuffled(value, rng: random.Random):
    """``value`` with the keys of every object in a random order (arrays keep theirs)."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


# --- the hash ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("user|interest=tech", 2636148886),
        ("item|price", 177114410),
        ("|hour", 106867215),
        # published MurmurHash3 x86_32 test vectors (seed 0)
        ("", 0),
        ("hello", 0x248BFA47),
        ("The quick brown fox jumps over the lazy dog", 0x2E4FF723),
    ],
)
def test_feature_hash_is_pinned_murmur3(name: str, expected: int) -> None:
    # Pinned values: the bucket of a name must not change across processes or releases.
    assert feature_hash(name) == expected


def test_buckets_are_pinned_in_a_fresh_process() -> None:
    # Python's own str hash is salted per process; the feature hash must not be.
    code = "from bandit_core.features import feature_hash as h; print(h('user|interest=tech') & 0x3FFFF)"
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    )
    assert int(out.stdout) == 2636148886 & 0x3FFFF


def test_interaction_hash_is_pinned_and_ordered() -> None:
    h = interaction_hash(
        np.uint32([1, 2, feature_hash("user|interest=tech")]),
        np.uint32([2, 1, feature_hash("item|price")]),
    )
    assert h.dtype == np.uint32
    assert h.tolist() == [2117216093, 232174035, 3306981360]


# --- each kind of feature ------------------------------------------------------------


def test_each_kind_of_value_maps_as_section_7_says() -> None:
    context = {
        "user": {
            "interest": "tech",  # categorical
            "tenureYears": 2,  # number
            "ratio": -0.5,
            "premium": True,  # true -> 1
            "churned": False,  # false, null and 0 -> nothing
            "coupon": None,
            "visits": 0,
            "tags": ["a", "b", "a"],  # multi-hot, repeats add up
            "vec": [0.5, 0, -2, True, None],  # positional
            "address": {"city": "Paris", "geo": {"zip": "75001"}},  # nested namespaces
            "_id": "ignored",
            "_private": {"x": 1},
            "": "empty key",
        },
        "hour": 13,  # default namespace
        "weekday": "mon",
        "flags": ["x"],
    }
    expected = {
        "user|interest=tech": 1,
        "user|tenureYears": 2,
        "user|ratio": -0.5,
        "user|premium": 1,
        "user|tags=a": 2,
        "user|tags=b": 1,
        "user|vec[0]": 0.5,
        "user|vec[2]": -2,
        "user|vec[3]": 1,
        "user.address|city=Paris": 1,
        "user.address.geo|zip=75001": 1,
        "user|=empty key": 1,
        "|hour": 13,
        "|weekday=mon": 1,
        "|flags=x": 1,
    }
    bits = 20
    got = Featurizer(FeaturizerConfig(bits=bits, output="sparse")).featurize_context(context)
    np.testing.assert_array_equal(got.to_dense()[0], vector(expected, bits))
    assert {f.name: f.value for f in Featurizer(FeaturizerConfig(bits=bits)).describe(context)} == {
        **{k: float(v) for k, v in expected.items() if k not in ("user|tags=a",)},
        "user|tags=a": 1.0,  # describe lists the two occurrences unsummed
        BIAS_NAME: 1.0,
    }


def test_a_list_of_objects_adds_up_like_one_object() -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=8))
    split = [{"user": {"a": 1, "t": "x"}}, {"user": {"a": 2}}, {"device": {"type": "m"}}]
    got = featurizer.featurize_context(split)
    np.testing.assert_array_equal(got, vector({"user|a": 3, "user|t=x": 1, "device|type=m": 1}, 8))


def test_empty_objects_give_only_the_bias() -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=4))
    for context in ({}, [], [{}], {"_x": 1, "a": None, "b": False, "c": 0, "d": [], "e": {}}):
        np.testing.assert_array_equal(featurizer.featurize_context(context), vector({}, 4))


def test_numpy_floats_are_floats_and_subclasses_of_json_types_are_taken() -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=10))

    class Label(str):
        pass

    plain = featurizer.featurize_context({"u": {"x": 1.5, "t": "a", "v": [2.0]}})
    exotic = featurizer.featurize_context(
        {Label("u"): {Label("x"): np.float64(1.5), "t": Label("a"), "v": [np.float64(2.0)]}}
    )
    np.testing.assert_array_equal(plain, exotic)
    assert np.count_nonzero(plain) == 4


# --- interactions -----------------------------------------------------------------------


def test_interactions_follow_the_outer_product_rule() -> None:
    bits = 16  # dense rows of 2**16 entries; the count below checks no collision
    mask = (1 << bits) - 1
    featurizer = Featurizer(FeaturizerConfig(bits=bits, output="sparse"))
    batch = featurizer.featurize(CONTEXT, ACTIONS)
    ctx_named = [f for f in featurizer.describe(CONTEXT) if f.name != BIAS_NAME]
    h_c = np.uint32([feature_hash(f.name) for f in ctx_named])
    v_c = np.array([f.value for f in ctx_named])
    rows = batch.actions.to_dense()
    for k, action in enumerate(ACTIONS):
        own = {}
        for obj in action if isinstance(action, list) else [action]:
            own.update(
                {
                    f.name: f.value
                    for f in featurizer.describe({}, obj)
                    if f.name != BIAS_NAME and "^" not in f.name
                }
            )
        h_a = np.uint32([feature_hash(n) for n in own])
        v_a = np.array(list(own.values()))
        expected = vector({**{f.name: f.value for f in ctx_named}, **own}, bits)
        np.add.at(
            expected,
            (interaction_hash(h_c[:, None], h_a[None, :]) & mask).astype(np.int64),
            np.outer(v_c, v_a),
        )
        np.testing.assert_allclose(rows[k], expected, rtol=0, atol=1e-12)
        assert (
            np.count_nonzero(rows[k]) == len(v_c) + len(v_a) + len(v_c) * len(v_a) + 1
        )  # no collision at 2^16


@pytest.mark.parametrize(
    ("pairs", "interacting"),
    [
        (
            [["*", "*"]],
            {
                ("user", "item"),
                ("user", "seller"),
                ("user.address", "item"),
                ("device", "item"),
                ("", "item"),
                ("", "seller"),
                ("user.address", "seller"),
                ("device", "seller"),
            },
        ),
        ([], set()),
        ([["user", "item"]], {("user", "item")}),
        ([["user*", "item"]], {("user", "item"), ("user.address", "item")}),
        ([["", "*"]], {("", "item"), ("", "seller")}),
        ([["d?vice", "*"]], set()),  # only * is a wildcard
        (
            [["*e*", "s*"], ["*e*", "s*"]],
            {("user", "seller"), ("user.address", "seller"), ("device", "seller")},
        ),
    ],
)
def test_interaction_pairs_with_wildcards(pairs, interacting) -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=20, interactions=pairs))
    named = featurizer.describe(CONTEXT, ACTIONS[1])
    seen = set()
    for f in named:
        if " ^ " in f.name:
            c, a = f.name.split(" ^ ")
            seen.add((c.split("|")[0], a.split("|")[0]))
    assert seen == interacting
    assert all(featurizer.interacts(c, a) for c, a in interacting)


def test_context_in_actions_off_leaves_only_action_features_interactions_and_bias() -> None:
    config = FeaturizerConfig(bits=20, context_in_actions=False, interactions=[])
    batch = Featurizer(config).featurize(CONTEXT, ACTIONS[:1])
    np.testing.assert_array_equal(
        batch.actions.to_dense()[0],
        vector({"item|category=food": 1, "item|price": 25, "item|tags=vegan": 1}, 20),
    )


# --- the vectorised path against the scalar reference ---------------------------------------


def describe_sum(featurizer: Featurizer, context, action) -> np.ndarray:
    """describe()'s features summed in their order (Python floats, left to right)."""
    out = [0.0] * featurizer.config.dim
    for _, bucket, value in featurizer.describe(context, action):
        out[bucket] += value
    return np.array(out)


@pytest.mark.parametrize("output", ["dense", "sparse"])
@pytest.mark.parametrize("bits", [1, 3, 8])
def test_featurize_equals_the_scalar_reference_bit_for_bit(bits: int, output: str) -> None:
    # Small spaces force collisions: sums in one bucket must still match exactly.
    featurizer = Featurizer(
        FeaturizerConfig(bits=bits, output=output, interactions=[["user*", "*"], ["", "seller"]])
    )
    assert_equals_the_reference(featurizer)


def assert_equals_the_reference(featurizer: Featurizer) -> tuple[np.ndarray, np.ndarray]:
    """Asserts that ``featurize`` on CONTEXT and ACTIONS gives describe()'s sums, bit for
    bit; returns the action rows and the context vector, dense."""
    batch = featurizer.featurize(CONTEXT, ACTIONS)
    dense = featurizer.config.output == "dense"
    rows = batch.actions if dense else batch.actions.to_dense()
    for k, action in enumerate(ACTIONS):
        np.testing.assert_array_equal(rows[k], describe_sum(featurizer, CONTEXT, action))
    context = batch.context if dense else batch.context.to_dense()[0]
    np.testing.assert_array_equal(context, describe_sum(featurizer, CONTEXT, None))
    return rows, context


# A JSON feature object: namespaces of scalars, arrays and nested objects.
_scalar = st.one_of(
    st.text(max_size=5),
    st.integers(-1000, 1000),
    st.floats(-1e6, 1e6, allow_nan=False, width=32),
    st.booleans(),
    st.none(),
)
_keys = st.text(alphabet="abcxyz_", min_size=0, max_size=4)
_leaf = st.one_of(
    _scalar,
    st.lists(st.one_of(st.text(max_size=3), st.integers(-5, 5), st.floats(-10, 10)), max_size=4),
)
_objects = st.recursive(
    st.dictionaries(_keys, _leaf, max_size=5),
    lambda inner: st.dictionaries(_keys, st.one_of(_leaf, inner), max_size=4),
    max_leaves=20,
)
_feature_input = st.one_of(_objects, st.lists(_objects, max_size=3))


@SETTINGS
@given(
    context=_feature_input,
    actions=st.lists(_feature_input, min_size=1, max_size=4),
    bits=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_any_key_order_gives_the_same_vectors_and_dense_equals_sparse(
    context, actions, bits, seed
) -> None:
    rng = random.Random(seed)
    dense_f = Featurizer(FeaturizerConfig(bits=bits, output="dense"))
    sparse_f = Featurizer(FeaturizerConfig(bits=bits, output="sparse"))
    first = dense_f.featurize(context, actions)
    again = dense_f.featurize(shuffled(context, rng), [shuffled(a, rng) for a in actions])
    np.testing.assert_array_equal(first.actions, again.actions)
    np.testing.assert_array_equal(first.context, again.context)
    sparse = sparse_f.featurize(shuffled(context, rng), [shuffled(a, rng) for a in actions])
    check_csr(sparse.actions, len(actions))
    np.testing.assert_array_equal(sparse.actions.to_dense(), first.actions)
    np.testing.assert_array_equal(sparse.context.to_dense()[0], first.context)
    for k, action in enumerate(actions):
        np.testing.assert_array_equal(first.actions[k], describe_sum(dense_f, context, action))


def check_csr(rows: SparseRows, n_rows: int) -> None:
    assert rows.shape == (n_rows, rows.dim)
    assert rows.indptr[0] == 0 and rows.indptr[-1] == len(rows.indices) == len(rows.values)
    for i in range(n_rows):
        idx, vals = rows.row(i)
        assert np.all(np.diff(idx) > 0), "indices strictly increasing within a row"
        assert np.all(vals != 0)
        assert idx[-1] == rows.dim - 1 and vals[-1] == 1.0, "the bias ends every row"


@SETTINGS
@given(keys=st.lists(st.integers(0, 40), max_size=60), widen=st.booleans())
def test_sort_stably_is_a_stable_argsort_on_both_paths(keys, widen) -> None:
    # widen: a bound so large that key * n + position would overflow int64 (the argsort path)
    arr = np.array(keys, dtype=np.int64)
    bound = 1 << 62 if widen else 41
    sorted_keys, order = sort_stably(arr, bound)
    expected = np.argsort(arr, kind="stable")
    np.testing.assert_array_equal(order, expected)
    np.testing.assert_array_equal(sorted_keys, arr[expected])


def test_featurize_does_not_change_its_input() -> None:
    context, actions = copy.deepcopy(CONTEXT), copy.deepcopy(ACTIONS)
    Featurizer(FeaturizerConfig(bits=6)).featurize(context, actions)
    assert context == CONTEXT and actions == ACTIONS


# --- errors name the path ---------------------------------------------------------------------


class Odd:
    pass


def deep(levels: int) -> dict:
    obj: dict = {"leaf": 1}
    for _ in range(levels - 1):
        obj = {"n": obj}
    return obj


_LIMITS = FeatureLimits(
    max_depth=4, max_features=10, max_string_length=8, max_array_length=5, max_abs_value=1e6
)


@pytest.mark.parametrize(
    ("context", "path", "message"),
    [
        ([{"user": {"score": math.nan}}], "context[0].user.score", "finite number"),
        ({"user": {"score": math.inf}}, "context.user.score", "finite number"),
        ({"user": {"v": [1, -math.inf]}}, "context.user.v[1]", "finite number"),
        (
            {"user": {"score": 2e6}},
            "context.user.score",
            r"magnitude at most 1e\+06, but got 2000000.0",
        ),
        ({"user": {"n": 10**400}}, "context.user.n", "an int of 1329 bits"),
        ({"user": {"s": {1, 2}}}, "context.user.s", "JSON value .* but got a set"),
        ({"user": {"b": b"x"}}, "context.user.b", "but got a bytes"),
        ({"user": {"t": (1, 2)}}, "context.user.t", "but got a tuple"),
        ({"user": {"i": np.int64(3)}}, "context.user.i", "but got a numpy.int64"),
        ({"user": {"o": Odd()}}, "context.user.o", "but got a tests.bandit_core.test_features.Odd"),
        (
            {"user": {"tags": ["a", "b", "c", ["d"]]}},
            "context.user.tags[3]",
            "in an array, but got an array",
        ),
        (
            {"user": {"tags": ["a", {"x": 1}]}},
            "context.user.tags[1]",
            "in an array, but got an object",
        ),
        ({"user": {"tags": list("abcdef")}}, "context.user.tags", "at most 5 elements, but got 6"),
        ({"user": {"name": "x" * 9}}, "context.user.name", "at most 8 characters, but got 9"),
        ({"user": {"tags": ["ok", "y" * 9]}}, "context.user.tags[1]", "at most 8 characters"),
        (
            {"user": {"k" * 9: 1}},
            "context.user.kkkkkkkkk",
            "keys of at most 8 characters, but got 9",
        ),
        (
            {"user": {"k" * 50: 1}},
            'context.user["kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk..."]',
            "but got 50",
        ),
        ({"user": {2: "x"}}, "context.user", "string keys, but got the key 2"),
        ({"user": {"a": 1, 2: "x"}}, "context.user", "string keys, but got the key 2"),
        ({"a": deep(4)}, "context.a.n.n.n", "nesting at most 4 levels"),
        (
            {"a": {"b": {"c": {"d": [1]}}}},
            "context.a.b.c.d",
            "nesting at most 4 levels",
        ),  # an array is a level
        ({"my ns": {"x y": math.nan}}, 'context["my ns"]["x y"]', "finite"),
        ({"u": {f"f{i}": 1 for i in range(11)}}, "context.u.f9", "at most 10 features"),
        (
            {"u": {"v": list(range(1, 5)), "w": list(range(1, 5)), "x": list(range(1, 5))}},
            "context.u.x[2]",
            "at most 10 features",
        ),
        ("tech", "context", "a JSON object or a list of objects, but got a string"),
        ([{"a": 1}, 3], "context[1]", "a JSON object, but got the number 3"),
        (None, "context", "but got null"),
    ],
)
def test_errors_name_the_path_of_the_offending_value(context, path, message) -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=8, limits=_LIMITS))
    with pytest.raises(InvalidFeatureError, match=message) as raised:
        featurizer.featurize(context, [{"item": {"a": 1}}])
    assert raised.value.path == path
    assert str(raised.value).startswith(f"{path}: expected ")
    with pytest.raises(InvalidFeatureError) as again:  # the same error on the context-only path
        featurizer.featurize_context(context)
    assert again.value.path == path


@pytest.mark.parametrize(
    ("actions", "path", "message"),
    [
        (
            [{"item": {"a": 1}}, {"item": {"tags": [["x"]]}}],
            "actions[1].item.tags[0]",
            "but got an array",
        ),
        (
            [{"item": {"a": 1}}, [{"x": 1}, {"item": {"p": math.nan}}]],
            "actions[1][1].item.p",
            "finite",
        ),
        ([], "actions", "a non-empty list"),
        ({"item": {"a": 1}}, "actions", "a non-empty list"),
        ("abc", "actions", "a non-empty list"),
    ],
)
def test_action_errors_name_the_action(actions, path, message) -> None:
    with pytest.raises(InvalidFeatureError, match=message) as raised:
        Featurizer(FeaturizerConfig(bits=8)).featurize({"u": {"a": 1}}, actions)
    assert raised.value.path == path


def test_errors_carry_the_path_as_components() -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=8))
    with pytest.raises(InvalidFeatureError) as raised:
        featurizer.featurize([{"u": {"my tags": ["a", ["b"]]}}], [{"i": {"a": 1}}])
    assert raised.value.loc == ("context", 0, "u", "my tags", 1)
    assert raised.value.path == 'context[0].u["my tags"][1]'
    with pytest.raises(InvalidFeatureError) as raised:
        featurizer.featurize({}, [{"i": {"a": 1}}, [{"x": 1}, {"item": {"p": math.inf}}]])
    assert raised.value.loc == ("actions", 1, 1, "item", "p")


def test_too_many_interactions_is_refused_before_any_is_computed() -> None:
    limits = FeatureLimits(max_interactions=100)
    featurizer = Featurizer(FeaturizerConfig(bits=8, limits=limits))
    context = {"u": {f"f{i}": 1 for i in range(10)}}
    featurizer.featurize(context, [{"item": {f"g{i}": 1 for i in range(10)}}])  # 100: at the limit
    with pytest.raises(
        InvalidFeatureError, match="at most 100 context x action interactions.*make 110"
    ) as raised:
        featurizer.featurize(
            context, [{"item": {f"g{i}": 1 for i in range(10)}}, {"item": {"x": 1}}]
        )
    assert raised.value.path == "actions"
    # Pairs that do not interact do not count.
    narrow = Featurizer(FeaturizerConfig(bits=8, limits=limits, interactions=[["u", "other"]]))
    narrow.featurize(context, [{"item": {f"g{i}": 1 for i in range(10)}}] * 5)


def test_very_deep_nesting_is_an_error_not_a_recursion_error() -> None:
    with pytest.raises(InvalidFeatureError, match="nesting at most 8 levels"):
        # ten times Python's recursion limit: a recursive walk would raise RecursionError
        Featurizer(FeaturizerConfig(bits=4)).featurize_context(deep(10 * sys.getrecursionlimit()))


def test_feature_error_is_an_invalid_input_error_and_pickles() -> None:
    with pytest.raises(InvalidInputError) as raised:
        Featurizer(FeaturizerConfig(bits=4)).featurize_context({"a": math.nan})
    copy_ = pickle.loads(pickle.dumps(raised.value))
    assert (
        type(copy_) is InvalidFeatureError
        and copy_.path == "context.a"
        and str(copy_) == str(raised.value)
        and copy_.loc == ("context", "a")
    )


# --- configuration ---------------------------------------------------------------------------


def test_config_round_trips_through_json() -> None:
    config = FeaturizerConfig(
        bits=12,
        interactions=[["user*", "item"], ["", "*"]],
        context_in_actions=False,
        output="dense",
        limits={"max_depth": 3, "max_abs_value": 10},
    )
    data = json.loads(json.dumps(config.to_dict()))
    assert FeaturizerConfig.from_dict(data) == config
    assert data == {
        "bits": 12,
        "interactions": [["user*", "item"], ["", "*"]],
        "context_in_actions": False,
        "output": "dense",
        "limits": {
            "max_depth": 3,
            "max_features": 1024,
            "max_string_length": 1024,
            "max_array_length": 1024,
            "max_abs_value": 10.0,
            "max_interactions": 250_000,
        },
    }


def test_config_defaults_and_auto_output() -> None:
    default = FeaturizerConfig()
    assert (default.bits, default.interactions, default.output, default.dim) == (
        18,
        (("*", "*"),),
        "sparse",
        2**18 + 1,
    )
    assert FeaturizerConfig(bits=10).output == "dense"
    assert FeaturizerConfig(bits=11).output == "sparse"
    assert FeaturizerConfig(bits=16, output="dense").output == "dense"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bits": 0}, r"bits must be an int in \[1, 30\], but got 0"),
        ({"bits": 2.5}, "bits must be an int"),
        ({"bits": True}, "bits must be an int"),
        ({"bits": 17, "output": "dense"}, "dense output needs bits <= 16, but got bits = 17"),
        ({"output": "csr"}, r"output must be one of \['auto', 'dense', 'sparse'\], but got 'csr'"),
        ({"interactions": "user,item"}, "interactions must be a list"),
        (
            {"interactions": [["user"]]},
            r"a pair of namespace patterns \[context, action\], but got \['user'\]",
        ),
        ({"interactions": [["user", 3]]}, "a pair of namespace patterns"),
        ({"context_in_actions": 1}, "context_in_actions must be a bool"),
        ({"limits": {"max_depth": 0}}, r"limits.max_depth must be a positive int, but got 0"),
        (
            {"limits": {"max_abs_value": math.inf}},
            r"limits.max_abs_value must be a finite number in \(0, 1e\+100\], but got inf",
        ),
        ({"limits": {"max_nesting": 3}}, "unknown limits config key 'max_nesting'"),
        ({"limits": 3}, "limits must be a FeatureLimits or a dict"),
    ],
)
def test_invalid_config_is_refused_with_the_field_named(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        FeaturizerConfig(**kwargs)


def test_from_dict_refuses_unknown_keys() -> None:
    with pytest.raises(ConfigError, match="unknown featurizer config key 'bit'"):
        FeaturizerConfig.from_dict({"bit": 8})
    with pytest.raises(ConfigError, match="featurizer config must be an object"):
        FeaturizerConfig.from_dict([8])


def test_featurizer_needs_a_config() -> None:
    with pytest.raises(ConfigError, match="config must be a FeaturizerConfig, but got dict"):
        Featurizer({"bits": 8})  # type: ignore[arg-type]


# --- bucket names -----------------------------------------------------------------------------


def test_bucket_names_explain_the_nonzero_buckets_of_a_vector() -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=16, output="dense"))
    names = BucketNames()
    names.observe(featurizer.describe(CONTEXT, ACTIONS[0]))
    row = featurizer.featurize(CONTEXT, ACTIONS[:1]).actions[0]
    assert set(np.flatnonzero(row).tolist()) == set(names.buckets)
    price = feature_hash("item|price") & 0xFFFF
    assert "item|price" in names.names(price)
    mixed = (
        int(
            interaction_hash(
                np.uint32([feature_hash("user|interest=tech")]),
                np.uint32([feature_hash("item|price")]),
            )[0]
        )
        & 0xFFFF
    )
    assert "user|interest=tech ^ item|price" in names.names(mixed)
    assert names.names(1 << 16) == (BIAS_NAME,)


@SETTINGS
@given(
    features=st.lists(st.tuples(st.text(max_size=6), st.integers(0, 20)), max_size=200),
    max_names=st.integers(1, 30),
    per_bucket=st.integers(1, 4),
)
def test_bucket_names_stay_bounded(features, max_names, per_bucket) -> None:
    names = BucketNames(max_names=max_names, max_names_per_bucket=per_bucket)
    names.observe(NamedFeature(n, b, 1.0) for n, b in features)
    assert names.size <= max_names
    assert all(1 <= len(v) <= per_bucket and len(set(v)) == len(v) for v in names.buckets.values())
    distinct = {(n, b) for n, b in features}
    kept = {(n, b) for b, ns in names.buckets.items() for n in ns}
    assert kept <= distinct
    assert len(kept) + names.dropped >= len(distinct)
    names.observe(NamedFeature(n, b, 1.0) for n, b in features)  # idempotent for names already held
    assert {(n, b) for b, ns in names.buckets.items() for n in ns} == kept
    back = BucketNames.from_dict(json.loads(json.dumps(names.to_dict())))
    assert back == names


def test_bucket_names_keep_the_first_names_seen() -> None:
    names = BucketNames(max_names=3, max_names_per_bucket=2)
    names.observe(
        [
            NamedFeature(n, b, 1.0)
            for n, b in [("a", 1), ("b", 1), ("c", 1), ("a", 1), ("d", 2), ("e", 3)]
        ]
    )
    assert names.buckets == {1: ["a", "b"], 2: ["d"]}
    assert names.dropped == 2  # "c" (bucket full) and "e" (map full)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"max_names": 0}, "max_names must be a positive int"),
        (
            {"max_names": 1, "buckets": {"1": ["a"], "2": ["b"]}},
            "holds 2 names, more than max_names = 1",
        ),
        (
            {"max_names_per_bucket": 1, "buckets": {"1": ["a", "b"]}},
            "bucket 1 holds 2 names, more than 1",
        ),
        ({"buckets": {"x": ["a"]}}, "bucket must be an int >= 0"),
        ({"buckets": {"1": "a"}}, "bucket 1 must map to a list of names"),
        ({"buckets": ["a"]}, "buckets must be a dict"),
        ({"names": {}}, "unknown bucket names config key 'names'"),
    ],
)
def test_bucket_names_from_dict_validates(data, message) -> None:
    with pytest.raises(ConfigError, match=message):
        BucketNames.from_dict(data)


# --- with a shared model ----------------------------------------------------------------------


def test_a_shared_model_on_featurized_json_scores_new_items_by_their_features() -> None:
    # The pipeline a policy with a featurizer runs: JSON -> featurize -> hybrid_linucb
    # (context_dim 0: one matrix over z). Users of segment s click items of category s; only
    # the user x item interactions can learn that (with interactions=[] this test fails).
    import bandit_core

    featurizer = Featurizer(FeaturizerConfig(bits=7, output="dense"))
    policy = bandit_core.make_policy("hybrid_linucb", d=featurizer.config.dim, alpha=0.5, seed=0)
    rng = np.random.default_rng(0)
    segments = ["a", "b", "c"]

    def catalog(prefix: str) -> tuple[list[str], list[dict]]:
        ids = [f"{prefix}{i}" for i in range(6)]
        return ids, [{"item": {"category": segments[i % 3], "price": 1 + i % 2}} for i in range(6)]

    ids, items = catalog("old-")
    for _ in range(600):
        segment = segments[rng.integers(3)]
        batch = featurizer.featurize({"user": {"segment": segment}}, items)
        decision = policy.select(ids, batch.actions)
        k = ids.index(decision.arm_id)
        clicked = float(items[k]["item"]["category"] == segment)
        policy.update(decision.arm_id, batch.actions[k], clicked)

    _, new_items = catalog("new-")  # ids never seen, the same kinds of features
    for segment in segments:  # the greedy choice (beta alone) is an item of the user's category
        batch = featurizer.featurize({"user": {"segment": segment}}, new_items)
        best = new_items[int(np.argmax(batch.actions @ policy.beta))]
        assert best["item"]["category"] == segment
