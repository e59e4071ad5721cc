"""Configuration of the service: one :class:`Settings` object read from ``BANDIT_*``
environment variables when :func:`get_settings` is first called (never at import).

With nothing set the service runs on the *embedded default*: in-process state, an
SQLite event log and spool under ``BANDIT_DATA_DIR`` and a demo policy, so
``bandit serve`` works on a fresh machine. At every start it rebuilds the model state
from the SQLite log (``service.usecases.recovery``, as for any store that lost a policy);
events still waiting for a reward when the process stopped are not restored (their
decisions stay in the log, unrewarded). ``--workers`` > 1 needs Redis.

Authentication: ``BANDIT_API_KEYS`` (comma-separated) protects ``/reward``,
``/events/*`` and the policy administration routes with ``Authorization: Bearer
<key>``. Without keys the service is never silently open: it logs a warning at start
and accepts protected calls only from loopback clients (127.0.0.1 / ::1), answering
401 to every other client. Set keys before exposing the port.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bandit_core.errors import InvalidInputError


def cors_origin(text: str) -> str:
    """``text`` as the ``Origin`` a browser sends (``scheme://host[:port]``), which CORS
    compares character for character: a trailing ``/`` is dropped and the scheme and host
    lowercased; ``*`` stays; anything with a path, query, fragment or user, or without
    an http(s) scheme and host, never matches and is refused naming the value."""
    if text == "*":
        return text
    parts = urlsplit(text)
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ValueError(
            f"{text!r} is not an origin; give scheme://host[:port] as a browser sends it, "
            "e.g. https://shop.example"
        )
    return f"{parts.scheme}://{parts.netloc.lower()}"


class Settings(BaseSettings):
    """Every setting of the service; the environment variable is ``BANDIT_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="BANDIT_", extra="ignore")

    redis_url: str | None = Field(
        None,
        description=(
            "redis://host:port/db, redis+cluster://host:port,... (Redis Cluster) or "
            "redis+sentinel://host:port,.../master-name[/db]; unset: in-process state"
        ),
    )
    database_url: str | None = Field(
        None, description="postgresql://... or sqlite:///...; unset: SQLite under data_dir"
    )
    api_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated API keys; empty: loopback-only admin"
    )
    oidc_issuer: str | None = Field(
        None,
        description=(
            "an OpenID Connect issuer (Entra ID: https://login.microsoftonline.com/<tenant>"
            "/v2.0) whose signed JWTs are accepted as bearer tokens beside the API keys; its "
            "keys come from <issuer>/.well-known/openid-configuration; needs "
            "BANDIT_OIDC_AUDIENCE; unset: API keys only"
        ),
    )
    oidc_audience: str | None = Field(
        None, description="the aud claim a bearer token must carry (with BANDIT_OIDC_ISSUER)"
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "comma-separated origins (https://shop.example; a trailing / is dropped, a path "
            "refused) whose browser pages may call the API (CORS; '*': any origin); empty: no "
            "CORS headers, browsers refuse cross-origin calls"
        ),
    )
    console: bool = Field(
        True,
        description="serve the browser console at /console/ (docs/console.md); false: no "
        "console routes",
    )
    console_readonly_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="comma-separated keys that sign in to the console read-only: every page, "
        "no change; they are not API keys",
    )
    console_session_seconds: float = Field(
        28_800.0, gt=0, description="how long a console sign-in lasts (the cookie's expiry)"
    )
    console_secret: str | None = Field(
        None,
        description="key that signs the console's session cookie; unset: derived from the "
        "API and read-only keys (a changed key signs everyone out), or random per process "
        "when there are none",
    )
    recommend_requires_key: bool = Field(
        False, description="require an API key on POST /recommend too"
    )
    recommend_coalescing: bool = Field(
        True,
        description=(
            "serve the POST /recommend requests of a policy that arrive while a batch of "
            "its decisions is being served as the next batch: one store read, one scoring "
            "call, one commit (docs/performance.md); off: each request on its own"
        ),
    )
    policies_file: Path | None = Field(
        None, description="YAML or JSON file of policies loaded at start"
    )
    demo_policy: bool = Field(True, description="create the demo policy when no policy exists")
    personalizer_loop: bool = Field(
        True,
        description="create the default Personalizer loop (policy 'personalizer', "
        "docs/personalizer.md) at start when it does not exist",
    )
    run_migrations: bool = Field(True, description="run alembic upgrade head at start")
    rebuild_check_seconds: float = Field(
        5.0,
        gt=0,
        description="how often the state store is compared with the event log's policies "
        "table; a policy the store lacks at two checks in a row is rebuilt from the log "
        "(at once at start)",
    )
    allow_import_guardrails: bool = Field(
        False, description="accept guardrail specs of type 'import' (they load server-side code)"
    )
    data_dir: Path = Field(
        Path("bandit-data"),
        description="directory of the SQLite log (embedded default) and the event-log spool",
    )
    max_body_bytes: int = Field(
        1_048_576, gt=0, description="larger request bodies are refused with 413"
    )
    max_model_bytes: int = Field(
        268_435_456,
        gt=0,
        description="larger model files (PUT .../model) are refused with 413",
    )
    max_candidates: int = Field(
        1000, gt=0, description="most candidate arms one POST /recommend may send"
    )
    feature_importance_decisions: int = Field(
        1000,
        gt=0,
        le=100_000,
        description="latest logged decisions GET /policies/{name}/features reads (traffic statistics and feature names)",
    )
    sweeper_interval_seconds: float = Field(
        1.0, gt=0, description="how often the sweeper gives due events their default reward"
    )
    sweeper_batch: int = Field(
        500, gt=0, description="most due events of one policy finalized per sweep"
    )
    fold_check_seconds: float = Field(
        0.2,
        gt=0,
        description=(
            "how often a replica checks whether a policy's model_update_interval period "
            "began and folds its pending rewards (a shorter interval is rounded up to it)"
        ),
    )
    fold_max_deltas: int = Field(
        1000,
        gt=0,
        description=(
            "most pending rewards one fold takes; a replica that accepted this many of a "
            "policy since its last fold folds at once"
        ),
    )
    reward_batching: bool = Field(
        True,
        description=(
            "apply a policy's rewards that arrive while one of its reward transactions is "
            "in flight together, as the next transaction; false: one transaction per reward"
        ),
    )
    done_event_retention_seconds: float = Field(
        86_400.0, ge=0, description="how long a rewarded event answers repeats before it is deleted"
    )
    event_ttl_seconds: float = Field(
        7 * 86_400.0,
        gt=0,
        description="lifetime of a deferred event never activated (it then expires unrewarded)",
    )
    snapshot_interval_seconds: float = Field(
        300.0, ge=0, description="0 disables periodic snapshots"
    )
    snapshot_keep: int = Field(
        24,
        ge=0,
        description="periodic snapshots kept per policy, the newest (0: no count limit); "
        "older ones are deleted after each save",
    )
    snapshot_max_age_seconds: float = Field(
        0.0,
        ge=0,
        description="periodic snapshots older than this are deleted after each save, all "
        "but the newest (0: no age limit)",
    )
    evaluation_workers: int = Field(
        1, ge=1, le=64, description="processes running offline evaluations (each uses one core)"
    )
    offline_engine: Literal["local", "ray"] = Field(
        "local",
        description=(
            "where offline work runs (evaluations, feature-importance jobs; the default of "
            "the offline commands' --engine): local (the evaluation_workers processes) or "
            "ray (tasks and actors on the Ray cluster at ray_address; needs the distributed extra; "
            "docs/operations.md, Offline work on a Ray cluster)"
        ),
    )
    ray_address: str | None = Field(
        None,
        description="host:port of the Ray cluster's head (offline_engine ray); unset: "
        "RAY_ADDRESS, else the cluster started on this machine",
    )
    evaluation_timeout_seconds: float = Field(
        3600.0, gt=0, description="an offline evaluation running longer stops with status Timeout"
    )
    evaluation_heartbeat_seconds: float = Field(
        5.0, gt=0, description="how often a process refreshes the heartbeat of its evaluations"
    )
    auto_optimize_check_seconds: float = Field(
        60.0,
        gt=0,
        description="how often a process looks for Auto-Optimize runs that are due and "
        "decides the finished ones (docs/personalizer.md, Auto-Optimize)",
    )
    retrain_check_seconds: float = Field(
        60.0,
        gt=0,
        description="how often a process looks for relearned models whose late rewards "
        "are not learned yet (left by a restart; docs/personalizer.md, Relearning from the log)",
    )
    evaluation_stale_seconds: float = Field(
        30.0,
        gt=0,
        description="an unfinished evaluation whose heartbeat is older is run again by any "
        "process (its own was restarted or died)",
    )
    log_upkeep_interval_seconds: float = Field(
        3600.0,
        ge=0,
        description="how often the event-log partitions are created ahead and each policy's "
        "logRetentionDays applied (0 disables; docs/operations.md)",
    )
    log_partition_days_ahead: int = Field(
        3, ge=1, description="days of partitions created ahead of today (PostgreSQL)"
    )
    log_delete_batch: int = Field(
        1000, gt=0, description="most rows one transaction of the log retention deletes"
    )
    log_batch_size: int = Field(
        500, gt=0, description="most decision/reward records written in one transaction"
    )
    log_flush_seconds: float = Field(
        0.2, gt=0, description="longest a record waits in memory before the writer flushes"
    )
    redis_timeout_seconds: float = Field(
        2.0, gt=0, description="Redis socket timeout; past it a call counts as the store down"
    )
    redis_retry_after_seconds: int = Field(5, gt=0, description="Retry-After of 503 answers")
    store_breaker_failures: int = Field(
        3,
        ge=1,
        description=(
            "consecutive Redis calls that time out before the circuit breaker opens: "
            "calls then fail at once (decisions degraded, rewards 503) instead of each "
            "waiting redis_timeout_seconds (single Redis and Sentinel; not Redis Cluster)"
        ),
    )
    store_breaker_open_seconds: float = Field(
        5.0,
        gt=0,
        description=(
            "how long an open breaker fails Redis calls at once before it lets one call "
            "through to probe (its success closes the breaker, its failure reopens it)"
        ),
    )
    probe_timeout_seconds: float = Field(
        0.5,
        gt=0,
        lt=1,
        description=(
            "longest /readyz, /health/dependencies and the gauge refresh wait for a "
            "dependency's probe; a probe not answered by then reports the dependency "
            "unavailable (one probe per dependency runs at a time, however many ask)"
        ),
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="how bandit serve writes its log: text (readable lines) or json (one "
        "object per line with the request id; docs/operations.md, Logs)",
    )
    metrics_refresh_seconds: float = Field(
        15.0,
        gt=0,
        description=(
            "how often the gauges (alpha, delta_G, pending events, backlog, dependency_up) "
            "are refreshed and the stores probed, without any API call"
        ),
    )
    metrics_arm_series: int = Field(
        100,
        ge=0,
        description=(
            "per policy, the most registered arms (in registration order) with their own "
            "arm label on the per-arm metrics; every other arm is counted under "
            'arm="__other__", so the series count stays bounded whatever ids requests send'
        ),
    )
    build_commit: str | None = Field(
        None,
        description="git commit of the running build, a label of bandit_build_info; unset: "
        "the commit of the git checkout the service runs from, else 'unknown'",
    )
    default_delta_g_limit: float = Field(
        0.05,
        gt=0,
        le=1,
        description="delta_G limit exported for guardrailed policies that set no delta_g_limit",
    )

    @field_validator("api_keys", "console_readonly_keys", "cors_origins", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        return [cors_origin(v) for v in values]

    @field_validator("offline_engine")
    @classmethod
    def _ray_installed(cls, value: str) -> str:
        from service.usecases.offline_engine import RAY_EXTRA, ray_installed

        if value == "ray" and not ray_installed():
            raise ValueError(
                f"BANDIT_OFFLINE_ENGINE=ray needs Ray, which is not installed: {RAY_EXTRA}"
            )
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url_not_empty(cls, value: str | None) -> str | None:
        # An empty URL would otherwise mean neither Redis nor "embedded": each worker
        # would keep its own in-process state.
        if value is not None and not value.strip():
            raise ValueError(
                "BANDIT_REDIS_URL is set but empty; give redis://host:port/db, or unset it "
                "for the embedded in-process state (one worker)"
            )
        if value is not None:
            from service.storage.redis_urls import parse_redis_url

            try:
                parse_redis_url(value)
            except InvalidInputError as exc:
                raise ValueError(str(exc)) from exc
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url_supported(cls, value: str | None) -> str | None:
        if value is not None:
            from sqlalchemy.exc import ArgumentError

            from bandit_core.errors import ConfigError
            from service.storage.schema import database_url

            try:
                database_url(value)
            except ArgumentError:
                raise ValueError(f"not a URL: {value!r}") from None
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _oidc_pair(self) -> Settings:
        if (self.oidc_issuer is None) != (self.oidc_audience is None):
            raise ValueError(
                "BANDIT_OIDC_ISSUER and BANDIT_OIDC_AUDIENCE go together: set both to "
                "accept OIDC bearer tokens, or neither"
            )
        if self.oidc_issuer is not None and not self.oidc_issuer.startswith(
            ("https://", "http://")
        ):
            raise ValueError(
                f"BANDIT_OIDC_ISSUER must be an http(s) URL, but got {self.oidc_issuer!r}"
            )
        return self

    @property
    def embedded(self) -> bool:
        """True when no Redis is configured (state lives in this process)."""
        return self.redis_url is None

    @property
    def log_url(self) -> str:
        """The event-log URL: ``database_url``, or an SQLite file under ``data_dir``
        (the storage layer picks the driver)."""
        return self.database_url or f"sqlite:///{(self.data_dir / 'events.sqlite3').as_posix()}"

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read from the environment on first call."""
    return Settings()
