"""Request and response models of the Personalizer-compatible routes
(``service.routers.personalizer``): Azure AI Personalizer's JSON field names (camelCase)
over snake_case attributes. Unknown fields are ignored, as Personalizer did."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from service.schemas import ArmId, FiniteFloat

EventId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")]
JsonFeatureList = list[dict[str, Any]]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class PersonalizerServiceConfiguration(_Camel):
    """A loop's service configuration (``configurations/service``); durations are ISO
    8601 (``PT10M``)."""

    reward_wait_time: str = Field(description="ISO 8601 duration, e.g. PT10M")
    default_reward: FiniteFloat | None = Field(
        description="reward of an activated event not rewarded within rewardWaitTime; "
        "null: none (the event expires)"
    )
    reward_aggregation: Literal["earliest", "sum"]
    exploration_percentage: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
    model_export_frequency: str = Field(description="ISO 8601 duration; kept, no effect here")
    log_retention_days: Annotated[int, Field(ge=-1)] = Field(
        description="days the event log keeps the loop's events (-1: forever)"
    )
    learning_mode: Literal["Online", "Apprentice", "LoggingOnly"] = "Online"
    log_mirror_enabled: bool | None = None
    log_mirror_sas_uri: str | None = None
    is_auto_optimization_enabled: bool | None = None
    auto_optimization_frequency: str | None = None
    auto_optimization_start_date: datetime | None = None
    model_retrain_days: int | None = None
    last_configuration_edit_date: datetime | None = None


class PersonalizerPolicy(_Camel):
    """The learning policy (``configurations/policy``): a name and Vowpal Wabbit
    arguments, or this service's JSON policy spec as the arguments."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    arguments: Annotated[str, Field(min_length=1, max_length=65536)]


class PersonalizerAction(_Camel):
    id: ArmId
    features: JsonFeatureList = Field(description="the action's JSON feature objects")


class PersonalizerRankRequest(_Camel):
    context_features: JsonFeatureList | None = None
    actions: Annotated[list[PersonalizerAction], Field(min_length=1)]
    excluded_actions: list[ArmId] | None = None
    event_id: EventId | None = None
    defer_activation: bool = False


class PersonalizerRankedAction(_Camel):
    id: str
    probability: float


class PersonalizerRankResponse(_Camel):
    ranking: list[PersonalizerRankedAction]
    event_id: str
    reward_action_id: str


class PersonalizerReward(_Camel):
    value: Annotated[FiniteFloat, Field(ge=-1, le=1)]


class PersonalizerErrorDetail(_Camel):
    code: str
    message: str


class PersonalizerErrorResponse(_Camel):
    error: PersonalizerErrorDetail


class PersonalizerModelProperties(_Camel):
    """``model/properties``: when the current model started (created, reset or
    imported) and when it last learned (docs/personalizer.md)."""

    creation_time: datetime
    last_modified_time: datetime


FeatureImportanceStatus = Literal["Succeeded", "Running", "Failed", "NotSubmitted", "Timeout", "Canceled"]


class PersonalizerFeatureImportanceContract(_Camel):
    """The body of ``PUT featureImportances/{id}``: a name and a time range of the log
    (a time without an offset is UTC)."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    start_time: datetime
    end_time: datetime


class PersonalizerFeatureScore(_Camel):
    namespace: str = Field(description="the feature's namespace ('' for top-level scalars)")
    feature_name: str = Field(description="the JSON key, whatever its values")
    score: float = Field(description="share of the score changes, the top feature 1")


class PersonalizerFeatureImportanceDetails(_Camel):
    id: str
    name: str
    start_time: datetime
    end_time: datetime
    creation_time: datetime
    status: FeatureImportanceStatus


class PersonalizerFeatureImportance(PersonalizerFeatureImportanceDetails):
    """A feature-importance job and, once ``Succeeded``, its scores by descending score."""

    feature_scores: list[PersonalizerFeatureScore]
    description: str | None = None


class PersonalizerFeatureImportances(_Camel):
    value: list[PersonalizerFeatureImportanceDetails]
    next_link: str | None = None


class PersonalizerDateRange(_Camel):
    """A span of time (``from`` is a Python keyword: the field is ``start``)."""

    start: datetime | None = Field(alias="from", description="null: the log is empty")
    to: datetime | None = Field(description="null: the log is empty")


class PersonalizerLogsProperties(_Camel):
    """``GET logs/properties``: the times of the first and the last event logged."""

    date_range: PersonalizerDateRange
