"""D-LinUCB and SW-LinUCB (docs/algorithms.md section 10): after any sequence of (timed)
updates the state, and the scores at any later time, equal the weighted ridge solution
recomputed from scratch; the window's memory is bounded; a changed world is followed."""

from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandit_core import make_policy, policy_from_bytes
from bandit_core.clock import clock_at
from bandit_core.datasets import LoggedEvent
from bandit_core.errors import ConfigError, InvalidInputError
from bandit_core.evaluation.replay import replay
from bandit_core.forgetting import WindowArmState, window_memory_bytes
from bandit_core.policy import Decision, SelectRequest

LAMBDA = 0.5
TOL = 1e-9


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def _weighted_ridge(rows: list[tuple[np.ndarray, float]], weights: np.ndarray, d: int):
    """``V = lambda*I + sum w x x^T``, ``V~ = lambda*I + sum w^2 x x^T``, ``b = sum w r x``."""
    V, V_sq, b = LAMBDA * np.eye(d), LAMBDA * np.eye(d), np.zeros(d)
    for (x, r), w in zip(rows, weights):
        V += w * np.outer(x, x)
        V_sq += w * w * np.outer(x, x)
        b += w * r * x
    return V, V_sq, b


def _ucb_terms(
    V: np.ndarray, V_sq: np.ndarray, b: np.ndarray, x: np.ndarray
) -> tuple[float, float]:
    V_inv = np.linalg.inv(V)
    return float(x @ V_inv @ b), math.sqrt(float(x @ V_inv @ V_sq @ V_inv @ x))


def _scores_by_arm(decision) -> dict[str, float]:
    return dict(zip(decision.ranking, decision.scores.tolist()))


