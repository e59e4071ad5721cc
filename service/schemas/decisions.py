"""Bodies of ``POST /recommend``, ``POST /reward`` and ``POST /events/{id}/activate``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, Field, WithJsonSchema

from service.schemas.common import (
    JSON_FEATURES_SCHEMA,
    ArmId,
    AsSent,
    EventId,
    Feature,
    FiniteFloat,
    JsonFeatures,
    PolicyName,
    StoredEventId,
    StrictModel,
    Text,
    VectorOrJson,
)

if TYPE_CHECKING:  # to mypy, what the field holds: floats or JSON feature objects
    ArmFeatures = list[float] | JsonFeatures | None
else:  # the wrapped type is what floats are checked against; JSON feature objects bypass it
    ArmFeatures = Annotated[
        list[Feature] | None,
        VectorOrJson,
        AsSent,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "array", "items": {"type": "number"}},
                    *JSON_FEATURES_SCHEMA,
                    {"type": "null"},
                ]
            }
        ),
    ]


class ArmCandidate(StrictModel):
    """One candidate arm; its feature vector is the request's context followed by
    ``features`` (both optional, together ``dimension`` long)."""

    id: ArmId
    features: ArmFeatures = Field(
        None,
        description="the arm's own features: floats, or JSON feature objects for a policy with features",
    )


class RecommendRequest(StrictModel):
    policy: PolicyName
    context: Annotated[
        list[Feature] | dict[str, Feature],
        VectorOrJson,
        AsSent,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "array", "items": {"type": "number"}},
                    {"type": "object", "additionalProperties": {"type": "number"}},
                    *JSON_FEATURES_SCHEMA,
                ]
            }
        ),
    ] = Field(
        default_factory=list,
        description="the context vector, named features for a policy with feature_names, "
        "or JSON feature objects for a policy with features",
    )
    arms: list[ArmCandidate] | None = Field(
        None, description="candidates; omitted: the policy's registered arms"
    )
    exclude: list[ArmId] | None = None
    user_id: Annotated[Text, Field(min_length=1, max_length=256)] | None = None
    event_id: EventId | None = None
    top_k: Annotated[int, Field(ge=1)] | None = None
    explore: bool = True
    defer_activation: bool = False


class RankedArm(BaseModel):
    arm_id: str
    score: float
    propensity: float
    width: float | None = Field(None, description="confidence width where the algorithm has one")


class GuardrailInfo(BaseModel):
    blocked: dict[str, list[str]] = Field(description="blocked arm id -> reasons")
    safe_arm_served: bool
    unconstrained_arm_id: str
    argmax_blocked: bool


class RecommendResponse(BaseModel):
    event_id: str
    arm_id: str
    ranking: list[RankedArm]
    policy: str
    algorithm: str
    model_version: int
    explored: bool = False
    guardrail: GuardrailInfo | None = None
    degraded: bool = Field(
        False, description="served from cached state because the state store is down"
    )
    activated: bool = True


# ---- rewards -------------------------------------------------------------------------------
class RewardRequest(StrictModel):
    event_id: StoredEventId
    reward: FiniteFloat
    arm_id: ArmId | None = None


class RewardResponse(BaseModel):
    event_id: str
    arm_id: str
    reward: float = Field(description="the reward the model learned for this event")
    applied: bool = Field(
        description="true when this call updated the model; false for a repeat of an "
        "already applied reward (the model is not changed again)"
    )
    status: Literal["applied", "already_rewarded", "conflicting_reward"] = Field(
        description="applied: this call updated the model; already_rewarded: a repeat of "
        "the applied reward (same value); conflicting_reward: the event was rewarded "
        "before with another value, this call's value was ignored (see ignored_reward)"
    )
    ignored_reward: float | None = Field(
        None,
        description="with status conflicting_reward: the value this call sent, not applied "
        "(reward holds the value the model learned); null otherwise",
    )


class ActivateResponse(BaseModel):
    event_id: str
    activated: bool
