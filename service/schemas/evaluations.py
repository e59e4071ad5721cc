"""Request and response models of the native API's offline evaluations (docs/offline.md
"Evaluations"), and the types any API family's evaluation models share. Personalizer's
shapes live in its adapter package."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _iso_time_only(value: object) -> object:
    if isinstance(value, int | float):
        # pydantic reports a ValueError as the field's 422 (a TypeError would be a 500)
        raise ValueError("a time is an ISO 8601 string, e.g. 2026-11-25T00:00:00Z")  # noqa: TRY004
    return value


RequestTime = Annotated[datetime, BeforeValidator(_iso_time_only)]
"""A time in a request body: an ISO 8601 string (a bare number is refused, not read as
unix seconds, so the body matches the OpenAPI ``date-time`` it documents)."""

EvaluationId = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.:\-]+$")]
PolicySource = Literal["Online", "Baseline", "Random", "Custom", "OfflineExperimentation"]


class PolicyArguments(Protocol):
    """A named learning setting as a request writes it (any API family's model of it)."""

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> str: ...


class EvaluationPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=256)]
    arguments: Annotated[str, Field(min_length=1, max_length=65536)] = Field(
        description="VW arguments (--epsilon, -q) or a JSON policy spec (PUT /policies body)"
    )


class EvaluationRequest(BaseModel):
    """Body of ``POST /policies/{name}/evaluations``."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=256)]
    start_time: RequestTime
    end_time: RequestTime
    policies: list[EvaluationPolicy] = Field(default_factory=list, max_length=20)
    offline_experimentation: bool = False
    evaluation_id: EvaluationId | None = Field(None, description="omitted: a new uuid")


class Estimate(BaseModel):
    value: float
    ci_low: float
    ci_high: float


ESTIMATE_DESCRIPTION = "the estimate of the evaluation's estimator (ips: equal to ips)"


class PeriodEstimate(BaseModel):
    start: float = Field(description="unix seconds")
    events: int
    ips: Estimate
    snips: Estimate
    estimate: Estimate = Field(description=ESTIMATE_DESCRIPTION)


class EvaluatedPolicy(BaseModel):
    name: str
    arguments: str
    source: PolicySource
    events: int
    ips: Estimate
    snips: Estimate
    estimate: Estimate = Field(description=ESTIMATE_DESCRIPTION)
    periods: list[PeriodEstimate]


class EvaluationView(BaseModel):
    """An evaluation in the native API (estimates once it succeeded)."""

    policy: str
    evaluation_id: str
    name: str
    status: str
    progress: float
    created_at: float
    start_time: float
    end_time: float
    message: str | None = None
    period_seconds: float | None = None
    estimator: str | None = Field(
        None,
        description="ips, dr or mtr: what each result's estimate is and optimal_policy "
        "ranks by (once it succeeded)",
    )
    optimal_policy: str | None = None
    results: list[EvaluatedPolicy] | None = None


class AutoOptimizeEstimate(BaseModel):
    """A learning setting's estimate in an Auto-Optimize run (its evaluation's estimator),
    with its 95% interval."""

    name: str
    source: str
    arguments: str
    mean: float
    low: float
    high: float


class AutoOptimizeRun(BaseModel):
    """``GET /policies/{name}/auto-optimizations``: one Auto-Optimize run (unix seconds;
    docs/personalizer.md, "Auto-Optimize"); the decision fields are null until its
    evaluation succeeded and was decided."""

    evaluation_id: str = Field(description="the run's evaluation (auto-<n>: the n-th run due)")
    status: str = Field(description="its evaluation's status")
    created_at: float
    start_time: float
    end_time: float
    decided_at: float | None = None
    applied: bool | None = Field(None, description="whether the best setting was applied")
    reason: str | None = Field(None, description="why it was applied or not")
    online: str | None = Field(None, description="the online setting's name")
    best: str | None = Field(None, description="the best setting other than the online one")
    estimates: list[AutoOptimizeEstimate] = Field(default_factory=list)
