"""Feature importance: the linear weights every linear policy exposes, the ranking by
``|w_i| * E|x_i - mean_i|`` against its closed form, and a model trained where one
feature matters and another is ignored ranking them by that."""

from __future__ import annotations

import numpy as np
import pytest

import bandit_core
from bandit_core.errors import InvalidInputError
from bandit_core.features import BucketNames, Featurizer, FeaturizerConfig, SparseRows
from bandit_core.importance import FeatureWeights, column_statistics, feature_importance


def test_importance_is_mean_abs_weight_times_mean_abs_deviation() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4)) * np.array([1.0, 3.0, 0.5, 0.0])  # column 3 never varies
    X[:, 3] = 1.0
    W = np.array([[0.5, -0.2, 2.0, 9.0], [-1.5, 0.0, 1.0, 9.0]])
    weights = FeatureWeights(np.arange(4), W, rewards=np.array([3.0, 1.0]))
    ranked = feature_importance(weights, X)
    mad = np.abs(X - X.mean(axis=0)).mean(axis=0)
    mean_abs = 0.75 * np.abs(W[0]) + 0.25 * np.abs(W[1])
    expected = mean_abs * mad
    np.testing.assert_allclose(ranked.importance, np.sort(expected)[::-1], rtol=1e-12)
    np.testing.assert_array_equal(ranked.columns, np.argsort(-expected, kind="stable"))
    np.testing.assert_allclose(
        ranked.weight, (0.75 * W[0] + 0.25 * W[1])[ranked.columns], rtol=1e-12
    )
    assert ranked.columns[-1] == 3 and ranked.importance[-1] == 0.0  # a constant moves no score
    assert ranked.n_rows == 50 and ranked.top(2).columns.tolist() == ranked.columns[:2].tolist()


def test_a_one_hot_feature_present_in_a_share_p_deviates_by_2p_1_minus_p() -> None:
    X = np.zeros((10, 2))
    X[:3, 0] = 1.0  # p = 0.3
    X[:, 1] = 1.0
    mean, deviation = column_statistics(np.array([0, 1]), X)
    assert mean.tolist() == pytest.approx([0.3, 1.0]) and deviation.tolist() == pytest.approx(
        [0.42, 0.0]
    )


