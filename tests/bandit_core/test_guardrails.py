"""Guardrails and guardrailed LinUCB (docs/algorithms.md sections 3.1-3.2)."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bandit_core import ConfigError, InvalidInputError, NoEligibleArmError, make_policy
from bandit_core.guardrailed_linucb import GuardrailedLinUCB, GuardrailedLinUCBConfig
from bandit_core.guardrails import (
    GuardrailContext,
    GuardrailSet,
    Verdict,
    Verdicts,
    build_guardrail,
)
from bandit_core.linucb import LinUCB, LinUCBConfig

HERE = "tests.bandit_core.test_guardrails"


# ---- user guardrails loaded by import path in the tests below --------------------------


def block_odd_index(
    arm_id: str, x: np.ndarray, ctx: GuardrailContext, suffix: str = "1"
) -> Verdict:
    """A per-arm predicate: blocks arms whose id ends in ``suffix``."""
    if arm_id.endswith(suffix):
        return Verdict(False, f"id ends in {suffix}")
    return Verdict(True)


def block_by_first_feature(arm_id: str, x: np.ndarray, ctx: GuardrailContext) -> bool:
    """A predicate returning a bare bool: allowed while x[0] <= 0.5."""
    return bool(x[0] <= 0.5)


def returns_garbage(arm_id: str, x: np.ndarray, ctx: GuardrailContext) -> str:
    return "yes"


class NormCap:
    """A vectorised user guardrail: blocks rows whose norm exceeds ``limit``."""

    def __init__(self, limit: float) -> None:
        self.limit = limit

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        norms = np.linalg.norm(ctx.X, axis=1)
        return Verdicts(norms <= self.limit, [f"norm {n:.2f} > {self.limit}" for n in norms])


class FirstOnly:
    """A broken vectorised guardrail: one verdict whatever K is."""

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        return Verdicts(np.array([False]), ["no"])


class NotAGuardrail:
    def __init__(self) -> None:
        pass


NOT_CALLABLE = 3


def _policy(
    guardrails: list[dict[str, Any]], safe_arm: str | None = None, **kw: Any
) -> GuardrailedLinUCB:
    kw.setdefault("d", 2)
    return make_policy("guardrailed_linucb", guardrails=guardrails, safe_arm=safe_arm, **kw)  # type: ignore[return-value]


def _screen(specs: list[dict[str, Any]], ctx: GuardrailContext, safe_arm: str | None = None):
    gs = GuardrailSet(specs, safe_arm)
    state = gs.new_state()
    return gs.screen(ctx, np.arange(len(ctx.arm_ids)), state), state


# ---- the engine ------------------------------------------------------------------------


def test_make_policy_with_defaults_behaves_as_linucb() -> None:
    g = make_policy("guardrailed_linucb", d=3, seed=5)
    plain = LinUCB(LinUCBConfig(d=3, seed=5))
    rng = np.random.default_rng(0)
    ids = ["a", "b", "c", "d"]
    for _ in range(200):
        X = rng.random((4, 3))
        dg, dp = g.select(ids, X), plain.select(ids, X)
        assert (dg.arm_id, dg.ranking) == (dp.arm_id, dp.ranking)
        np.testing.assert_array_equal(dg.scores, dp.scores)
        assert (
            dg.guardrail is not None
            and not dg.guardrail.blocked
            and not dg.guardrail.argmax_blocked
        )
        assert dg.guardrail.unconstrained_arm_id == dg.arm_id
        assert "shared" in dg.state_changed
        r = float(rng.random() < 0.5)
        g.update(dg.arm_id, X[ids.index(dg.arm_id)], r)
        plain.update(dp.arm_id, X[ids.index(dp.arm_id)], r)
    assert g.policy_stats() == {"decisions": 200.0, "delta_g": 0.0, "safe_arm_served": 0.0}
    assert "shared" in g.parts_for_select(ids)


ARMS = [f"a{i}" for i in range(5)]
SAFE = "safe"


@st.composite
def guarded_runs(
    draw: st.DrawFn,
) -> tuple[list[dict[str, Any]], float, list[tuple[list[str], float]]]:
    specs: list[dict[str, Any]] = [
        {
            "type": "feature_threshold",
            "feature": "f",
            "op": draw(st.sampled_from(["<", ">=", "!="])),
            "value": draw(st.sampled_from([0.25, 0.5, 0.75])),
            "arms": draw(st.lists(st.sampled_from(ARMS), min_size=1, max_size=5, unique=True)),
        },
        {
            "type": "exposure_cap",
            "max_share": draw(st.sampled_from([0.2, 0.34, 0.5])),
            "window": draw(st.integers(5, 12)),
        },
        {
            "type": "budget",
            "budgets": {
                a: float(draw(st.integers(0, 6)))
                for a in draw(st.lists(st.sampled_from(ARMS), max_size=3, unique=True))
            }
            or {"a0": 3.0},
        },
        {"type": "min_estimate", "min_pulls": 3, "min_value": draw(st.sampled_from([0.2, 0.5]))},
    ]
    epsilon = draw(st.sampled_from([0.0, 0.3]))
    steps = draw(
        st.lists(
            st.tuples(
                st.lists(st.sampled_from(ARMS + [SAFE]), min_size=1, max_size=6, unique=True),
                st.floats(0, 1),
            ),
            min_size=5,
            max_size=40,
        )
    )
    return specs, epsilon, steps


@settings(max_examples=200, deadline=None)
@given(run=guarded_runs(), seed=st.integers(0, 2**16))
def test_a_blocked_arm_is_never_served(run, seed: int) -> None:
    specs, epsilon, steps = run
    p = _policy(specs, SAFE, epsilon=epsilon, seed=seed, alpha=0.5)
    rng = np.random.default_rng(seed)
    served: list[str] = []
    for ids, f in steps:
        X = rng.random((len(ids), 2))
        try:
            dec = p.select(ids, X, features={"f": f})
        except NoEligibleArmError:
            assert SAFE not in ids
            continue
        out = dec.guardrail
        assert dec.arm_id not in out.blocked
        assert SAFE not in out.blocked  # assumption 5: the safe arm passes every guardrail
        n_blocked = len(out.blocked)
        assert set(dec.ranking[len(ids) - n_blocked :]) == set(out.blocked)
        assert not dec.propensities[len(ids) - n_blocked :].any()
        assert math.isclose(dec.propensities.sum(), 1.0)
        assert all(reasons for reasons in out.blocked.values())
        assert out.argmax_blocked == (out.unconstrained_arm_id in out.blocked)
        assert out.safe_arm_served == (dec.arm_id == SAFE and n_blocked == len(ids) - 1 > 0)
        served.append(dec.arm_id)
        p.update(dec.arm_id, X[ids.index(dec.arm_id)], float(rng.random() < 0.5))
    # Exposure cap: any `window` consecutive decisions serve a judged arm at most cap times.
    cap_spec = specs[1]
    cap, w = math.floor(cap_spec["max_share"] * cap_spec["window"] + 1e-9), cap_spec["window"]
    for start in range(max(1, len(served) - w + 1)):
        window = served[start : start + w]
        assert all(window.count(a) <= cap for a in ARMS)
    # Budget: no arm spends past its budget.
    for arm, total in specs[2]["budgets"].items():
        assert served.count(arm) <= total


def test_safe_arm_served_when_everything_else_is_blocked() -> None:
    spec = {"type": "feature_threshold", "feature": "age", "op": "<", "value": 18}
    p = _policy([spec], safe_arm="water", alpha=0.0)
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    p.add_arm("beer")
    for _ in range(5):
        p.update("beer", X[0], 1.0)  # beer is the unconstrained argmax
    dec = p.select(["beer", "wine", "water"], X, features={"age": 15})
    assert dec.arm_id == "water"
    assert dec.guardrail.safe_arm_served and dec.guardrail.argmax_blocked
    assert dec.guardrail.unconstrained_arm_id == "beer"
    assert dec.guardrail.blocked == {
        "beer": ("feature_threshold: feature age = 15 < 18",),
        "wine": ("feature_threshold: feature age = 15 < 18",),
    }
    assert dec.ranking[0] == "water" and dec.propensity == 1.0
    # Not everything blocked: the safe arm is not a fallback.
    adult = p.select(["beer", "wine", "water"], X, features={"age": 40})
    assert adult.arm_id == "beer" and not adult.guardrail.safe_arm_served
    # Safe arm not among the candidates: no arm to serve.
    with pytest.raises(
        NoEligibleArmError,
        match=r"blocked every candidate \(beer: .*wine: .*\) and the safe arm 'water'",
    ):
        p.select(["beer", "wine"], X[:2], features={"age": 15})
    assert p.policy_stats()["decisions"] == 2.0  # the refused request counts nothing
    assert p.policy_stats()["safe_arm_served"] == 0.5


def test_no_safe_arm_and_everything_blocked_raises() -> None:
    p = _policy([{"type": "feature_threshold", "feature": "age", "op": "<", "value": 18}])
    with pytest.raises(NoEligibleArmError, match="safe arm None"):
        p.select(["a", "b"], np.eye(2), features={"age": 3})


def test_delta_g_counts_exactly_the_blocked_argmax_decisions() -> None:
    # alpha = 0 and a trained arm "a" make "a" the unconstrained argmax in every decision.
    specs = [
        {
            "type": "feature_threshold",
            "name": "hot",
            "feature": "t",
            "op": ">",
            "value": 0.5,
            "arms": ["a"],
        },
        {
            "type": "feature_threshold",
            "name": "late",
            "feature": "h",
            "op": ">=",
            "value": 22,
            "arms": ["a", "b"],
        },
        {
            "type": "feature_threshold",
            "name": "b_only",
            "feature": "t",
            "op": "<",
            "value": 0.5,
            "arms": ["b"],
        },
    ]
    p = _policy(specs, safe_arm="c", alpha=0.0, d=1)
    x = np.ones((3, 1))
    p.add_arm("a")
    p.add_arm("b")
    p.update("a", x[0], 1.0)
    p.update("b", x[0], 0.5)  # UCB order a > b > c
    features = [
        {"t": 0.9, "h": 10},  # a blocked by hot
        {"t": 0.1, "h": 10},  # b blocked by b_only; argmax a passes
        {"t": 0.9, "h": 23},  # a blocked by hot and late; b blocked by late -> safe arm
        {"t": 0.2, "h": 23},  # a blocked by late; b by late and b_only -> safe arm
        {"t": 0.3, "h": 1},  # b blocked by b_only
        {"t": 0.5, "h": 1},  # nothing blocked
    ]
    decisions = [p.select(["a", "b", "c"], x, features=f) for f in features]
    assert [d.guardrail.unconstrained_arm_id for d in decisions] == ["a"] * 6
    assert [d.guardrail.argmax_blocked for d in decisions] == [
        True,
        False,
        True,
        True,
        False,
        False,
    ]
    assert [d.arm_id for d in decisions] == ["b", "a", "c", "c", "a", "a"]
    assert p.policy_stats() == {
        "decisions": 6.0,
        "delta_g": 3 / 6,
        "safe_arm_served": 2 / 6,
        "delta_g:hot": 2 / 6,
        "delta_g:late": 2 / 6,
        "delta_g:b_only": 0.0,  # it blocked b four times, never the argmax
    }


# ---- built-in predicates on constructed cases ------------------------------------------


@pytest.mark.parametrize(
    ("op", "value", "blocked"),
    [
        ("<", 18, True),
        ("<", 17, False),
        ("<=", 17, True),
        (">", 16, True),
        (">", 17, False),
        (">=", 17, True),
        ("==", 17, True),
        ("==", 18, False),
        ("!=", 18, True),
        ("!=", 17, False),
    ],
)
def test_feature_threshold_ops(op: str, value: float, blocked: bool) -> None:
    spec = {
        "type": "feature_threshold",
        "feature": "age",
        "op": op,
        "value": value,
        "arms": ["beer"],
    }
    ctx = GuardrailContext.build(["beer", "juice"], np.zeros((2, 1)), {"age": 17})
    screen, _ = _screen([spec], ctx)
    assert screen.eligible.tolist() == [not blocked, True]


def test_feature_threshold_missing_feature_and_bad_value() -> None:
    base = {"type": "feature_threshold", "feature": "age", "op": "<", "value": 18}
    ctx = GuardrailContext.build(["a", "b", "s"], np.zeros((3, 1)), {"other": 1.0})
    screen, _ = _screen([base], ctx, safe_arm="s")
    assert screen.eligible.tolist() == [False, False, True]
    assert screen.outcome.blocked["a"] == (
        "feature_threshold: feature age missing from the request",
    )
    screen, _ = _screen(
        [{**base, "on_missing": "allow"}], GuardrailContext.build(["a", "b"], np.zeros((2, 1)))
    )
    assert screen.eligible.tolist() == [True, True]
    with pytest.raises(
        InvalidInputError, match=r"features\['age'\] must be a finite number, but got 'old'"
    ):
        _screen([base], GuardrailContext.build(["a"], np.zeros((1, 1)), {"age": "old"}))


def test_exposure_cap_blocks_over_a_sliding_window() -> None:
    # cap = floor(0.5 * 4) = 2 selections in any 4 consecutive decisions.
    gs = GuardrailSet([{"type": "exposure_cap", "max_share": 0.5, "window": 4}])
    state = gs.new_state()
    ctx = GuardrailContext.build(["a", "b"], np.zeros((2, 1)))
    order = np.array([0, 1])
    expected_eligible_a = []
    for served in ["a", "a", "b", "b", "a", "b", "a"]:
        expected_eligible_a.append(bool(gs.screen(ctx, order, state).eligible[0]))
        gs.record(state, served)
    # history before each decision: -, a, aa, aab, aabb, (a)abba..., window holds the last 3
    assert expected_eligible_a == [True, True, False, False, True, True, True]
    assert state.guards["exposure_cap"]["recent"] == ["a", "b", "a"]
    assert state.guards["exposure_cap"]["counts"] == {"a": 2, "b": 1}
    screen = gs.screen(ctx, order, state)
    assert screen.eligible.tolist() == [False, True]
    assert screen.outcome.blocked["a"] == (
        "exposure_cap: served 2 of the last 3 decisions; cap 2 per 4",
    )


def test_budget_spends_cost_per_selection() -> None:
    spec = {
        "type": "budget",
        "name": "spend",
        "budgets": {"premium": 2.5, "gold": 3.0},
        "cost": {"premium": 1.0, "gold": 1.5},
    }
    p = _policy([spec], safe_arm="basic", alpha=0.0, d=1)
    x = np.ones((3, 1))
    p.add_arm("premium")
    p.add_arm("gold")
    p.update("premium", x[0], 1.0)
    p.update("gold", x[0], 0.5)
    served = [p.select(["premium", "gold", "basic"], x).arm_id for _ in range(6)]
    assert served == ["premium", "premium", "gold", "gold", "basic", "basic"]
    stats = p.policy_stats()
    assert stats["budget_remaining:spend:premium"] == 0.5
    assert stats["budget_remaining:spend:gold"] == 0.0
    assert stats["delta_g:spend"] == 4 / 6  # premium blocked as argmax from decision 3 on
    dec = p.select(["premium", "gold", "basic"], x)
    assert dec.guardrail.blocked["premium"] == ("spend: remaining budget 0.5 < cost 1",)
    assert dec.guardrail.safe_arm_served


def test_conservative_rule_compares_lower_confidence_bounds() -> None:
    spec = {"type": "conservative", "baseline": "base", "margin": 0.1}
    ids = ["base", "close", "far", "new"]
    means = np.array([0.6, 0.5, 0.5, 0.0])
    widths = np.array([0.1, 0.19, 0.21, 1.0])
    pulls = np.array([50, 20, 20, 0])
    ctx = GuardrailContext.build(
        ids, np.zeros((4, 1)), means=means, widths=widths, alpha=0.5, pulls=pulls
    )
    # LCB = mean - 0.5 * width = 0.55, 0.405, 0.395, -0.5; floor = 0.55 - 0.1 = 0.45
    screen, _ = _screen([spec], ctx)
    assert screen.eligible.tolist() == [True, False, False, False]
    screen, _ = _screen([{**spec, "margin": 0.15}], ctx)  # floor 0.40
    assert screen.eligible.tolist() == [True, True, False, False]
    screen, _ = _screen(
        [{**spec, "margin": 0.15, "min_pulls": 1}], ctx
    )  # the cold arm is not judged
    assert screen.eligible.tolist() == [True, True, False, True]
    assert screen.outcome.blocked["far"] == (
        "conservative: LCB 0.395 < baseline base LCB - margin = 0.4",
    )
    no_base = GuardrailContext.build(
        ids[1:], np.zeros((3, 1)), means=means[1:], widths=widths[1:], alpha=0.5
    )
    screen, _ = _screen([spec], no_base)
    assert screen.eligible.all()


def test_conservative_rule_in_the_policy_uses_the_policy_alpha() -> None:
    p = _policy(
        [{"type": "conservative", "baseline": "base", "margin": 0.0, "min_pulls": 1}],
        alpha=1.0,
        d=1,
    )
    x = np.ones((2, 1))
    p.add_arm("base")
    p.add_arm("new")
    for _ in range(99):
        p.update("base", x[0], 0.5)  # A = 100, theta = 49.5/100, width 0.1: LCB 0.395
    for _ in range(3):
        p.update("new", x[0], 1.0)  # A = 4, theta = 0.75, width 0.5: LCB 0.25, UCB 1.25
    dec = p.select(["base", "new"], x)
    assert dec.guardrail.unconstrained_arm_id == "new" and dec.guardrail.argmax_blocked
    assert dec.arm_id == "base"
    assert dec.guardrail.blocked["new"] == (
        "conservative: LCB 0.25 < baseline base LCB - margin = 0.395",
    )


def test_min_estimate_after_m_pulls() -> None:
    ids = ["a", "b", "c"]
    ctx = GuardrailContext.build(
        ids,
        np.zeros((3, 1)),
        means=np.array([0.9, 0.05, 0.3]),
        pulls=np.array([10, 10, 9]),
        mean_rewards=np.array([0.05, 0.5, 0.0]),
    )
    spec = {"type": "min_estimate", "min_pulls": 10, "min_value": 0.1}
    screen, _ = _screen([spec], ctx)
    assert screen.eligible.tolist() == [False, True, True]  # c has only 9 pulls
    assert screen.outcome.blocked["a"] == ("min_estimate: mean_reward 0.05 < 0.1 after 10 pulls",)
    screen, _ = _screen([{**spec, "estimate": "predicted"}], ctx)
    assert screen.eligible.tolist() == [True, False, True]


# ---- user predicates -------------------------------------------------------------------


def test_import_path_predicates() -> None:
    ctx = GuardrailContext.build(["x0", "x1", "y1"], np.array([[0.0, 0.0], [0.9, 0.0], [0.1, 3.0]]))
    screen, _ = _screen([{"type": "import", "path": f"{HERE}:block_odd_index"}], ctx)
    assert screen.eligible.tolist() == [True, False, False]
    assert screen.outcome.blocked["x1"] == ("block_odd_index: id ends in 1",)
    screen, _ = _screen(
        [{"type": "import", "path": f"{HERE}:block_odd_index", "params": {"suffix": "0"}}], ctx
    )
    assert screen.eligible.tolist() == [False, True, True]
    screen, _ = _screen(
        [{"type": "import", "name": "x0", "path": f"{HERE}:block_by_first_feature"}], ctx
    )
    assert screen.eligible.tolist() == [True, False, True]
    screen, _ = _screen(
        [{"type": "import", "path": f"{HERE}:NormCap", "params": {"limit": 1.0}}], ctx
    )
    assert screen.eligible.tolist() == [True, True, False]
    assert screen.outcome.blocked["y1"] == ("NormCap: norm 3.00 > 1.0",)
    # Scope: only the listed arms are asked.
    screen, _ = _screen(
        [{"type": "import", "path": f"{HERE}:block_odd_index", "arms": ["x0", "x1"]}], ctx
    )
    assert screen.eligible.tolist() == [True, False, True]
    with pytest.raises(
        InvalidInputError, match="must return a Verdict or a bool, but returned str"
    ):
        _screen([{"type": "import", "path": f"{HERE}:returns_garbage"}], ctx)


def test_import_path_predicate_in_a_policy_keeps_the_safe_arm_exempt() -> None:
    p = _policy([{"type": "import", "path": f"{HERE}:block_odd_index"}], safe_arm="s1", alpha=0.0)
    dec = p.select(["a1", "s1"], np.eye(2))
    assert dec.arm_id == "s1" and dec.guardrail.safe_arm_served
    assert list(dec.guardrail.blocked) == ["a1"]


def test_entry_point_guardrail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_guards.py").write_text(
        textwrap.dedent("""
        from bandit_core.guardrails import Verdict
        def no_vip(arm_id, x, ctx, tag="vip"):
            return Verdict(tag not in arm_id, f"{tag} arm")
    """)
    )
    dist = tmp_path / "my_guards-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-guards\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[bandit_core.guardrails]\nno_vip = my_guards:no_vip\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ctx = GuardrailContext.build(["vip_1", "std", "gold"], np.zeros((3, 1)))
    screen, _ = _screen([{"type": "no_vip"}], ctx)
    assert screen.eligible.tolist() == [False, True, True]
    assert screen.outcome.blocked == {"vip_1": ("no_vip: vip arm",)}
    screen, _ = _screen([{"type": "no_vip", "params": {"tag": "gold"}}], ctx)
    assert screen.eligible.tolist() == [True, True, False]


# ---- configuration errors ----------------------------------------------------------------

FT = {"type": "feature_threshold", "feature": "age", "op": "<", "value": 18}

CONFIG_ERRORS = [
    (
        [{"type": "nope"}],
        None,
        r"unknown guardrail type 'nope'; expected one of \['budget', 'conservative'",
    ),
    ([{"kind": "budget"}], None, r"must be a mapping with a str 'type'"),
    ("feature_threshold", None, r"guardrails must be a list of spec mappings"),
    ([{**FT, "op": "=<"}], None, r"'op' must be one of .*but got '=<'"),
    ([{**FT, "value": "18"}], None, r"'value' must be a finite number, but got '18'"),
    ([{**FT, "treshold": 1}], None, r"unknown keys \['treshold'\]; expected some of"),
    ([{"type": "feature_threshold", "feature": "age", "op": "<"}], None, r"needs keys \['value'\]"),
    (
        [{**FT, "on_missing": "maybe"}],
        None,
        r"'on_missing' must be one of \['block', 'allow'\], but got 'maybe'",
    ),
    ([{**FT, "arms": "beer"}], None, r"'arms' must be a list of arm ids or null, but got 'beer'"),
    (
        [{**FT, "arms": ["safe", "beer"]}],
        "safe",
        r"safe_arm 'safe' is judged by guardrail 'feature_threshold'",
    ),
    ([FT, FT], None, r"names must be unique, but \['feature_threshold'\] appear more than once"),
    ([{**FT, "name": "a:b"}], None, r"'name' must be a non-empty str without ':'"),
    (
        [{"type": "exposure_cap", "max_share": 0.05, "window": 10}],
        None,
        r"max_share \* window >= 1",
    ),
    ([{"type": "exposure_cap", "max_share": 1.5, "window": 10}], None, r"0 < max_share <= 1"),
    (
        [{"type": "exposure_cap", "max_share": 0.5, "window": 0}],
        None,
        r"'window' must be a positive int, but got 0",
    ),
    ([{"type": "budget", "budgets": {}}], None, r"'budgets' must be a non-empty"),
    ([{"type": "budget", "budgets": {"a": -1.0}}], None, r"budgets >= 0 and costs > 0"),
    ([{"type": "budget", "budgets": {"a": 1.0}, "cost": 0}], None, r"budgets >= 0 and costs > 0"),
    (
        [{"type": "budget", "budgets": {"a": 1.0, "b": 2.0}, "cost": {"a": 1.0}}],
        None,
        r"misses \['b'\]",
    ),
    (
        [{"type": "budget", "budgets": {"a": 1.0}, "arms": ["a"]}],
        None,
        r"takes its arms from its parameters",
    ),
    (
        [{"type": "budget", "budgets": {"safe": 1.0}}],
        "safe",
        r"safe_arm 'safe' is judged by guardrail 'budget'",
    ),
    (
        [{"type": "conservative", "baseline": "b", "margin": -0.1}],
        None,
        r"'margin' must be a finite number >= 0, but got -0.1",
    ),
    (
        [{"type": "conservative", "baseline": "b", "arms": ["safe"]}],
        "safe",
        r"safe_arm 'safe' is judged",
    ),
    (
        [{"type": "min_estimate", "min_pulls": 0, "min_value": 0.1}],
        None,
        r"'min_pulls' must be a positive int",
    ),
    (
        [{"type": "min_estimate", "min_pulls": 5, "min_value": 0.1, "estimate": "ucb"}],
        None,
        r"'estimate' must be",
    ),
    ([{"type": "import", "path": "no_colon"}], None, r"must look like 'package.module:callable'"),
    (
        [{"type": "import", "path": "no_such_module_xyz:f"}],
        None,
        r"'no_such_module_xyz:f' cannot be imported",
    ),
    ([{"type": "import", "path": f"{HERE}:missing"}], None, r"cannot be imported: .*missing"),
    (
        [{"type": "import", "path": f"{HERE}:NOT_CALLABLE"}],
        None,
        r"must be a class or a callable, but got int",
    ),
    (
        [{"type": "import", "path": f"{HERE}:NotAGuardrail"}],
        None,
        r"must build an object with evaluate\(ctx\)",
    ),
    (
        [{"type": "import", "path": f"{HERE}:NormCap", "params": {"lim": 1}}],
        None,
        r"rejected params \{'lim': 1\}",
    ),
    (
        [{"type": "import", "path": f"{HERE}:NormCap", "params": [1]}],
        None,
        r"'params' must be a mapping",
    ),
    (
        [{"type": "import", "path": f"{HERE}:NormCap", "limit": 1}],
        None,
        r"unknown keys \['limit'\]",
    ),
    ([{**FT, "value": float("nan")}], None, r"must be JSON-able|finite number"),
    ([{**FT, "value": object()}], None, r"guardrail specs must be JSON-able"),
    ([], "", r"safe_arm must be a non-empty arm id or None, but got ''"),
]


@pytest.mark.parametrize(("guardrails", "safe_arm", "match"), CONFIG_ERRORS)
def test_config_errors(guardrails: Any, safe_arm: str | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_policy("guardrailed_linucb", d=2, guardrails=guardrails, safe_arm=safe_arm)


def test_the_conservative_baseline_may_be_the_safe_arm() -> None:
    p = _policy(
        [{"type": "conservative", "baseline": "safe", "arms": ["safe", "x"]}], safe_arm="safe"
    )
    assert p.guardrails.names == ("conservative",)


def test_build_guardrail_default_names() -> None:
    assert (
        build_guardrail({"type": "import", "path": f"{HERE}:NormCap", "params": {"limit": 1}}).name
        == "NormCap"
    )
    assert build_guardrail({**FT, "name": "adults"}).name == "adults"
    assert build_guardrail({"type": "budget", "budgets": {"a": 1}}).arms == frozenset({"a"})


# ---- state round trips -------------------------------------------------------------------

STATEFUL = [
    {"type": "exposure_cap", "max_share": 0.4, "window": 10},
    {"type": "budget", "budgets": {"a": 6.0, "b": 4.0}, "cost": 1.0},
    {"type": "feature_threshold", "feature": "f", "op": ">", "value": 0.7, "arms": ["a"]},
]


def _drive(p: GuardrailedLinUCB, rng: np.random.Generator, n: int) -> list[tuple[str, bool]]:
    out = []
    for _ in range(n):
        X = rng.random((4, 2))
        dec = p.select(["a", "b", "c", "s"], X, features={"f": float(rng.random())})
        out.append((dec.arm_id, dec.guardrail.argmax_blocked))
        p.update(dec.arm_id, X[["a", "b", "c", "s"].index(dec.arm_id)], float(rng.random() < 0.6))
    return out


def test_guardrail_state_survives_to_bytes_from_bytes() -> None:
    p = _policy(STATEFUL, safe_arm="s", epsilon=0.1, seed=11)
    _drive(p, np.random.default_rng(1), 15)
    q = GuardrailedLinUCB.from_bytes(p.to_bytes())
    assert q.shared_state == p.shared_state and q.shared_state.guards["budget"]["spent"]
    assert q.policy_stats() == p.policy_stats()
    assert _drive(q, np.random.default_rng(2), 30) == _drive(p, np.random.default_rng(2), 30)
    assert q.to_bytes() == p.to_bytes()


def test_guardrail_state_travels_in_the_shared_part() -> None:
    p = _policy(STATEFUL, safe_arm="s", seed=4)
    _drive(p, np.random.default_rng(3), 20)
    spent = dict(p.shared_state.guards["budget"]["spent"])
    assert spent  # the budget was used
    fresh = _policy(STATEFUL, safe_arm="s", seed=4)
    fresh.import_parts(p.export_parts(["shared"]))
    assert fresh.shared_state == p.shared_state
    assert fresh.policy_stats() == p.policy_stats()
    # The whole state split into parts and reassembled decides identically.
    twin = _policy(STATEFUL, safe_arm="s", seed=4)
    twin.import_parts(p.export_parts(p.part_names()))
    twin.rng_state = p.rng_state
    assert _drive(twin, np.random.default_rng(5), 40) == _drive(p, np.random.default_rng(5), 40)
    # Dropping the shared part resets counters and guardrail state.
    fresh.import_parts({"shared": None})
    assert (
        fresh.policy_stats()["decisions"] == 0.0
        and fresh.shared_state.guards["budget"]["spent"] == {}
    )


def test_config_round_trips_through_json() -> None:
    cfg = GuardrailedLinUCBConfig(d=2, guardrails=tuple(STATEFUL), safe_arm="s")
    assert GuardrailedLinUCBConfig(**cfg.to_dict()) == cfg