observations = st.lists(
    st.tuples(
        st.lists(st.floats(-2.0, 2.0), min_size=3, max_size=3),
        st.floats(0.0, 1.0),
        st.floats(0.0, 50.0),  # seconds since the previous update (0: same instant)
        st.booleans(),  # whether this reward arrives late (its time before the arm's clock)
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(0.5, 0.999))
def test_per_update_discounting_equals_the_weighted_ridge_from_scratch(obs, gamma: float) -> None:
    p = make_policy("discounted_linucb", d=3, gamma=gamma, ridge_lambda=LAMBDA, alpha=1.0)
    p.add_arm("a")
    rows = [(np.array(x), r) for x, r, _, _ in obs]
    for x, r in rows:
        p.update("a", x, r)
    n = len(rows)
    V, V_sq, b = _weighted_ridge(rows, gamma ** (n - 1 - np.arange(n)), 3)
    s = p.arm_state("a")
    _close(s.V, V)
    _close(s.V_tilde, V_sq)
    _close(s.b, b)
    _close(s.theta, np.linalg.solve(V, b))
    _close(s.width_matrix, np.linalg.inv(V) @ V_sq @ np.linalg.inv(V))
    x = np.array([0.3, -1.0, 0.7])
    mean, width = _ucb_terms(V, V_sq, b, x)
    assert _scores_by_arm(p.select(["a"], x[None, :]))["a"] == pytest.approx(
        mean + width, rel=TOL, abs=TOL
    )


@settings(max_examples=40, deadline=None)
@given(observations, st.floats(1.0, 500.0), st.floats(0.0, 300.0))
def test_half_life_discounting_equals_the_weighted_ridge_from_scratch_at_any_later_time(
    obs, half_life: float, later: float
) -> None:
    p = make_policy(
        "discounted_linucb", d=3, half_life_seconds=half_life, ridge_lambda=LAMBDA, alpha=2.0
    )
    p.add_arm("a")
    start = 1.7e9  # Unix time: the weights stay relative to the arm's clock, none overflows
    clock, rows, times = start, [], []
    for x, r, gap, late in obs:
        at = clock - gap if late else clock + gap
        clock = max(clock, at) if times else at  # the arm's clock is its first update's time
        p.update("a", x, r, now=at)
        rows.append((np.array(x), r))
        times.append(at)
    now = clock + later
    weights = 0.5 ** ((now - np.array(times)) / half_life)
    V, V_sq, b = _weighted_ridge(rows, weights, 3)
    x = np.array([1.0, 0.5, -0.25])
    mean, width = _ucb_terms(V, V_sq, b, x)
    got = _scores_by_arm(p.select(["a"], x[None, :], now=now))["a"]
    assert got == pytest.approx(mean + 2.0 * width, rel=TOL, abs=TOL)
    # the state itself, at its clock (the last update's time)
    V, V_sq, b = _weighted_ridge(rows, 0.5 ** ((clock - np.array(times)) / half_life), 3)
    s = p.arm_state("a")
    assert s.clock == clock
    _close(s.V, V)
    _close(s.V_tilde, V_sq)
    _close(s.b, b)


def test_an_arm_nobody_pulls_decays_back_to_its_prior_as_time_passes() -> None:
    p = make_policy("discounted_linucb", d=2, half_life_seconds=60.0, alpha=0.0)
    p.add_arm("a")
    for _ in range(49):
        p.update("a", [1.0, 0.0], 1.0, now=1000.0)
    X = np.array([[1.0, 0.0]])
    fresh = _scores_by_arm(p.select(["a"], X, now=1000.0))["a"]
    one_half_life = _scores_by_arm(p.select(["a"], X, now=1060.0))["a"]
    forgotten = _scores_by_arm(p.select(["a"], X, now=1000.0 + 60.0 * 2000))["a"]
    assert fresh > one_half_life > 0.0
    # V = lambda*I + g M with g = 2^-1 and M = 49 e1 e1^T: theta_1 = 49 g / (1 + 49 g)
    assert one_half_life == pytest.approx(24.5 / 25.5, rel=1e-12)
    assert forgotten == 0.0  # 2^-2000 underflows to 0: the prior, no overflow on the way
    assert p.arm_state("a").n == 49  # reading changed nothing


def test_a_long_horizon_keeps_the_state_finite_and_exact() -> None:
    gamma, n = 0.9, 8_000  # gamma^-n would be 1e366, beyond float64
    p = make_policy("discounted_linucb", d=2, gamma=gamma, ridge_lambda=LAMBDA)
    p.add_arm("a")
    for _ in range(n):
        p.update("a", [1.0, 1.0], 1.0)
    total = (1 - gamma**n) / (1 - gamma)  # sum of gamma^k, k < n
    _close(p.arm_state("a").V, LAMBDA * np.eye(2) + total * np.ones((2, 2)))
    _close(p.arm_state("a").b, total * np.ones(2))


def _windowed_ridge(rows: list[tuple[np.ndarray, float]], d: int) -> tuple[np.ndarray, np.ndarray]:
    A, b = LAMBDA * np.eye(d), np.zeros(d)
    for x, r in rows:
        A += np.outer(x, x)
        b += r * x
    return A, b


@settings(max_examples=40, deadline=None)
@given(observations, st.integers(1, 12))
def test_sliding_window_equals_the_ridge_over_the_last_window_updates(obs, window: int) -> None:
    p = make_policy("sliding_window_linucb", d=3, window=window, ridge_lambda=LAMBDA, alpha=1.0)
    p.add_arm("a")
    rows = [(np.array(x), r) for x, r, _, _ in obs]
    for x, r in rows:
        p.update("a", x, r)
    A, b = _windowed_ridge(rows[-window:], 3)
    s = p.arm_state("a")
    _close(s.A, A)
    _close(s.A_inv, np.linalg.inv(A))
    _close(s.theta, np.linalg.solve(A, b))
    assert s.size == min(window, len(rows)) and s.n == len(rows)


def test_the_window_inverse_kept_by_sherman_morrison_stays_exact() -> None:
    """A full window's ``A^-1`` follows each row in and the oldest out by two rank-one
    steps, re-derived every ``window`` updates: over 2,500 updates of a 1,000-row
    window it equals the inverse of the ridge over the window's rows."""
    p = make_policy("sliding_window_linucb", d=8, window=1000, ridge_lambda=LAMBDA)
    p.add_arm("a")
    rng = np.random.default_rng(3)
    rows = [(rng.normal(size=8), float(rng.uniform())) for _ in range(2500)]
    for k, (x, r) in enumerate(rows):
        p.update("a", x, r)
        if k in (999, 1998, 2499):  # full, one step before a re-derivation, halfway after
            A, b = _windowed_ridge(rows[k - 999 : k + 1], 8)
            _close(p.arm_state("a").A_inv, np.linalg.inv(A))
            _close(p.arm_state("a").theta, np.linalg.solve(A, b))


def test_the_window_inverse_follows_several_rows_aging_out_at_once() -> None:
    """Rows leaving ``window_seconds`` together are downdated one by one while fewer than
    ``d / 2`` leave (else ``A`` is inverted anew): after every update ``A^-1`` equals the
    inverse of the ridge over the rows younger than the window."""
    p = make_policy("sliding_window_linucb", d=8, window=100, window_seconds=20.0)
    p.add_arm("a")
    rng = np.random.default_rng(4)
    rows, now = [], 0.0
    for _ in range(400):
        now += float(rng.choice([0.0, 0.5, 3.0, 12.0]))  # several rows share a time
        x, r = rng.normal(size=8), float(rng.uniform())
        p.update("a", x, r, now=now)
        rows = [(y, q, t) for y, q, t in rows if t > now - 20.0] + [(x, r, now)]
        A, b = _windowed_ridge([(y, q) for y, q, _ in rows], 8)
        A = A + (1.0 - LAMBDA) * np.eye(8)  # the policy's ridge_lambda is 1
        _close(p.arm_state("a").A_inv, np.linalg.inv(A))
        _close(p.arm_state("a").theta, np.linalg.solve(A, b))


@settings(max_examples=40, deadline=None)
@given(observations, st.integers(1, 12), st.floats(1.0, 100.0), st.floats(0.0, 150.0))
def test_sliding_window_in_seconds_equals_the_ridge_over_the_young_observations(
    obs, window: int, seconds: float, later: float
) -> None:
    p = make_policy(
        "sliding_window_linucb",
        d=3,
        window=window,
        window_seconds=seconds,
        ridge_lambda=LAMBDA,
        alpha=1.0,
    )
    p.add_arm("a")
    clock, kept = 0.0, []  # the observations in the window, oldest first
    for k, (x, r, gap, late) in enumerate(obs):
        # k * 1e-6 keeps the times distinct: which of two equally old rows leaves is not specified
        at = (clock - gap if late else clock + gap) + k * 1e-6
        clock = max(clock, at)
        p.update("a", x, r, now=at)
        kept = [o for o in kept if o[2] > clock - seconds]
        if at > clock - seconds:
            if len(kept) == window:
                del kept[int(np.argmin([o[2] for o in kept]))]
            kept.append((np.array(x), r, at))
    A, b = _windowed_ridge([(x, r) for x, r, _ in kept], 3)
    _close(p.arm_state("a").A, A)
    _close(p.arm_state("a").A_inv, np.linalg.inv(A))
    now = clock + later
    A, b = _windowed_ridge([(x, r) for x, r, t in kept if t > now - seconds], 3)
    x = np.array([0.5, -0.5, 1.0])
    want = x @ np.linalg.solve(A, b) + math.sqrt(x @ np.linalg.solve(A, x))
    assert _scores_by_arm(p.select(["a"], x[None, :], now=now))["a"] == pytest.approx(
        want, rel=TOL, abs=TOL
    )


def test_the_window_bounds_the_memory_of_an_arm() -> None:
    d, window = 4, 25
    p = make_policy("sliding_window_linucb", d=d, window=window)
    p.add_arm("a")
    rng = np.random.default_rng(0)
    held = []  # bytes of the arm's arrays after `window` updates and after 8 times as many
    for n in range(8 * window):
        p.update("a", rng.normal(size=d), float(rng.uniform()))
        if n + 1 in (window, 8 * window):
            state = p.arm_state("a")
            assert isinstance(state, WindowArmState)
            held.append(sum(v.nbytes for v in vars(state).values() if isinstance(v, np.ndarray)))
    assert held == [window_memory_bytes(d, window)] * 2
    assert window_memory_bytes(d, window) == 8 * (window * (d + 2) + 2 * d * d + 2 * d)


@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("discounted_linucb", {"gamma": 0.95}),
        ("discounted_linucb", {"half_life_seconds": 20.0}),
        ("sliding_window_linucb", {"window": 20}),
        ("sliding_window_linucb", {"window": 50, "window_seconds": 40.0}),
    ],
)
def test_a_forgetting_policy_follows_an_abrupt_change_that_linucb_does_not(
    algorithm: str, params: dict
) -> None:
    """Arm "a" pays 1 for 300 rounds and 0 after; the forgetting model's estimate of "a"
    falls below 0.1 within 100 updates of the change, LinUCB's stays above 0.7."""
    policies = {
        "forgetting": make_policy(algorithm, d=1, alpha=0.0, **params),
        "linucb": make_policy("linucb", d=1, alpha=0.0),
    }
    X = np.ones((1, 1))
    for p in policies.values():
        p.add_arm("a")
        for t in range(400):
            kwargs = {} if p.name == "linucb" else {"now": float(t)}
            p.update("a", [1.0], 1.0 if t < 300 else 0.0, **kwargs)
    late = {"now": 399.0}
    assert _scores_by_arm(policies["forgetting"].select(["a"], X, **late))["a"] < 0.1
    assert _scores_by_arm(policies["linucb"].select(["a"], X))["a"] > 0.7