def test_sparse_and_dense_rows_give_the_same_statistics() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 12)) * (rng.random((30, 12)) < 0.3)
    columns = np.array([0, 2, 5, 11])
    dense = column_statistics(columns, X)
    sparse = column_statistics(columns, SparseRows.from_dense(X))
    for a, b in zip(dense, sparse, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_without_rows_the_ranking_is_by_weight_magnitude() -> None:
    weights = FeatureWeights(np.array([2, 7, 9]), np.array([[0.1, -3.0, 1.0]]), np.array([5.0]))
    ranked = feature_importance(weights)
    assert ranked.columns.tolist() == [7, 9, 2] and ranked.n_rows == 0
    assert ranked.importance.tolist() == [3.0, 1.0, 0.1] and ranked.deviation.tolist() == [1.0] * 3


def test_bad_weights_and_rows_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="strictly increasing"):
        FeatureWeights(np.array([3, 1]), np.zeros((1, 2)), np.zeros(1))
    with pytest.raises(InvalidInputError, match="weights"):
        FeatureWeights(np.arange(2), np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(InvalidInputError, match="reach column 4"):
        feature_importance(
            FeatureWeights(np.arange(5), np.ones((1, 5)), np.ones(1)), np.ones((3, 4))
        )


def _ridge(rows: list[np.ndarray], rewards: list[float], d: int) -> np.ndarray:
    Z = np.array(rows).reshape(len(rows), d)
    return np.linalg.solve(np.eye(d) + Z.T @ Z, Z.T @ np.array(rewards))


def test_linear_policies_expose_their_ridge_weights() -> None:
    rng = np.random.default_rng(2)
    d = 4
    linucb = bandit_core.make_policy("linucb", d=d)
    diag = bandit_core.make_policy("diag_linucb", d=d)
    shared = bandit_core.make_policy("hybrid_linucb", d=d)
    linucb.add_arm("a")
    linucb.add_arm("b")
    seen: dict[str, tuple[list[np.ndarray], list[float]]] = {"a": ([], []), "b": ([], [])}
    for t in range(30):
        arm = "ab"[t % 3 == 0]
        x, r = rng.normal(size=d), float(rng.random())
        for p in (linucb, diag, shared):
            p.update(arm, x, r)
        seen[arm][0].append(x)
        seen[arm][1].append(r)
    w = linucb.feature_weights()
    assert w.columns.tolist() == list(range(d)) and w.rewards.tolist() == [20.0, 10.0]
    np.testing.assert_allclose(w.weights, [_ridge(*seen["a"], d), _ridge(*seen["b"], d)], rtol=1e-9)
    every = (seen["a"][0] + seen["b"][0], seen["a"][1] + seen["b"][1])
    w = shared.feature_weights()  # context_dim 0: one row, beta
    assert w.rewards.tolist() == [30.0]
    np.testing.assert_allclose(w.weights[0], _ridge(*every, d), rtol=1e-9)
    w = diag.feature_weights()
    assert w.columns.tolist() == list(range(d)) and w.rewards.tolist() == [30.0]
    np.testing.assert_array_equal(w.weights[0], diag.weights(np.arange(d)))
    assert bandit_core.make_policy("random", d=d).feature_weights() is None


def test_hybrid_rows_are_beta_then_each_arms_theta() -> None:
    rng = np.random.default_rng(3)
    p = bandit_core.make_policy("hybrid_linucb", d=5, context_dim=2)
    p.add_arm("a")
    p.add_arm("b")
    for t in range(12):
        p.update("ab"[t % 2], rng.normal(size=5), float(rng.random()))
    w = p.feature_weights()
    assert w.rewards.tolist() == [6.0, 6.0]
    for row, arm in zip(w.weights, "ab", strict=True):
        np.testing.assert_array_equal(row, np.concatenate([p.beta, p.theta(arm)]))


@pytest.mark.parametrize(
    ("algorithm", "params", "per_arm"),
    [
        ("linucb", {}, True),
        ("guardrailed_linucb", {}, True),
        ("diag_linucb", {}, False),
        ("hybrid_linucb", {"context_dim": 2}, True),
        ("hybrid_linucb", {"context_dim": 0}, False),
    ],
)
def test_an_arms_weights_times_its_row_sum_to_the_mean_of_its_score(
    algorithm: str, params: dict, per_arm: bool
) -> None:
    """``arm_weights(a) . x_a`` is the mean the score adds ``alpha * width`` to, for
    every candidate of a selection: the per-column products are the score's parts. A
    per-arm model refuses an arm it does not know; a shared one's weights are every
    arm's."""
    rng = np.random.default_rng(11)
    d, alpha = 5, 0.7
    p = bandit_core.make_policy(algorithm, d=d, alpha=alpha, **params)
    for arm in "abc":
        p.add_arm(arm)
    for t in range(40):
        p.update("abc"[t % 3], rng.normal(size=d), float(rng.random()))
    X = rng.normal(size=(3, d))
    decision = p.select(["a", "b", "c"], X, explore=False)
    assert decision.widths is not None
    rows = dict(zip("abc", X, strict=True))
    for arm, score, width in zip(decision.ranking, decision.scores, decision.widths, strict=True):
        w = p.arm_weights(arm)
        assert w is not None and w.weights.shape == (1, len(w.columns))
        mean = float(w.weights[0] @ rows[arm][w.columns])
        assert mean == pytest.approx(score - alpha * width, rel=1e-9, abs=1e-9)
    if per_arm:
        with pytest.raises(bandit_core.errors.UnknownArmError):
            p.arm_weights("never-added")
    else:
        unknown, known = p.arm_weights("never-added"), p.arm_weights("a")
        assert unknown is not None and known is not None
        np.testing.assert_array_equal(unknown.weights, known.weights)
    assert bandit_core.make_policy("random", d=d).arm_weights("a") is None


def _trained_on_favourites(
    policy_name: str, featurizer: Featurizer, rounds: int, seed: int, **params
):
    """A shop where a shopper clicks (Bernoulli 0.7) only items of the segment's favourite
    category (0.1 otherwise), and a session flag, sent with half the requests, changes
    nothing. Returns the policy, the rows of the last 200 rounds and their names."""
    favourite = {"student": "books", "parent": "toys", "foodie": "food"}
    categories = ["books", "toys", "food"]
    rng = np.random.default_rng(seed)
    policy = bandit_core.make_policy(policy_name, d=featurizer.config.dim, seed=seed, **params)
    names, rows = BucketNames(), []
    for t in range(rounds):
        segment = list(favourite)[rng.integers(3)]
        context = {"user": {"segment": segment}, "session": {"flag": bool(rng.integers(2))}}
        actions = [{"item": {"category": c}} for c in categories]
        X = featurizer.featurize(context, actions).actions
        k = categories.index(policy.select(categories, X).arm_id)
        policy.update(
            categories[k],
            X[k],
            float(rng.random() < (0.7 if categories[k] == favourite[segment] else 0.1)),
        )
        if t >= rounds - 200:
            rows.append(X)
            for action in actions:
                names.observe(featurizer.describe(context, action))
    return policy, np.vstack(rows), names


@pytest.mark.parametrize("seed", [0, 1])
def test_a_trained_shared_model_ranks_the_feature_that_matters_above_the_ignored_one(
    seed: int,
) -> None:
    featurizer = Featurizer(FeaturizerConfig(bits=8))
    policy, rows, names = _trained_on_favourites(
        "hybrid_linucb", featurizer, 1500, seed, alpha=0.0, epsilon=0.2
    )
    ranked = feature_importance(policy.feature_weights(), rows)
    by_name = {names.names(int(c)): i for i, c in enumerate(ranked.columns)}
    rank = {n[0]: i for n, i in by_name.items() if len(n) == 1}  # buckets without a collision
    matters = [
        f"user|segment={s} ^ item|category={c}"
        for s, c in (("student", "books"), ("parent", "toys"), ("foodie", "food"))
    ]
    ignored = [n for n in rank if n.startswith("session|")]
    assert all(m in rank for m in matters) and len(ignored) >= 3  # collision-free at bits 8
    assert max(rank[m] for m in matters) < min(rank[n] for n in ignored)
    top = ranked.importance[[rank[m] for m in matters]]
    assert top.min() > 3 * ranked.importance[[rank[n] for n in ignored]].max()
