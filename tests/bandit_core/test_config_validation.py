"""Every config field of every registered policy follows the one rule of
:mod:`bandit_core.validation`: numpy integer and real scalars are accepted and stored as
Python ``int``/``float`` (so the policy serializes), bools are not numbers, and each
error names the field, the expectation and what came."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from bandit_core import POLICIES, make_policy, policy_from_bytes
from bandit_core.errors import ConfigError

D = 4
ARMS = ["a", "b", "c"]

# field -> (an accepted numpy value and what the config stores, or None for fields that
# are not numbers; rejected values with the message they raise)
FIELDS: dict[str, tuple[tuple[Any, Any] | None, list[tuple[Any, str]]]] = {
    "d": (
        (np.int64(4), 4),
        [
            (0, "d must be a positive int, but got 0"),
            (2.5, "d must be a positive int, but got 2.5"),
            (True, "d must be a positive int, but got True"),
        ],
    ),
    "alpha": (
        (np.float64(0.5), 0.5),
        [
            (-1.0, "alpha must be a finite number >= 0, but got -1.0"),
            ("high", "alpha must be a finite number >= 0, but got 'high'"),
            (np.bool_(True), "alpha must be a finite number >= 0, but got (np.)?True"),
            (float("nan"), "alpha must be a finite number >= 0, but got nan"),
        ],
    ),
    "epsilon": (
        (np.float32(0.25), 0.25),
        [(1.5, r"epsilon must be a finite number in \[0, 1\], but got 1.5")],
    ),
    "seed": (
        (np.int64(3), 3),
        [
            (-3, "seed must be an int >= 0 or None, but got -3"),
            (True, "seed must be an int >= 0 or None, but got True"),
            (1.0, "seed must be an int >= 0 or None, but got 1.0"),
        ],
    ),
    "reward_range": (
        ((np.int64(0), np.float64(2.0)), (0.0, 2.0)),
        [
            (
                (1.0, 0.0),
                r"reward_range must be \[low, high\] with finite low < high, but got \(1.0, 0.0\)",
            ),
            (None, r"reward_range must be \[low, high\] with finite low < high, but got None"),
            (
                (False, 1.0),
                r"reward_range must be \[low, high\] with finite low < high, but got \(False",
            ),
        ],
    ),
    "ridge_lambda": (
        (np.float64(2.0), 2.0),
        [
            (0.0, "ridge_lambda must be a finite number > 0, but got 0.0"),
            (float("inf"), "ridge_lambda must be a finite number > 0, but got inf"),
        ],
    ),
    "refactor_every": (
        (np.int32(10), 10),
        [
            (0, "refactor_every must be a positive int, but got 0"),
            (10.0, "refactor_every must be a positive int, but got 10.0"),
        ],
    ),
    "theta_min": ((np.int64(2), 2), [(0, "theta_min must be a positive int, but got 0")]),
    "theta_max": ((np.int64(4), 4), [(True, "theta_max must be a positive int, but got True")]),
    "kappa": (
        (np.float64(0.75), 0.75),
        [(1.5, r"kappa must be a finite number in \[0, 1\], but got 1.5")],
    ),
    "knn_window": ((np.uint16(10), 10), [(0, "knn_window must be a positive int, but got 0")]),
    "linear_target": (
        None,
        [("rewards", r"linear_target must be one of \['reward', 'residual'\], but got 'rewards'")],
    ),
    "knn_weights": (
        None,
        [("cosine", r"knn_weights must be one of \['uniform', 'distance'\], but got 'cosine'")],
    ),
    "use_linear": ((np.bool_(False), False), [(1, "use_linear must be a bool, but got 1")]),
    "use_knn": ((np.bool_(False), False), [("yes", "use_knn must be a bool, but got 'yes'")]),
    "temporal_attention": (
        (np.bool_(False), False),
        [(0, "temporal_attention must be a bool, but got 0")],
    ),
    "guardrails": (None, [("cap", "guardrails must be a list of spec mappings, but got 'cap'")]),
    "safe_arm": (None, [("", "safe_arm must be a non-empty arm id or None, but got ''")]),
    "context_dim": (
        (np.int64(1), 1),
        [
            (-1, rf"context_dim must be an int in \[0, {D - 1}\], but got -1"),
            (D, rf"context_dim must be an int in \[0, {D - 1}\], but got {D}"),
        ],
    ),
    "heads": ((np.int64(2), 2), [(0, "heads must be a positive int, but got 0")]),
    "key_dim": ((np.int64(3), 3), [(2.0, "key_dim must be a positive int, but got 2.0")]),
    "value_dim": ((np.int64(3), 3), [(False, "value_dim must be a positive int, but got False")]),
    "out_dim": ((np.int64(2), 2), [(0, "out_dim must be a positive int or None, but got 0")]),
    "n_clusters": ((np.int64(2), 2), [(0, "n_clusters must be a positive int, but got 0")]),
    "clusters": (
        ({"a": np.int64(1), "b": 0, "c": np.int8(1)}, (("a", 1), ("b", 0), ("c", 1))),
        [
            ({"a": 9}, r"clusters\['a'\] must be an int in \[0, 3\], but got 9"),
            ({"a": True}, r"clusters\['a'\] must be an int in \[0, 3\], but got True"),
        ],
    ),
    "sigma": ((np.float64(0.5), 0.5), [(0.0, "sigma must be a finite number > 0, but got 0.0")]),
    "learning_rate": (
        (np.float64(0.05), 0.05),
        [(-0.1, "learning_rate must be a finite number > 0, but got -0.1")],
    ),
    "l2": ((np.float64(0.0), 0.0), [(-1.0, "l2 must be a finite number >= 0, but got -1.0")]),
    "grad_clip": (
        (np.float64(np.inf), float("inf")),
        [
            (0.0, "grad_clip must be a number > 0, but got 0.0"),
            (float("nan"), "grad_clip must be a number > 0, but got nan"),
        ],
    ),
    "gamma": (
        (np.float64(0.9), 0.9),
        [
            (1.0, r"gamma must be a finite number in \(0, 1\), but got 1.0"),
            (True, r"gamma must be a finite number in \(0, 1\), but got True"),
        ],
    ),
    "half_life_seconds": (
        (np.float32(30.0), 30.0),
        [(0.0, "half_life_seconds must be a finite number > 0, but got 0.0")],
    ),
    "window": (
        (np.int64(10), 10),
        [
            (0, "window must be a positive int, but got 0"),
            (2.5, "window must be a positive int, but got 2.5"),
        ],
    ),
    "window_seconds": (
        (np.float64(5.0), 5.0),
        [(-1.0, "window_seconds must be a finite number > 0, but got -1.0")],
    ),
    "fit": (None, [("ridge", r"fit must be one of \['joint', 'per_feature'\], but got 'ridge'")]),
    "loss": (
        None,
        [
            (
                "hinge",
                r"loss must be one of \('squared', 'logistic'\)|loss must be one of \['squared', 'logistic'\]",
            )
        ],
    ),
}

CASES = [
    (name, f.name) for name, cls in sorted(POLICIES.items()) for f in dataclasses.fields(cls.CONFIG)
]


def test_the_table_covers_every_config_field() -> None:
    assert {field for _, field in CASES} == set(FIELDS)


@pytest.mark.parametrize(
    ("name", "field", "value", "match"),
    [(name, field, value, match) for name, field in CASES for value, match in FIELDS[field][1]],
)
def test_an_invalid_field_is_rejected_with_a_message_naming_it(
    name: str, field: str, value: Any, match: str
) -> None:
    params = {"d": D, field: value}
    with pytest.raises(ConfigError, match=match):
        make_policy(name, **params)


@pytest.mark.parametrize(("name", "field"), [c for c in CASES if FIELDS[c[1]][0] is not None])
def test_a_numpy_scalar_is_stored_as_a_python_value_and_survives_to_bytes(
    name: str, field: str
) -> None:
    value, stored = FIELDS[field][0]  # type: ignore[misc]
    policy = make_policy(name, **{"d": D, field: value})
    got = getattr(policy.config, field)
    assert got == stored and type(got) is type(stored)
    X = np.random.default_rng(0).normal(size=(len(ARMS), D))
    X[:, 0] = 1.0  # one context column shared by every row, as HARE with context_dim=1 needs
    dec = policy.select(ARMS, X)
    policy.update(dec.arm_id, X[ARMS.index(dec.arm_id)], 1.0)
    data = policy.to_bytes()
    clone = policy_from_bytes(data)
    assert clone.config == policy.config and clone.to_bytes() == data


def test_seed_given_as_numpy_int_round_trips() -> None:
    policy = make_policy("linucb", d=D, seed=np.int64(3))
    clone = policy_from_bytes(policy.to_bytes())
    X = np.eye(3, D)
    assert clone.select(ARMS, X).arm_id == policy.select(ARMS, X).arm_id
    assert clone.to_bytes() == policy.to_bytes()


def test_an_unknown_parameter_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown parameter 'no_such_param' for linucb"):
        make_policy("linucb", d=D, no_such_param=1)