@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("discounted_linucb", {"half_life_seconds": 30.0}),
        ("sliding_window_linucb", {"window": 5, "window_seconds": 9.0}),
    ],
)
def test_timed_state_round_trips_and_decides_the_same(algorithm: str, params: dict) -> None:
    p = make_policy(algorithm, d=2, seed=3, **params)
    rng = np.random.default_rng(1)
    for t in range(30):
        X = rng.normal(size=(3, 2))
        dec = p.select(["a", "b", "c"], X, now=float(t))
        p.update(
            dec.arm_id, X[["a", "b", "c"].index(dec.arm_id)], float(rng.uniform()), now=float(t)
        )
    clone = policy_from_bytes(p.to_bytes())
    assert clone.to_bytes() == p.to_bytes()
    X = rng.normal(size=(3, 2))
    ours, theirs = (
        p.select(["a", "b", "c"], X, now=45.0),
        clone.select(["a", "b", "c"], X, now=45.0),
    )
    assert ours.ranking == theirs.ranking and np.array_equal(ours.scores, theirs.scores)


def test_configs_name_the_bad_field() -> None:
    with pytest.raises(ConfigError, match="give gamma or half_life_seconds, not both"):
        make_policy("discounted_linucb", d=2, gamma=0.9, half_life_seconds=10.0)
    assert make_policy("discounted_linucb", d=2).config.gamma == 0.99
    p = make_policy("discounted_linucb", d=2, half_life_seconds=10.0)
    with pytest.raises(InvalidInputError, match="now must be a finite number, but got nan"):
        p.select(["a"], np.ones((1, 2)), now=float("nan"))


