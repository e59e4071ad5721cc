"""Guardrails: predicates that block arms before the UCB argmax (docs/algorithms.md section 3;
Theorem 1 in section 3.2, assumptions 4 and 5).

A guardrail is the theorem's ``G(arm, x, ctx) -> Verdict(allowed, reason)``. Two forms are
accepted:

* a :class:`Predicate`, a plain callable judging one arm at a time, and
* a :class:`Guardrail`, an object whose ``evaluate(ctx)`` judges all ``K`` candidates at
  once (:class:`Verdicts`, arrays of shape ``(K,)``). Every built-in is of this form.

Guardrails are configured by JSON-able specs, one dict each. Keys every spec may carry:
``type`` (required), ``name`` (default: the type; names must be unique) and ``arms``
(the arm ids the guardrail judges; ``null`` or absent means every arm except the
policy's safe arm). Built-in types and their own keys:

=====================  ===================================================================
``feature_threshold``  ``feature``, ``op`` (``<  <=  >  >=  ==  !=``), ``value``,
                       ``on_missing`` (``"block"`` default, or ``"allow"``): block the
                       arms while the request's context feature ``feature op value`` holds.
``exposure_cap``       ``max_share``, ``window``: block an arm when serving it would make
                       its share of the last ``window`` decisions exceed ``max_share``.
``budget``             ``budgets`` (``{arm: total}``), ``cost`` (number or ``{arm: cost}``,
                       default 1): block an arm once its remaining budget is below its cost
                       per selection. Judges exactly the arms in ``budgets`` (no ``arms``).
``conservative``       ``baseline`` (arm id), ``margin`` (>= 0, default 0), ``min_pulls``
                       (default 0): block arms whose lower confidence bound
                       ``x^T theta - alpha * width`` is below the baseline's by more than
                       ``margin``. Arms with fewer than ``min_pulls`` rewards are not judged.
                       Without the baseline among the candidates the rule allows every arm.
``min_estimate``       ``min_pulls``, ``min_value``, ``estimate`` (``"mean_reward"`` default,
                       or ``"predicted"`` for ``x^T theta``): block arms that have at least
                       ``min_pulls`` rewards and an estimate below ``min_value``.
``import``             ``path`` (``"package.module:callable"``), ``params`` (dict): a user
                       guardrail, see below.
any other type         looked up by name in the entry point group ``bandit_core.guardrails``;
                       ``params`` as for ``import``.
=====================  ===================================================================

A user object found by ``import`` or an entry point is either a class, called with
``params`` as keyword arguments, whose instances satisfy :class:`Guardrail`; or a
:class:`Predicate` function, called for each judged arm as ``fn(arm_id, x, ctx, **params)``
and returning a :class:`Verdict` or a bool.

The policy's safe arm (assumption 5) passes every guardrail by construction: it is
outside the default scope, and a spec whose ``arms`` (or ``budgets``) name it is a
:class:`~bandit_core.errors.ConfigError` when the policy is created.

>>> import numpy as np
>>> gs = GuardrailSet([{"type": "feature_threshold", "feature": "age", "op": "<",
...                     "value": 18, "arms": ["beer"]}])
>>> ctx = GuardrailContext.build(["beer", "juice"], np.zeros((2, 1)), {"age": 16})
>>> screen = gs.screen(ctx, np.array([0, 1]), gs.new_state())
>>> screen.eligible.tolist(), dict(screen.outcome.blocked)
([False, True], {'beer': ('feature_threshold: feature age = 16 < 18',)})
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar, NamedTuple, cast

import numpy as np

from bandit_core.errors import ConfigError, InvalidInputError, NoEligibleArmError
from bandit_core.guardrail_rules import (
    BUILTINS,
    Budget,
    Conservative,
    ExposureCap,
    FeatureThreshold,
    Guardrail,
    GuardrailContext,
    MinEstimate,
    Predicate,
    PredicateGuardrail,
    Verdict,
    Verdicts,
)
from bandit_core.policy import GuardrailOutcome
from bandit_core.state import ArrayState

ENTRY_POINT_GROUP = "bandit_core.guardrails"

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "Budget",
    "Conservative",
    "ExposureCap",
    "FeatureThreshold",
    "Guardrail",
    "GuardrailContext",
    "GuardrailEntry",
    "GuardrailSet",
    "GuardrailState",
    "MinEstimate",
    "Predicate",
    "PredicateGuardrail",
    "Screening",
    "Verdict",
    "Verdicts",
    "build_guardrail",
    "check_specs_jsonable",
    "load_object",
]


# ---- loading specs ---------------------------------------------------------------------


def load_object(path: object) -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted)."""
    if not isinstance(path, str) or path.count(":") != 1 or not all(path.split(":")):
        raise ConfigError(
            f"guardrail 'path' must look like 'package.module:callable', but got {path!r}"
        )
    module_name, attr = path.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"guardrail 'path' {path!r} cannot be imported: {exc}") from exc
    return obj


