"""Request and response models of the HTTP API (the field names are the contract).

Every float is finite (NaN and infinities are refused with 422 naming the field).
These models are the wire format only; the event-log tables live in the storage layer.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    field_validator,
    model_validator,
)

from bandit_core import ConfigError
from bandit_core.features import FeaturizerConfig
from bandit_core.featurized import featurized_dimension
from bandit_core.registry import POLICIES, policy_class

MAX_DENSE_DIMENSION = 4096
"""Longest dense rows a policy may take (float vectors, dense JSON features)."""
MAX_SPARSE_DIMENSION = 2**20 + 1
"""Longest sparse rows: ``diag_linucb`` over JSON features of up to ``bits`` 20
(docs/features.md, "Large hashed spaces"); the pending event keeps the served row sparse."""

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
if TYPE_CHECKING:  # the registry is known at run time only: to mypy, an algorithm is a name
    Algorithm = str
else:
    # The registered engine policies, in registry order: the OpenAPI enum follows the registry.
    Algorithm = Literal[tuple(POLICIES)]


JsonFeatures = dict[str, Any] | list[dict[str, Any]]
"""JSON feature objects (one object or a list of them, as Personalizer sends), for a policy
with ``features``; checked by its featurizer (bandit_core.features), not here."""
_JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}
_JSON_FEATURES_SCHEMA: list[dict[str, Any]] = [
    _JSON_OBJECT_SCHEMA,
    {"type": "array", "items": _JSON_OBJECT_SCHEMA},
]


def is_json_features(value: Any) -> bool:
    """A JSON feature object (one holding something else than numbers: a flat object of
    numbers stays named features) or a non-empty list of objects."""
    if type(value) is dict:
        for v in value.values():  # a plain loop: called per candidate on the request path
            kind = type(v)
            if kind is not float and kind is not int:
                return True
        return False
    return type(value) is list and bool(value) and all(type(v) is dict for v in value)


def _vector_or_json(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Floats are validated as before; JSON feature objects (:data:`JsonFeatures`) pass
    as they came, so a field typed for floats may hold them."""
    return value if is_json_features(value) else handler(value)


def _as_is(value: Any) -> Any:
    return value


VectorOrJson = WrapValidator(_vector_or_json)
AsSent = PlainSerializer(_as_is, return_type=Any)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- decisions ----------------------------------------------------------------------------
class ArmCandidate(_Model):
    """One candidate arm; its feature vector is the request's context followed by
    ``features`` (both optional, together ``dimension`` long)."""

    id: ArmId
    # the wrapped type is what floats are checked against; JSON feature objects bypass it
    features: Annotated[
        list[Feature] | None,
        VectorOrJson,
        AsSent,
        WithJsonSchema({"anyOf": [{"type": "array", "items": {"type": "number"}}, *_JSON_FEATURES_SCHEMA, {"type": "null"}]}),
    ] = Field(
        None,
        description="the arm's own features: floats, or JSON feature objects for a policy with features",
    )


class RecommendRequest(_Model):
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
                    *_JSON_FEATURES_SCHEMA,
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


# ---- policies ------------------------------------------------------------------------------
# Settings a spec holds as top-level fields: ``params`` holds only the algorithm's own
# hyperparameters, so each setting is decided in one place (a top-level one given in
# ``params`` moves to its field; the two disagreeing is a 422 on ``params``).
TOP_LEVEL_SETTINGS = ("epsilon", "reward_range", "guardrails", "safe_arm")
# The service explores by default so that its logs support offline evaluation: every
# candidate keeps a logged propensity >= epsilon / K (docs/offline.md, "Support").
DEFAULT_EPSILON = 0.05


def default_epsilon(algorithm: str) -> float:
    """Epsilon of a policy that names none: :data:`DEFAULT_EPSILON`, or the algorithm's own
    default when larger (epsilon_greedy: 0.1)."""
    fields = {f.name: f for f in dataclasses.fields(policy_class(algorithm).CONFIG)}
    epsilon = fields["epsilon"].default
    if not isinstance(epsilon, (int, float)):
        raise TypeError(f"{algorithm}'s epsilon has no numeric default: {epsilon!r}")
    return max(DEFAULT_EPSILON, float(epsilon))


