"""Whole-policy snapshots: export and import over the API (``/policies/{name}/snapshot``)
and the periodic save of every policy into the event log, once per period across all
replicas (docs/operations.md, "Several replicas"), each save followed by the pruning of
the policy's older snapshots (``snapshot_keep``, ``snapshot_max_age_seconds``)."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import bandit_core
from bandit_core import BanditError
from service.errors import InvalidRequest, NotFound
from service.observability import metrics
from service.policies import setting_differences
from service.schemas import Snapshot
from service.settings import Settings
from service.storage.base import EventLog
from service.storage.base import Snapshot as LogSnapshot
from service.storage.state_store import LastSeenIndex, PartStore, PeriodClaims, PolicyDirectory
from service.usecases.audit import SNAPSHOT_RESTORE, AuditTrail
from service.usecases.folds import Folds
from service.usecases.models import read_whole_policy
from service.usecases.periodic import count_unavailable, each_period
from service.usecases.policy_cache import PolicyCache

SNAPSHOT_JOB = "snapshot"  # the job name the periodic snapshots claim their periods under
SNAPSHOT_FIELDS = ("algorithm", "dimension")  # what a snapshot's state must share with the policy

log = logging.getLogger("bandit.service")


class SnapshotStore(PartStore, LastSeenIndex, PolicyDirectory, PeriodClaims, Protocol):
    """The state store's roles the snapshots call beside the cache: a policy's stored
    parts (export), the last-seen index (import), the policy list and the periods
    claimed (the periodic save) (``service.storage.state_store``)."""


@dataclass
class Snapshots:
    """The snapshot use cases; one per process."""

    cache: PolicyCache
    store: SnapshotStore
    event_log: EventLog
    settings: Settings
    audit: AuditTrail
    folds: Folds
    clock: Callable[[], float] = time.time

    async def export_snapshot(self, name: str) -> Snapshot:
        """The whole model of ``name``: the state of every stored arm, the shared part and
        every user part (:func:`~service.usecases.models.read_whole_policy`), with every
        reward accepted before it: the pending deltas are folded first."""
        await self.folds.fold_pending(name)
        whole = await read_whole_policy(self.cache, self.store, name)
        return Snapshot(
            policy=name,
            algorithm=whole.info.algorithm,
            created_at=self.clock(),
            model_version=whole.model_version,
            data=base64.b64encode(whole.policy.to_bytes()).decode(),
        )

    async def import_snapshot(self, name: str, data: str) -> Snapshot:
        """Replace the learned state of ``name`` with an exported snapshot (base64 of
        ``BasePolicy.to_bytes``) of the same algorithm and dimension."""
        runtime, _, _ = await self.cache.load(name)
        try:
            blob = base64.b64decode(data, validate=True)
            policy = bandit_core.policy_from_bytes(blob)
        except (ValueError, BanditError) as exc:
            raise InvalidRequest(
                f"data is not an exported snapshot: {exc}", ["body", "data"]
            ) from exc
        differences = setting_differences(
            runtime.info.model_dump(include=set(SNAPSHOT_FIELDS)),
            {"algorithm": policy.name, "dimension": policy.config.d},
            SNAPSHOT_FIELDS,
            "snapshot",
        )
        if differences:
            raise InvalidRequest(
                f"snapshot does not fit policy {name!r}: {'; '.join(differences)}",
                ["body", "data"],
            )
        await self.cache.replace(name, policy.export_parts(policy.part_names()))
        # the imported arms count as seen now (arm_idle_seconds runs from the import)
        await self.store.mark_seen(name, dict.fromkeys(policy.arm_ids, self.clock()))
        self.audit.record(
            name, SNAPSHOT_RESTORE, detail={"arms": len(policy.arm_ids), "bytes": len(blob)}
        )
        return await self.export_snapshot(name)

    async def snapshot_period(self, period: int) -> int:
        """Save a snapshot of every policy whose ``period`` (of
        ``snapshot_interval_seconds``) this process claims first in the store into the
        event log, then prune that policy's snapshots; returns how many were saved. A
        policy whose save fails (the database down) is logged and counted in
        ``bandit_snapshot_failures_total`` and the others go on; its period has no
        snapshot: the claim is not given back, so no replica saves it twice."""
        saved = 0
        for name in await self.store.list_policies():
            if not await self.store.claim_period(name, SNAPSHOT_JOB, period):
                continue
            try:
                snap = await self.export_snapshot(name)
            except NotFound:
                continue
            record = LogSnapshot(
                policy=name,
                created_at=snap.created_at,
                model_version=snap.model_version,
                data=base64.b64decode(snap.data),
                meta={"algorithm": snap.algorithm, "period": period},
            )
            # one policy's failure must not skip the others'
            try:
                await asyncio.to_thread(self.event_log.save_snapshot, record)
            except Exception as exc:  # noqa: BLE001
                metrics.SNAPSHOT_FAILURES.labels(name).inc()
                count_unavailable(exc, "snapshots")
                log.warning("snapshot of policy %r failed: %s", name, exc)
                continue
            metrics.SNAPSHOT_LAST_SUCCESS.labels(name).set(record.created_at)
            saved += 1
            try:
                await asyncio.to_thread(self._prune, name, record.created_at)
            except Exception as exc:  # noqa: BLE001
                count_unavailable(exc, "snapshots")
                log.warning("pruning the snapshots of policy %r failed: %s", name, exc)
        return saved

    def _prune(self, name: str, newest: float) -> int:
        """Delete the snapshots of ``name`` past ``snapshot_keep`` and, counted back from
        the ``newest`` one's time, ``snapshot_max_age_seconds``; how many."""
        max_age = self.settings.snapshot_max_age_seconds
        return self.event_log.prune_snapshots(
            name, self.settings.snapshot_keep, newest - max_age if max_age > 0 else None
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Save snapshots each ``snapshot_interval_seconds`` (0: never) until ``stop``."""
        if self.settings.snapshot_interval_seconds > 0:
            await each_period(
                self.settings.snapshot_interval_seconds,
                stop,
                self.snapshot_period,
                "snapshots",
                self.clock,
            )
