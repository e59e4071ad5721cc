"""Hybrid LinUCB (Li et al. 2010, Algorithm 2; docs/algorithms.md section 8) against its
closed forms: the stacked ridge solution, the paper's width ``s`` computed naively, and
a plain one-matrix LinUCB when there is no per-arm part."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bandit_core import make_policy
from bandit_core.errors import ConfigError, InvalidInputError, UnknownArmError
from bandit_core.hybrid_linucb import HybridArmState, HybridLinUCB, HybridSharedState

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ARMS = ["a", "b", "c", "d"]


def _policy(k: int, d: int, **params) -> HybridLinUCB:
    policy = make_policy("hybrid_linucb", d=k + d, context_dim=d, **params)
    assert isinstance(policy, HybridLinUCB)
    return policy


def _parts(
    policy: HybridLinUCB, arm_id: str | None = None
) -> tuple[HybridSharedState, HybridArmState | None]:
    """The shared part and, when named and present, an arm's part, decoded from bytes."""
    names = policy.parts_for_update(arm_id) if arm_id else ["shared"]
    parts = policy.export_parts(names)
    arm = parts.get(f"arm:{arm_id}")
    return HybridSharedState.from_bytes(
        parts["shared"]
    ), None if arm is None else HybridArmState.from_bytes(arm)


def _stacked_ridge(
    k: int, d: int, lam: float, log: list[tuple[int, np.ndarray, float]]
) -> np.ndarray:
    """``[beta, theta_arm0, theta_arm1, ...]``: the ridge solution of the stacked design
    whose row for an update of arm ``i`` is ``[z, 0, .., x (block i), .., 0]``."""
    W = np.zeros((len(log), k + d * len(ARMS)))
    y = np.zeros(len(log))
    for t, (i, row, r) in enumerate(log):
        W[t, :k] = row[:k]
        W[t, k + i * d : k + (i + 1) * d] = row[k:]
        y[t] = r
    return np.linalg.solve(lam * np.eye(W.shape[1]) + W.T @ W, W.T @ y)


_updates = st.lists(
    st.tuples(st.integers(0, len(ARMS) - 1), st.integers(0, 2**32 - 1), st.floats(0.0, 1.0)),
    min_size=1,
    max_size=40,
)


@SETTINGS
@given(
    k=st.integers(1, 4),
    d=st.integers(0, 3),
    lam=st.sampled_from([0.5, 1.0, 3.0]),
    refactor_every=st.integers(1, 7),
    updates=_updates,
)
def test_parameters_equal_the_stacked_ridge_solution(k, d, lam, refactor_every, updates) -> None:
    policy = _policy(k, d, ridge_lambda=lam, refactor_every=refactor_every)
    for a in ARMS:
        policy.add_arm(a)
    log = []
    for i, seed, r in updates:
        row = np.random.default_rng(seed).uniform(-2.0, 2.0, size=k + d)
        policy.update(ARMS[i], row, r)
        log.append((i, row, r))
    solution = _stacked_ridge(k, d, lam, log)
    np.testing.assert_allclose(policy.beta, solution[:k], rtol=0, atol=1e-9)
    for i, a in enumerate(ARMS):
        np.testing.assert_allclose(
            policy.theta(a), solution[k + i * d : k + (i + 1) * d], rtol=0, atol=1e-9
        )
    shared, _ = _parts(policy)
    np.testing.assert_allclose(shared.A_inv @ shared.A, np.eye(k), rtol=0, atol=1e-9)
    assert shared.n == len(updates) and shared.reward_sum == pytest.approx(
        sum(r for _, _, r in updates)
    )


def _naive_scores(
    policy: HybridLinUCB, arm_ids: list[str], X: np.ndarray, alpha: float
) -> np.ndarray:
    """``z'beta + x'theta_a + alpha sqrt(s)`` with the paper's four-term ``s`` and fresh inverses."""
    k = policy.config.shared_dim
    out = []
    for a, row in zip(arm_ids, X, strict=True):
        shared, arm = _parts(policy, a)
        z, x = row[:k], row[k:]
        A0_inv = np.linalg.inv(shared.A)
        beta = A0_inv @ shared.b
        A_inv = np.linalg.inv(arm.A)
        theta = A_inv @ (arm.b - arm.B @ beta)
        s = (
            z @ A0_inv @ z
            - 2 * z @ A0_inv @ arm.B.T @ A_inv @ x
            + x @ A_inv @ x
            + x @ A_inv @ arm.B @ A0_inv @ arm.B.T @ A_inv @ x
        )
        out.append(z @ beta + x @ theta + alpha * np.sqrt(s))
    return np.array(out)


