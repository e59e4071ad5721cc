"""LinUCB: closed-form ridge solution, Sherman-Morrison drift, the Cholesky inverse, the paper's news replay."""

from __future__ import annotations

import numpy as np
import pytest

import bandit_core
from bandit_core.evaluation import replay
from bandit_core.linear import LinearArmState, cholesky_inverse
from bandit_core.linucb import LinUCB, LinUCBConfig


def test_linucb_equals_closed_form_ridge_solution() -> None:
    rng = np.random.default_rng(1)
    d, lam, alpha = 6, 0.7, 0.9
    policy = LinUCB(LinUCBConfig(d=d, alpha=alpha, ridge_lambda=lam))
    policy.add_arm("a")
    Xs, rs = rng.normal(size=(50, d)), rng.uniform(size=50)
    for x, r in zip(Xs, rs):
        policy.update("a", x, r)
    A = lam * np.eye(d) + Xs.T @ Xs
    theta = np.linalg.solve(A, Xs.T @ rs)
    state = policy.arm_state("a")
    np.testing.assert_allclose(state.theta, theta, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state.A, A, rtol=1e-12)

    x_new = rng.normal(size=(1, d))
    dec = policy.select(["a"], x_new)
    expected = x_new[0] @ theta + alpha * np.sqrt(x_new[0] @ np.linalg.solve(A, x_new[0]))
    assert dec.scores[0] == pytest.approx(expected, rel=1e-10)
    assert dec.widths is not None
    assert dec.widths[0] == pytest.approx(
        np.sqrt(x_new[0] @ np.linalg.solve(A, x_new[0])), rel=1e-10
    )


def test_batched_scores_equal_per_arm_formula() -> None:
    rng = np.random.default_rng(2)
    d = 4
    policy = LinUCB(LinUCBConfig(d=d, alpha=1.3))
    ids = ["a", "b", "c"]
    for arm in ids:
        policy.add_arm(arm)
        for _ in range(int(rng.integers(1, 20))):
            policy.update(arm, rng.normal(size=d), float(rng.uniform()))
    X = rng.normal(size=(3, d))
    dec = policy.select(ids, X)
    for arm, score in zip(dec.ranking, dec.scores):
        s, x = policy.arm_state(arm), X[ids.index(arm)]
        assert score == pytest.approx(
            x @ s.theta + 1.3 * np.sqrt(x @ np.linalg.inv(s.A) @ x), rel=1e-9
        )


def test_sherman_morrison_inverse_stays_within_1e_9_after_1e5_updates() -> None:
    rng = np.random.default_rng(3)
    d = 10
    state = LinearArmState.prior(d, 1.0)
    xs = rng.uniform(0.0, 1.0, size=(100_000, d))
    for x in xs:
        state.add(x, 1.0, 1.0, refactor_every=1000)
    exact = np.linalg.inv(state.A)
    rel = np.linalg.norm(state.A_inv - exact) / np.linalg.norm(exact)
    assert rel < 1e-9
    assert state.n == 100_000 and state.since_refactor == 0


def test_refactor_every_triggers_a_cholesky_rederivation() -> None:
    state = LinearArmState.prior(3, 2.0)
    rng = np.random.default_rng(4)
    for i in range(1, 8):
        state.add(rng.normal(size=3), 0.5, 0.5, refactor_every=3)
        assert state.since_refactor == i % 3


@pytest.mark.parametrize("d", [1, 2, 7, 32, 64])
def test_the_cholesky_inverse_equals_numpys_inverse(d: int) -> None:
    """One matrix through LAPACK (dpotrf, dpotri) and a stack through numpy's Cholesky:
    each equals ``numpy.linalg.inv`` to 1e-9 (relative to its largest entry) and is
    exactly symmetric, on ridge Gram matrices from well to badly conditioned."""
    rng = np.random.default_rng(d)
    for scale in (1.0, 1e3):
        X = rng.normal(size=(3 * d, d)) * scale
        A = 0.5 * np.eye(d) + X.T @ X
        inverse = cholesky_inverse(A)
        want = np.linalg.inv(A)
        np.testing.assert_allclose(inverse, want, rtol=0, atol=1e-9 * np.abs(want).max())
        assert np.array_equal(inverse, inverse.T)
        stacked = cholesky_inverse(np.stack([A, 2.0 * A]))
        np.testing.assert_allclose(stacked[1], want / 2.0, rtol=0, atol=1e-9 * np.abs(want).max())


def test_the_cholesky_inverse_refuses_a_matrix_not_positive_definite() -> None:
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        cholesky_inverse(np.array([[1.0, 2.0], [2.0, 1.0]]))


@pytest.mark.parametrize(("alpha", "expected"), [(0.1, 567.0), (1.0, 424.0), (10.0, 98.0)])
def test_news_replay_reproduces_the_papers_linucb_row(news, alpha: float, expected: float) -> None:
    policy = bandit_core.make_policy("linucb", d=10, alpha=alpha, ridge_lambda=1.0, seed=0)
    result = replay(policy, news, 800)
    assert (result.matched, result.cumulative_reward) == (800, expected)


@pytest.mark.parametrize("name", ["linucb", "lnucb_ta"])
def test_overflowing_features_raise_and_leave_the_state_intact(name: str) -> None:
    policy = bandit_core.make_policy(name, d=2, seed=0)
    policy.add_arm("a")
    policy.update("a", np.array([1.0, 2.0]), 1.0)
    before = policy.to_bytes()
    with pytest.raises(bandit_core.InvalidInputError, match="overflow the ridge statistics"):
        policy.update("a", np.array([1e200, 0.0]), 1.0)
    assert policy.to_bytes() == before
    with pytest.raises(bandit_core.InvalidInputError, match=r"X\[0\] gives the non-finite score"):
        policy.select(["a"], np.array([[1e200, 1e200]]))


