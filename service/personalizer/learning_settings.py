"""The Personalizer adapter's :class:`~service.usecases.learning_settings.LearningSettings`:
a loop's own setting is its ``policyName``, settings are written as Vowpal Wabbit
arguments over the default shared model (or this service's JSON policy spec), and a loop
learns from no decision served in LoggingOnly mode (docs/personalizer.md, "Learning
settings and the model", "Offline evaluations")."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from service.personalizer.learning_modes import mode_at
from service.personalizer.loop_policy import (
    DEFAULT_LOOP_SPEC,
    ENGINE_OF_VW,
    cb_type_of,
    parse_vw_arguments,
    vw_arguments,
)
from service.personalizer.settings import LOGGING_ONLY, LoopSettings
from service.schemas import PolicyInfo, PolicySpec
from service.timeparse import parse_duration


@dataclass(frozen=True)
class LoopLearningSettings:
    """A loop's learning settings as Personalizer reads and writes them (stateless, so a
    worker process can take it)."""

    def online_name(self, info: PolicyInfo) -> str:
        return LoopSettings.of(info).policy_name

    def arguments(self, spec: PolicySpec) -> str:
        """VW arguments for the default engine, else the spec's JSON (:func:`vw_arguments`)."""
        info = PolicyInfo(
            name="", revision="", created_at=0.0, updated_at=0.0, reset_at=0.0, **spec.model_dump()
        )
        return vw_arguments(info)

    def spec_from_arguments(self, loop: PolicySpec, arguments: str) -> PolicySpec:
        """A JSON policy spec as is, or VW arguments over the default shared model with the
        loop's other settings (as ``PUT configurations/policy`` applies them)."""
        if arguments.lstrip().startswith("{"):
            return PolicySpec.model_validate_json(arguments)
        changes, _ = parse_vw_arguments(arguments)
        engine = {f: getattr(DEFAULT_LOOP_SPEC, f) for f in ENGINE_OF_VW}
        return PolicySpec.model_validate({**loop.model_dump(), **engine, **changes})

    def explorable(self, loop: PolicySpec) -> bool:
        """The grid's settings map onto the default shared model only."""
        return loop.algorithm == DEFAULT_LOOP_SPEC.algorithm

    def estimator(self, info: PolicyInfo) -> str:
        """The loop's ``--cb_type`` (:func:`cb_type_of`): ``ips``, ``dr`` or ``mtr``."""
        return cb_type_of(info)

    def learns_at(self, info: PolicyInfo, when: float) -> bool:
        return mode_at(LoopSettings.of(info), when) != LOGGING_ONLY

    def auto_optimization(self, info: PolicyInfo) -> tuple[float, float] | None:
        """Every ``autoOptimizationFrequency`` from ``autoOptimizationStartDate`` (else
        the loop's creation) while ``isAutoOptimizationEnabled``; none without a
        frequency of fixed positive length."""
        kept = LoopSettings.of(info).model_extra or {}
        frequency = kept.get("autoOptimizationFrequency")
        if kept.get("isAutoOptimizationEnabled") is not True or not isinstance(frequency, str):
            return None
        try:
            period = parse_duration(frequency, "autoOptimizationFrequency")
        except ValueError:
            return None
        start = kept.get("autoOptimizationStartDate")
        if start is None:
            return (period, info.created_at) if period > 0 else None
        when = datetime.fromisoformat(start)
        when = when if when.tzinfo else when.replace(tzinfo=UTC)
        return (period, when.timestamp()) if period > 0 else None
