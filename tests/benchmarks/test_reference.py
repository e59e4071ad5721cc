"""The benchmark's reference implementations compute what the engine computes, so the
ratios in docs/performance.md compare like with like."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import bandit_core
from benchmarks import _harness
from benchmarks.reference import (
    LoopLinUCB,
    NumpyLinUCBFloor,
    Workload,
    load_news,
    news_path,
    synthetic_log,
)
from benchmarks.replay_throughput import loop_replay

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("K, d, alpha", [(8, 5, 1.0), (3, 12, 0.1), (20, 2, 10.0)])
def test_floor_makes_the_engines_linucb_decisions(K: int, d: int, alpha: float) -> None:
    # Continuous features: no exact ties, so the engine's random tie-breaking never acts.
    pool = Workload.make(K, d, seed=K)
    floor = NumpyLinUCBFloor(K, d, alpha=alpha)
    policy = bandit_core.make_policy("linucb", d=d, alpha=alpha, seed=0)
    ids = [f"a{i}" for i in range(K)]
    for t in range(300):
        X, R = pool.X[t % len(pool.X)], pool.R[t % len(pool.X)]
        dec = policy.select(ids, X)
        a = floor.step(X, R)
        assert dec.arm_id == ids[a], t
        policy.update(dec.arm_id, X[a], R[a])
    state = policy.export_parts([f"arm:{ids[a]}"])
    restored = type(policy).from_bytes(policy.to_bytes())
    assert restored.export_parts(list(state)) == state
    assert np.allclose(floor.A_inv[a], policy.arm_state(ids[a]).A_inv, rtol=1e-9, atol=1e-12)


def test_per_arm_loop_linucb_reproduces_table_3() -> None:
    # docs/algorithms.md section 1: 567 at alpha = 0.1 over 800 matched rounds.
    arms, rewards, X = load_news(news_path(ROOT))
    result = loop_replay(LoopLinUCB(10, 10, 0.1), arms, rewards, X, 800)
    assert result["matched"] == 800
    assert result["cumulative_reward"] == 567


def test_synthetic_log_is_seeded_chunked_and_binary() -> None:
    chunks = list(synthetic_log(25_000, chunk=10_000, seed=3))
    assert [len(a) for a, _, _ in chunks] == [10_000, 10_000, 5_000]
    arms, rewards, X = (np.concatenate(p) for p in zip(*chunks))
    assert X.shape == (25_000, 10, 10) and set(np.unique(rewards)) <= {0.0, 1.0}
    assert 0.05 < rewards.mean() < 0.6
    assert np.all(np.bincount(arms, minlength=10) > 2_000)  # uniformly random logging
    again = np.concatenate([a for a, _, _ in synthetic_log(25_000, chunk=10_000, seed=3)])
    other = np.concatenate([a for a, _, _ in synthetic_log(25_000, chunk=10_000, seed=4)])
    assert np.array_equal(arms, again) and not np.array_equal(arms, other)


def test_interleave_measures_every_contender_every_round() -> None:
    calls = {"fast": 0, "slow": 0}

    def fast(n: int) -> None:
        calls["fast"] += n

    def slow(n: int) -> None:
        calls["slow"] += n
        sum(range(20_000 * n))

    m = _harness.interleave({"fast": fast, "slow": slow}, rounds=3, slice_s=0.01)
    assert all(len(m[k].cpu) == len(m[k].wall) == 3 for k in m)
    assert _harness.ratio(m["fast"], m["slow"]) > 10
    assert _harness.ratio(m["slow"], m["fast"]) == pytest.approx(
        1 / _harness.ratio(m["fast"], m["slow"])
    )
    assert calls["fast"] > calls["slow"] > 0


def test_table_is_markdown_with_one_row_per_entry() -> None:
    text = _harness.table([{"a": 1234.5, "b": "x"}, {"a": 0.25, "b": None}], ["a", "b"])
    lines = text.splitlines()
    assert lines[0].split("|")[1].strip() == "a" and len(lines) == 4
    assert "1,234" in lines[2] and "0.25" in lines[3]


def test_per_arm_loop_lnucb_ta_scores_like_the_engine_without_distance_ties() -> None:
    # Continuous features, so kNN distances never tie and the two tie rules (engine: most
    # recent point; loop: oldest) never act; 400 steps stay far inside the 5000 window.
    # Both learn from the engine's choice (exact score ties, e.g. at the start when every
    # alpha_a is 0, are broken at random by the engine and by index by the loop).
    from benchmarks.reference import LoopLNUCBTA

    K, d = 5, 3
    pool = Workload.make(K, d, seed=7)
    loop = LoopLNUCBTA(K, d, alpha=1.0)
    policy = bandit_core.make_policy("lnucb_ta", d=d, alpha=1.0, seed=0)
    ids = [f"a{i}" for i in range(K)]
    for t in range(400):
        X, R = pool.X[t % len(pool.X)] + 0.01 * t, pool.R[t % len(pool.X)]
        dec = policy.select(ids, X)
        engine_scores = dict(zip(dec.ranking, dec.scores))
        loop_scores = [loop.ucb(i, X[i]) for i in range(K)]
        assert np.allclose([engine_scores[a] for a in ids], loop_scores, rtol=1e-9, atol=1e-12), t
        a = ids.index(dec.arm_id)
        policy.update(dec.arm_id, X[a], R[a])
        loop.learn(a, X[a], R[a])


def test_knn_window_fills_every_arm_memory() -> None:
    from benchmarks.knn_window import filled_policy

    policy = filled_policy(K=3, d=2, m=7)
    for a in ("arm0", "arm1", "arm2"):
        state = policy.ARM_STATE.from_bytes(policy.export_parts([f"arm:{a}"])[f"arm:{a}"])
        assert state.X_mem.shape == (7, 2) and state.r_mem.shape == (7,)
