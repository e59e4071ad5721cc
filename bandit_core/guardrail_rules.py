"""The guardrails' judging side (docs/algorithms.md section 3): what a guardrail returns
(:class:`Verdict`, :class:`Verdicts`), what it sees (:class:`GuardrailContext`), the two
forms a guardrail takes (:class:`Guardrail`, :class:`Predicate`, adapted by
:class:`PredicateGuardrail`) and the built-in rules (:data:`BUILTINS`, keyed by their
spec ``type``). Specs, loading and the set a policy holds: :mod:`bandit_core.guardrails`.

>>> MinEstimate(min_pulls=1, min_value=0.5).TYPE
'min_estimate'
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Protocol, cast, runtime_checkable

import numpy as np

from bandit_core.errors import ConfigError, InvalidInputError
from bandit_core.validation import check_choice, check_int, check_real


@dataclass(frozen=True)
class Verdict:
    """The theorem's ``G(arm, x, ctx)`` for one arm: ``allowed`` and, when blocked, why."""

    allowed: bool
    reason: str = ""


class Verdicts(NamedTuple):
    """Verdicts on all ``K`` candidates: ``allowed`` (bool, shape ``(K,)``) and
    ``reasons`` (``K`` strings aligned with it; only read where ``allowed`` is False)."""

    allowed: np.ndarray
    reasons: Sequence[str]


@dataclass(frozen=True)
class GuardrailContext:
    """What a guardrail may look at for one request.

    ``arm_ids`` (``K`` ids) and ``X`` (shape ``(K, d)``) are the candidates; ``features``
    the request's named context features. ``means`` (``x_a^T theta_a``), ``widths``
    (``sqrt(x_a^T A_a^-1 x_a)``), ``pulls`` (rewards applied to each arm) and
    ``mean_rewards`` have shape ``(K,)``; ``alpha`` is the policy's exploration weight.
    ``judged`` (bool, ``(K,)``) marks the arms in the evaluating guardrail's scope and
    ``state`` is that guardrail's own state (read-only in ``evaluate``).
    """

    arm_ids: Sequence[str]
    X: np.ndarray
    features: Mapping[str, float] | None = None
    means: np.ndarray | None = None
    widths: np.ndarray | None = None
    alpha: float = 0.0
    pulls: np.ndarray | None = None
    mean_rewards: np.ndarray | None = None
    judged: np.ndarray | None = None
    state: Mapping[str, Any] = field(default_factory=dict)

    def per_arm(self, name: str) -> np.ndarray:
        """The ``(K,)`` array ``name`` (``means``, ``widths``, ``pulls`` or
        ``mean_rewards``) a rule reads; a context without it is an
        :class:`InvalidInputError` naming it."""
        value: np.ndarray | None = getattr(self, name)
        if value is None:
            raise InvalidInputError(
                f"the guardrail context has no {name!r}, which this guardrail reads"
            )
        return value

    @classmethod
    def build(
        cls,
        arm_ids: Sequence[str],
        X: np.ndarray,
        features: Mapping[str, float] | None = None,
        *,
        means: np.ndarray | None = None,
        widths: np.ndarray | None = None,
        alpha: float = 0.0,
        pulls: np.ndarray | None = None,
        mean_rewards: np.ndarray | None = None,
    ) -> GuardrailContext:
        """A context with zeros for the model terms not given (handy for tests and tools)."""
        k = len(arm_ids)
        zeros = np.zeros(k)
        return cls(
            arm_ids=list(arm_ids),
            X=np.asarray(X, dtype=np.float64),
            features=features,
            means=zeros if means is None else np.asarray(means, dtype=np.float64),
            widths=zeros if widths is None else np.asarray(widths, dtype=np.float64),
            alpha=float(alpha),
            pulls=np.zeros(k, dtype=np.int64) if pulls is None else np.asarray(pulls),
            mean_rewards=zeros
            if mean_rewards is None
            else np.asarray(mean_rewards, dtype=np.float64),
            judged=np.ones(k, dtype=bool),
        )


@runtime_checkable
class Guardrail(Protocol):
    """A guardrail judging all candidates of a request at once.

    Optional members the engine uses when present: ``initial_state() -> dict`` and
    ``record(state, arm_id)`` for state that changes when an arm is served (JSON-able;
    kept in the policy's ``shared`` state part); ``implied_scope`` (a frozenset of arm
    ids the parameters name, e.g. a budget's arms) and ``exempt`` (arm ids it never
    blocks, e.g. a conservative rule's baseline).
    """

    def evaluate(self, ctx: GuardrailContext) -> Verdicts: ...


class Predicate(Protocol):
    """The theorem's ``G(arm, x, ctx) -> Verdict``: judges one arm (``x`` of shape ``(d,)``)."""

    def __call__(self, arm_id: str, x: np.ndarray, ctx: GuardrailContext, /) -> Verdict | bool: ...


# ---- built-ins -------------------------------------------------------------------------

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