def _same_setting(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return bool(a == b)


class PolicySpec(_Model):
    """Body of ``PUT /policies/{name}``."""

    algorithm: Algorithm
    dimension: Annotated[int, Field(ge=1, le=MAX_SPARSE_DIMENSION)] | None = Field(
        None,
        description="length of each candidate's feature vector; with features it follows "
        f"from them (and, when given, must equal that); at most {MAX_DENSE_DIMENSION} but for "
        "an algorithm taking sparse rows (diag_linucb) with sparse features",
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "the algorithm's own hyperparameters (alpha, ridge_lambda, seed, ...); not d "
            "(that is dimension) nor a top-level field (epsilon, reward_range, guardrails, "
            "safe_arm): one given here moves to its field, and disagreeing with it is a 422"
        ),
    )
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
    epsilon: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None,
        description=(
            "probability of serving a uniformly random candidate (logged propensities stay "
            f">= epsilon/K, so the log supports offline evaluation); omitted: {DEFAULT_EPSILON} "
            "(epsilon_greedy: its default 0.1); null: the algorithm's own default (0 for the "
            "UCB algorithms: deterministic, a log no estimator can evaluate)"
        ),
    )
    guardrails: list[dict[str, Any]] | None = None
    safe_arm: ArmId | None = None
    feature_names: list[Annotated[Text, Field(min_length=1)]] | None = None
    personalizer: dict[str, Any] | None = Field(
        None,
        description="settings of the Personalizer-compatible configuration routes, kept so "
        "that reading the configuration returns them (modelExportFrequency, the learning "
        "policy's name, ...); of those logRetentionDays acts: the days the event log keeps "
        "the policy's events (-1 or absent: forever)",
    )
    arm_idle_seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = Field(
        None,
        description=(
            "forget the learned state (and pull count) of an arm that is not registered "
            "in arms and was neither served nor rewarded for this long; it starts again "
            "from the prior when it comes back. null: keep every arm's state until retired"
        ),
    )
    features: dict[str, Any] | None = Field(
        None,
        description="the featurizer of JSON features (bandit_core FeaturizerConfig: bits, "
        "interactions, context_in_actions, output, limits); /recommend then takes context "
        "and arm features as JSON feature objects",
        examples=[{"bits": 8, "interactions": [["*", "*"]]}],
    )
    delta_g_limit: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = Field(
        None,
        description=(
            "largest acceptable delta_G (share of decisions whose UCB argmax a guardrail "
            "blocked), exported as bandit_guardrail_delta_g_limit for the "
            "BanditDeltaGAboveLimit alert; null: the server's BANDIT_DEFAULT_DELTA_G_LIMIT"
        ),
    )

    @field_validator("features")
    @classmethod
    def _check_features(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            return FeaturizerConfig.from_dict(value).to_dict()
        except (ConfigError, TypeError) as exc:
            raise ValueError(str(exc)) from exc

    @property
    def featurizer_config(self) -> FeaturizerConfig | None:
        """The featurizer ``features`` declares (None: float vectors)."""
        return None if self.features is None else FeaturizerConfig.from_dict(self.features)

    @model_validator(mode="before")
    @classmethod
    def _settings_in_one_place(cls, data: Any) -> Any:
        """Move top-level settings given in ``params`` to their fields (a conflict stays in
        ``params`` for :meth:`_only_hyperparameters` to refuse) and fill in the default
        epsilon of a spec that names none."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        params = data.get("params")
        if isinstance(params, dict):
            params = dict(params)
            for key in TOP_LEVEL_SETTINGS:
                if key not in params:
                    continue
                if data.get(key) is None:
                    data[key] = params.pop(key)
                elif _same_setting(data[key], params[key]):
                    del params[key]
            data["params"] = params
        if "epsilon" not in data and data.get("algorithm") in POLICIES:
            data["epsilon"] = default_epsilon(data["algorithm"])
        return data

    @field_validator("params")
    @classmethod
    def _only_hyperparameters(cls, params: dict[str, Any]) -> dict[str, Any]:
        if "d" in params:
            raise ValueError(
                "params.d is not allowed: the feature length is the top-level field dimension"
            )
        for key in TOP_LEVEL_SETTINGS:
            if key in params:
                raise ValueError(
                    f"params.{key} = {params[key]!r} conflicts with the top-level field {key}: "
                    f"set {key} once, as the top-level field"
                )
        return params

    @model_validator(mode="after")
    def _check(self) -> PolicySpec:
        if self.features is not None:
            self._derive_dimension()
        elif self.dimension is None:
            raise ValueError("dimension is required for a policy without features")
        elif self.dimension > MAX_DENSE_DIMENSION:
            raise ValueError(
                f"dimension must be at most {MAX_DENSE_DIMENSION} for float vectors, but got {self.dimension}"
            )
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

    def _derive_dimension(self) -> None:
        config = self.featurizer_config
        assert config is not None
        if self.feature_names is not None:
            raise ValueError("features and feature_names exclude each other")
        context_dim = self.params.get("context_dim", 0)
        try:
            layout = policy_class(self.algorithm).FEATURE_LAYOUT
            d = featurized_dimension(layout, config, context_dim)
        except ConfigError as exc:
            raise ValueError(str(exc)) from exc
        if d > MAX_DENSE_DIMENSION and not (
            policy_class(self.algorithm).SPARSE_ROWS and config.output == "sparse"
        ):
            raise ValueError(
                f"features make vectors of {d} entries; at most {MAX_DENSE_DIMENSION} (lower bits) "
                "but for an algorithm taking sparse rows (diag_linucb) with sparse output"
            )
        if self.dimension is not None and self.dimension != d:
            raise ValueError(
                f"dimension must be {d} for {self.algorithm} with these features, but got {self.dimension}"
            )
        self.dimension = d


class PolicyInfo(PolicySpec):
    name: str
    revision: str = Field(description="changes with every configuration change")
    created_at: float
    updated_at: float
    reset_at: float = Field(description="when the learned state last started from scratch")
    declared: PolicySpec | None = Field(
        None,
        description="the settings the policies file (BANDIT_POLICIES_FILE) last applied; at "
        "start a field the file changed since is applied, one changed through the API and "
        "not in the file is kept (docs/operations.md); null: not declared by the file",
    )


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


IMPORTANCE_METHOD = (
    "importance = |w_i| * mean_t |x_ti - mean(x_i)|: the mean absolute linear SHAP value "
    "of feature i over the candidate rows of the latest logged decisions (|w_i| averaged "
    "over arms by their rewards for per-arm models); docs/features.md, Feature importance"
)


class FeatureImportance(BaseModel):
    """One input column of a linear policy and how much it moves the scores."""

    column: int = Field(description="the column of the policy's input rows (a bucket with JSON features)")
    names: list[str] = Field(
        description="the features seen in this column (several: hashed features collided); "
        "empty when none of the sampled decisions carried it"
    )
    importance: float = Field(description="|weight| times deviation: the average amount the feature moves a score")
    weight: float = Field(description="the policy's weight on the column (averaged over arms for per-arm models)")
    mean: float = Field(description="the column's mean over the sampled rows")
    deviation: float = Field(description="the column's mean absolute deviation over the sampled rows")


class FeatureImportanceReport(BaseModel):
    """``GET /policies/{name}/features``: the columns that move the policy's scores most."""

    policy: str
    algorithm: str
    method: str = Field(description="how importance is computed")
    decisions: int = Field(description="logged decisions the statistics and names come from")
    rows: int = Field(description="candidate rows over those decisions")
    features: list[FeatureImportance] = Field(description="by descending importance")


class ModelProperties(BaseModel):
    """``GET /policies/{name}/model/properties`` (unix seconds)."""

    policy: str
    created_at: float = Field(description="when the current model started: creation, reset, engine change or import")
    modified_at: float = Field(description="the later of created_at and the newest logged reward")


class FeatureScore(BaseModel):
    """One input feature (a JSON key in a namespace) and its score: what the learning
    policy loses without it, the top feature's loss 1, 0 for no loss."""

    namespace: str = Field(description="the feature's namespace ('' for top-level scalars)")
    name: str = Field(description="the JSON key, whatever its values")
    score: float


class FeatureImportanceJob(BaseModel):
    """A feature-importance job over ``[start_time, end_time)`` of a policy's log (unix
    seconds; docs/personalizer.md, Feature importances)."""

    id: str
    name: str
    start_time: float
    end_time: float
    creation_time: float
    status: Literal["Running", "Succeeded", "Failed"]
    description: str | None = Field(None, description="how it was computed, or why it failed")
    feature_scores: list[FeatureScore] = Field([], description="by descending score")


class FeatureImportanceJobs(BaseModel):
    jobs: list[FeatureImportanceJob] = Field(description="newest first")


class FeatureImportanceRequest(_Model):
    """``PUT /policies/{name}/feature-importances/{id}``: a job over ``[since, until)``."""

    name: str = Field("", max_length=256, description="a label for the job")
    since: FiniteFloat = Field(description="start of the log range (unix seconds)")
    until: FiniteFloat = Field(description="end of the log range (unix seconds, excluded)")


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


class ReadinessCheck(BaseModel):
    """One condition of readiness, as its last probe answered."""

    ok: bool
    seconds: float = Field(
        description="how long the probe took, or has been running without an answer"
    )
    error: str | None = Field(None, description="why not ok; null when ok")


class Readiness(BaseModel):
    """``GET /readyz``: whether this process can serve decisions (200 ready, 503 not)."""

    status: Literal["ready", "not_ready"] = Field(
        description="ready when every check is ok; the event log is not a check"
    )
    checks: dict[str, ReadinessCheck] = Field(
        description="each condition of readiness by name (state_store: the store answers)"
    )
    state_store: Literal["ok", "unavailable"]
    event_log: Literal["ok", "degraded"] = Field(
        description=(
            "degraded: the event-log database does not answer; decisions and rewards wait "
            "in memory and the spool and are written when it is back (not unreadiness)"
        )
    )
    spool_depth: int
    log_lag_seconds: float
    policies_missing: list[str] = Field(
        default_factory=list,
        description="policies of the event log whose state the store lacks, being rebuilt "
        "from the log (decisions degraded meanwhile); any makes the status degraded",
    )


class DependencyReport(BaseModel):
    """One dependency as its last probe found it."""

    name: Literal["state_store", "event_log"]
    backend: str = Field(
        description="redis, redis-cluster, redis-sentinel or in-process; postgresql or sqlite"
    )
    required: bool = Field(
        description="whether readiness needs it (the event log's outages are spooled)"
    )
    status: Literal["ok", "unavailable"]
    latency_seconds: float = Field(
        description="how long the probe took, or has been running without an answer"
    )
    error: str | None = Field(None, description="why unavailable; null when ok")
    breaker: Literal["closed", "open", "half_open"] | None = Field(
        None, description="the state store's circuit breaker; null: none (in-process store)"
    )
    spool_depth: int | None = Field(None, description="event log: records spooled on disk")
    log_lag_seconds: float | None = Field(
        None, description="event log: age of the oldest record not yet written"
    )


class Dependencies(BaseModel):
    """``GET /health/dependencies``: every dependency's status, whatever readiness says."""

    dependencies: list[DependencyReport]


class ErrorDetail(BaseModel):
    detail: str | list[dict[str, Any]]


class LogProperties(BaseModel):
    """The span of a policy's event log (``GET /policies/{name}/logs``)."""

    policy: str
    first: datetime | None = Field(description="time of the first decision logged; null: none")
    last: datetime | None = Field(description="time of the last decision logged; null: none")


class AuditEntry(BaseModel):
    """One change to a policy, its model or its log (docs/operations.md, "Audit trail")."""

    id: str = Field(description="the record's id")
    created_at: float = Field(description="when the change was made (unix seconds)")
    policy: str
    action: str = Field(
        description="create, update, delete, reset, retire_arms, model_import, "
        "snapshot_restore, rebuild, log_delete or retention"
    )
    actor: str = Field(
        description="who: key:<first 12 hex digits of the API key's SHA-256>, loopback, "
        "policies-file, cli or system"
    )
    request_id: str | None = Field(description="the X-Request-ID of the request that made it")
    before: dict[str, Any] | None = Field(description="the changed settings before")
    after: dict[str, Any] | None = Field(description="the changed settings after")
    detail: dict[str, Any] | None = Field(
        description="what else the action did (rows deleted, a rebuild's counts, ...)"
    )


class AuditHistory(BaseModel):
    """A page of audit records, oldest first."""

    records: list[AuditEntry]
    next: str | None = Field(description="pass as ?after= for the next page; null on the last page")
