"""Hypothesis properties: state round trips, input validation, Sherman-Morrison, seeding."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bandit_core import POLICIES, make_policy, policy_from_bytes
from bandit_core.errors import InvalidInputError, StateFormatError
from bandit_core.linear import LinearArmState
from bandit_core.state import MAGIC, ArrayState, pack, unpack
from bandit_core.validation import check_matrix, check_vector

NAMES = sorted(POLICIES)
D = 3
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclasses.dataclass
class _Demo(ArrayState):
    KIND: ClassVar[str] = "demo"
    a: np.ndarray
    b: np.ndarray
    n: int
    total: float
    label: str
    flag: bool


_dtypes = st.sampled_from([np.float64, np.float32, np.int64, np.uint8, np.bool_])
_arrays = _dtypes.flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
)


@SETTINGS
@given(
    a=_arrays,
    b=_arrays,
    n=st.integers(-(2**62), 2**62),
    total=st.floats(allow_nan=False, allow_infinity=False),
    label=st.text(max_size=20),
    flag=st.booleans(),
)
def test_array_state_round_trip_is_exact(a, b, n, total, label, flag) -> None:
    state = _Demo(a=a, b=b, n=n, total=total, label=label, flag=flag)
    data = state.to_bytes()
    back = _Demo.from_bytes(data)
    for name in ("a", "b"):
        orig, got = getattr(state, name), getattr(back, name)
        assert got.dtype == orig.dtype and got.shape == orig.shape
        assert got.tobytes() == orig.tobytes()  # bit-identical, NaN payloads included
    assert (back.n, back.total, back.label, back.flag) == (n, total, label, flag)
    assert back.to_bytes() == data


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_state_format_error_only(blob: bytes) -> None:
    for data in (blob, MAGIC + blob):
        try:
            unpack(data)
        except StateFormatError:
            pass


@SETTINGS
@given(data=st.data())
def test_truncated_state_raises_state_format_error(data) -> None:
    blob = pack("demo", {"n": 1}, {"x": np.arange(6.0).reshape(2, 3)})
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(StateFormatError):
        unpack(blob[:cut])


_ids = st.lists(st.sampled_from(list("abcdefgh")), min_size=1, max_size=6, unique=True)
_finite = st.floats(-1e3, 1e3, allow_nan=False)


@SETTINGS
@given(
    name=st.sampled_from(NAMES),
    seed=st.integers(0, 2**32),
    epsilon=st.sampled_from([0.0, 0.25]),
    steps=st.lists(
        st.tuples(_ids, st.floats(0.0, 1.0), st.integers(0, 2**16)), min_size=1, max_size=8
    ),
)
def test_policy_round_trip_gives_identical_later_decisions(name, seed, epsilon, steps) -> None:
    policy = make_policy(name, d=D, seed=seed, epsilon=epsilon)
    for ids, reward, xseed in steps:
        X = np.random.default_rng(xseed).normal(size=(len(ids), D))
        dec = policy.select(ids, X)
        policy.update(dec.arm_id, X[ids.index(dec.arm_id)], reward)
    data = policy.to_bytes()
    clone = policy_from_bytes(data)
    assert clone.to_bytes() == data
    X = np.random.default_rng(seed).normal(size=(3, D))
    da, db = policy.select(["a", "b", "z"], X), clone.select(["a", "b", "z"], X)
    assert (da.arm_id, da.ranking, da.explored) == (db.arm_id, db.ranking, db.explored)
    assert da.scores.tobytes() == db.scores.tobytes()


@SETTINGS
@given(
    name=st.sampled_from(NAMES),
    seed=st.integers(0, 2**32),
    X=hnp.arrays(np.float64, st.tuples(st.integers(1, 6), st.just(D)), elements=_finite),
)
def test_same_seed_same_decision(name, seed, X) -> None:
    ids = [f"arm{i}" for i in range(len(X))]
    da = make_policy(name, d=D, seed=seed, epsilon=0.3).select(ids, X)
    db = make_policy(name, d=D, seed=seed, epsilon=0.3).select(ids, X)
    assert (da.arm_id, da.ranking, da.explored) == (db.arm_id, db.ranking, db.explored)
    np.testing.assert_array_equal(da.propensities, db.propensities)


@SETTINGS
@given(
    X=hnp.arrays(np.float64, st.tuples(st.integers(1, 5), st.just(D)), elements=_finite),
    where=st.data(),
    bad=st.sampled_from([np.nan, np.inf, -np.inf]),
)
def test_non_finite_input_raises_invalid_input_error(X, where, bad) -> None:
    i = where.draw(st.integers(0, X.shape[0] - 1))
    j = where.draw(st.integers(0, D - 1))
    X[i, j] = bad
    with pytest.raises(InvalidInputError, match=rf"X must be finite, but X\[{i}, {j}\]"):
        check_matrix(X, X.shape[0], D)
    with pytest.raises(InvalidInputError, match=rf"x must be finite, but x\[{j}\]"):
        check_vector(X[i], D)
    policy = make_policy("linucb", d=D)
    with pytest.raises(InvalidInputError, match="X must be finite"):
        policy.select([f"a{k}" for k in range(X.shape[0])], X)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), rows=st.integers(1, 5))
def test_mis_shaped_input_raises_invalid_input_error(shape, rows) -> None:
    arr = np.zeros(shape)
    if shape != (rows, D):
        with pytest.raises(
            InvalidInputError, match=rf"X must have shape \(K, d\) = \({rows}, {D}\)"
        ):
            check_matrix(arr, rows, D)
    if shape != (D,):
        with pytest.raises(InvalidInputError, match=rf"x must have shape \({D},\)"):
            check_vector(arr, D)


_junk = st.recursive(
    st.one_of(
        st.none(),
        st.text(max_size=3),
        st.complex_numbers(),
        st.floats(),
        st.integers(),
        st.booleans(),
    ),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=12,
)


@SETTINGS
@given(value=_junk)
def test_arbitrary_python_values_never_raise_a_numpy_error(value) -> None:
    for call in (lambda: check_matrix(value, 2, 2), lambda: check_vector(value, 2)):
        try:
            out = call()
        except InvalidInputError:
            continue
        assert out.dtype == np.float64 and np.isfinite(out).all()


@SETTINGS
@given(
    xs=hnp.arrays(
        np.float64, st.tuples(st.integers(1, 40), st.just(5)), elements=st.floats(-10, 10)
    ),
    lam=st.floats(0.1, 10.0),
)
def test_sherman_morrison_equals_the_inverse(xs, lam) -> None:
    state = LinearArmState.prior(5, lam)
    for x in xs:
        state.add(x, 1.0, 1.0, refactor_every=10**9)  # no refactor: pure Sherman-Morrison
    exact = np.linalg.inv(lam * np.eye(5) + xs.T @ xs)
    assert np.linalg.norm(state.A_inv - exact) <= 1e-9 * np.linalg.norm(exact)
