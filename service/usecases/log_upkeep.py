"""Event-log upkeep: the day partitions created ahead, each policy's log retention, and
the log administration of ``DELETE logs`` / ``GET logs/properties`` (docs/operations.md,
"Event-log partitions" and "Log retention"; docs/personalizer.md, "Logs").

A policy's retention is Personalizer's ``logRetentionDays`` of its service configuration
(kept in the spec's ``personalizer`` field, which the native API sets too); ``-1`` or
absent keeps everything. Every ``log_upkeep_interval_seconds`` each process prepares the
partitions and deletes what is past retention; both are safe in every replica at once
(the partition steps take turns on an advisory lock, a batch delete of rows already
deleted deletes nothing). The database work runs in a worker thread, off the event loop
that serves decisions, in transactions of ``log_delete_batch`` rows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from service.observability import metrics
from service.schemas import LogProperties, PolicyInfo
from service.settings import Settings
from service.storage.base import EventLog, Retention
from service.storage.partitions import DAY_SECONDS, Partition
from service.usecases.admin import PolicyAdmin
from service.usecases.audit import LOG_DELETE, RETENTION
from service.usecases.periodic import every

log = logging.getLogger("bandit.service")

RETENTION_KEY = "logRetentionDays"


def retention_days(info: PolicyInfo) -> int:
    """The policy's ``logRetentionDays`` (-1: keep everything)."""
    return int((info.personalizer or {}).get(RETENTION_KEY, -1))


@dataclass
class LogUpkeep:
    """The event-log upkeep use cases; one per process."""

    admin: PolicyAdmin
    event_log: EventLog
    settings: Settings
    clock: Callable[[], float] = time.time

    async def prepare_partitions(self) -> list[str]:
        """Create the day partitions up to ``log_partition_days_ahead`` days ahead (and
        empty the default partitions); the names created."""
        return await asyncio.to_thread(
            self.event_log.prepare_partitions, self.clock(), self.settings.log_partition_days_ahead
        )

    async def cutoffs(self) -> dict[str, float]:
        """Policy -> the time before which its events are past retention (policies
        keeping everything are absent)."""
        now = self.clock()
        return {
            info.name: now - days * DAY_SECONDS
            for info in await self.admin.list_policies()
            if (days := retention_days(info)) >= 0
        }

    async def apply_retention(self) -> Retention:
        """Delete every policy's events past its retention; the audit trail records what
        each policy lost."""
        cutoffs = await self.cutoffs()
        retention = await asyncio.to_thread(
            self.event_log.apply_retention, cutoffs, self.settings.log_delete_batch
        )
        for policy, removed in retention.by_policy.items():
            self.admin.audit.record(
                policy,
                RETENTION,
                detail={
                    "cutoff": cutoffs[policy],
                    "dropped_partitions": removed.dropped_partitions,
                    "deleted_rows": removed.deleted_rows,
                },
            )
        return retention

    async def upkeep_once(self) -> Retention:
        """One round: partitions ahead, then retention; its end is the time in
        ``bandit_log_upkeep_last_success_timestamp_seconds``."""
        created = await self.prepare_partitions()
        if created:
            log.info("event log: created partitions %s", ", ".join(created))
        retention = await self.apply_retention()
        if retention.dropped_partitions or retention.deleted_rows:
            log.info(
                "event log retention: dropped %s, deleted %d rows",
                retention.dropped_partitions,
                retention.deleted_rows,
            )
        metrics.LOG_UPKEEP_LAST_SUCCESS.set(self.clock())
        return retention

    async def run(self, stop: asyncio.Event) -> None:
        """The upkeep every ``log_upkeep_interval_seconds`` until ``stop`` (0: never)."""
        if self.settings.log_upkeep_interval_seconds > 0:
            await every(
                self.settings.log_upkeep_interval_seconds, stop, self.upkeep_once, "log upkeep"
            )

    async def partitions(self) -> list[Partition]:
        """The event log's partitions with their day ranges, estimated rows and sizes
        (none where the log is not partitioned: SQLite)."""
        return await asyncio.to_thread(self.event_log.partitions)

    async def delete_logs(self, name: str) -> int:
        """Delete every logged decision and reward of policy ``name`` (404 if unknown), in
        bounded batches; the rows deleted. Records still in the writer's queue or spool
        land afterwards."""
        await self.admin.get_policy(name)
        deleted = await asyncio.to_thread(
            self.event_log.delete_events, name, math.inf, self.settings.log_delete_batch
        )
        self.admin.audit.record(name, LOG_DELETE, detail={"deleted_rows": deleted})
        return deleted

    async def properties(self, name: str) -> LogProperties:
        """The times of the first and the last decision of ``name`` logged (None when
        none is); 404 if the policy is unknown."""
        await self.admin.get_policy(name)
        span = await asyncio.to_thread(self.event_log.time_range, name)
        if span is None:
            return LogProperties(policy=name, first=None, last=None)
        first, last = (datetime.fromtimestamp(t, UTC) for t in span)
        return LogProperties(policy=name, first=first, last=last)
