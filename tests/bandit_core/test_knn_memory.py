"""LNUCB-TA's kept kNN layout (KnnMemory): written arm by arm as the policy learns, it
gives exactly what a layout built from scratch gives (``knn_estimates``), through
appends, reserved rows running out, ring overwrites and wrap-arounds, replaced states
and changing candidate lists; a batch of feature sets scores each row bit-identically
to that row alone."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import bandit_core
from bandit_core import knn_memory, lnucb_ta
from bandit_core.knn_memory import KnnMemory, LNUCBTAArmState, adaptive_k, knn_estimates

CONFIGS = [
    {"knn_window": 5},  # rings wrap every 5 points per arm
    {"knn_window": 7, "knn_weights": "distance", "theta_max": 9},
    {"knn_window": 60, "theta_max": 9},  # memories outgrow their reserved rows several times
    {"knn_window": 23, "knn_weights": "distance", "linear_target": "residual"},
]


def _features(rng: np.random.Generator, integer: bool, shape: tuple[int, ...]) -> np.ndarray:
    # small integers: many equal distances, so the tie rule decides the neighbours
    return rng.integers(0, 3, size=shape).astype(float) if integer else rng.normal(size=shape)


def _from_scratch(policy: lnucb_ta.LNUCBTA, ids: list[str], X: np.ndarray) -> np.ndarray:
    cfg = policy.config
    states = [policy.arm_state(a) for a in ids]
    ks = adaptive_k(states, cfg.theta_min, cfg.theta_max, cfg.reward_range)
    return knn_estimates(states, X, ks, cfg.knn_weights)


@pytest.mark.parametrize("integer", [True, False], ids=["integer", "normal"])
@pytest.mark.parametrize("params", CONFIGS, ids=range(len(CONFIGS)))
def test_kept_layout_equals_a_layout_from_scratch(params: dict, integer: bool) -> None:
    d, rng = 3, np.random.default_rng(11)
    policy = bandit_core.make_policy("lnucb_ta", d=d, seed=3, **params)
    pool = [f"a{i}" for i in range(7)]
    for t in range(400):
        ids = (
            pool[:5]
            if t % 50 < 45
            else list(rng.choice(pool, size=int(rng.integers(1, 8)), replace=False))
        )
        X = _features(rng, integer, (len(ids), d))
        dec = policy.select(ids, X)
        kept = policy.score_cache.knn.estimates(X[None], policy.config.knn_weights)[0]
        np.testing.assert_array_equal(kept, _from_scratch(policy, ids, X))
        j = ids.index(dec.arm_id)
        policy.update(dec.arm_id, X[j], float(rng.random() < 0.4))
        if t % 37 == 0:  # several points on one arm between two selections
            for x in _features(rng, integer, (3, d)):
                policy.update(ids[0], x, float(rng.random() < 0.5))
        if t == 150:
            policy.retire_arm(pool[1])
            policy.add_arm(pool[1])
        if t == 250:  # replace an arm's state from outside, as a store does
            other = bandit_core.make_policy("lnucb_ta", d=d, seed=4, **params)
            other.add_arm(pool[2])
            for x in _features(rng, integer, (9, d)):
                other.update(pool[2], x, 1.0)
            policy.import_parts(other.export_parts([f"arm:{pool[2]}"]))
    assert max(len(s.r_mem) for s in map(policy.arm_state, policy.arm_ids)) == min(
        params["knn_window"], 60
    )


def test_batch_rows_are_bit_identical_to_single_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    states = []
    for m in (0, 3, 40, 12, 1):
        s = LNUCBTAArmState.prior(4, 1.0)
        for _ in range(m):
            s.remember(_features(rng, m % 2 == 0, (4,)), float(rng.random() < 0.5), window=25)
        states.append(s)
    ks = np.array([1, 2, 5, 3, 1])
    X = np.concatenate([_features(rng, True, (6, 5, 4)), _features(rng, False, (6, 5, 4))])
    for weights in ("uniform", "distance"):
        memory = KnnMemory(states, ks)
        single = np.stack([memory.estimates(x[None], weights)[0] for x in X])
        np.testing.assert_array_equal(memory.estimates(X, weights), single)
        monkeypatch.setattr(knn_memory, "_BATCH_POINTS", 100)  # a batch row or two at a time
        monkeypatch.setattr(knn_memory, "_SPAN_FLOATS", 50)  # a few points at a time
        np.testing.assert_array_equal(memory.estimates(X, weights), single)
        monkeypatch.undo()


def test_memory_appends_never_alias_a_copied_state() -> None:
    s = LNUCBTAArmState.prior(2, 1.0)
    s.remember(np.array([1.0, 1.0]), 1.0, window=10)
    twin = copy.copy(s)
    s.remember(np.array([2.0, 2.0]), 0.0, window=10)
    twin.remember(np.array([3.0, 3.0]), 1.0, window=10)
    assert s.X_mem.tolist() == [[1.0, 1.0], [2.0, 2.0]] and s.r_mem.tolist() == [1.0, 0.0]
    assert twin.X_mem.tolist() == [[1.0, 1.0], [3.0, 3.0]] and twin.r_mem.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("integer", [True, False], ids=["integer", "normal"])
def test_one_candidate_and_one_new_point_give_the_whole_search(
    integer: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``search(X, i)`` is column ``i`` of ``search(X)``, and after an append with ``k``
    unchanged ``with_newest`` gives what searching again gives, ties to the newest point
    included (a point equal to a stored one, or to the row scored)."""
    rng = np.random.default_rng(6)
    states = []
    for m in (0, 3, 20, 12, 1):
        s = LNUCBTAArmState.prior(4, 1.0)
        for _ in range(m):
            s.remember(_features(rng, integer, (4,)), float(rng.random() < 0.5), window=30)
        states.append(s)
    ks = np.array([1, 2, 4, 3, 1])
    memory = KnnMemory(states, ks, window=30)
    X = _features(rng, integer, (9, 5, 4))
    for small in (False, True):
        if small:
            monkeypatch.setattr(knn_memory, "_BATCH_POINTS", 30)
            monkeypatch.setattr(knn_memory, "_SPAN_FLOATS", 20)
        whole = memory.search(X)
        assert whole.shape == (4, 9, 5)
        for i in range(5):
            np.testing.assert_array_equal(memory.search(X, i), whole[:, :, i : i + 1])
    for t in range(40):
        i = t % 5
        before = memory.search(X, i)
        s = states[i]
        new = [X[t % 9, i], s.X_mem[0] if len(s.r_mem) else X[0, i], _features(rng, integer, (4,))][
            t % 3
        ]
        s.remember(new.copy(), float(rng.random() < 0.5), window=30)
        s.n += 1  # as LNUCBTAArmState.add does with each point remembered
        assert memory.write(i, s, int(ks[i]))
        np.testing.assert_array_equal(memory.with_newest(before, X, i), memory.search(X, i))
        np.testing.assert_array_equal(memory.estimates_from(memory.search(X)), memory.estimates(X))


def test_write_says_whether_it_only_appended_with_k_unchanged() -> None:
    s = LNUCBTAArmState.prior(1, 1.0)
    memory = KnnMemory([s], np.array([1]), window=2)
    for t, (k, appended) in enumerate([(1, True), (1, True), (1, False), (2, False)]):
        s.remember(np.array([float(t)]), 1.0, window=2)  # the third point overwrites the first
        s.n += 1
        assert memory.write(0, s, k) is appended
