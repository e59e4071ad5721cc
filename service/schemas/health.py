"""Bodies of the health routes: ``/healthz``, ``/readyz``, ``/health/dependencies``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


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
        None,
        description="the state store's circuit breaker; null: none (in-process store)",
    )
    spool_depth: int | None = Field(None, description="event log: records spooled on disk")
    log_lag_seconds: float | None = Field(
        None, description="event log: age of the oldest record not yet written"
    )


class Dependencies(BaseModel):
    """``GET /health/dependencies``: every dependency's status, whatever readiness says."""

    dependencies: list[DependencyReport]
