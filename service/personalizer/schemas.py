"""Request and response models of the Personalizer-compatible routes
(``service.personalizer.routers``): Azure AI Personalizer's JSON field names (camelCase)
over snake_case attributes. Unknown fields are ignored, as Personalizer did."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from service.schemas import ArmCandidate, ArmId, EventId, FiniteFloat, Text

JsonFeatureList = list[dict[str, Any]]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class PersonalizerImitationMetrics(_Camel):
    """Apprentice events counted: how many, how many the model's own greedy choice
    imitated (was the baseline), the baseline's rewards and those of the imitated events."""

    number_of_events: int
    number_of_imitated_events: int
    sum_of_rewards: float
    sum_of_imitated_rewards: float


class PersonalizerApprenticeModeMetrics(PersonalizerImitationMetrics):
    """``latestApprenticeModeMetrics``: since ``startTime`` (Apprentice mode turned on),
    and over the latest batch (one ``modelExportFrequency`` period)."""

    start_time: datetime
    last_processed_event_time: datetime
    last_batch_metrics: PersonalizerImitationMetrics | None = None


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
    model_update_frequency: str | None = Field(
        None,
        description="ISO 8601 duration between folds of the rewards into the model "
        "(the policy's model_update_interval): rewards are kept as small deltas and "
        "folded in one batch per period; PT0S: every reward updates the model at once "
        "(the default); omitted on PUT: kept",
    )
    log_retention_days: Annotated[int, Field(ge=-1)] = Field(
        description="days the event log keeps the loop's events (-1: forever)"
    )
    learning_mode: Literal["Online", "Apprentice", "LoggingOnly"] | None = Field(
        None,
        description="Online: serve and learn from the model's choices; Apprentice: serve "
        "the baseline (the first action not excluded) and learn from its rewards; "
        "LoggingOnly: serve the baseline and only log. Omitted on PUT: kept",
    )
    latest_apprentice_mode_metrics: PersonalizerApprenticeModeMetrics | None = Field(
        None,
        description="read only: how the model imitates the baseline since Apprentice "
        "mode was last turned on (ignored on PUT)",
    )
    log_mirror_enabled: bool | None = Field(
        None,
        description="mirroring the log to Azure storage is refused with a logMirrorSasUri "
        "(none here): bandit export-log writes the log out",
    )
    log_mirror_sas_uri: str | None = None
    is_auto_optimization_enabled: bool | None = None
    auto_optimization_frequency: str | None = None
    auto_optimization_start_date: datetime | None = None
    model_retrain_days: Annotated[int, Field(ge=0)] | None = Field(
        None, description="days of the log a new model is trained on (default 2); kept"
    )
    last_configuration_edit_date: datetime | None = None


class PersonalizerPolicy(_Camel):
    """The learning policy (``configurations/policy``): a name and Vowpal Wabbit
    arguments, or this service's JSON policy spec as the arguments."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    arguments: Annotated[str, Field(min_length=1, max_length=65536)]


class PersonalizerAction(ArmCandidate):
    # A native candidate arm, so that the rank request's actions, validated once here,
    # are the recommend request's arms as they are (pydantic takes an instance of the
    # field's class without validating it again). No docstring: the OpenAPI has none.
    model_config = _Camel.model_config
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


class PersonalizerInnerError(_Camel):
    """More specific information about an error: this service's own error type."""

    code: str
    innererror: PersonalizerInnerError | None = None


MAX_SLOTS = 50
"""Most slots of a multi-slot rank (each is one decision, one store transaction)."""
SlotId = Annotated[Text, Field(min_length=1, max_length=256)]


class PersonalizerSlot(_Camel):
    """One place on the page: its features join the context for its decision."""

    id: SlotId
    features: JsonFeatureList | None = None
    excluded_actions: list[ArmId] | None = None
    baseline_action: ArmId = Field(
        description="the action the application shows here without the service: an "
        "action id, not excluded from this slot, each slot's its own"
    )


class PersonalizerMultiSlotRankRequest(_Camel):
    context_features: JsonFeatureList | None = None
    actions: Annotated[list[PersonalizerAction], Field(min_length=1)]
    slots: Annotated[list[PersonalizerSlot], Field(min_length=1, max_length=MAX_SLOTS)]
    event_id: EventId | None = None
    defer_activation: bool = False


class PersonalizerSlotResponse(_Camel):
    id: str
    reward_action_id: str | None = Field(
        None, description="absent when every action left for the slot is excluded from it"
    )


class PersonalizerMultiSlotRankResponse(_Camel):
    slots: list[PersonalizerSlotResponse]
    event_id: str


class PersonalizerSlotReward(_Camel):
    slot_id: SlotId
    value: Annotated[FiniteFloat, Field(ge=-1, le=1)]


class PersonalizerMultiSlotReward(_Camel):
    reward: Annotated[list[PersonalizerSlotReward], Field(min_length=1)]


class PersonalizerErrorDetail(_Camel):
    """Personalizer's error object: ``code`` (its ErrorCode values), a ``message`` naming
    the field, the field as ``target``, each problem found in ``details``."""

    code: str
    message: str
    target: str | None = None
    details: list[PersonalizerErrorDetail] | None = None
    inner_error: PersonalizerInnerError | None = None


class PersonalizerErrorResponse(_Camel):
    error: PersonalizerErrorDetail


class PersonalizerRetrain(_Camel):
    """The latest relearning of the loop's model from its log (docs/personalizer.md,
    "Relearning from the log"): ``state`` running, done, failed or superseded."""

    state: Literal["running", "done", "failed", "superseded"]
    start_time: datetime
    finish_time: datetime | None = None
    window_start_time: datetime = Field(description="the start of the log window learned")
    events_used: int | None = None
    message: str | None = None


class PersonalizerModelProperties(_Camel):
    """``model/properties``: when the current model started (created, reset or
    imported; relearned from the log: the start of its window) and when it last learned
    (docs/personalizer.md), and the latest relearning from the log."""

    creation_time: datetime
    last_modified_time: datetime
    retrain: PersonalizerRetrain | None = None


FeatureImportanceStatus = Literal[
    "Succeeded", "Running", "Failed", "NotSubmitted", "Timeout", "Canceled"
]


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
