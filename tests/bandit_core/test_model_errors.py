"""Who a non-finite score blames (issue 16, item 2): features too large for float64 are
the caller's InvalidInputError; a non-finite score from representable features is the
model's ModelError. And HARE without a context never contracts over its empty axis."""

from __future__ import annotations

import numpy as np
import pytest

from bandit_core import InvalidInputError, ModelError, make_policy
from bandit_core.hare import HARE, HAREConfig, queries
from bandit_core.linear import LinearArmState


def test_a_non_finite_state_is_a_model_error_naming_the_arm() -> None:
    policy = make_policy("linucb", d=2, seed=0)
    broken = LinearArmState.prior(2, 1.0)
    broken.theta[:] = np.nan  # e.g. a state written by a faulty release
    policy.import_parts({"arm:b": broken.to_bytes()})
    with pytest.raises(ModelError, match=r"linucb produced the non-finite score nan for arm 'b'"):
        policy.select(["a", "b"], np.array([[1.0, 0.0], [0.0, 1.0]]))


def test_features_whose_square_overflows_still_blame_the_input() -> None:
    policy = make_policy("linucb", d=2, seed=0)
    with pytest.raises(InvalidInputError, match="overflow float64"):
        policy.select(["a"], np.array([[2e154, 0.0]]))  # (2e154)^2 overflows
    with pytest.raises(ModelError):
        broken = LinearArmState.prior(2, 1.0)
        broken.A_inv[:] = np.inf
        policy.import_parts({"arm:a": broken.to_bytes()})
        policy.select(["a"], np.array([[1e150, 0.0]]))  # representable: the state is at fault


def test_hare_queries_without_context_are_exactly_the_user_term_plus_bias() -> None:
    policy = HARE(HAREConfig(d=3, heads=2, key_dim=4, seed=0))
    policy.select(["a", "b"], np.eye(3)[:2])  # creates the shared part
    sh = HARE.SHARED_STATE.from_bytes(policy.export_parts(["shared"])["shared"])
    U = np.random.default_rng(0).normal(size=(5, 3))
    expected = np.einsum("hkd,bd->bhk", sh.W_Qu, U) + sh.b_Q
    assert sh.W_Qx.shape == (2, 4, 0)
    assert queries(sh, np.empty((5, 0)), U).tobytes() == expected.tobytes()


@pytest.mark.parametrize("seed", range(40))
def test_hare_without_context_serves_finite_scores_from_the_first_request(seed: int) -> None:
    policy = make_policy("hare", d=3, seed=seed)
    X = np.random.default_rng(seed).random((3, 3))
    dec = policy.select(["a", "b", "c"], X, user_id="u")
    assert np.isfinite(dec.scores).all() and np.isfinite(dec.extras["z"]).all()
    policy.update(dec.arm_id, X[["a", "b", "c"].index(dec.arm_id)], 1.0, user_id="u")
    history = policy.fit_projections(
        np.empty((4, 0)), ["u", None, "u", "v"], X[[0, 1, 2, 0]], [1.0, 0.0, 1.0, 0.0], epochs=2
    )
    assert np.isfinite(history).all()