def _blocked(allowed: np.ndarray, reason: Callable[[int], str]) -> Verdicts:
    reasons = [""] * len(allowed)
    for i in np.flatnonzero(~allowed):
        reasons[i] = reason(int(i))
    return Verdicts(allowed, reasons)


@dataclass(frozen=True)
class FeatureThreshold:
    """Block the judged arms while ``features[feature] op value`` holds."""

    TYPE: ClassVar[str] = "feature_threshold"
    feature: str
    op: str
    value: float
    on_missing: str = "block"

    def __post_init__(self) -> None:
        if not isinstance(self.feature, str) or not self.feature:
            raise ConfigError(
                f"feature_threshold 'feature' must be a non-empty str, but got {self.feature!r}"
            )
        check_choice(self.op, "feature_threshold 'op'", sorted(_OPS))
        object.__setattr__(self, "value", check_real(self.value, "feature_threshold 'value'"))
        check_choice(self.on_missing, "feature_threshold 'on_missing'", ("block", "allow"))

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        k = len(ctx.arm_ids)
        raw = None if ctx.features is None else ctx.features.get(self.feature)
        if raw is None:
            allowed = np.full(k, self.on_missing == "allow")
            return _blocked(allowed, lambda i: f"feature {self.feature} missing from the request")
        hit = _OPS[self.op](
            check_real(raw, f"features[{self.feature!r}]", error=InvalidInputError), self.value
        )
        shown = f"{raw:g}" if isinstance(raw, float) else str(raw)
        return _blocked(
            np.full(k, not hit),
            lambda i: f"feature {self.feature} = {shown} {self.op} {self.value:g}",
        )


@dataclass(frozen=True)
class ExposureCap:
    """Per-arm exposure cap: in any ``window`` consecutive decisions a judged arm is
    served at most ``floor(max_share * window)`` times. State: the arms served in the
    last ``window - 1`` decisions and their counts."""

    TYPE: ClassVar[str] = "exposure_cap"
    max_share: float
    window: int

    def __post_init__(self) -> None:
        share = check_real(self.max_share, "exposure_cap 'max_share'")
        object.__setattr__(self, "window", check_int(self.window, "exposure_cap 'window'", low=1))
        if not 0.0 < share <= 1.0 or share * self.window < 1.0:
            raise ConfigError(
                f"exposure_cap needs 0 < max_share <= 1 and max_share * window >= 1, "
                f"but got max_share={self.max_share!r}, window={self.window!r}"
            )
        object.__setattr__(self, "max_share", share)

    @property
    def cap(self) -> int:
        return math.floor(self.max_share * self.window + 1e-9)

    def initial_state(self) -> dict[str, Any]:
        return {"recent": [], "counts": {}}

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        counts = ctx.state.get("counts", {})
        served = np.array([counts.get(a, 0) for a in ctx.arm_ids], dtype=np.int64)
        allowed = served + 1 <= self.cap
        return _blocked(
            allowed,
            lambda i: (
                f"served {served[i]} of the last {self.window - 1} decisions; cap {self.cap} per {self.window}"
            ),
        )

    def record(self, state: dict[str, Any], arm_id: str) -> None:
        recent, counts = state["recent"], state["counts"]
        recent.append(arm_id)
        counts[arm_id] = counts.get(arm_id, 0) + 1
        while len(recent) > self.window - 1:
            old = recent.pop(0)
            counts[old] -= 1
            if not counts[old]:
                del counts[old]


@dataclass(frozen=True)
class Budget:
    """Per-arm budget: each selection of arm ``a`` spends ``cost[a]`` of ``budgets[a]``;
    the arm is blocked once ``spent + cost > budget``. State: the amount spent per arm."""

    TYPE: ClassVar[str] = "budget"
    budgets: Mapping[str, float]
    cost: float | Mapping[str, float] = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.budgets, Mapping) or not self.budgets:
            raise ConfigError(
                f"budget 'budgets' must be a non-empty {{arm: total}} mapping, but got {self.budgets!r}"
            )
        budgets = {
            str(a): check_real(v, f"budget 'budgets'[{a!r}]") for a, v in self.budgets.items()
        }
        if isinstance(self.cost, Mapping):
            missing = sorted(set(budgets) - set(self.cost))
            if missing:
                raise ConfigError(
                    f"budget 'cost' must give a cost for every budgeted arm, but misses {missing}"
                )
            cost = {a: check_real(self.cost[a], f"budget 'cost'[{a!r}]") for a in budgets}
        else:
            c = check_real(self.cost, "budget 'cost'")
            cost = {a: c for a in budgets}
        if any(v < 0 for v in budgets.values()) or any(v <= 0 for v in cost.values()):
            raise ConfigError(
                f"budget needs budgets >= 0 and costs > 0, but got budgets={budgets}, cost={cost}"
            )
        object.__setattr__(self, "budgets", budgets)
        object.__setattr__(self, "cost", cost)

    @property
    def implied_scope(self) -> frozenset[str]:
        return frozenset(self.budgets)

    @property
    def costs(self) -> Mapping[str, float]:
        """The cost per budgeted arm (``__post_init__`` turns a single cost into one per arm)."""
        return cast(Mapping[str, float], self.cost)

    def initial_state(self) -> dict[str, Any]:
        return {"spent": {}}

    def remaining(self, state: Mapping[str, Any]) -> dict[str, float]:
        """Budget left per arm."""
        spent = state.get("spent", {})
        return {a: total - spent.get(a, 0.0) for a, total in self.budgets.items()}

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        left = self.remaining(ctx.state)
        remaining = np.array([left.get(a, math.inf) for a in ctx.arm_ids])
        cost = np.array([self.costs.get(a, 0.0) for a in ctx.arm_ids])
        allowed = remaining - cost >= -1e-12
        return _blocked(allowed, lambda i: f"remaining budget {remaining[i]:g} < cost {cost[i]:g}")

    def record(self, state: dict[str, Any], arm_id: str) -> None:
        if arm_id in self.budgets:
            spent = state["spent"]
            spent[arm_id] = spent.get(arm_id, 0.0) + self.costs[arm_id]