def test_finite_values_whose_sum_overflows_are_accepted() -> None:
    """The finiteness checks sum an array first and test entries only if the sum is not
    finite, so huge but finite statistics and features pass as before."""
    from bandit_core.linear import LinearArmState
    from bandit_core.validation import check_matrix, check_vector

    s = LinearArmState.prior(2, 1e308)  # A = 1e308 I: finite, its sum is not
    s.add(np.array([1.0, 0.0]), 1.0, 1.0, refactor_every=1000)
    np.testing.assert_allclose(s.A_inv, np.diag([1.0 / (1e308 + 1.0), 1e-308]), rtol=1e-12)
    np.testing.assert_array_equal(check_vector(np.array([1e308, 1e308]), 2), [1e308, 1e308])
    assert check_matrix(np.full((2, 2), 1e308), 2, 2).shape == (2, 2)
    with pytest.raises(bandit_core.InvalidInputError, match=r"x must be finite, but x\[1\] is nan"):
        check_vector(np.array([1e308, np.nan]), 2)
    with pytest.raises(
        bandit_core.InvalidInputError, match=r"X must be finite, but X\[1, 0\] is -inf"
    ):
        check_matrix(np.array([[1.0, 2.0], [-np.inf, 0.0]]), 2, 2)


def test_add_is_the_textbook_update_bit_for_bit() -> None:
    """LinearArmState.add computes A + x x^T, A^-1 - (A^-1 x)(A^-1 x)^T / (1 + x^T A^-1 x),
    b + target x and theta = A^-1 b exactly as the plain numpy expressions do."""
    from bandit_core.linear import LinearArmState

    rng = np.random.default_rng(11)
    s = LinearArmState.prior(5, 0.5)
    for _ in range(40):
        x, target = rng.normal(size=5), float(rng.normal())
        A, A_inv, b = s.A.copy(), s.A_inv.copy(), s.b.copy()
        s.add(x, target, 1.0, refactor_every=10**6)
        Ax = A_inv @ x
        for got, want in [
            (s.A, A + np.outer(x, x)),
            (s.A_inv, A_inv - np.outer(Ax, Ax) / (1.0 + x @ Ax)),
            (s.b, b + target * x),
            (s.theta, s.A_inv @ s.b),
        ]:
            assert got.tobytes() == want.tobytes()


def test_one_vector_sherman_morrison_matches_the_stacked_form() -> None:
    from bandit_core.linear import sherman_morrison_term

    rng = np.random.default_rng(3)
    M = rng.normal(size=(4, 6, 6))
    A_inv = np.linalg.inv(M @ np.swapaxes(M, 1, 2) + np.eye(6))
    x = rng.normal(size=(4, 6))
    stacked = sherman_morrison_term(A_inv, x)
    for k in range(4):
        one = sherman_morrison_term(A_inv[k], x[k])
        np.testing.assert_allclose(one, stacked[k], rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(one, one.T)  # symmetric, as A^-1 must stay


def test_stack_rows_follow_every_kind_of_change() -> None:
    # select scores from the policy's RidgeStack, synced from the arms update() named
    # since the last selection; after any mix of updates, cold starts, adds, retires and
    # part imports the stacks must equal the states' arrays bit for bit.
    rng = np.random.default_rng(3)
    d = 3
    policy = LinUCB(LinUCBConfig(d=d, alpha=1.0, seed=0))
    donor = LinUCB(LinUCBConfig(d=d, alpha=1.0, seed=1))
    donor.select(["a", "b", "c", "d"], rng.normal(size=(4, d)))
    for arm in ("a", "b", "c", "d"):
        donor.update(arm, rng.normal(size=d), 1.0)
    ids = ["a", "b", "c"]
    for step in range(300):
        op = rng.integers(6)
        if op == 0:
            pool = ["a", "b", "c"] + (["d"] if "d" in policy.arm_ids else [])
            ids = [str(a) for a in rng.permutation(pool)[: rng.integers(1, len(pool) + 1)]]
        elif op == 1 and "d" in policy.arm_ids:
            policy.retire_arm("d")
            ids = [a for a in ids if a != "d"] or ["a"]
        elif op == 2:
            policy.add_arm("d")
        elif op == 3:
            arm = str(rng.choice(["a", "b", "c", "d"]))
            policy.import_parts(donor.export_parts([f"arm:{arm}"]))
        else:
            known = [a for a in ids if a in policy.arm_ids]
            for arm in rng.choice(known, size=rng.integers(0, 3)) if known else []:
                policy.update(str(arm), rng.normal(size=d), float(rng.random()))
        policy.select(ids, rng.normal(size=(len(ids), d)))
        states = [policy.arm_state(a) for a in ids]
        assert np.array_equal(policy.score_cache.A_inv, np.stack([s.A_inv for s in states])), step
        assert np.array_equal(policy.score_cache.theta, np.stack([s.theta for s in states])), step


@pytest.mark.parametrize("size", [7, 8192, 8193, 20_000])
def test_all_finite_flags_one_bad_entry_at_any_size(size: int) -> None:
    """all_finite witnesses with a sum of squares (small arrays) or a sum (large ones);
    either way one NaN or infinity anywhere is caught and huge finite values pass."""
    from bandit_core.validation import _DOT_MAX, all_finite

    assert (size <= _DOT_MAX) == (size in (7, 8192))
    arr = np.full(size, 1e300)  # squares and sums overflow: the entry-wise test decides
    assert all_finite(arr) and all_finite(arr.reshape(1, -1)[:, ::-1])
    for bad in (np.nan, np.inf, -np.inf):
        for i in (0, size // 2, size - 1):
            a = np.ones(size)
            a[i] = bad
            assert not all_finite(a)
