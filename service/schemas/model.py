"""Bodies of the routes over a policy's model and log: feature importance (and its
jobs), model properties, snapshots, the log's span."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from service.schemas.common import FiniteFloat, StrictModel

IMPORTANCE_METHOD = (
    "importance = |w_i| * mean_t |x_ti - mean(x_i)|: the mean absolute linear SHAP value "
    "of feature i over the candidate rows of the latest logged decisions (|w_i| averaged "
    "over arms by their rewards for per-arm models); docs/features.md, Feature importance"
)


class FeatureImportance(BaseModel):
    """One input column of a linear policy and how much it moves the scores."""

    column: int = Field(
        description="the column of the policy's input rows (a bucket with JSON features)"
    )
    names: list[str] = Field(
        description="the features seen in this column (several: hashed features collided); "
        "empty when none of the sampled decisions carried it"
    )
    importance: float = Field(
        description="|weight| times deviation: the average amount the feature moves a score"
    )
    weight: float = Field(
        description="the policy's weight on the column (averaged over arms for per-arm models)"
    )
    mean: float = Field(description="the column's mean over the sampled rows")
    deviation: float = Field(
        description="the column's mean absolute deviation over the sampled rows"
    )


class FeatureImportanceReport(BaseModel):
    """``GET /policies/{name}/features``: the columns that move the policy's scores most."""

    policy: str
    algorithm: str
    method: str = Field(description="how importance is computed")
    decisions: int = Field(description="logged decisions the statistics and names come from")
    rows: int = Field(description="candidate rows over those decisions")
    features: list[FeatureImportance] = Field(description="by descending importance")


RetrainState = Literal["running", "done", "failed", "superseded"]


class RetrainProperties(BaseModel):
    """The latest relearning of a policy's model from its log (unix seconds;
    docs/personalizer.md, "Relearning from the log")."""

    state: RetrainState = Field(
        description="running (the old model serves), done (switched), failed (the old model "
        "kept), superseded (a reset or another configuration change came first)"
    )
    started_at: float
    finished_at: float | None = None
    since: float = Field(description="the start of the log window learned")
    events: int | None = Field(None, description="rewarded decisions learned (once done)")
    message: str | None = Field(None, description="why it failed or was superseded")


class ModelProperties(BaseModel):
    """``GET /policies/{name}/model/properties`` (unix seconds)."""

    policy: str
    created_at: float = Field(
        description="when the current model started: creation, reset, engine change or "
        "import; a model relearned from the log: the start of its window"
    )
    modified_at: float = Field(description="the later of created_at and the newest logged reward")
    retrain: RetrainProperties | None = Field(
        None, description="the latest relearning from the log; null: none"
    )
    pending_rewards: int = Field(
        0,
        description="accepted rewards waiting as deltas for the next fold (model_update_interval)",
    )
    staleness_seconds: float = Field(
        0.0,
        description="how long the oldest reward not yet folded into the model has waited; "
        "0: the model holds every accepted reward",
    )


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


class FeatureImportanceRequest(StrictModel):
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


class SnapshotImport(StrictModel):
    data: str = Field(description="base64 of an exported snapshot")


class LogProperties(BaseModel):
    """The span of a policy's event log (``GET /policies/{name}/logs``)."""

    policy: str
    first: datetime | None = Field(description="time of the first decision logged; null: none")
    last: datetime | None = Field(description="time of the last decision logged; null: none")
