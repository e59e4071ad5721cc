"""Personalizer's request and response models of offline evaluations (docs/personalizer.md
"Offline evaluations"): its shapes for each API version, camelCase; unknown fields are
ignored, as Personalizer did. The native API's: :mod:`service.schemas.evaluations`."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from service.personalizer.schemas import PersonalizerPolicy
from service.schemas.evaluations import EvaluationId, PolicySource, RequestTime


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class PersonalizerEvaluationContract(_Camel):
    """Body of ``POST evaluations`` (v1.0) and ``PUT evaluations/{evaluationId}``: the
    log's ``[startTime, endTime)`` and the learning settings to evaluate beside the
    online one, the baseline and random. ``enableOfflineExperimentation`` (v1.0) and
    ``enablePolicyOptimization`` (2022-09-01-preview) both ask for the search of a
    better setting."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    start_time: RequestTime
    end_time: RequestTime
    policies: list[PersonalizerPolicy] = Field(default_factory=list, max_length=20)
    enable_offline_experimentation: bool = False
    enable_policy_optimization: bool = False


class PolicyResultSummary(_Camel):
    """One period of a v1 ``policyResults[].summary`` (or the ``totalSummary``):
    ``averageReward`` is the IPS estimate ``ipsEstimatorNumerator /
    ipsEstimatorDenominator``, SNIPS is ``ipsEstimatorNumerator /
    snipsEstimatorDenominator``, ``confidenceInterval`` the half-width of the IPS
    estimate's 95% Gaussian interval."""

    time_stamp: datetime
    ips_estimator_numerator: float
    ips_estimator_denominator: float
    snips_estimator_denominator: float
    aggregate_time_window: str
    non_zero_probability: float
    sum_of_squares: float
    confidence_interval: float
    average_reward: float


class PolicyResult(_Camel):
    name: str
    arguments: str
    policy_source: PolicySource
    summary: list[PolicyResultSummary] | None = None
    total_summary: PolicyResultSummary | None = None


class PersonalizerEvaluation(_Camel):
    """An evaluation in the v1.0 / v1.1-preview shape."""

    id: str
    name: str
    start_time: datetime
    end_time: datetime
    job_id: str
    status: Literal[
        "pending", "completed", "failed", "timeout", "optimalPolicyApplied", "onlinePolicyRetained"
    ]
    policy_results: list[PolicyResult]
    feature_importance: list[list[str]] = Field(default_factory=list)
    evaluation_type: Literal["Manual", "Auto"] = "Manual"
    optimal_policy: str = ""
    creation_time: datetime


class EstimateSummary(_Camel):
    expected_reward: float = Field(description="IPS estimate of the reward per decision")
    confidence_interval: list[float] = Field(description="[low, high]: 95% Gaussian interval")


class TimeSeriesPoint(EstimateSummary):
    time_stamp: datetime


class TimeSeries(_Camel):
    data: list[TimeSeriesPoint]


class PolicyTimeSeries(_Camel):
    name: str
    arguments: str
    policy_source: PolicySource
    summary: EstimateSummary
    timeseries: TimeSeries


class EvaluationContent(_Camel):
    start_time: datetime
    end_time: datetime
    interval_in_minutes: int
    value: list[PolicyTimeSeries]


PreviewStatus = Literal[
    "NotSubmitted",
    "Running",
    "Succeeded",
    "Failed",
    "Timeout",
    "OptimalPolicyApplied",
    "OnlinePolicyRetained",
]


class EvaluationDetails(_Camel):
    """An evaluation in the 2022-09-01-preview list."""

    id: str
    name: str
    start_time: datetime
    end_time: datetime
    creation_time: datetime
    status: PreviewStatus
    evaluation_type: Literal["Manual", "Auto"] = "Manual"


class PreviewEvaluation(EvaluationDetails):
    """An evaluation in the 2022-09-01-preview shape (``content`` once it succeeded)."""

    optimal_policy: str | None = None
    description: str | None = None
    content: EvaluationContent | None = None


class EvaluationList(_Camel):
    value: list[EvaluationDetails]
    next_link: str | None = None


class PolicyReference(_Camel):
    """Body of ``POST configurations/applyFromEvaluation``."""

    evaluation_id: EvaluationId
    policy_name: Annotated[str, Field(min_length=1, max_length=256)]


# ---- native API -----------------------------------------------------------------------
