"""Policies whose state the store lost, rebuilt from the event log.

The event log's ``policies`` table is the directory of record: a policy with a row
there and no config in the state store (Redis flushed, restarted without its data, or
restored from a backup older than the policy) is rebuilt from the log
(:func:`service.usecases.rebuild.rebuild_policy`), never created afresh. :meth:`Recovery.check`
compares the two at start and every ``rebuild_check_seconds``: the first check rebuilds
each policy it finds missing, a later one only a policy the check before it found
missing too (another replica's create or reset writes the log, then the store: between
the check's two reads its policy looks lost, and is there at the next check). A request
that finds the config of a policy gone (:meth:`PolicyCache.load` asks
:meth:`Recovery.stand_in`) starts the rebuild at once when the policy is in the
directory as last read, or was cached by this process.

While a policy is missing or being rebuilt, its decisions are served degraded (flagged,
nothing stored, as when the store is down) from a stand-in: the policy this process had
cached, else one built from the log's config (the prior); its other routes answer 503
with ``Retry-After``, ``/readyz`` is not ready and ``bandit_policies_missing`` counts it.
Replicas that find the same policy missing each replay it; the first replay's write is
kept (``rebuild_policy`` with ``replace=False``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from service.observability import metrics
from service.policies import Runtime, info_from_record
from service.schemas import PolicyInfo
from service.settings import Settings
from service.storage.base import EventLog, LogSink, StoreUnavailableError
from service.usecases.audit import SYSTEM, AuditTrail, acting_as
from service.usecases.learning_settings import LearningSettings
from service.usecases.periodic import every
from service.usecases.policy_cache import PolicyCache
from service.usecases.rebuild import RebuildTarget, rebuild_policy

log = logging.getLogger("bandit.service")


async def _nothing(name: str) -> None:
    return None


@dataclass
class Recovery:
    """The rebuild of policies missing from the store; one per process."""

    cache: PolicyCache
    store: RebuildTarget
    sink: LogSink
    event_log: EventLog
    settings: Settings
    audit: AuditTrail
    learning: LearningSettings
    # run after a policy is rebuilt (at start: the policies file's reconciliation)
    after_rebuild: Callable[[str], Awaitable[None]] = _nothing
    _directory: dict[str, PolicyInfo] | None = field(default=None, init=False)  # None: unread
    _stand_ins: dict[str, Runtime] = field(default_factory=dict, init=False)
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _reading: asyncio.Future[dict[str, dict[str, Any]]] | None = field(default=None, init=False)
    _checked: bool = field(default=False, init=False)  # a check has read both sides
    _suspects: set[str] = field(default_factory=set, init=False)  # missing at the last check

    def __post_init__(self) -> None:
        self.cache.stand_in = self.stand_in

    def missing(self) -> list[str]:
        """The policies the log has and the store lacks (being rebuilt, or waiting for
        the next check after a failed rebuild), sorted."""
        return sorted(self._stand_ins)

    async def check(self) -> list[str]:
        """Read the log's ``policies`` table, then the store's list, and return
        :meth:`missing`. A policy the store does not list (but one whose config this
        process was writing meanwhile) is missing when this is the first check, when
        the check before found it missing too, or when it has a stand-in already; its
        rebuild starts. One found missing by this check only is remembered, and
        forgotten by the next check that finds it (docs/reliability.md, "Redis loses
        its data")."""
        mark = self.cache.config_writes.mark()
        directory = await self._read_directory()
        present = set(await self.store.list_policies())
        # a config written between the two reads may be in the log and not yet in the store
        present |= self.cache.config_writes.since(mark)
        absent = directory.keys() - present
        lost = absent if not self._checked else absent & (self._suspects | self._stand_ins.keys())
        self._checked = True
        self._suspects = absent - lost
        for name in sorted(lost):
            if name not in self._stand_ins:
                self._register(name, self.cache.new_runtime(directory[name]))
            self._start(name)
        return self.missing()

    async def _read_directory(self) -> dict[str, PolicyInfo]:
        """The log's ``policies`` table, read again (one read shared by the callers that
        ask while it runs)."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(asyncio.to_thread(self.event_log.policies))
        reading = self._reading
        try:
            records = await asyncio.shield(reading)
        finally:
            if self._reading is reading and reading.done():
                self._reading = None
        self._directory = {name: info_from_record(r) for name, r in records.items()}
        return self._directory

    async def stand_in(self, name: str, lost: Runtime | None) -> Runtime | None:
        """The runtime that serves degraded decisions of ``name`` while its state is
        rebuilt (``lost``: the one this process had cached, if any); a policy found
        missing now has its rebuild started (after a failed one, :meth:`check` starts the
        next). None when the policy does not exist: neither this process nor the
        directory knew it, or the log, read again, has no row for it (a policy deleted
        through another replica); 503 while the directory could not be read yet."""
        runtime = self._stand_ins.get(name)
        if runtime is not None:
            return runtime
        known = self._directory is not None and name in self._directory
        if lost is None and not known:
            if self._directory is None:
                raise StoreUnavailableError(
                    f"policy {name!r} is not in the state store and the event log's "
                    "policies table, which says whether it exists, could not be read yet"
                )
            return None
        try:  # deleted policies leave the log first: its row says whether it exists
            info = (await self._read_directory()).get(name)
            if info is None:
                return None
        except StoreUnavailableError:  # the log is down too: as the directory last said
            info = None if self._directory is None else self._directory.get(name)
        runtime = self._stand_ins.get(name)  # registered by a concurrent caller meanwhile
        if runtime is not None:
            return runtime
        if lost is not None:
            return self._register(name, lost)
        if info is not None:
            return self._register(name, self.cache.new_runtime(info))
        return None

    def _register(self, name: str, runtime: Runtime) -> Runtime:
        """``runtime`` serves ``name``, missing from the store, until it is rebuilt;
        the rebuild starts."""
        self._stand_ins[name] = runtime
        metrics.POLICIES_MISSING.set(len(self._stand_ins))
        log.warning("policy %r is missing from the state store: rebuilding it from the log", name)
        self._start(name)
        return runtime

    def _start(self, name: str) -> None:
        if name not in self._tasks:
            self._tasks[name] = asyncio.create_task(self._rebuild(name))

    async def _rebuild(self, name: str) -> None:
        """Replay ``name`` from the log into the store, then let its stand-in go; a
        failure (the log or the store down) keeps it missing until the next check."""
        started = time.perf_counter()
        try:
            # what this process logged before the store lost the policy is replayed too
            await asyncio.to_thread(self.sink.flush, self.settings.rebuild_check_seconds)
            report = await rebuild_policy(
                self.event_log, self.store, name, replace=False, learning=self.learning
            )
        except KeyError:  # deleted meanwhile (its log row goes first): not missing
            outcome = "deleted"
            if self._directory is not None:
                self._directory.pop(name, None)
        except Exception as exc:  # noqa: BLE001 -- retried at the next check
            metrics.POLICY_REBUILDS.labels("failed").inc()
            log.warning("policy %r: rebuild from the event log failed, retried: %s", name, exc)
            return
        else:
            outcome = "rebuilt"
            if report.written:
                with acting_as(SYSTEM):  # not the request that found the policy missing
                    self.audit.rebuilt(report)
            log.warning(
                "policy %r rebuilt from the event log: %d rewards of %d decisions in %.1f s%s",
                name,
                report.rewards,
                report.decisions,
                time.perf_counter() - started,
                "" if report.written else " (another replica wrote it first)",
            )
            try:
                await self.after_rebuild(name)
            except Exception:  # the state is back; the follow-up failure is logged
                log.exception("policy %r: the step after its rebuild failed", name)
        finally:
            self._tasks.pop(name, None)
        metrics.POLICY_REBUILDS.labels(outcome).inc()
        self._stand_ins.pop(name, None)
        metrics.POLICIES_MISSING.set(len(self._stand_ins))
        if outcome == "deleted" or report.written:
            # a policy another replica wrote first keeps the runtime this process has
            # cached of it: its rng stream goes on (PolicyCache.load_versioned)
            self.cache.forget(name)

    async def wait(self) -> None:
        """Until the rebuilds started so far have finished (or failed)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def run(self, stop: asyncio.Event) -> None:
        """:meth:`check` every ``rebuild_check_seconds`` until ``stop``; then cancel the
        rebuilds still running (the next start redoes them)."""
        try:
            await every(self.settings.rebuild_check_seconds, stop, self.check, "rebuild check")
        finally:
            for task in list(self._tasks.values()):
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
