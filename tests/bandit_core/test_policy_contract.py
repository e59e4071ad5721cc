"""The contract every registered policy keeps (docs/algorithms.md section 5, policy.py).

The tests are parametrised over ``bandit_core.POLICIES`` at collection time, so a
policy registered later (guardrailed_linucb, hare, ...) is checked without edits here.
Each policy is built with ``_make(name, ...)`` and its defaults otherwise,
plus the configurations in ``VARIANTS`` that change which state parts exist. A policy
whose update touches no arm part (a shared model such as hybrid_linucb with
``context_dim = 0``) keeps no per-arm state: any arm id may be served and rewarded.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import bandit_core
from bandit_core import POLICIES, make_policy
from bandit_core.errors import InvalidInputError, UnknownArmError
from bandit_core.policy import BasePolicy, Decision, PolicyConfig
from bandit_core.selection import FixedRanking
from bandit_core.validation import check_arm_ids

D = 4
ARMS = ["a", "b", "c", "d", "e"]
# Configurations checked besides each policy's defaults: name -> (algorithm, params).
VARIANTS: dict[str, tuple[str, dict]] = {name: (name, {}) for name in POLICIES} | {
    "hybrid_linucb[context_dim=2]": ("hybrid_linucb", {"context_dim": 2}),
    "hybrid_linucb[context_dim=2,half_life_seconds=60]": (
        "hybrid_linucb",
        {"context_dim": 2, "half_life_seconds": 60.0},
    ),
    "hybrid_linucb[context_dim=2,window=8]": ("hybrid_linucb", {"context_dim": 2, "window": 8}),
    "hybrid_linucb[context_dim=2,window_seconds=60]": (
        "hybrid_linucb",
        {"context_dim": 2, "window": 8, "window_seconds": 60.0},
    ),
    "diag_linucb[fit=per_feature]": ("diag_linucb", {"fit": "per_feature"}),
    "discounted_linucb[half_life_seconds=60]": ("discounted_linucb", {"half_life_seconds": 60.0}),
    "sliding_window_linucb[window_seconds=60]": (
        "sliding_window_linucb",
        {"window": 8, "window_seconds": 60.0},
    ),
}
NAMES = sorted(VARIANTS)


def _make(name: str, **params):
    """The policy ``name`` of ``VARIANTS`` for rows of length D unless ``params`` says."""
    algorithm, fixed = VARIANTS[name]
    return make_policy(algorithm, **{"d": D, **fixed, **params})


def _keeps_arm_parts(policy) -> bool:
    return any(p.startswith("arm:") for p in policy.parts_for_update("a"))


def _X(rng: np.random.Generator, k: int = len(ARMS)) -> np.ndarray:
    return rng.normal(size=(k, D))


def _train(policy, rng: np.random.Generator, rounds: int = 30) -> None:
    """Select over ARMS and reward the served arm (reward in [0, 1])."""
    for _ in range(rounds):
        X = _X(rng)
        dec = policy.select(ARMS, X)
        policy.update(dec.arm_id, X[ARMS.index(dec.arm_id)], float(rng.uniform()))


def _decisions(policy, seed: int, rounds: int = 15) -> list[Decision]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rounds):
        X = _X(rng)
        dec = policy.select(ARMS, X)
        policy.update(dec.arm_id, X[ARMS.index(dec.arm_id)], float(rng.uniform()))
        out.append(dec)
    return out


def _same(a: list[Decision], b: list[Decision]) -> None:
    for da, db in zip(a, b, strict=True):
        assert da.arm_id == db.arm_id and da.ranking == db.ranking and da.explored == db.explored
        np.testing.assert_array_equal(da.scores, db.scores)
        np.testing.assert_array_equal(da.propensities, db.propensities)


def _eligible(dec: Decision) -> np.ndarray:
    blocked = set(dec.guardrail.blocked) if dec.guardrail is not None else set()
    return np.array([a not in blocked for a in dec.ranking])


def _concrete_subclasses(cls: type) -> set[type]:
    subs = set()
    for sub in cls.__subclasses__():
        if not inspect.isabstract(sub):
            subs.add(sub)
        subs |= _concrete_subclasses(sub)
    return subs


def test_the_algorithms_and_baselines_are_registered() -> None:
    algorithms = {
        "linucb",
        "hybrid_linucb",
        "diag_linucb",
        "lnucb_ta",
        "guardrailed_linucb",
        "hare",
        "discounted_linucb",
        "sliding_window_linucb",
    }
    baselines = {"random", "epsilon_greedy"}
    assert set(POLICIES) == algorithms | baselines
    assert all(cls.NAME == name for name, cls in POLICIES.items())
    engine = {
        c for c in _concrete_subclasses(BasePolicy) if c.__module__.startswith("bandit_core.")
    }
    assert engine == set(POLICIES.values())  # every policy of the engine is registered


def test_a_policy_without_its_hooks_cannot_be_built() -> None:
    class NoScore(BasePolicy):
        NAME = "no_score"

        def _new_arm_state(self):  # type: ignore[no-untyped-def]
            return None

        def _update(self, arm_id, state, x, reward, ctx):  # type: ignore[no-untyped-def]
            pass

    with pytest.raises(TypeError, match="abstract method '?_score"):
        NoScore(PolicyConfig(d=1))


@pytest.mark.parametrize("name", NAMES)
def test_decision_shape_invariants(name: str) -> None:
    policy = _make(name, seed=0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        X = _X(rng)
        dec = policy.select(ARMS, X)
        assert isinstance(dec, Decision)
        assert sorted(dec.ranking) == sorted(ARMS)
        assert dec.ranking[0] == dec.arm_id
        assert dec.scores.shape == dec.propensities.shape == (len(ARMS),)
        assert dec.widths is None or dec.widths.shape == (len(ARMS),)
        assert ((dec.propensities >= 0) & (dec.propensities <= 1)).all()
        eligible = _eligible(dec)
        assert dec.propensities[eligible].sum() == pytest.approx(1.0, abs=1e-12)
        assert (dec.propensities[~eligible] == 0).all()
        assert dec.propensity == dec.propensities[0] > 0
        policy.update(dec.arm_id, X[ARMS.index(dec.arm_id)], float(rng.uniform()))


@pytest.mark.parametrize("name", NAMES)
def test_propensities_follow_the_epsilon_formula(name: str) -> None:
    """(1 - eps) * 1[score = greedy score] / #tied + eps / K_eligible, checked on the
    decisions that served the greedy arm (explored False)."""
    eps = 0.3
    policy = _make(name, seed=2, epsilon=eps)
    rng = np.random.default_rng(3)
    _train(policy, rng)
    checked = explored = 0
    for _ in range(60):
        dec = policy.select(ARMS, _X(rng))
        if dec.explored:
            explored += 1
            continue
        eligible = _eligible(dec)
        tied = eligible & (dec.scores == dec.scores[0])
        expected = np.where(eligible, eps / eligible.sum(), 0.0) + np.where(
            tied, (1 - eps) / tied.sum(), 0.0
        )
        np.testing.assert_allclose(dec.propensities, expected, rtol=0, atol=1e-12)
        checked += 1
    assert checked > 0 and explored > 0  # P(no exploration in 60 draws at eps=0.3) ~ 5e-10


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_decisions(name: str) -> None:
    _same(
        _decisions(_make(name, seed=7, epsilon=0.2), 5),
        _decisions(_make(name, seed=7, epsilon=0.2), 5),
    )


@pytest.mark.parametrize("name", NAMES)
def test_bytes_round_trip_gives_bit_identical_later_decisions(name: str) -> None:
    policy = _make(name, seed=11, epsilon=0.2)
    _train(policy, np.random.default_rng(12))
    data = policy.to_bytes()
    clone = type(policy).from_bytes(data)
    also = bandit_core.policy_from_bytes(data)
    assert clone.to_bytes() == data == also.to_bytes()
    later = _decisions(policy, 13)
    _same(later, _decisions(clone, 13))
    _same(later, _decisions(also, 13))


@pytest.mark.parametrize("name", NAMES)
def test_exported_parts_reproduce_scores_in_a_fresh_policy(name: str) -> None:
    """Parts carry the model; a fresh policy importing them scores every candidate the
    same (the RNG is not part of the parts, so compare scores per arm, explore off)."""
    policy = _make(name, seed=21)
    _train(policy, np.random.default_rng(22))
    fresh = _make(name, seed=99)
    fresh.import_parts(policy.export_parts(policy.part_names()))
    assert sorted(fresh.part_names()) == sorted(policy.part_names())
    rng = np.random.default_rng(23)
    for _ in range(5):
        X = _X(rng)
        da, db = policy.select(ARMS, X, explore=False), fresh.select(ARMS, X, explore=False)
        assert dict(zip(da.ranking, da.scores.tolist())) == dict(
            zip(db.ranking, db.scores.tolist())
        )


@pytest.mark.parametrize("name", NAMES)
def test_single_arm_part_moves_alone(name: str) -> None:
    policy = _make(name, seed=31)
    _train(policy, np.random.default_rng(32))
    other = _make(name, seed=31)
    other.import_parts(policy.export_parts(policy.parts_for_update("c")))
    assert other.arm_stats("c") == policy.arm_stats("c")
    assert policy.export_parts(["arm:c"]) == other.export_parts(["arm:c"])


@pytest.mark.parametrize("name", NAMES)
def test_cold_start_of_new_arms(name: str) -> None:
    policy = _make(name, seed=41)
    rng = np.random.default_rng(42)
    _train(policy, rng)
    new = ["a", "b", "new-1", "new-2"]
    dec = policy.select(new, _X(rng, 4))
    assert sorted(dec.ranking) == sorted(new)
    if not _keeps_arm_parts(
        policy
    ):  # a shared model: new ids are scored and learned from, statelessly
        assert not any(p.startswith("arm:") for p in (*dec.state_changed, *policy.part_names()))
        before = policy.export_parts(policy.part_names())
        policy.update("new-1", _X(rng, 1)[0], 1.0)
        assert policy.export_parts(policy.part_names()).keys() == before.keys()
        assert policy.export_parts(policy.part_names()) != before
        return
    assert "arm:a" not in dec.state_changed
    assert {"new-1", "new-2"} <= set(policy.arm_ids)
    # a new arm's part a store is not told to save is the prior any policy starts it with
    unsaved = [f"arm:{a}" for a in ("new-1", "new-2") if f"arm:{a}" not in dec.state_changed]
    fresh = _make(name, seed=43)
    fresh.import_parts(policy.export_parts([p for p in dec.state_changed if p != "arm:a"]))
    fresh.select(new, _X(rng, 4))
    assert fresh.export_parts(unsaved) == policy.export_parts(unsaved)
    assert policy.arm_stats("new-1").rewarded == 0 and policy.arm_stats("new-1").reward_sum == 0.0
    policy.update("new-1", _X(rng, 1)[0], 1.0)
    assert policy.arm_stats("new-1").rewarded == 1 and policy.arm_stats("new-1").reward_sum == 1.0


@pytest.mark.parametrize("name", NAMES)
def test_retire_arm(name: str) -> None:
    policy = _make(name, seed=51)
    rng = np.random.default_rng(52)
    _train(policy, rng)
    policy.retire_arm("b")
    assert "b" not in policy.arm_ids and "arm:b" not in policy.part_names()
    with pytest.raises(UnknownArmError, match="arm 'b' was retired"):
        policy.select(ARMS, _X(rng))
    with pytest.raises(UnknownArmError, match="arm 'b' was retired"):
        policy.update("b", _X(rng, 1)[0], 1.0)
    restored = type(policy).from_bytes(policy.to_bytes())
    with pytest.raises(UnknownArmError, match="retired"):
        restored.select(ARMS, _X(rng))
    policy.add_arm("b")
    assert policy.arm_stats("b").rewarded == 0
    assert "b" in policy.select(ARMS, _X(rng)).ranking
    # forget_arm drops a learned arm's state without retiring it: it starts over
    policy.forget_arm("c")
    assert "c" not in policy.arm_ids and "arm:c" not in policy.part_names()
    assert "c" in policy.select(ARMS, _X(rng)).ranking
    if _keeps_arm_parts(policy):
        assert policy.arm_stats("c").rewarded == 0 and policy.arm_stats("c").reward_sum == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_explore_false_serves_the_greedy_arm(name: str) -> None:
    policy = _make(name, seed=61, epsilon=1.0)
    rng = np.random.default_rng(62)
    _train(policy, rng)
    for _ in range(10):
        X = _X(rng)
        greedy = policy.select(ARMS, X, explore=False)
        assert not greedy.explored
        eligible = _eligible(greedy)
        tied = eligible & (greedy.scores == greedy.scores[0])
        np.testing.assert_allclose(
            greedy.propensities, np.where(tied, 1.0 / tied.sum(), 0.0), atol=1e-12
        )
        explored = policy.select(ARMS, X)
        assert explored.explored
        np.testing.assert_allclose(
            explored.propensities, np.where(_eligible(explored), 1 / eligible.sum(), 0.0)
        )


def _invalid_calls():
    x_ok = np.zeros(D)
    X_ok = np.zeros((3, D))
    nan_X = X_ok.copy()
    nan_X[1, 2] = np.nan
    inf_x = x_ok.copy()
    inf_x[3] = np.inf
    return [
        (
            "X wrong dimension",
            lambda p: p.select(["a", "b", "c"], np.zeros((3, D + 1))),
            InvalidInputError,
            rf"X must have shape \(K, d\) = \(3, {D}\), but got \(3, {D + 1}\)",
        ),
        (
            "X wrong rows",
            lambda p: p.select(["a", "b", "c"], np.zeros((2, D))),
            InvalidInputError,
            r"X must have shape \(K, d\) = \(3, ",
        ),
        (
            "X NaN",
            lambda p: p.select(["a", "b", "c"], nan_X),
            InvalidInputError,
            r"X must be finite, but X\[1, 2\] is nan",
        ),
        (
            "X strings",
            lambda p: p.select(["a"], [["1"] * D]),
            InvalidInputError,
            "X must be .* of real numbers",
        ),
        (
            "x inf",
            lambda p: p.update("a", inf_x, 1.0),
            InvalidInputError,
            r"x must be finite, but x\[3\] is inf",
        ),
        (
            "x wrong dimension",
            lambda p: p.update("a", np.zeros(D - 1), 1.0),
            InvalidInputError,
            rf"x must have shape \({D},\), but got \({D - 1},\)",
        ),
        (
            "empty candidates",
            lambda p: p.select([], np.zeros((0, D))),
            InvalidInputError,
            "arm_ids must hold at least one candidate arm",
        ),
        (
            "duplicate ids",
            lambda p: p.select(["a", "b", "a"], X_ok),
            InvalidInputError,
            "'a' appears more than once",
        ),
        (
            "single str ids",
            lambda p: p.select("abc", X_ok),
            InvalidInputError,
            "arm_ids must be a sequence of str",
        ),
        (
            "non-str id",
            lambda p: p.select(["a", 2, "c"], X_ok),
            InvalidInputError,
            "every arm id must be a non-empty str",
        ),
        (
            "unknown arm in update",
            lambda p: p.update("zzz", x_ok, 1.0),
            UnknownArmError,
            "arm 'zzz' is not known to this policy",
        ),
        (
            "reward out of range",
            lambda p: p.update("a", x_ok, 1.5),
            InvalidInputError,
            r"reward must be a finite number in \[0.0, 1.0\], but got 1.5",
        ),
        (
            "reward NaN",
            lambda p: p.update("a", x_ok, float("nan")),
            InvalidInputError,
            "reward must be a finite number",
        ),
        (
            "reward not a number",
            lambda p: p.update("a", x_ok, "1"),
            InvalidInputError,
            "reward must be a number, but got str",
        ),
    ]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("case", "call", "error", "match"), _invalid_calls(), ids=[c[0] for c in _invalid_calls()]
)
def test_invalid_input_is_rejected(name: str, case: str, call, error: type, match: str) -> None:
    policy = _make(name, seed=0)
    policy.select(["a", "b", "c"], np.random.default_rng(0).normal(size=(3, D)))
    before = policy.to_bytes()
    if case == "unknown arm in update" and not _keeps_arm_parts(policy):
        call(policy)  # a shared model learns from any arm id: there is no arm state to look up
        assert policy.part_names() == ["shared"] and policy.to_bytes() != before
        return
    with pytest.raises(error, match=match):
        call(policy)
    assert (
        policy.to_bytes() == before
    )  # a rejected call changes no state and draws no random number


@pytest.mark.parametrize("name", NAMES)
def test_decision_fields_read_later_equal_fields_read_at_once(name: str) -> None:
    """A Decision computes ranking, scores, widths and propensities on first read; reading
    them after later selections and updates gives what reading them at once gave."""
    params = {"epsilon": 0.3} if name != "hare" else {}
    now, late = _make(name, seed=8, **params), _make(name, seed=8, **params)
    rng = np.random.default_rng(8)
    held = []
    for _ in range(25):
        X = rng.integers(0, 2, size=(len(ARMS), D)).astype(float)  # exact ties are common
        a, b = now.select(ARMS, X), late.select(ARMS, X)
        _ = (a.ranking, a.scores, a.widths, a.propensities)
        held.append((a, b))
        reward = float(rng.integers(0, 2))
        for p, dec in ((now, a), (late, b)):
            p.update(dec.arm_id, X[ARMS.index(dec.arm_id)], reward)
    _same([a for a, _ in held], [b for _, b in held])
    for a, b in held:
        assert a.propensity == b.propensity and (a.widths is None) == (b.widths is None)
        if a.widths is not None:
            np.testing.assert_array_equal(a.widths, b.widths)


def test_a_decision_behaves_as_the_dataclass_it_is() -> None:
    import dataclasses
    import pickle

    p = make_policy("linucb", d=D, seed=0)
    dec = p.select(ARMS, np.ones((len(ARMS), D)))
    again = pickle.loads(pickle.dumps(dec))
    moved = dataclasses.replace(dec, state_changed=("shared",))
    for d in (again, moved):
        assert d.arm_id == dec.arm_id and d.ranking == dec.ranking and d.ranking[0] == dec.arm_id
        np.testing.assert_array_equal(d.propensities, dec.propensities)
    assert moved.state_changed == ("shared",) and repr(dec).startswith("Decision(arm_id=")
    assert [f.name for f in dataclasses.fields(dec)] == [
        "arm_id",
        "explored",
        "plan",
        "guardrail",
        "state_changed",
        "extras",
    ]
    assert dataclasses.asdict(dec)["arm_id"] == dec.arm_id
    fixed = Decision(
        arm_id="b",
        explored=False,
        plan=FixedRanking(("b", "a"), np.array([1.0, 2.0]), None, np.array([1.0, 0.0])),
    )
    assert fixed.ranking == ("b", "a") and fixed.propensity == 1.0 and fixed.widths is None
    with pytest.raises(AttributeError, match="no attribute 'rank'"):
        dec.rank  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError):
        dec.arm_id = "b"  # type: ignore[misc]


def test_arm_ids_checked_against_the_last_list_select_checked() -> None:
    class EqualToB:  # not a str, yet equal to the known id "b"
        def __eq__(self, other: object) -> bool:
            return other == "b"

        __hash__ = None  # type: ignore[assignment]

    known = check_arm_ids(["a", "b", "c"])
    again = check_arm_ids(["a", "b", "c"], known)
    assert again == known and again is not known
    with pytest.raises(InvalidInputError, match="every arm id must be a non-empty str, but got <"):
        check_arm_ids(["a", EqualToB(), "c"], known)
    with pytest.raises(InvalidInputError, match="'a' appears more than once"):
        check_arm_ids(["a", "b", "a"], known)
    policy = make_policy("linucb", d=D, seed=0)
    X = np.random.default_rng(0).normal(size=(3, D))
    policy.select(["a", "b", "c"], X)
    policy.select(["a", "b", "c"], X)  # an equal list: the cheap check
    with pytest.raises(InvalidInputError, match="every arm id must be a non-empty str"):
        policy.select(["a", EqualToB(), "c"], X)