@dataclass(frozen=True)
class Conservative:
    """Block arm ``a`` when ``LCB_a < LCB_baseline - margin``, with
    ``LCB = x^T theta - alpha * sqrt(x^T A^-1 x)`` (the policy's alpha). Arms with fewer
    than ``min_pulls`` rewards are not judged (a cold arm's LCB is low and, since a
    blocked arm is never pulled, would stay blocked)."""

    TYPE: ClassVar[str] = "conservative"
    baseline: str
    margin: float = 0.0
    min_pulls: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.baseline, str) or not self.baseline:
            raise ConfigError(
                f"conservative 'baseline' must be an arm id, but got {self.baseline!r}"
            )
        object.__setattr__(
            self, "margin", check_real(self.margin, "conservative 'margin'", low=0.0)
        )
        object.__setattr__(
            self, "min_pulls", check_int(self.min_pulls, "conservative 'min_pulls'", low=0)
        )

    @property
    def exempt(self) -> frozenset[str]:
        return frozenset({self.baseline})

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        k = len(ctx.arm_ids)
        if self.baseline not in ctx.arm_ids:
            return Verdicts(np.ones(k, dtype=bool), [""] * k)
        lcb = ctx.per_arm("means") - ctx.alpha * ctx.per_arm("widths")
        floor = lcb[list(ctx.arm_ids).index(self.baseline)] - self.margin
        allowed = (lcb >= floor) | (ctx.per_arm("pulls") < self.min_pulls)
        return _blocked(
            allowed,
            lambda i: f"LCB {lcb[i]:.4g} < baseline {self.baseline} LCB - margin = {floor:.4g}",
        )


@dataclass(frozen=True)
class MinEstimate:
    """Block arms with at least ``min_pulls`` rewards whose estimate is below
    ``min_value``; the estimate is the arm's mean reward or ``x^T theta``."""

    TYPE: ClassVar[str] = "min_estimate"
    min_pulls: int
    min_value: float
    estimate: str = "mean_reward"

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "min_pulls", check_int(self.min_pulls, "min_estimate 'min_pulls'", low=1)
        )
        object.__setattr__(
            self, "min_value", check_real(self.min_value, "min_estimate 'min_value'")
        )
        check_choice(self.estimate, "min_estimate 'estimate'", ("mean_reward", "predicted"))

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        est = ctx.per_arm("mean_rewards" if self.estimate == "mean_reward" else "means")
        pulls = ctx.per_arm("pulls")
        allowed = (pulls < self.min_pulls) | (est >= self.min_value)
        return _blocked(
            allowed,
            lambda i: f"{self.estimate} {est[i]:.4g} < {self.min_value:g} after {pulls[i]} pulls",
        )


BUILTINS: dict[str, type] = {
    cls.TYPE: cls for cls in (FeatureThreshold, ExposureCap, Budget, Conservative, MinEstimate)
}


class PredicateGuardrail:
    """Adapts a :class:`Predicate` to :class:`Guardrail` by calling it per judged arm."""

    def __init__(self, fn: Callable[..., Verdict | bool], params: Mapping[str, Any]) -> None:
        self.fn = fn
        self.params = dict(params)

    def evaluate(self, ctx: GuardrailContext) -> Verdicts:
        k = len(ctx.arm_ids)
        allowed = np.ones(k, dtype=bool)
        reasons = [""] * k
        judged = np.ones(k, dtype=bool) if ctx.judged is None else ctx.judged
        for i in np.flatnonzero(judged):
            v = self.fn(ctx.arm_ids[int(i)], ctx.X[i], ctx, **self.params)
            if isinstance(v, Verdict):
                allowed[i], reasons[i] = v.allowed, v.reason or "blocked"
            elif isinstance(v, (bool, np.bool_)):
                allowed[i], reasons[i] = bool(v), "blocked"
            else:
                raise InvalidInputError(
                    f"guardrail predicate {getattr(self.fn, '__name__', self.fn)!r} must return a Verdict "
                    f"or a bool, but returned {type(v).__name__}"
                )
        return Verdicts(allowed, reasons)
