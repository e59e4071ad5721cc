"""The decision-latency histogram (``decisions.latency_us`` and the ``decision_latency``
rollup kept by triggers) on the real PostgreSQL and on SQLite: each bucket's p50 and
p99 read from the bins are those of the logged latencies within one bin, through a
retried batch, deleted events and a deleted policy; and both recommend paths log a
latency."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from service.storage.activity import LATENCY_BINS_PER_OCTAVE
from service.storage.base import DecisionRecord
from service.storage.migrate import upgrade_head
from service.storage.partitions import DAY_SECONDS
from service.storage.sql_log import SqlEventLog
from service.usecases.activity import ActivityViews, binned_percentile, latency_bin_upper_ms
from tests.databases import database

T0 = 1_699_999_200.0  # a whole hour
BUCKET = 300.0


def _bin(latency_us: int) -> int:
    """The bin of a latency as the triggers compute it."""
    return math.floor(LATENCY_BINS_PER_OCTAVE * math.log(max(latency_us, 1)) / math.log(2))


def _records(n: int, seed: int) -> list[DecisionRecord]:
    """``n`` decisions of policy ``p`` over the hour after T0, with log-normal latencies
    from 1 µs to seconds (one in ten without a latency), and one of another policy."""
    rng = np.random.default_rng(seed)
    times = T0 + rng.uniform(0, 3600.0, n)
    latencies = np.rint(np.exp(rng.normal(7.5, 1.5, n))).astype(int)
    timed = rng.random(n) >= 0.1
    records = [
        DecisionRecord(
            event_id=f"e{i}",
            policy="p",
            created_at=float(t),
            context=[],
            candidates=[{"id": "a"}],
            arm_id="a",
            propensity=1.0,
            scores=[0.0],
            model_version=0,
            latency_us=int(us) if ok else None,
        )
        for i, (t, us, ok) in enumerate(zip(times, latencies, timed))
    ]
    other = replace(records[0], event_id="o", policy="other", created_at=T0 + 1, latency_us=5)
    return [*records, other]


def _exact_percentile(values: list[int], percent: int) -> int:
    """The nearest-rank percentile of ``values``."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent * len(ordered) / 100)) - 1]


async def _assert_percentiles_are_the_records(
    log: SqlEventLog, records: list[DecisionRecord], bucket: float
) -> None:
    views = ActivityViews(log, clock=lambda: T0 + 3600.0 - 1.0)
    activity = await views.policy_activity("p", 3600.0, int(3600.0 / bucket))
    by_bucket: dict[float, list[int]] = {}
    for d in records:
        if d.policy == "p" and d.latency_us is not None:
            start = T0 + math.floor((d.created_at - T0) / bucket) * bucket
            by_bucket.setdefault(start, []).append(d.latency_us)
    assert [p.start for p in activity.latency] == sorted(by_bucket)
    for point in activity.latency:
        values = by_bucket[point.start]
        assert point.decisions == len(values)
        for percent, got in ((50, point.p50_ms), (99, point.p99_ms)):
            exact = _exact_percentile(values, percent)
            # the upper edge of the exact value's bin, or of a neighbour where ln's
            # rounding puts a value on a bin edge into the next bin
            edges = [latency_bin_upper_ms(_bin(exact) + k) for k in (-1, 0, 1)]
            assert got in edges
            assert exact / 1000 * 2 ** (-1 / LATENCY_BINS_PER_OCTAVE) <= got
            assert got <= exact / 1000 * 2 ** (2 / LATENCY_BINS_PER_OCTAVE)


@pytest.mark.anyio
@pytest.mark.parametrize("bucket", [60.0, 300.0, 3600.0])
async def test_percentiles_from_the_bins_are_those_of_the_logged_latencies(
    log: SqlEventLog, bucket: float
) -> None:
    records = _records(600, seed=int(bucket))
    log.append(records, [])
    await _assert_percentiles_are_the_records(log, records, bucket)


@pytest.mark.anyio
async def test_a_retried_batch_counts_once_and_deleted_events_leave_the_histogram(
    log: SqlEventLog,
) -> None:
    records = _records(400, seed=2)
    log.append(records, [])
    log.append(records, [])  # the writer's retry
    await _assert_percentiles_are_the_records(log, records, BUCKET)
    cutoff = T0 + 1800.0
    assert log.delete_events("p", cutoff, batch_size=37) > 0
    kept = [d for d in records if d.policy != "p" or d.created_at >= cutoff]
    await _assert_percentiles_are_the_records(log, kept, BUCKET)
    log.delete_policy("p")
    assert log.activity("p", T0, T0 + 3600.0, 60.0).latency == []
    [other] = log.activity("other", T0, T0 + 60.0, 60.0).latency
    assert (other.bin, other.decisions) == (_bin(5), 1)


@pytest.mark.anyio
async def test_a_dropped_day_partition_leaves_the_histogram(tmp_path: Path) -> None:
    """On PostgreSQL, rows moved from the default partition into their day are counted
    once, and the day partition the retention drops takes its histogram rows along."""
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        day_end = (T0 // DAY_SECONDS + 1) * DAY_SECONDS
        records = _records(300, seed=4)
        log.append(records, [])  # no day partitions yet: every row in the default one
        assert log.prepare_partitions(T0, days_ahead=2)
        await _assert_percentiles_are_the_records(log, records, BUCKET)
        log.apply_retention({"p": day_end, "other": day_end}, batch_size=1000)
        assert log.activity("p", T0, T0 + 3600.0, 3600.0).latency == []
        log.close()


def test_binned_percentile_is_the_upper_edge_of_the_bin_holding_the_rank() -> None:
    counts = {10: 49, 11: 1, 20: 49, 30: 1}
    assert binned_percentile(counts, 50) == latency_bin_upper_ms(11)
    assert binned_percentile(counts, 99) == latency_bin_upper_ms(20)
    assert binned_percentile(counts, 100) == latency_bin_upper_ms(30)
    assert binned_percentile({0: 1}, 1) == pytest.approx(2 ** (1 / 8) / 1000)
    with pytest.raises(ValueError, match="no latency"):
        binned_percentile({}, 50)
