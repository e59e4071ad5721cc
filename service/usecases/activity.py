"""What the event log says a policy did over a time range, and one logged event: the
aggregates the console shows (docs/console.md), read with the event log's time-bounded
queries (:meth:`~service.storage.base.EventLog.activity`) off the event loop."""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from service.errors import NotFound
from service.storage.activity import LATENCY_BINS_PER_OCTAVE, RewardBucket
from service.storage.base import EventLog, EventTrail
from service.usecases.audit import DRIFT

Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""
MATCHING_DECISIONS = 1000
"""How many of the latest decisions a baseline's matching ratio is read over."""
MOST_AUDIT_RECORDS = 1000
"""How many of a policy's audit records a window's drift detections are looked for in."""


@dataclass(frozen=True)
class RewardPoint:
    """The mean reward of one bucket with its 95% interval ``[low, high]``
    (docs/console.md, "Reward over time"); one reward has no interval (low = high)."""

    start: float
    rewards: int
    mean: float
    low: float
    high: float


def mean_point(start: float, n: int, total: float, squares: float) -> RewardPoint:
    """The mean ``x̄ = Σx / n`` of ``n`` values whose sum is ``total`` and sum of squares
    ``squares``, with the normal interval ``x̄ ± z·s/√n`` and the sample variance
    ``s² = (Σx² − n·x̄²) / (n − 1)`` (docs/console.md, "Reward over time")."""
    mean = total / n
    if n < 2:
        return RewardPoint(start, n, mean, mean, mean)
    variance = max(0.0, (squares - n * mean * mean) / (n - 1))
    half = Z_95 * math.sqrt(variance / n)
    return RewardPoint(start, n, mean, mean - half, mean + half)


def reward_point(start: float, buckets: list[RewardBucket]) -> RewardPoint:
    """The rewards of ``buckets`` together: their mean and its 95% interval
    (:func:`mean_point`)."""
    return mean_point(
        start,
        sum(b.rewards for b in buckets),
        sum(b.total for b in buckets),
        sum(b.total_squares for b in buckets),
    )


def ips_points(start: float, buckets: list[RewardBucket]) -> tuple[RewardPoint, RewardPoint]:
    """The IPS estimates of the baseline's and of uniform random's mean reward over the
    rewards of ``buckets`` logged with weights: ``V̂ = Σ r·w / n`` over those ``n``
    rewards, with the normal 95% interval of the mean of the terms ``r·w``
    (:func:`mean_point`; docs/console.md, "Baseline and random"). ``n`` must be
    positive."""
    n = sum(b.weighted for b in buckets)
    baseline = mean_point(
        start,
        n,
        sum(b.baseline_total for b in buckets),
        sum(b.baseline_squares for b in buckets),
    )
    random = mean_point(
        start, n, sum(b.random_total for b in buckets), sum(b.random_squares for b in buckets)
    )
    return baseline, random


def latency_bin_upper_ms(bin_: int) -> float:
    """The upper edge of latency bin ``bin_`` in milliseconds: ``2^((b+1)/8) / 1000``
    (:data:`~service.storage.activity.LATENCY_BINS_PER_OCTAVE`)."""
    return float(2.0 ** ((bin_ + 1) / LATENCY_BINS_PER_OCTAVE) / 1000.0)