@pytest.mark.parametrize(("k", "d"), [(1, 1), (3, 2), (6, 4)])
def test_scores_equal_the_papers_formula_computed_naively(k: int, d: int) -> None:
    alpha = 0.8
    policy = _policy(k, d, alpha=alpha, seed=3, refactor_every=5)
    rng = np.random.default_rng(k * 10 + d)
    for _ in range(60):
        subset = sorted(
            rng.choice(ARMS, size=3, replace=False).tolist()
        )  # the stacked cache sees new lists
        X = rng.normal(size=(3, k + d))
        X[:, k:] = rng.normal(size=d)  # one context for every candidate
        dec = policy.select(subset, X, explore=False)
        by_arm = dict(zip(dec.ranking, dec.scores.tolist()))
        np.testing.assert_allclose(
            [by_arm[a] for a in subset], _naive_scores(policy, subset, X, alpha), atol=1e-9
        )
        policy.update(dec.arm_id, X[subset.index(dec.arm_id)], float(rng.integers(0, 2)))


def test_without_a_per_arm_part_it_is_one_matrix_linucb_over_z() -> None:
    k, alpha, lam = 5, 0.6, 2.0
    policy = _policy(k, 0, alpha=alpha, ridge_lambda=lam, seed=1)
    A, b = lam * np.eye(k), np.zeros(k)  # LinUCB with one matrix, computed here
    rng = np.random.default_rng(7)
    for t in range(80):
        ids = [f"item-{t}-{j}" for j in range(6)]  # a new catalog on every request
        Z = rng.normal(size=(6, k))
        theta = np.linalg.solve(A, b)
        expected = Z @ theta + alpha * np.sqrt(np.einsum("ij,ji->i", Z, np.linalg.solve(A, Z.T)))
        dec = policy.select(ids, Z)
        assert dec.state_changed == ()
        assert dec.arm_id == ids[int(np.argmax(expected))]
        np.testing.assert_allclose(dec.scores, np.sort(expected)[::-1], rtol=0, atol=1e-9)
        z, r = Z[ids.index(dec.arm_id)], float(rng.uniform())
        policy.update(dec.arm_id, z, r)
        A += np.outer(z, z)
        b += r * z
    assert policy.part_names() == ["shared"] and policy.arm_ids == ()
    assert policy.parts_for_update("any-id") == ["shared"] == policy.parts_for_select(["x", "y"])
    assert policy.theta("any-id").shape == (0,)
    np.testing.assert_allclose(policy.beta, np.linalg.solve(A, b), rtol=0, atol=1e-9)
    assert policy.policy_stats()["rewarded"] == 80


def test_a_retired_id_is_refused_without_a_per_arm_part() -> None:
    policy = _policy(2, 0)
    policy.retire_arm("gone")
    assert policy.part_names() == ["shared"]
    with pytest.raises(UnknownArmError, match="arm 'gone' was retired"):
        policy.select(["a", "gone"], np.ones((2, 2)))
    with pytest.raises(UnknownArmError, match="arm 'gone' was retired"):
        policy.update("gone", np.ones(2), 1.0)
    policy.add_arm("gone")
    assert policy.select(["a", "gone"], np.ones((2, 2))).arm_id in ("a", "gone")


def test_an_update_names_and_moves_the_shared_and_the_arm_part() -> None:
    k, d = 3, 2
    policy = _policy(k, d, seed=5)
    rng = np.random.default_rng(5)
    for _ in range(30):
        X = rng.normal(size=(len(ARMS), k + d))
        dec = policy.select(ARMS, X)
        policy.update(dec.arm_id, X[ARMS.index(dec.arm_id)], float(rng.uniform()))
    assert policy.parts_for_update("b") == ["arm:b", "shared"]
    # A store loads exactly those parts, applies the update and saves them: the result is
    # the whole policy's update.
    worker = _policy(k, d, seed=5)
    worker.import_parts(policy.export_parts(policy.parts_for_update("b")))
    x = rng.normal(size=k + d)
    worker.update("b", x, 1.0)
    policy.update("b", x, 1.0)
    assert worker.export_parts(["arm:b", "shared"]) == policy.export_parts(["arm:b", "shared"])
    clone = HybridLinUCB.from_bytes(policy.to_bytes())
    X = rng.normal(size=(len(ARMS), k + d))
    assert clone.select(ARMS, X).scores.tobytes() == policy.select(ARMS, X).scores.tobytes()