def _entry_point(name: str) -> Any:
    found = metadata.entry_points(group=ENTRY_POINT_GROUP).select(name=name)
    for ep in found:
        try:
            return ep.load()
        except (ImportError, AttributeError) as exc:
            raise ConfigError(
                f"guardrail entry point {name!r} ({ep.value}) cannot be loaded: {exc}"
            ) from exc
    known = (
        sorted(BUILTINS)
        + ["import"]
        + sorted(ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP))
    )
    raise ConfigError(f"unknown guardrail type {name!r}; expected one of {known}")


def _from_user_object(obj: Any, params: Any, where: str) -> Guardrail:
    if not isinstance(params, Mapping):
        raise ConfigError(f"guardrail 'params' must be a mapping, but got {params!r}")
    if isinstance(obj, type):
        try:
            guard = obj(**params)
        except TypeError as exc:
            raise ConfigError(f"guardrail {where} rejected params {dict(params)}: {exc}") from exc
        if not isinstance(guard, Guardrail):
            raise ConfigError(
                f"guardrail {where} must build an object with evaluate(ctx), but got {type(guard).__name__}"
            )
        return guard
    if callable(obj):
        return PredicateGuardrail(obj, params)
    raise ConfigError(
        f"guardrail {where} must be a class or a callable, but got {type(obj).__name__}"
    )


@dataclass(frozen=True)
class GuardrailEntry:
    """One configured guardrail: its ``name``, scope (``arms``; None = every arm but
    the safe arm) and the :class:`Guardrail` object."""

    name: str
    arms: frozenset[str] | None
    guard: Guardrail


_COMMON_KEYS = ("type", "name", "arms")