def binned_percentile(counts: dict[int, int], percent: int) -> float:
    """The nearest-rank ``percent``-th percentile of the latencies counted per bin in
    ``counts``, in milliseconds: the upper edge of the bin holding the ``⌈percent·n /
    100⌉``-th smallest, so at most one bin (9%) above the exact value (docs/console.md,
    "Decision latency")."""
    n = sum(counts.values())
    rank = max(1, -(-percent * n // 100))
    seen = 0
    for bin_ in sorted(counts):
        seen += counts[bin_]
        if seen >= rank:
            return latency_bin_upper_ms(bin_)
    raise ValueError("no latency counted")


@dataclass(frozen=True)
class LatencyPoint:
    """The decision latency of the bucket starting at ``start``: its ``decisions`` with
    a latency and their p50 and p99 in milliseconds (:func:`binned_percentile`)."""

    start: float
    decisions: int
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class PolicyActivity:
    """A policy's decisions and rewards over ``[since, until)`` in buckets of
    ``bucket_seconds``: the reward per bucket, the IPS estimates of the baseline's and
    of uniform random's reward per bucket (:func:`ips_points`; buckets without a reward
    logged with weights have none), each arm's decisions per bucket start, and the
    totals."""

    since: float
    until: float
    bucket_seconds: float
    now: float
    points: list[RewardPoint]
    baseline: list[RewardPoint]
    random: list[RewardPoint]
    arm_rewards: dict[str, RewardPoint]
    arm_decisions: dict[str, dict[float, int]]
    decisions: int
    explored: int
    rewards: int
    reward_mean: float | None
    latency: list[LatencyPoint]

    def recent_rates(self) -> tuple[float, float]:
        """Decisions and rewards per minute over the last two buckets, from the start of
        the one before the last to now (the last bucket holds ``now``)."""
        start = self.until - 2 * self.bucket_seconds
        decisions = sum(
            count
            for counts in self.arm_decisions.values()
            for bucket, count in counts.items()
            if bucket >= start
        )
        rewards = sum(p.rewards for p in self.points if p.start >= start)
        minutes = (self.now - start) / 60.0
        return decisions / minutes, rewards / minutes

    def selection_share(self) -> dict[str, float]:
        """Each arm's share of the decisions of the range, largest first."""
        if not self.decisions:
            return {}
        totals = {arm: sum(c.values()) for arm, c in self.arm_decisions.items()}
        return {
            arm: count / self.decisions
            for arm, count in sorted(totals.items(), key=lambda item: (-item[1], item[0]))
        }


def matched_share(scores: Sequence[float]) -> float:
    """Whether the model's own choice was the baseline in a decision served the baseline
    (docs/console.md, "Apprentice"): its logged ``scores`` list the baseline's first,
    then the other candidates' as the model ranked them; the model chose the baseline
    when no other scored higher, one of the ``k`` tied at the top with share ``1/k``."""
    top = max(scores)
    return 1.0 / sum(s == top for s in scores) if scores[0] == top else 0.0


@dataclass(frozen=True)
class BaselineMatching:
    """Of the latest ``decisions`` served the baseline, how many the model's own choice
    matched (``matched``; ties counted by their share)."""

    decisions: int
    matched: float

    @property
    def ratio(self) -> float | None:
        return self.matched / self.decisions if self.decisions else None


@dataclass
class ActivityViews:
    """The console's reads of the event log; one per process."""

    event_log: EventLog
    clock: Callable[[], float] = time.time

    async def policy_activity(
        self, policy: str, window_seconds: float, buckets: int
    ) -> PolicyActivity:
        """The activity of ``policy`` in ``buckets`` buckets of ``window_seconds /
        buckets`` (a whole number of minutes) on the clock's grid of that length, the
        last one holding now: the event log's rollups answer for whole minutes."""
        now = self.clock()
        bucket_seconds = window_seconds / buckets
        until = math.floor(now / bucket_seconds + 1) * bucket_seconds
        since = until - window_seconds
        activity = await asyncio.to_thread(
            self.event_log.activity, policy, since, until, bucket_seconds
        )
        arm_decisions: dict[str, dict[float, int]] = defaultdict(dict)
        for s in activity.selections:
            arm_decisions[s.arm_id][s.start] = s.decisions
        by_start: dict[float, list[RewardBucket]] = defaultdict(list)
        by_arm: dict[str, list[RewardBucket]] = defaultdict(list)
        for b in activity.rewards:
            by_start[b.start].append(b)
            by_arm[b.arm_id].append(b)
        rewards = sum(b.rewards for b in activity.rewards)
        total = sum(b.total for b in activity.rewards)
        estimated = [
            ips_points(start, group)
            for start, group in sorted(by_start.items())
            if any(b.weighted for b in group)
        ]
        latency_bins: dict[float, dict[int, int]] = defaultdict(dict)
        for timed in activity.latency:
            latency_bins[timed.start][timed.bin] = timed.decisions
        return PolicyActivity(
            since=since,
            until=until,
            bucket_seconds=bucket_seconds,
            now=now,
            points=[reward_point(start, group) for start, group in sorted(by_start.items())],
            baseline=[baseline for baseline, _ in estimated],
            random=[random for _, random in estimated],
            arm_rewards={arm: reward_point(since, group) for arm, group in by_arm.items()},
            arm_decisions=dict(arm_decisions),
            decisions=sum(s.decisions for s in activity.selections),
            explored=sum(s.explored for s in activity.selections),
            rewards=rewards,
            reward_mean=total / rewards if rewards else None,
            latency=[
                LatencyPoint(
                    start,
                    sum(bins.values()),
                    binned_percentile(bins, 50),
                    binned_percentile(bins, 99),
                )
                for start, bins in sorted(latency_bins.items())
            ],
        )

    async def drift_detections(self, policy: str, since: float, until: float) -> list[float]:
        """The times in ``[since, until)`` at which the drift detector of any replica
        detected a change of ``policy``'s rewards (its audit records of action
        ``drift``, :mod:`service.usecases.drift_watch`), oldest first; looked for in the
        policy's first :data:`MOST_AUDIT_RECORDS` audit records since ``since``."""
        records = await asyncio.to_thread(
            self.event_log.audit_records, policy, since, None, MOST_AUDIT_RECORDS
        )
        return [r.created_at for r in records if r.action == DRIFT and r.created_at < until]

    async def baseline_matching(
        self, policy: str, since: float, limit: int = MATCHING_DECISIONS
    ) -> BaselineMatching:
        """How often the model's choice matched the baseline over the latest ``limit``
        decisions of ``policy`` made since ``since`` (when it began serving the baseline;
        :func:`matched_share` of each)."""
        logged = await asyncio.to_thread(self.event_log.recent_decisions, policy, limit)
        scored = [d.scores for d in logged if d.created_at >= since and d.scores]
        return BaselineMatching(len(scored), sum(matched_share(s) for s in scored))

    async def event(self, event_id: str) -> EventTrail:
        """The logged decision ``event_id`` with its rewards; 404 if the log has none."""
        trail = await asyncio.to_thread(self.event_log.event_trail, event_id)
        if trail is None:
            raise NotFound(f"no event {event_id!r} in the event log", reason="event")
        return trail