@pytest.mark.parametrize(
    ("algorithm", "params"),
    [
        ("discounted_linucb", {"half_life_seconds": 10.0}),
        ("sliding_window_linucb", {"window": 8, "window_seconds": 6.0}),
    ],
)
def test_clock_at_times_batched_selections_and_updates_like_now(
    algorithm: str, params: dict
) -> None:
    """Inside ``clock_at(policy, t)`` a ``select_batch`` decides what ``select(now=t)``
    decides row by row, and an update lands as ``update(now=t)`` does."""
    timed, blocked = (make_policy(algorithm, d=2, seed=5, **params) for _ in range(2))
    rng = np.random.default_rng(4)
    arms = ["a", "b", "c"]
    for p in (timed, blocked):
        for arm in arms:
            p.add_arm(arm)
    for t in range(20):
        x, r = rng.normal(size=2), float(rng.uniform())
        timed.update(arms[t % 3], x, r, now=float(t))
        with clock_at(blocked, float(t)):
            blocked.update(arms[t % 3], x, r)
    assert blocked.to_bytes() == timed.to_bytes()
    rows = rng.normal(size=(4, 3, 2))
    with clock_at(blocked, 27.0):
        batch = blocked.select_batch([SelectRequest(arms, X) for X in rows])
    one_by_one = [timed.select(arms, X, now=27.0) for X in rows]
    untimed = [timed.select(arms, X) for X in rows]
    assert [d.ranking for d in batch] == [d.ranking for d in one_by_one]
    for got, want, stale in zip(batch, one_by_one, untimed):
        assert isinstance(got, Decision)
        np.testing.assert_array_equal(got.scores, want.scores)
        assert not np.array_equal(got.scores, stale.scores)  # the arms aged since t = 19


