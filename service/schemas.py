"""Request and response models of the HTTP API (the field names are the contract).

Every float is finite (NaN and infinities are refused with 422 naming the field).
These models are the wire format only; the event-log tables live in the storage layer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from bandit_core.registry import POLICIES

# strict: JSON true/false or "1.5" are not numbers (lax mode would read true as 1.0)
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]
# Features are bounded so that no request can overflow the model: with |x| <= 1e6 the
# products in x x^T stay far inside float64 (a 1e308 feature made every score NaN and a
# reward with it poisoned the arm for good).
MAX_ABS_FEATURE = 1e6
Feature = Annotated[FiniteFloat, Field(ge=-MAX_ABS_FEATURE, le=MAX_ABS_FEATURE)]


def _storable(value: str) -> str:
    """PostgreSQL text and JSONB cannot hold NUL: an id with one could not be logged."""
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (\\u0000)")
    return value


Text = Annotated[str, AfterValidator(_storable)]
ArmId = Annotated[Text, Field(min_length=1, max_length=256)]
PolicyName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]
# The registered engine policies, in registry order: the OpenAPI enum follows the registry.
Algorithm = Literal[tuple(POLICIES)]  # type: ignore[valid-type]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- decisions ----------------------------------------------------------------------------
class ArmCandidate(_Model):
    """One candidate arm; its feature vector is the request's context followed by
    ``features`` (both optional, together ``dimension`` long)."""

    id: ArmId
    features: list[Feature] | None = None


class RecommendRequest(_Model):
    policy: PolicyName
    context: list[Feature] | dict[str, Feature] = Field(
        default_factory=list,
        description="the context vector, or named features for a policy with feature_names",
    )
    arms: list[ArmCandidate] | None = Field(
        None, description="candidates; omitted: the policy's registered arms"
    )
    exclude: list[ArmId] | None = None
    user_id: Annotated[Text, Field(min_length=1, max_length=256)] | None = None
    event_id: (
        Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$")] | None
    ) = None
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
class RewardRequest(_Model):
    event_id: Annotated[str, Field(min_length=1, max_length=128)]
    reward: FiniteFloat
    arm_id: ArmId | None = None


class RewardResponse(BaseModel):
    event_id: str
    arm_id: str
    reward: float
    applied: bool = Field(
        description="true when this call updated the model; false for a repeat of an "
        "already applied reward (the model is not changed again)"
    )
    status: Literal["applied", "already_rewarded"]


class ActivateResponse(BaseModel):
    event_id: str
    activated: bool


# ---- policies ------------------------------------------------------------------------------
class PolicySpec(_Model):
    """Body of ``PUT /policies/{name}``."""

    algorithm: Algorithm
    dimension: Annotated[int, Field(ge=1, le=4096)]
    params: dict[str, Any] = Field(default_factory=dict, description="algorithm hyperparameters")
    arms: list[ArmId] | None = None
    # documented as items + min/maxItems: the prefixItems pydantic writes for a tuple trip
    # OpenAPI tools that rewrite 3.1 schemas to older drafts (schemathesis among them)
    reward_range: Annotated[
        tuple[FiniteFloat, FiniteFloat],
        WithJsonSchema({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}),
    ] = (0.0, 1.0)
    default_reward: FiniteFloat | None = Field(
        0.0,
        description="reward given to events not rewarded within reward_wait_seconds; null: none",
    )
    reward_wait_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 600.0
    epsilon: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    guardrails: list[dict[str, Any]] | None = None
    safe_arm: ArmId | None = None
    feature_names: list[Annotated[Text, Field(min_length=1)]] | None = None
    personalizer: dict[str, Any] | None = Field(
        None,
        description="settings of the Personalizer-compatible configuration routes that "
        "change nothing here (modelExportFrequency, logRetentionDays, the learning "
        "policy's name, ...), kept so that reading the configuration returns them",
    )
    delta_g_limit: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = Field(
        None,
        description=(
            "largest acceptable delta_G (share of decisions whose UCB argmax a guardrail "
            "blocked), exported as bandit_guardrail_delta_g_limit for the "
            "BanditDeltaGAboveLimit alert; null: the server's BANDIT_DEFAULT_DELTA_G_LIMIT"
        ),
    )

    @model_validator(mode="after")
    def _check(self) -> PolicySpec:
        low, high = self.reward_range
        if not low < high:
            raise ValueError(
                f"reward_range must be [low, high] with low < high, but got {[low, high]}"
            )
        if self.default_reward is not None and not low <= self.default_reward <= high:
            raise ValueError(
                f"default_reward must lie in reward_range {[low, high]}, but got {self.default_reward}"
            )
        if self.arms is not None and len(set(self.arms)) != len(self.arms):
            raise ValueError("arms must be unique")
        if self.feature_names is not None and len(set(self.feature_names)) != len(
            self.feature_names
        ):
            raise ValueError("feature_names must be unique")
        return self


class PolicyInfo(PolicySpec):
    name: str
    revision: str = Field(description="changes with every configuration change")
    created_at: float
    updated_at: float
    reset_at: float = Field(description="when the learned state last started from scratch")


class PolicyList(BaseModel):
    policies: list[PolicyInfo]


class ArmsChange(_Model):
    arms: list[ArmId] = Field(min_length=1)


class ArmStatsOut(BaseModel):
    pulls: int = Field(description="decisions that served the arm")
    rewarded: int = Field(description="rewards applied to the arm")
    reward_sum: float
    mean_reward: float
    alpha: float | None = Field(None, description="LNUCB-TA exploration weight of the arm")
    extras: dict[str, float] = Field(default_factory=dict)


class PolicyStats(BaseModel):
    policy: str
    algorithm: str
    decisions: int
    rewards: int
    default_rewards: int
    arms: dict[str, ArmStatsOut]
    delta_G: float | None = Field(
        None, description="guardrail: fraction of decisions whose UCB argmax was blocked"
    )
    policy_stats: dict[str, float] = Field(default_factory=dict)


class Snapshot(BaseModel):
    """A whole-policy model snapshot (``data``: base64 of the engine's binary layout)."""

    policy: str
    algorithm: str
    created_at: float
    model_version: int
    data: str


class SnapshotImport(_Model):
    data: str = Field(description="base64 of an exported snapshot")


# ---- health ---------------------------------------------------------------------------------
class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready", "degraded"]
    state_store: Literal["ok", "unavailable"]
    event_log: Literal["ok", "unavailable"]
    spool_depth: int
    log_lag_seconds: float


class ErrorDetail(BaseModel):
    detail: str | list[dict[str, Any]]
