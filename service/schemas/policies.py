"""Bodies of the policy routes (``/policies``): a policy's settings, its stored record
and its statistics."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from pydantic import BaseModel, Field, WithJsonSchema, field_validator, model_validator

from bandit_core import ConfigError
from bandit_core.drift import PageHinkleyConfig
from bandit_core.features import FeaturizerConfig
from bandit_core.featurized import featurized_dimension
from bandit_core.registry import POLICIES, policy_class
from service.schemas.common import (
    MAX_DENSE_DIMENSION,
    MAX_SPARSE_DIMENSION,
    Algorithm,
    ArmId,
    FiniteFloat,
    StrictModel,
    Text,
)

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


class DriftResponse(StrictModel):
    """What a policy does after its detector finds a change (docs/algorithms.md section
    10.5, "Response to a detection"): explore at ``exploration`` for ``seconds``."""

    exploration: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        description="the level the policy's exploration knob is raised to: alpha (the "
        "weight of the confidence width) for the UCB models, epsilon (at most 1) for "
        "random and epsilon_greedy; a knob already higher keeps its value",
    )
    seconds: Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="how long the raised exploration lasts after each detection"
    )


class PolicySpec(StrictModel):
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
        WithJsonSchema(
            {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
        ),
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
    retrain_days: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        None,
        description=(
            "when a change of the engine needs a new model, train it on the rewarded "
            "decisions of this many last days of the event log in the background while the "
            'current model serves, then switch (docs/personalizer.md, "Relearning from the '
            'log"); null or 0: the new model starts from scratch at once'
        ),
    )
    features: dict[str, Any] | None = Field(
        None,
        description="the featurizer of JSON features (bandit_core FeaturizerConfig: bits, "
        "interactions, ignore, keep, ignore_linear, context_in_actions, output, limits); /recommend then takes context "
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

    model_update_interval: Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)] | None = (
        Field(
            None,
            description=(
                "seconds between folds of the accepted rewards into the model, for a shared "
                "model without per-arm parts (hybrid_linucb with context_dim 0, the default "
                "Personalizer loop): a reward is stored as a small delta and the deltas are "
                "folded in one rank-m update per interval, so decisions read a model at most "
                "about this old (docs/architecture.md, 'Folded model updates'); null: every "
                "reward updates the model in its own transaction; no effect on other models"
            ),
            examples=[1.0],
        )
    )
    drift_detection: dict[str, Any] | None = Field(
        None,
        description=(
            "the Page-Hinkley detector watching the policy's applied rewards "
            "(docs/algorithms.md section 10.5): delta (the change in mean tolerated), "
            "threshold (the excursion that signals a change) and min_samples; a field left "
            "out takes its default (0.005, 50, 30); null: all three defaults"
        ),
        examples=[{"delta": 0.01, "threshold": 20}],
    )

    drift_response: DriftResponse | None = Field(
        None,
        description=(
            "after the detector (drift_detection) finds a change, raise the policy's "
            "exploration to exploration for seconds (docs/algorithms.md section 10.5); "
            "null: a detection changes nothing in the decisions"
        ),
        examples=[{"exploration": 2.0, "seconds": 3600}],
    )

    @field_validator("drift_detection")
    @classmethod
    def _check_drift_detection(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is None:
            return None
        try:
            return dataclasses.asdict(PageHinkleyConfig(**value))
        except (ConfigError, TypeError) as exc:
            raise ValueError(str(exc)) from exc

    @property
    def drift_config(self) -> PageHinkleyConfig:
        """The settings of the policy's change detector."""
        return PageHinkleyConfig(**(self.drift_detection or {}))

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
        response = self.drift_response
        if (
            response is not None
            and policy_class(self.algorithm).EXPLORATION_KNOB == "epsilon"
            and response.exploration > 1
        ):
            raise ValueError(
                f"drift_response.exploration is {self.algorithm}'s epsilon and must be at "
                f"most 1, but got {response.exploration}"
            )
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
    reset_at: float = Field(
        description="when the learned state last started from scratch (a model relearned "
        "from the log: the start of the log window it learned)"
    )
    retrained_from: float | None = Field(
        None,
        description="the reset_at of the model a relearned one replaced: the rewards of that "
        "model's events still pending are logged and reach the relearned model from the log; "
        "null: not relearned",
    )
    declared: PolicySpec | None = Field(
        None,
        description="the settings the policies file (BANDIT_POLICIES_FILE) last applied; at "
        "start a field the file changed since is applied, one changed through the API and "
        "not in the file is kept (docs/operations.md); null: not declared by the file",
    )


class PolicyList(BaseModel):
    policies: list[PolicyInfo]


class ArmsChange(StrictModel):
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
        None,
        description="guardrail: fraction of decisions whose UCB argmax was blocked",
    )
    policy_stats: dict[str, float] = Field(default_factory=dict)