def test_clock_at_leaves_a_policy_without_a_clock_alone() -> None:
    plain, timed = make_policy("linucb", d=2), make_policy("linucb", d=2)
    for p, context in ((plain, nullcontext()), (timed, clock_at(timed, 1e9))):
        p.add_arm("a")
        with context:
            p.update("a", [1.0, 0.5], 1.0)
    assert plain.to_bytes() == timed.to_bytes()


@pytest.mark.parametrize(
    "algorithm, params",
    [
        ("discounted_linucb", {"half_life_seconds": 15.0}),
        ("sliding_window_linucb", {"window": 6, "window_seconds": 9.0}),
    ],
)
def test_scores_at_a_later_time_stay_exact_when_the_candidate_lists_change(
    algorithm: str, params: dict
) -> None:
    """What a wall-clock policy keeps for scoring at ``now`` (the per-arm decompositions of
    a half-life, the re-fitted windows) follows every update and every time, forward or
    back, whichever candidate lists come and go: the scores equal those of a copy rebuilt
    from bytes, which keeps none, and without a time those of the arms' own clocks."""
    p = make_policy(algorithm, d=3, seed=2, **params)
    rng = np.random.default_rng(6)
    arms = [f"a{i}" for i in range(12)]
    for t in range(150):
        ids = list(rng.choice(arms, size=int(rng.integers(2, 8)), replace=False))
        X = rng.normal(size=(len(ids), 3))
        dec = p.select(ids, X, now=float(t))
        p.update(dec.arm_id, X[ids.index(dec.arm_id)], float(rng.uniform()), now=float(t))
        if t % 10 == 9:
            state = p.to_bytes()
            X = rng.normal(size=(len(arms), 3))
            for now in (t + 7.0, t + 3.0, t + 40.0, None):
                ours = p.select(arms, X, now=now)
                fresh = policy_from_bytes(state).select(arms, X, now=now)
                np.testing.assert_allclose(ours.scores, fresh.scores, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "algorithm, params",
    [
        ("discounted_linucb", {"half_life_seconds": 30.0}),
        ("sliding_window_linucb", {"window": 5, "window_seconds": 20.0}),
        ("hybrid_linucb", {"half_life_seconds": 30.0}),
        ("hybrid_linucb", {"half_life_seconds": 30.0, "context_dim": 1}),
        ("discounted_linucb", {"gamma": 0.9}),  # per-update clock: the times change nothing
    ],
)
def test_replay_runs_a_clocked_policy_at_each_logged_time(algorithm: str, params: dict) -> None:
    """A log of one candidate (every event matches) with decision times: the replayed
    policy's state is that of updates at those times, each shared by two events (one run)
    (docs/algorithms.md section 10.3)."""
    rng = np.random.default_rng(11)
    times = 1.7e9 + np.repeat(np.sort(rng.uniform(0.0, 200.0, size=20)), 2)
    events = [
        LoggedEvent.build(["a"], "a", float(rng.uniform()), context=rng.normal(size=2), time=t)
        for t in times
    ]
    replayed = make_policy(algorithm, d=2, alpha=1.0, **params)
    assert replay(replayed, events).matched == len(events)
    direct = make_policy(algorithm, d=2, alpha=1.0, **params)
    direct.add_arm("a")
    for event in events:
        with clock_at(direct, event.time) if replayed.uses_wall_clock() else nullcontext():
            direct.update("a", event.X[0], event.reward)
    # the same learned parts (the replay's selections drew from its RNG as well)
    names = direct.part_names()
    assert replayed.part_names() == names
    assert replayed.export_parts(names) == direct.export_parts(names)
