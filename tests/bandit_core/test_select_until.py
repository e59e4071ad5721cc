"""``Policy.select_until`` and the replay built on it: equal, decision for decision and
bit for bit, to calling ``select`` once per event (policy.py, evaluation/replay.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

import bandit_core
from bandit_core import POLICIES, make_policy
from bandit_core.datasets import BanditLog, LoggedEvent
from bandit_core.errors import InvalidInputError, UnknownArmError
from bandit_core.evaluation import rejection_replay, replay
from bandit_core.evaluation.replay import ReplayResult
from tests.bandit_core.conftest import select_scores, takes_batched_path

D = 4
ARMS = ["a", "b", "c", "d", "e"]
NAMES = sorted(POLICIES)


def _X(rng: np.random.Generator, shape: tuple[int, ...], integer: bool) -> np.ndarray:
    """Integer-valued features make exact score ties common; normal ones make them rare."""
    return rng.integers(0, 3, size=shape).astype(np.float64) if integer else rng.normal(size=shape)


def _trained(name: str, integer: bool, **params) -> bandit_core.BasePolicy:
    rng = np.random.default_rng(5)
    p = make_policy(name, d=D, seed=3, **params)
    for _ in range(40):
        X = _X(rng, (len(ARMS), D), integer)
        dec = p.select(ARMS, X)
        p.update(dec.arm_id, X[ARMS.index(dec.arm_id)], float(rng.integers(0, 2)))
    return p


def _one_by_one(policy, arm_ids, X_batch, targets) -> int:
    for i in range(len(targets)):
        if policy.select(arm_ids, X_batch[i]).arm_id == arm_ids[targets[i]]:
            return i
    return len(targets)


@pytest.mark.parametrize("integer", [False, True], ids=["normal", "integer"])
@pytest.mark.parametrize("epsilon", [0.0, 0.3])
@pytest.mark.parametrize("name", NAMES)
def test_select_until_equals_one_select_per_row(name: str, epsilon: float, integer: bool) -> None:
    p = _trained(name, integer, epsilon=epsilon)
    q = type(p).from_bytes(p.to_bytes())
    rng = np.random.default_rng(11)
    stops = []
    for B in (1, 1, 1, 2, 2, 7, 30, 30, 30, 60):
        X = _X(rng, (B, len(ARMS), D), integer)
        targets = rng.integers(0, len(ARMS), size=B)
        i = p.select_until(ARMS, X, targets)
        assert i == _one_by_one(q, ARMS, X, targets)
        assert p.to_bytes() == q.to_bytes()  # every part and the RNG state
        stops.append(i == B)
        if i < B:
            for s in (p, q):
                s.update(ARMS[targets[i]], X[i, targets[i]], 1.0)
    assert any(stops) and not all(stops)  # batches without a match and with one


@pytest.mark.parametrize("name", NAMES)
def test_select_until_cold_starts_like_the_first_select(name: str) -> None:
    p, q = make_policy(name, d=D, seed=1), make_policy(name, d=D, seed=1)
    X = np.ones((6, len(ARMS), D))
    targets = np.array([0, 1, 2, 3, 4, 0])
    assert p.select_until(ARMS, X, targets) == _one_by_one(q, ARMS, X, targets)
    assert p.to_bytes() == q.to_bytes()
    assert p.select_until(ARMS, X[:0], targets[:0]) == 0


def test_linucb_without_exploration_takes_the_batched_path() -> None:
    p = _trained("linucb", integer=True)
    assert takes_batched_path(p, ARMS, np.ones((3, len(ARMS), D)))
    for name in ("guardrailed_linucb", "hare", "random"):
        assert not takes_batched_path(make_policy(name, d=D), ARMS, np.ones((3, len(ARMS), D)))
    assert not takes_batched_path(
        _trained("linucb", integer=True, epsilon=0.1), ARMS, np.ones((3, len(ARMS), D))
    )


@pytest.mark.parametrize("integer", [False, True], ids=["normal", "integer"])
def test_linucb_batched_scores_are_bit_identical_to_single_scores(integer: bool) -> None:
    p = _trained("linucb", integer, alpha=0.7)
    ids = [*ARMS, "new1", "new2"]  # two arms in the prior state: ties on equal rows
    rng = np.random.default_rng(2)
    big = _X(rng, (40, len(ids), 2 * D), integer)
    for X_batch in (big[:, :, :D], np.ascontiguousarray(big[:, :, :D])):  # strided and contiguous
        batch = p.batch_scores(ids, X_batch)
        single = np.stack([select_scores(p, ids, X) for X in X_batch])
        assert batch.shape == (40, len(ids)) and np.array_equal(batch, single)
    if integer:
        assert (batch == batch.max(axis=1, keepdims=True)).sum(
            axis=1
        ).max() > 1  # ties were exercised


@pytest.mark.parametrize("name", ["linucb", "lnucb_ta"])
def test_rows_select_would_reject_fail_at_the_same_selection(name: str) -> None:
    p = _trained(name, integer=False)
    targets = np.zeros(8, dtype=int)
    X = np.random.default_rng(0).normal(size=(8, len(ARMS), D))
    i = _one_by_one(type(p).from_bytes(p.to_bytes()), ARMS, X, targets)
    assert i < 7
    late, early = X.copy(), X.copy()
    late[i + 1, 0, 0] = np.nan  # after the match: never selected on, so no error
    early[i, 0, 0] = np.inf
    q = type(p).from_bytes(p.to_bytes())
    assert q.select_until(ARMS, late, targets) == i
    r, s = type(p).from_bytes(p.to_bytes()), type(p).from_bytes(p.to_bytes())
    with pytest.raises(InvalidInputError, match=r"X must be finite, but X\[0, 0\] is inf") as a:
        r.select_until(ARMS, early, targets)
    with pytest.raises(InvalidInputError) as b:
        _one_by_one(s, ARMS, early, targets)
    assert str(a.value) == str(b.value) and r.to_bytes() == s.to_bytes()


def test_select_until_rejects_bad_targets_and_retired_arms() -> None:
    p = _trained("linucb", integer=False)
    X = np.ones((3, len(ARMS), D))
    with pytest.raises(InvalidInputError, match="targets must be 3 candidate indices"):
        p.select_until(ARMS, X, [0, 1])
    with pytest.raises(InvalidInputError, match="targets must be 3 candidate indices"):
        p.select_until(ARMS, X, [0.0, 1.0, 2.0])
    with pytest.raises(InvalidInputError, match=r"targets must lie in \[0, 5\), but got 5"):
        p.select_until(ARMS, X, [0, 5, 1])
    p.retire_arm("c")
    with pytest.raises(UnknownArmError, match="'c' was retired"):
        p.select_until(ARMS, X, [0, 1, 2])


# ---- replay --------------------------------------------------------------------------------
def _reference_replay(
    policy, source, n_rounds: int | None, accept: Callable[[LoggedEvent], bool] = lambda e: True
) -> tuple[float, int, int, np.ndarray]:
    """The strict replay written as one ``select`` per event (the loop before
    ``select_until``)."""
    rewards, seen = [], 0
    for event in source:
        if n_rounds is not None and len(rewards) >= n_rounds:
            break
        seen += 1
        if policy.select(
            event.arm_ids, event.X, user_id=event.user_id
        ).arm_id != event.chosen or not accept(event):
            continue
        policy.update(event.chosen, event.X[event.action], event.reward, user_id=event.user_id)
        rewards.append(event.reward)
    curve = np.cumsum(np.asarray(rewards, dtype=np.float64))
    return (float(curve[-1]) if curve.size else 0.0, int(curve.size), seen, curve)


def _same_result(result: ReplayResult, reference: tuple[float, int, int, np.ndarray]) -> None:
    assert (result.cumulative_reward, result.matched, result.events_seen) == reference[:3]
    np.testing.assert_array_equal(result.curve, reference[3])


def _synthetic_log(seed: int, n: int = 3000) -> list[LoggedEvent]:
    """Integer features (exact ties), two candidate lists and users that change in runs."""
    rng = np.random.default_rng(seed)
    events = []
    for t in range(n):
        ids = tuple(ARMS) if (t // 37) % 3 else ("a", "c", "e")
        X = _X(rng, (len(ids), D), integer=True)
        action = int(rng.integers(len(ids)))
        events.append(
            LoggedEvent(
                ids,
                X,
                action,
                float(rng.integers(0, 2)),
                pscore=1.0 / len(ids),
                user_id=None if (t // 50) % 2 else f"u{t // 100}",
            )
        )
    return events


CASES = [
    ("linucb", {"alpha": 0.1}),
    ("linucb", {"alpha": 1.0}),
    ("lnucb_ta", {"alpha": 0.1}),
    ("epsilon_greedy", {}),
    ("guardrailed_linucb", {}),
]


@pytest.mark.parametrize(
    ("name", "params"), CASES, ids=[f"{n}-{p.get('alpha', '')}" for n, p in CASES]
)
def test_replay_equals_one_select_per_event_on_news(
    news: BanditLog, name: str, params: dict
) -> None:
    rounds = 300 if name == "lnucb_ta" else 800
    p, q = make_policy(name, d=10, seed=2, **params), make_policy(name, d=10, seed=2, **params)
    _same_result(replay(p, news, rounds), _reference_replay(q, news, rounds))
    assert p.to_bytes() == q.to_bytes()


@pytest.mark.parametrize("rounds", [None, 150])
@pytest.mark.parametrize(
    ("name", "params"), CASES, ids=[f"{n}-{p.get('alpha', '')}" for n, p in CASES]
)
def test_replay_equals_one_select_per_event_on_a_log_with_ties(
    name: str, params: dict, rounds: int | None
) -> None:
    log = _synthetic_log(7)
    p, q = make_policy(name, d=D, seed=4, **params), make_policy(name, d=D, seed=4, **params)
    _same_result(replay(p, log, rounds), _reference_replay(q, log, rounds))
    assert p.to_bytes() == q.to_bytes()


def test_rejection_replay_draws_acceptances_only_on_matches_as_before() -> None:
    log = _synthetic_log(8)
    for e in log[::3]:
        object.__setattr__(e, "pscore", 0.5)
    p, q = make_policy("linucb", d=D, seed=4), make_policy("linucb", d=D, seed=4)
    rng_p, rng_q = np.random.default_rng(1), np.random.default_rng(1)
    result = rejection_replay(p, log, rng_p, 200, min_pscore=0.2)
    reference = _reference_replay(q, log, 200, lambda e: bool(rng_q.random() < 0.2 / e.pscore))
    _same_result(result, reference)
    assert p.to_bytes() == q.to_bytes() and rng_p.random() == rng_q.random()


class _Broken:
    """A log whose event ``fail_at`` raises, as a corrupt line of a JSON Lines log does."""

    def __init__(self, events: list[LoggedEvent], fail_at: int) -> None:
        self.events, self.fail_at = events, fail_at

    def __iter__(self) -> Iterator[LoggedEvent]:
        for t, e in enumerate(self.events):
            if t == self.fail_at:
                raise InvalidInputError(f"line {t} is corrupt")
            yield e


@pytest.mark.parametrize("fail_at", [0, 5, 130, 1000])
def test_a_source_error_surfaces_where_the_one_by_one_loop_meets_it(fail_at: int) -> None:
    log = _synthetic_log(9, n=400)
    reference = make_policy("linucb", d=D, seed=0)
    try:
        expected: object = _reference_replay(reference, _Broken(log, fail_at), 20)[:3]
    except InvalidInputError as exc:
        expected = str(exc)
    p = make_policy("linucb", d=D, seed=0)
    try:
        result = replay(p, _Broken(log, fail_at), 20)
        got: object = (result.cumulative_reward, result.matched, result.events_seen)
    except InvalidInputError as exc:
        got = str(exc)
    assert got == expected and p.to_bytes() == reference.to_bytes()


def test_malformed_events_fail_as_select_would() -> None:
    log = _synthetic_log(3, n=40)
    ragged = LoggedEvent(tuple(ARMS), [[1.0] * D] * 4 + [[1.0] * (D - 1)], 0, 1.0)  # type: ignore[arg-type]
    wrong_d = LoggedEvent(tuple(ARMS), np.ones((len(ARMS), D + 1)), 0, 1.0)
    for bad in (ragged, wrong_d):
        events = [*log[:20], bad, *log[20:]]
        expected = make_policy("linucb", d=D, seed=0)
        with pytest.raises(InvalidInputError) as a:
            _reference_replay(expected, events, None)
        p = make_policy("linucb", d=D, seed=0)
        with pytest.raises(InvalidInputError) as b:
            replay(p, events)
        assert str(a.value) == str(b.value) and p.to_bytes() == expected.to_bytes()


@pytest.mark.parametrize("integer", [False, True], ids=["normal", "integer"])
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"knn_window": 4},  # rings overwrite their oldest points
        {"knn_weights": "distance", "theta_max": 9, "reward_range": (0.0, 2.0)},  # k changes
        {"linear_target": "residual"},
        {"use_knn": False},
    ],
    ids=range(5),
)
def test_lnucb_ta_select_until_on_the_rest_of_its_rows_equals_one_select_per_row(
    params: dict, integer: bool
) -> None:
    """As a replay calls it: the rest of the same rows after each update, which LNUCB-TA
    scores again only in the updated arm's column; a select or a part imported in
    between must not leave stale terms behind."""
    p = _trained("lnucb_ta", integer, **params)
    q = type(p).from_bytes(p.to_bytes())
    rng = np.random.default_rng(12)
    for rep in range(6):
        X = _X(rng, (60, len(ARMS), D), integer)
        targets = rng.integers(0, len(ARMS), size=60)
        pos = 0
        while pos < 60:
            i = p.select_until(ARMS, X[pos:], targets[pos:])
            assert i == _one_by_one(q, ARMS, X[pos:], targets[pos:])
            assert p.to_bytes() == q.to_bytes()
            pos += i + 1
            if pos <= 60:
                reward = (
                    float(rng.integers(0, 3))
                    if "reward_range" in params
                    else float(rng.integers(0, 2))
                )
                for s in (p, q):
                    s.update(ARMS[targets[pos - 1]], X[pos - 1, targets[pos - 1]], reward)
            if rep == 2 and pos < 60:
                assert p.select(ARMS, X[pos]).arm_id == q.select(ARMS, X[pos]).arm_id
            if rep == 4 and pos < 60:
                parts = q.export_parts(["arm:a", "shared"])
                for s in (p, q):
                    s.update("a", X[pos, 0], 1.0)
                    s.import_parts(parts)
