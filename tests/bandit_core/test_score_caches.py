"""The caches behind fast selection (RidgeStack, LNUCB-TA's stack and KnnMemory) never
change a decision: a policy that has scored before decides bit-identically to a fresh
copy rebuilt from its bytes (empty caches, same RNG state), through updates, cold
starts, retirements, imported parts and changing candidate lists; the kNN search
matches a brute-force sort by (distance, age) exactly, ties included."""

from __future__ import annotations

import numpy as np
import pytest

import bandit_core
from bandit_core.knn_memory import LNUCBTAArmState, knn_estimates

GUARDS = {
    "guardrails": (
        {"type": "exposure_cap", "max_share": 0.3, "window": 20},
        {"type": "min_estimate", "min_pulls": 3, "min_value": 0.05},
    )
}
CASES = [
    ("linucb", {}),
    ("linucb", {"epsilon": 0.2}),
    ("guardrailed_linucb", GUARDS),
    ("lnucb_ta", {}),
    ("lnucb_ta", {"knn_weights": "distance", "theta_max": 9, "knn_window": 6}),
    ("lnucb_ta", {"linear_target": "residual", "epsilon": 0.3}),
    ("lnucb_ta", {"temporal_attention": False, "use_linear": False}),
]


def _same(a: bandit_core.Decision, b: bandit_core.Decision) -> None:
    assert (a.arm_id, a.ranking, a.explored, a.state_changed) == (
        b.arm_id,
        b.ranking,
        b.explored,
        b.state_changed,
    )
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.propensities, b.propensities)
    if a.widths is not None:
        np.testing.assert_array_equal(a.widths, b.widths)


@pytest.mark.parametrize(
    ("name", "params"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
def test_cached_scoring_decides_like_a_fresh_copy(name: str, params: dict) -> None:
    d, rng = 4, np.random.default_rng(7)
    policy = bandit_core.make_policy(name, d=d, seed=1, **params)
    pool = [f"a{i}" for i in range(9)]
    for t in range(160):
        ids = (
            pool[:6]
            if t % 3
            else list(rng.choice(pool, size=int(rng.integers(1, 9)), replace=False))
        )
        X = np.round(rng.normal(size=(len(ids), d)))  # coarse values: tied distances and scores
        fresh = type(policy).from_bytes(policy.to_bytes())
        dec = policy.select(ids, X)
        _same(dec, fresh.select(ids, X))
        j = ids.index(dec.arm_id)
        policy.update(dec.arm_id, X[j], float(rng.random() < 0.5))
        if t == 60:
            policy.retire_arm(pool[0])
            policy.add_arm(pool[0])
        if t == 90:  # replace an arm's state from outside, as a store does
            other = bandit_core.make_policy(name, d=d, seed=2, **params)
            other.add_arm(pool[1])
            other.update(pool[1], np.ones(d), 1.0)
            policy.import_parts(other.export_parts([f"arm:{pool[1]}"]))


def _brute(
    states: list[LNUCBTAArmState], X: np.ndarray, ks: np.ndarray, weights: str
) -> np.ndarray:
    out = np.zeros(len(states))
    for i, (s, x, k) in enumerate(zip(states, X, ks)):
        m = len(s.r_mem)
        if m < k:
            continue
        age = (s.head - 1 - np.arange(m)) % m
        dist = np.sqrt(((s.X_mem - x) ** 2).sum(1))
        nearest = sorted(range(m), key=lambda p: (dist[p], age[p]))[:k]
        if weights == "uniform":
            out[i] = s.r_mem[nearest].mean()
            continue
        dn = dist[nearest]
        w = (dn == 0).astype(float) if (dn == 0).any() else 1.0 / dn
        out[i] = (w * s.r_mem[nearest]).sum() / w.sum()
    return out


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("seed", range(5))
def test_knn_search_matches_a_sort_by_distance_then_age(weights: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    states = []
    for _ in range(6):
        s = LNUCBTAArmState.prior(2, 1.0)
        for _ in range(int(rng.integers(0, 15))):  # windows of 5: some rings wrap
            s.remember(rng.integers(0, 3, 2).astype(float), float(rng.random()), window=5)
        states.append(s)
    X = rng.integers(0, 3, (6, 2)).astype(float)
    ks = rng.integers(1, 6, 6)
    np.testing.assert_allclose(
        knn_estimates(states, X, ks, weights), _brute(states, X, ks, weights), rtol=1e-12
    )


@pytest.mark.parametrize("name", ["linucb", "lnucb_ta"])
def test_select_looks_states_up_again_after_the_arm_table_changes(name: str) -> None:
    """select keeps the states of its last candidate list; a retire and re-add, an import
    or a select_until (which also cold-starts and consumes the update record) between two
    selections over an equal list must not leave it scoring a replaced state."""
    d, rng = 3, np.random.default_rng(5)
    policy = bandit_core.make_policy(name, d=d, alpha=0.0, seed=0)
    ids = ["a", "b", "c"]
    X = np.abs(rng.normal(size=(3, d)))
    policy.select(ids, X)
    for _ in range(5):
        policy.update("a", X[0], 1.0)
    prior = bandit_core.make_policy(name, d=d)
    prior.add_arm("a")
    steps = [
        lambda p: (p.retire_arm("a"), p.add_arm("a")),
        lambda p: p.import_parts(prior.export_parts(["arm:a"])),
        lambda p: p.select_until(
            ["a", "b", "c", "e"], X[None].repeat(2, 0)[:, [0, 1, 2, 2]], [3, 3]
        ),
    ]
    for step in steps:
        policy.select(list(ids), X)
        step(policy)
        policy.update("b", X[1], 1.0)
        fresh = type(policy).from_bytes(policy.to_bytes())
        _same(policy.select(list(ids), X), fresh.select(list(ids), X))
