"""Prometheus metrics of the service, every name in one place.

Multi-process safe: when ``PROMETHEUS_MULTIPROC_DIR`` is set before this module is
imported (``bandit serve --workers N`` sets it), values live in that directory and
``/metrics`` aggregates every worker through ``MultiProcessCollector``; gauges declare
how workers combine.

=======================================  =========  ======================  ====================================
name                                     type       labels                  meaning
=======================================  =========  ======================  ====================================
bandit_http_request_duration_seconds     histogram  route, method, status   request latency per route
bandit_decisions_total                   counter    policy, arm             decisions served, by served arm (*)
bandit_degraded_decisions_total          counter    policy                  decisions served from cache (store down)
bandit_rewards_total                     counter    policy, arm, source     rewards applied (source explicit/default) (*)
bandit_reward_positive_sum_total         counter    policy, arm, source     sum of the applied rewards above 0 (*)(***)
bandit_reward_negative_sum_total         counter    policy, arm, source     sum of -r over applied rewards r < 0 (*)(***)
bandit_guardrail_blocks_total            counter    policy, arm             candidates blocked by a guardrail (*)
bandit_guardrail_argmax_blocked_total    counter    policy                  decisions whose UCB argmax was blocked
bandit_guardrail_delta_g                 gauge      policy                  delta_G reported by the policy (max)
bandit_guardrail_delta_g_limit           gauge      policy                  delta_G limit of the policy (latest)
bandit_lnucb_ta_alpha                    gauge      policy, arm             LNUCB-TA exploration weight alpha_a (max) (**)
bandit_pending_events                    gauge      policy                  events scheduled, waiting for a reward
bandit_default_rewards_total             counter    policy                  default rewards applied by the sweeper
bandit_expired_events_total              counter    policy                  deferred events never activated
bandit_overdue_pending_seconds           gauge      policy                  oldest due pending event's age past its deadline (latest)
bandit_folds_total                       counter    policy                  folds of pending rewards committed
bandit_sweeper_errors_total              counter    policy                  due events (or policy sweeps) the sweeper failed
bandit_reward_record_errors_total        counter    policy, step            applied rewards whose log/metrics step failed
bandit_arms_forgotten_total              counter    policy                  arm states forgotten after arm_idle_seconds
bandit_event_log_lag_seconds             gauge      (none)                  age of the oldest unflushed record (max)
bandit_event_log_spool_depth             gauge      (none)                  records spooled on disk (livesum)
bandit_event_log_dead_letters_total      counter    (none)                  records the event log rejected for good
bandit_dependency_up                     gauge      dependency              1 if the last probe reached it (min)
bandit_store_errors_total                counter    operation               state-store calls that failed
bandit_store_breaker_state               gauge      state                   1 for the breaker's state, else 0 (max)
bandit_store_breaker_transitions_total   counter    state                   times the breaker entered a state
bandit_store_transaction_retries_total   counter    policy                  transactions redone after a conflict
bandit_build_info                        gauge      version, commit         1, labelled with the running build
bandit_http_requests_in_flight           gauge      (none)                  requests being answered (livesum)
bandit_not_found_total                   counter    reason                  404 answers by what was not found (***)
bandit_store_operation_duration_seconds  histogram  operation               state-store read / transact latency
bandit_event_log_operation_duration...   histogram  operation               event-log append latency (****)
bandit_event_log_errors_total            counter    operation               event-log calls that failed
bandit_event_log_rows_written_total      counter    table                   records appended to the event log
bandit_snapshot_last_success_timestamp.. gauge      policy                  unix time of the last saved snapshot
bandit_snapshot_failures_total           counter    policy                  periodic snapshots that failed
bandit_log_upkeep_last_success_timest..  gauge      (none)                  unix time of the last upkeep round
bandit_audit_records_total               counter    policy, action          changes recorded in the audit trail
bandit_policies_missing                  gauge      (none)                  policies the log has and the store lacks (max)
bandit_policy_rebuilds_total             counter    outcome                 rebuilds from the log (rebuilt/failed/deleted)
bandit_drift_detections_total            counter    policy                  changes Page-Hinkley detected in the rewards
bandit_drift_excursion                   gauge      policy                  the detector's excursion (threshold 50) (max)
bandit_exploration_boost_until_seconds   gauge      policy                  unix time the drift_response boost ends (max)
=======================================  =========  ======================  ====================================

(*) The ``arm`` label is bounded: an arm has its own value only while it is one of the
first ``BANDIT_METRICS_ARM_SERIES`` registered arms of its policy (:func:`arm_label`);
every other arm, such as the ids of a catalog sent as candidates, is counted under
``arm="__other__"``. Per policy a metric has at most ``BANDIT_METRICS_ARM_SERIES + 1``
arm values (times the ``source`` values), so new ids every hour add no series; a policy
total is the sum over ``arm``. The per-arm numbers of every arm are in ``GET
/policies/{name}/stats``. (**) Only labelled arms report their alpha. (***) ``reason``
is ``policy``, ``event``, ``arm``, ``evaluation``, ``job`` (a feature-importance job) or
``route`` (no route matches the path). (****) Full names:
``bandit_event_log_operation_duration_seconds``,
``bandit_snapshot_last_success_timestamp_seconds``,
``bandit_log_upkeep_last_success_timestamp_seconds``.

The series of a deleted policy leave ``/metrics``: :func:`render` drops every sample of
the metrics in :data:`POLICY_FAMILIES` whose ``policy`` is not in the store's policy
list (read at each scrape; kept when the store cannot be read), in every worker's files.

(***) Rewards may be negative (a Personalizer loop's range is [-1, 1]), and a Prometheus
counter only grows, so the sum of the applied rewards is the pair of counters: the
positive part and the magnitude of the negative part, both counted (one of them by 0) at
every reward so their series exist together. The sum is ``positive - negative``, and
``rate()``/``increase()`` still work on each part across restarts and workers, which a
gauge would not give (a gauge's rate is not defined across a restart and its
per-worker values do not add up in multi-process mode).

The gauges are refreshed without any API call: every ``metrics_refresh_seconds`` by the
lifespan's gauge loop (:meth:`service.usecases.readiness.Monitor.refresh_gauges`), and the
event-log backlog also at every scrape of ``/metrics``. ``dependency`` is ``redis`` (the
state store) or ``database`` (the event log).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Container, Iterable, Iterator
from importlib import metadata
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

REQUEST_LATENCY = Histogram(
    "bandit_http_request_duration_seconds",
    "HTTP request latency per route",
    ["route", "method", "status"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
DECISIONS = Counter("bandit_decisions", "Decisions served, by served arm", ["policy", "arm"])
DEGRADED_DECISIONS = Counter(
    "bandit_degraded_decisions",
    "Decisions served from cached state while the store is down",
    ["policy"],
)
REWARDS = Counter("bandit_rewards", "Rewards applied to the model", ["policy", "arm", "source"])
REWARD_POSITIVE_SUM = Counter(
    "bandit_reward_positive_sum",
    "Sum of the applied reward values above 0",
    ["policy", "arm", "source"],
)
REWARD_NEGATIVE_SUM = Counter(
    "bandit_reward_negative_sum",
    "Sum of -r over the applied reward values r below 0 (the sum is positive - negative)",
    ["policy", "arm", "source"],
)
GUARDRAIL_BLOCKS = Counter(
    "bandit_guardrail_blocks", "Candidates blocked by a guardrail", ["policy", "arm"]
)
GUARDRAIL_ARGMAX_BLOCKED = Counter(
    "bandit_guardrail_argmax_blocked",
    "Decisions whose unconstrained UCB argmax was blocked",
    ["policy"],
)
DELTA_G = Gauge(
    "bandit_guardrail_delta_g",
    "delta_G of a guardrailed policy",
    ["policy"],
    multiprocess_mode="max",
)
DELTA_G_LIMIT = Gauge(
    "bandit_guardrail_delta_g_limit",
    "delta_G limit of a guardrailed policy (its delta_g_limit, or the default)",
    ["policy"],
    multiprocess_mode="mostrecent",
)
LNUCB_TA_ALPHA = Gauge(
    "bandit_lnucb_ta_alpha",
    "LNUCB-TA exploration weight per arm",
    ["policy", "arm"],
    multiprocess_mode="max",
)
PENDING_EVENTS = Gauge(
    "bandit_pending_events", "Events waiting for a reward", ["policy"], multiprocess_mode="max"
)
DEFAULT_REWARDS = Counter(
    "bandit_default_rewards", "Default rewards applied by the sweeper", ["policy"]
)
EXPIRED_EVENTS = Counter("bandit_expired_events", "Deferred events never activated", ["policy"])
OVERDUE_PENDING = Gauge(
    "bandit_overdue_pending_seconds",
    "How long past its deadline the oldest pending event the latest sweep found due was",
    ["policy"],
    multiprocess_mode="mostrecent",
)
MODEL_STALENESS = Gauge(
    "bandit_model_staleness_seconds",
    "How long the oldest reward the latest fold of a policy's pending rewards took had "
    "waited since it was accepted",
    ["policy"],
    multiprocess_mode="mostrecent",
)
FOLDS = Counter(
    "bandit_folds",
    "Folds of a policy's pending rewards committed (each writes the policy's shared part)",
    ["policy"],
)
SWEEPER_ERRORS = Counter(
    "bandit_sweeper_errors",
    "Due events the sweeper failed to finalize or delete (a failed policy sweep counts one)",
    ["policy"],
)
REWARD_RECORD_ERRORS = Counter(
    "bandit_reward_record_errors",
    "Applied rewards or expiries whose logging or metrics failed afterwards",
    ["policy", "step"],
)
ARMS_FORGOTTEN = Counter(
    "bandit_arms_forgotten",
    "Arm states forgotten by the sweeper after the policy's arm_idle_seconds",
    ["policy"],
)
LOG_LAG = Gauge(
    "bandit_event_log_lag_seconds",
    "Age of the oldest unflushed event-log record",
    multiprocess_mode="max",
)
SPOOL_DEPTH = Gauge(
    "bandit_event_log_spool_depth", "Event-log records spooled on disk", multiprocess_mode="livesum"
)
DEAD_LETTERS = Counter(
    "bandit_event_log_dead_letters",
    "Event-log records the database rejected for good (moved to the dead-letter file)",
)
DEPENDENCY_UP = Gauge(
    "bandit_dependency_up",
    "1 if the last probe reached the dependency, else 0",
    ["dependency"],
    multiprocess_mode="livemin",
)
STORE_ERRORS = Counter("bandit_store_errors", "State-store calls that failed", ["operation"])
STORE_BREAKER_STATE = Gauge(
    "bandit_store_breaker_state",
    "1 for the state the state store's circuit breaker is in (closed, open, half_open), else 0",
    ["state"],
    multiprocess_mode="livemax",
)
STORE_BREAKER_TRANSITIONS = Counter(
    "bandit_store_breaker_transitions",
    "Times the state store's circuit breaker entered a state",
    ["state"],
)
POLICIES_MISSING = Gauge(
    "bandit_policies_missing",
    "Policies of the event log's policies table whose state the store lacks (being rebuilt)",
    multiprocess_mode="livemax",
)
POLICY_REBUILDS = Counter(
    "bandit_policy_rebuilds",
    "Rebuilds from the event log of a policy missing from the store, by outcome",
    ["outcome"],
)
TRANSACTION_RETRIES = Counter(
    "bandit_store_transaction_retries",
    "State-store transactions redone on fresh values after a concurrent write to their keys",
    ["policy"],
)
BUILD_INFO = Gauge(
    "bandit_build_info",
    "1, labelled with the version and the git commit of the running build",
    ["version", "commit"],
    multiprocess_mode="max",
)
REQUESTS_IN_FLIGHT = Gauge(
    "bandit_http_requests_in_flight",
    "HTTP requests being answered",
    multiprocess_mode="livesum",
)
NOT_FOUND = Counter("bandit_not_found", "404 answers by what was not found", ["reason"])
STORE_LATENCY = Histogram(
    "bandit_store_operation_duration_seconds",
    "State-store call latency (a transaction includes the engine update inside it)",
    ["operation"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0),
)
EVENT_LOG_LATENCY = Histogram(
    "bandit_event_log_operation_duration_seconds",
    "Event-log call latency",
    ["operation"],
    buckets=(0.005, 0.025, 0.1, 0.5, 2.5),
)
EVENT_LOG_ERRORS = Counter(
    "bandit_event_log_errors", "Event-log (database) calls that failed", ["operation"]
)
EVENT_LOG_ROWS = Counter(
    "bandit_event_log_rows_written", "Records appended to the event log", ["table"]
)
SNAPSHOT_LAST_SUCCESS = Gauge(
    "bandit_snapshot_last_success_timestamp_seconds",
    "Unix time of the policy's last periodic snapshot saved",
    ["policy"],
    multiprocess_mode="max",
)
SNAPSHOT_FAILURES = Counter(
    "bandit_snapshot_failures", "Periodic snapshots that failed to be saved", ["policy"]
)
LOG_UPKEEP_LAST_SUCCESS = Gauge(
    "bandit_log_upkeep_last_success_timestamp_seconds",
    "Unix time of the last event-log upkeep round (partitions, retention) that succeeded",
    multiprocess_mode="max",
)
AUDIT_RECORDS = Counter(
    "bandit_audit_records", "Changes recorded in the audit trail", ["policy", "action"]
)

DRIFT_DETECTIONS = Counter(
    "bandit_drift_detections",
    "Changes the Page-Hinkley detector found in the policy's applied rewards",
    ["policy"],
)
DRIFT_EXCURSION = Gauge(
    "bandit_drift_excursion",
    "Page-Hinkley excursion of the policy's rewards since its last detection (a detection at 50)",
    ["policy"],
    multiprocess_mode="max",
)
EXPLORATION_BOOST_UNTIL = Gauge(
    "bandit_exploration_boost_until_seconds",
    "Unix time the exploration boost of the policy's drift_response after its latest detection ends",
    ["policy"],
    multiprocess_mode="max",
)

# The metrics whose series :func:`render` drops for a policy that no longer exists.
POLICY_METRICS = (
    DECISIONS,
    DEGRADED_DECISIONS,
    REWARDS,
    REWARD_POSITIVE_SUM,
    REWARD_NEGATIVE_SUM,
    GUARDRAIL_BLOCKS,
    GUARDRAIL_ARGMAX_BLOCKED,
    DELTA_G,
    DELTA_G_LIMIT,
    LNUCB_TA_ALPHA,
    PENDING_EVENTS,
    DEFAULT_REWARDS,
    EXPIRED_EVENTS,
    OVERDUE_PENDING,
    FOLDS,
    SWEEPER_ERRORS,
    REWARD_RECORD_ERRORS,
    ARMS_FORGOTTEN,
    TRANSACTION_RETRIES,
    SNAPSHOT_LAST_SUCCESS,
    SNAPSHOT_FAILURES,
    DRIFT_DETECTIONS,
    DRIFT_EXCURSION,
    EXPLORATION_BOOST_UNTIL,
    AUDIT_RECORDS,  # the audit trail keeps a deleted policy's records, GET /audit
)
POLICY_FAMILIES = frozenset(next(iter(metric.describe())).name for metric in POLICY_METRICS)


OTHER_ARMS = "__other__"  # the arm label of every arm without its own series


def arm_label(arm: str, labelled: Container[str]) -> str:
    """The ``arm`` label value of ``arm``: itself when it is among the policy's
    ``labelled`` arms, else :data:`OTHER_ARMS` (see the module docstring)."""
    return arm if arm in labelled else OTHER_ARMS


def show_store_breaker(state: str, states: Iterable[str]) -> None:
    """Set ``bandit_store_breaker_state`` to 1 for ``state`` and 0 for the other ``states``;
    each state's transition counter exists from then on (at 0 before its first
    transition, so that ``increase()`` sees that one)."""
    for each in states:
        STORE_BREAKER_STATE.labels(each).set(float(each == state))
        STORE_BREAKER_TRANSITIONS.labels(each)


def count_reward(policy: str, arm: str, source: str, value: float) -> None:
    """Count one applied reward ``value`` (of any sign) of ``arm`` (an :func:`arm_label`)."""
    REWARDS.labels(policy, arm, source).inc()
    REWARD_POSITIVE_SUM.labels(policy, arm, source).inc(max(value, 0.0))
    REWARD_NEGATIVE_SUM.labels(policy, arm, source).inc(max(-value, 0.0))


class _LivePolicies(Collector):
    """A collector over ``source`` without the :data:`POLICY_FAMILIES` samples of
    policies not in ``live``."""

    def __init__(self, source: Collector, live: Container[str]) -> None:
        self.source = source
        self.live = live

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            if family.name in POLICY_FAMILIES:
                family.samples = [s for s in family.samples if s.labels["policy"] in self.live]
            yield family


def render(live_policies: Container[str] | None = None) -> tuple[bytes, str]:
    """The exposition text of every metric (aggregated over workers in multi-process
    mode); with ``live_policies``, without the series of any other policy."""
    registry: Collector = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    if live_policies is None:
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(_LivePolicies(registry, live_policies)), CONTENT_TYPE_LATEST


def publish_build_info(commit: str | None) -> tuple[str, str]:
    """Set ``bandit_build_info`` to 1 for this build: the installed distribution's
    version and ``commit`` (unset: the commit of the git checkout the code runs from,
    else ``unknown``); returns ``(version, commit)``."""
    version = metadata.version("bandit-service")
    if not commit:
        try:
            found = subprocess.run(
                ["git", "rev-parse", "--short=12", "HEAD"],
                check=False,
                cwd=Path(__file__).resolve().parent,
                capture_output=True,
                text=True,
                timeout=5,
            )
            commit = found.stdout.strip() if found.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            commit = None
    BUILD_INFO.labels(version, commit or "unknown").set(1)
    return version, commit or "unknown"


def process_exit() -> None:
    """Drop this worker's live gauges from the multi-process aggregate."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(os.getpid())