def build_guardrail(spec: Mapping[str, Any]) -> GuardrailEntry:
    """Build one guardrail from its JSON-able spec (keys in the module docstring).

    >>> build_guardrail({"type": "min_estimate", "min_pulls": 10, "min_value": 0.1}).name
    'min_estimate'
    >>> build_guardrail({"type": "min_estimate", "min_pulls": 10})
    Traceback (most recent call last):
    ...
    bandit_core.errors.ConfigError: guardrail 'min_estimate' needs keys ['min_value'], but they are missing
    """
    if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
        raise ConfigError(f"a guardrail spec must be a mapping with a str 'type', but got {spec!r}")
    kind = spec["type"]
    params = {k: v for k, v in spec.items() if k not in _COMMON_KEYS}
    if kind in BUILTINS:
        cls = BUILTINS[kind]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - set(fields))
        if unknown:
            raise ConfigError(
                f"guardrail {kind!r} got unknown keys {unknown}; expected some of {sorted(fields)}"
            )
        missing = sorted(
            n
            for n, f in fields.items()
            if n not in params
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if missing:
            raise ConfigError(f"guardrail {kind!r} needs keys {missing}, but they are missing")
        guard: Guardrail = cls(**params)
        default_name = kind
    else:
        unknown = sorted(set(params) - {"path", "params"})
        if kind == "import":
            if unknown:
                raise ConfigError(
                    f"guardrail 'import' got unknown keys {unknown}; expected 'path' and 'params'"
                )
            path = params.get("path")
            guard = _from_user_object(load_object(path), params.get("params", {}), repr(path))
            default_name = str(path).split(":")[1]  # load_object accepted it: a str
        else:
            if unknown:
                raise ConfigError(
                    f"guardrail {kind!r} got unknown keys {unknown}; expected 'params'"
                )
            guard = _from_user_object(
                _entry_point(kind), params.get("params", {}), f"entry point {kind!r}"
            )
            default_name = kind
    name = spec.get("name", default_name)
    if not isinstance(name, str) or not name or ":" in name:
        raise ConfigError(f"guardrail 'name' must be a non-empty str without ':', but got {name!r}")
    implied = getattr(guard, "implied_scope", None)
    arms = spec.get("arms")
    if implied is not None and arms is not None:
        raise ConfigError(
            f"guardrail {name!r} of type {kind!r} takes its arms from its parameters, not from 'arms'"
        )
    if arms is not None:
        if (
            isinstance(arms, str)
            or not isinstance(arms, Sequence)
            or not all(isinstance(a, str) and a for a in arms)
        ):
            raise ConfigError(
                f"guardrail {name!r} 'arms' must be a list of arm ids or null, but got {arms!r}"
            )
        arms = frozenset(arms)
    return GuardrailEntry(name=name, arms=implied if implied is not None else arms, guard=guard)


# ---- state and screening ---------------------------------------------------------------


@dataclass
class GuardrailState(ArrayState):
    """Guardrail state of one policy, its ``shared`` state part (all JSON-able meta).

    ``decisions`` counts selections; ``argmax_blocked`` those where the unconstrained UCB
    argmax was blocked (delta_G's numerator) and ``blocked_by[name]`` those where guardrail
    ``name`` blocked it; ``safe_served`` counts fallbacks to the safe arm; ``guards[name]``
    is the state of stateful guardrails (exposure window, budget spent).
    """

    KIND: ClassVar[str] = "guardrail_shared"
    decisions: int = 0
    argmax_blocked: int = 0
    safe_served: int = 0
    blocked_by: dict[str, int] = field(default_factory=dict)
    guards: dict[str, dict[str, Any]] = field(default_factory=dict)


class Screening(NamedTuple):
    """Result of :meth:`GuardrailSet.screen`: the eligible mask (shape ``(K,)``) and
    the decision's :class:`GuardrailOutcome`."""

    eligible: np.ndarray
    outcome: GuardrailOutcome


class GuardrailSet:
    """The guardrails of one policy, built from specs, plus its safe arm.

    Raises :class:`ConfigError` for an invalid spec, duplicate names, or a safe arm a
    guardrail's scope names (assumption 5 needs a safe arm that passes every guardrail).
    """

    def __init__(
        self, specs: Sequence[Mapping[str, Any]] = (), safe_arm: str | None = None
    ) -> None:
        if safe_arm is not None and (not isinstance(safe_arm, str) or not safe_arm):
            raise ConfigError(f"safe_arm must be a non-empty arm id or None, but got {safe_arm!r}")
        self.safe_arm = safe_arm
        self.entries: tuple[GuardrailEntry, ...] = tuple(build_guardrail(s) for s in specs)
        names = [e.name for e in self.entries]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(
                f"guardrail names must be unique, but {dup} appear more than once; give each spec a 'name'"
            )
        for e in self.entries:
            if (
                safe_arm is not None
                and e.arms is not None
                and safe_arm in e.arms
                and safe_arm not in getattr(e.guard, "exempt", ())
            ):
                raise ConfigError(
                    f"safe_arm {safe_arm!r} is judged by guardrail {e.name!r}, which can block it; "
                    "the safe arm must pass every guardrail (remove it from that guardrail's arms)"
                )

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def new_state(self) -> GuardrailState:
        """Counters at zero and each stateful guardrail's initial state."""
        return GuardrailState(
            blocked_by={e.name: 0 for e in self.entries},
            guards={
                e.name: e.guard.initial_state()
                for e in self.entries
                if hasattr(e.guard, "initial_state")
            },
        )

    def _judged(self, entry: GuardrailEntry, arm_ids: Sequence[str]) -> np.ndarray:
        if entry.arms is None:
            return np.array([a != self.safe_arm for a in arm_ids], dtype=bool)
        return np.array([a in entry.arms for a in arm_ids], dtype=bool)

    def screen(self, ctx: GuardrailContext, order: np.ndarray, state: GuardrailState) -> Screening:
        """Judge the candidates, update the delta_G counters in ``state`` and return the
        eligible mask and outcome. ``order`` ranks candidates by UCB score (ties broken
        at random), so ``order[0]`` is the unconstrained argmax.

        The safe arm is never judged (assumption 5), so when every other candidate is
        blocked it is the one eligible arm and ``safe_arm_served`` is set; when every
        candidate is blocked (the safe arm is not among them) this raises
        :class:`NoEligibleArmError` and changes no counter.
        """
        k = len(ctx.arm_ids)
        blocked_by = np.zeros((len(self.entries), k), dtype=bool)
        reasons: dict[int, list[str]] = {}
        for g, e in enumerate(self.entries):
            judged = self._judged(e, ctx.arm_ids)
            if not judged.any():
                continue
            guard_state = state.guards.setdefault(e.name, getattr(e.guard, "initial_state", dict)())
            v = e.guard.evaluate(dataclasses.replace(ctx, judged=judged, state=guard_state))
            allowed = np.asarray(v.allowed, dtype=bool)
            if allowed.shape != (k,) or len(v.reasons) != k:
                raise InvalidInputError(
                    f"guardrail {e.name!r} must return {k} verdicts and {k} reasons, but returned "
                    f"shape {allowed.shape} and {len(v.reasons)} reasons"
                )
            blocked_by[g] = judged & ~allowed
            for i in np.flatnonzero(blocked_by[g]).tolist():
                reasons.setdefault(i, []).append(f"{e.name}: {v.reasons[i]}")
        eligible = cast(np.ndarray, ~blocked_by.any(axis=0))  # any over an axis of 2-d: an array
        if not eligible.any():
            detail = "; ".join(
                f"{ctx.arm_ids[i]}: {', '.join(r)}" for i, r in sorted(reasons.items())
            )
            raise NoEligibleArmError(
                f"guardrails blocked every candidate ({detail}) and the safe arm "
                f"{self.safe_arm!r} is not among them"
            )
        # The safe arm is never judged, so "nothing passes" shows as: only the safe arm passes.
        safe_served = bool(
            k > 1 and eligible.sum() == 1 and ctx.arm_ids[int(np.argmax(eligible))] == self.safe_arm
        )
        top = int(order[0])
        state.decisions += 1
        state.argmax_blocked += int(not eligible[top])
        state.safe_served += int(safe_served)
        for g, e in enumerate(self.entries):
            state.blocked_by[e.name] = state.blocked_by.get(e.name, 0) + int(blocked_by[g, top])
        outcome = GuardrailOutcome(
            blocked={ctx.arm_ids[i]: tuple(r) for i, r in sorted(reasons.items())},
            unconstrained_arm_id=ctx.arm_ids[top],
            argmax_blocked=bool(not eligible[top]),
            safe_arm_served=safe_served,
        )
        return Screening(eligible, outcome)

    def record(self, state: GuardrailState, arm_id: str) -> None:
        """Tell the stateful guardrails that ``arm_id`` was served."""
        for e in self.entries:
            record = getattr(e.guard, "record", None)
            if record is not None:
                # the state screen starts: initial_state() or, without one, an empty dict
                record(
                    state.guards.setdefault(e.name, getattr(e.guard, "initial_state", dict)()),
                    arm_id,
                )

    def stats(self, state: GuardrailState) -> dict[str, float]:
        """delta_G overall and per guardrail, safe-arm share, and budgets left."""
        n = state.decisions
        out = {
            "decisions": float(n),
            "delta_g": state.argmax_blocked / n if n else 0.0,
            "safe_arm_served": state.safe_served / n if n else 0.0,
        }
        for e in self.entries:
            out[f"delta_g:{e.name}"] = state.blocked_by.get(e.name, 0) / n if n else 0.0
            if isinstance(e.guard, Budget):
                for arm, left in e.guard.remaining(state.guards.get(e.name, {})).items():
                    out[f"budget_remaining:{e.name}:{arm}"] = left
        return out


def check_specs_jsonable(specs: Any) -> tuple[dict[str, Any], ...]:
    """Normalise guardrail specs to a tuple of plain JSON dicts (ConfigError if not JSON-able)."""
    if isinstance(specs, (str, bytes, Mapping)) or not isinstance(specs, Sequence):
        raise ConfigError(f"guardrails must be a list of spec mappings, but got {specs!r}")
    try:
        return tuple(json.loads(json.dumps(list(specs))))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"guardrail specs must be JSON-able: {exc}") from exc
