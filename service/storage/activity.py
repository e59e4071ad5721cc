"""The event log's aggregates for the console (:meth:`EventLog.activity
<service.storage.base.EventLog.activity>`): decisions, rewards and decision latencies of
a policy in time buckets, read from the rollup tables the database's triggers keep
(``service/storage/sql_activity.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArmSelections:
    """The decisions of one arm in one time bucket (:meth:`EventLog.activity`): how many,
    and how many of them explored (``explored`` in the log)."""

    start: float
    arm_id: str
    decisions: int
    explored: int


@dataclass(frozen=True)
class RewardBucket:
    """The rewards applied to one arm in one time bucket: their count, sum and sum of
    squares (the mean and its interval follow, docs/console.md "Reward over time"), and
    of the ``weighted`` ones among them (those logged with importance weights,
    :class:`RewardRecord`) the sum and sum of squares of ``r·w`` for the baseline's and
    uniform random's weights (their IPS estimates, docs/console.md "Baseline and
    random")."""

    start: float
    arm_id: str
    rewards: int
    total: float
    total_squares: float
    weighted: int = 0
    baseline_total: float = 0.0
    baseline_squares: float = 0.0
    random_total: float = 0.0
    random_squares: float = 0.0


LATENCY_BINS_PER_OCTAVE = 8
"""Latency bin ``b`` holds ``[2^(b/8), 2^((b+1)/8))`` microseconds (9% wide): a
decision's bin is ``floor(8·ln(max(latency_us, 1)) / ln 2)``, computed by the event
log's triggers (docs/console.md, "Decision latency")."""


@dataclass(frozen=True)
class LatencyBin:
    """How many decisions of the bucket starting at ``start`` took a latency in bin
    ``bin`` (:data:`LATENCY_BINS_PER_OCTAVE`)."""

    start: float
    bin: int
    decisions: int


@dataclass(frozen=True)
class Activity:
    """A policy's decisions and rewards in ``[since, until)`` in buckets of
    ``bucket_seconds`` starting at ``since``; buckets with nothing logged are absent."""

    since: float
    until: float
    bucket_seconds: float
    selections: list[ArmSelections]
    rewards: list[RewardBucket]
    latency: list[LatencyBin]
