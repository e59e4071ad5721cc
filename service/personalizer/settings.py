"""A loop's Personalizer settings (docs/personalizer.md, "Service configuration"): kept
in its policy's spec as ``PolicySpec.personalizer``, a JSON object under Personalizer's
camelCase names, which :class:`LoopSettings` reads and writes as they were stored.

Of the settings kept, the learning mode and its history
(:mod:`service.personalizer.learning_modes`), the reward aggregation
(:mod:`service.personalizer.loop_rewards`), the model export frequency (the apprentice
metrics' batches), the policy name, ``logRetentionDays`` (read by the log upkeep),
``modelRetrainDays`` (a new model's days of log) and the Auto-Optimize schedule
(``service.personalizer.learning_settings``) act; the others (``logMirrorEnabled``...)
are kept so that reading the configuration returns them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from service import timeparse
from service.errors import InvalidRequest
from service.schemas import PolicyInfo

LearningMode = Literal["Online", "Apprentice", "LoggingOnly"]
ONLINE: LearningMode = "Online"
APPRENTICE: LearningMode = "Apprentice"
LOGGING_ONLY: LearningMode = "LoggingOnly"
RewardAggregation = Literal["earliest", "sum"]
EARLIEST: RewardAggregation = "earliest"
SUM: RewardAggregation = "sum"
DEFAULT_EXPORT_FREQUENCY = "PT1M"
DEFAULT_POLICY_NAME = "default"
DEFAULT_RETRAIN_DAYS = 2
MAX_UPDATE_INTERVAL = 86400.0
"""The longest ``modelUpdateFrequency``: a day (the policy's ``model_update_interval``)."""
"""Azure's ``modelRetrainDays`` default: the days of log a new model is trained on."""


class LoopSettings(BaseModel):
    """A loop's Personalizer settings; the ones not named here are kept as they came."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    learning_mode: LearningMode = Field(ONLINE, alias="learningMode")
    learning_mode_history: list[tuple[float, LearningMode]] = Field(
        default_factory=list,
        alias="learningModeHistory",
        description="(unix time, mode) of the latest mode changes, oldest first",
    )
    reward_aggregation: RewardAggregation = Field(EARLIEST, alias="rewardAggregation")
    model_export_frequency: str = Field(DEFAULT_EXPORT_FREQUENCY, alias="modelExportFrequency")
    log_retention_days: int = Field(-1, alias="logRetentionDays")
    policy_name: str = Field(DEFAULT_POLICY_NAME, alias="policyName")
    model_retrain_days: int = Field(DEFAULT_RETRAIN_DAYS, alias="modelRetrainDays")

    @classmethod
    def of(cls, info: PolicyInfo) -> LoopSettings:
        """The settings the policy ``info`` keeps (defaults where it keeps none)."""
        return cls.model_validate(info.personalizer or {})

    def stored(self) -> dict[str, Any]:
        """The JSON object kept in ``PolicySpec.personalizer``: the settings that were
        given, under their camelCase names."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def updated(self, changes: dict[str, Any]) -> LoopSettings:
        """These settings with ``changes`` (camelCase names) applied."""
        return LoopSettings.model_validate({**self.stored(), **changes})

    def without(self, name: str) -> LoopSettings:
        """These settings without the one stored as ``name`` (back to its default)."""
        return LoopSettings.model_validate({k: v for k, v in self.stored().items() if k != name})


def update_interval(frequency: str | None, current: float | None) -> float | None:
    """The policy's ``model_update_interval`` for a service configuration's
    ``modelUpdateFrequency`` (docs/personalizer.md, "Service configuration"): its
    seconds, None (every reward updates the model at once) for ``PT0S``, ``current``
    when omitted; a 400 naming the field unless it is a duration from PT0S to P1D."""
    if frequency is None:
        return current
    field = "modelUpdateFrequency"
    try:
        seconds = timeparse.parse_duration(frequency, field)
    except ValueError as exc:
        raise InvalidRequest(str(exc), ["body", field]) from None
    if not 0 <= seconds <= MAX_UPDATE_INTERVAL:
        raise InvalidRequest(
            f"{field} must be a duration from PT0S to P1D, but got {frequency!r}", ["body", field]
        )
    return seconds or None


def update_frequency(interval: float | None) -> str:
    """The ``modelUpdateFrequency`` of a policy's ``model_update_interval`` (``PT0S``:
    every reward updates the model at once)."""
    return "PT0S" if interval is None else timeparse.format_duration(interval)