def test_an_overflowing_update_changes_nothing() -> None:
    policy = _policy(2, 2)
    policy.add_arm("a")
    policy.update("a", np.ones(4), 1.0)
    before = policy.to_bytes()
    with pytest.raises(InvalidInputError, match="overflows the ridge statistics"):
        policy.update("a", np.array([1e200, 1.0, 1e200, 1.0]), 1.0)
    assert policy.to_bytes() == before


@pytest.mark.parametrize("context_dim", [-1, 4, 5, 1.5, True])
def test_context_dim_must_leave_a_shared_feature(context_dim) -> None:
    with pytest.raises(ConfigError, match=r"context_dim must be an int in \[0, 3\], but got"):
        make_policy("hybrid_linucb", d=4, context_dim=context_dim)
    assert make_policy("hybrid_linucb", d=4, context_dim=3).config.shared_dim == 1


def test_epsilon_greedy_at_20_percent_with_alpha_0() -> None:
    """Personalizer's default: the greedy score served with probability 0.8 + 0.2 / K,
    each other arm 0.2 / K (docs/algorithms.md section 5)."""
    K, eps = 5, 0.2
    policy = _policy(3, 0, alpha=0.0, epsilon=eps, seed=9)
    rng = np.random.default_rng(9)
    explored = 0
    rounds = 2000
    for t in range(rounds):
        ids = [f"i{t}-{j}" for j in range(K)]
        Z = rng.normal(size=(K, 3))
        dec = policy.select(ids, Z)
        means = Z @ policy.beta
        tied = means == means.max()  # all tied before the first reward (beta = 0)
        expected = dict(zip(ids, eps / K + (1 - eps) * tied / tied.sum(), strict=True))
        np.testing.assert_allclose(
            dec.propensities, [expected[a] for a in dec.ranking], rtol=0, atol=1e-12
        )
        assert dec.explored or tied[ids.index(dec.arm_id)]
        explored += dec.explored
        policy.update(dec.arm_id, Z[ids.index(dec.arm_id)], float(Z[ids.index(dec.arm_id), 0] > 0))
    assert abs(explored / rounds - eps) < 4 * np.sqrt(eps * (1 - eps) / rounds)


def _storefront(seed: int):
    """Users in 3 segments, items in 4 categories; click probability by segment x
    category. A row is ``[z, x]``: z = item one-hot (4) and segment x category (12),
    x = segment one-hot (3)."""
    rng = np.random.default_rng(seed)
    taste = rng.uniform(0.05, 0.6, size=(3, 4))

    def rows(segment: int, categories: np.ndarray) -> np.ndarray:
        user = np.eye(3)[segment]
        items = np.eye(4)[categories]
        z = np.hstack([items, (user[:, None] * items[:, None, :]).reshape(len(categories), 12)])
        return np.hstack([z, np.tile(user, (len(categories), 1))])

    return rng, taste, rows


def test_a_new_arm_id_scores_sensibly_at_once_where_per_arm_linucb_cannot() -> None:
    rng, taste, rows = _storefront(2024)
    hybrid = _policy(16, 3, alpha=0.5, seed=0)
    per_arm = make_policy("linucb", d=19, alpha=0.5, seed=0)
    old = {f"old-{i}": int(rng.integers(0, 4)) for i in range(30)}
    for _ in range(1500):
        ids = rng.choice(list(old), size=8, replace=False).tolist()
        segment = int(rng.integers(0, 3))
        X = rows(segment, np.array([old[a] for a in ids]))
        for policy in (hybrid, per_arm):
            dec = policy.select(ids, X)
            clicked = float(rng.uniform() < taste[segment, old[dec.arm_id]])
            policy.update(dec.arm_id, X[ids.index(dec.arm_id)], clicked)
    # A new catalog: ids never seen, the same kinds of features; no learning from here on.
    gains = {"hybrid": [], "per_arm": [], "best": []}
    for t in range(400):
        categories = rng.integers(0, 4, size=8)
        ids = [f"new-{t}-{j}" for j in range(8)]
        segment = int(rng.integers(0, 3))
        X = rows(segment, categories)
        p = taste[segment, categories]
        for name, policy in (("hybrid", hybrid), ("per_arm", per_arm)):
            gains[name].append(p[ids.index(policy.select(ids, X, explore=False).arm_id)] - p.mean())
        gains["best"].append(p.max() - p.mean())
    lift = {name: float(np.mean(v)) for name, v in gains.items()}
    assert lift["hybrid"] > 0.8 * lift["best"]  # near the best item of every new catalog
    assert (
        abs(lift["per_arm"]) < 0.25 * lift["best"]
    )  # no better than random: nothing learned transfers
