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
bandit_reward_sum_total                  counter    policy, arm, source     sum of applied reward values (*)
bandit_guardrail_blocks_total            counter    policy, arm             candidates blocked by a guardrail (*)
bandit_guardrail_argmax_blocked_total    counter    policy                  decisions whose UCB argmax was blocked
bandit_guardrail_delta_g                 gauge      policy                  delta_G reported by the policy (max)
bandit_guardrail_delta_g_limit           gauge      policy                  delta_G limit of the policy (latest)
bandit_lnucb_ta_alpha                    gauge      policy, arm             LNUCB-TA exploration weight alpha_a (max) (**)
bandit_pending_events                    gauge      policy                  events scheduled, waiting for a reward
bandit_default_rewards_total             counter    policy                  default rewards applied by the sweeper
bandit_expired_events_total              counter    policy                  deferred events never activated
bandit_arms_forgotten_total              counter    policy                  arm states forgotten after arm_idle_seconds
bandit_event_log_lag_seconds             gauge      (none)                  age of the oldest unflushed record (max)
bandit_event_log_spool_depth             gauge      (none)                  records spooled on disk (livesum)
bandit_event_log_dead_letters_total      counter    (none)                  records the event log rejected for good
bandit_dependency_up                     gauge      dependency              1 if the last probe reached it (min)
bandit_store_errors_total                counter    operation               state-store calls that failed
bandit_policies_missing                  gauge      (none)                  policies the log has and the store lacks (max)
bandit_policy_rebuilds_total             counter    outcome                 rebuilds from the log (rebuilt/failed/deleted)
=======================================  =========  ======================  ====================================

(*) The ``arm`` label is bounded: an arm has its own value only while it is one of the
first ``BANDIT_METRICS_ARM_SERIES`` registered arms of its policy (:func:`arm_label`);
every other arm, such as the ids of a catalog sent as candidates, is counted under
``arm="__other__"``. Per policy a metric has at most ``BANDIT_METRICS_ARM_SERIES + 1``
arm values (times the ``source`` values), so new ids every hour add no series; a policy
total is the sum over ``arm``. The per-arm numbers of every arm are in ``GET
/policies/{name}/stats``. (**) Only labelled arms report their alpha.

The gauges are refreshed without any API call: every ``metrics_refresh_seconds`` by the
lifespan's gauge loop (:meth:`service.usecases.readiness.Monitor.refresh_gauges`), and the
event-log backlog also at every scrape of ``/metrics``. ``dependency`` is ``redis`` (the
state store) or ``database`` (the event log).
"""

from __future__ import annotations

import os
from collections.abc import Container

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
REWARD_SUM = Counter(
    "bandit_reward_sum", "Sum of applied reward values", ["policy", "arm", "source"]
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


OTHER_ARMS = "__other__"  # the arm label of every arm without its own series


def arm_label(arm: str, labelled: Container[str]) -> str:
    """The ``arm`` label value of ``arm``: itself when it is among the policy's
    ``labelled`` arms, else :data:`OTHER_ARMS` (see the module docstring)."""
    return arm if arm in labelled else OTHER_ARMS


def render() -> tuple[bytes, str]:
    """The exposition text of every metric (aggregated over workers in multi-process mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def process_exit() -> None:
    """Drop this worker's live gauges from the multi-process aggregate."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.mark_process_dead(os.getpid())
