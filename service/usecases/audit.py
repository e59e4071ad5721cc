"""The audit trail: who changed a policy, its settings, its model or its log, when, and
the settings before and after (docs/operations.md, "Audit trail").

Who acts is :func:`current_actor`: the API key of the request (``key:`` and the first 12
hex digits of its SHA-256, never the key), ``loopback`` (no keys configured, a loopback
client), ``policies-file`` (the file's settings applied at start), ``cli`` (``bandit
rebuild``) or ``system`` (the service's own jobs: retention, the demo policy, the
rebuild at start). The auth dependency sets a request's (:func:`act_as`); the request's
id comes with it (:mod:`service.observability.request_context`).

A record is made after its change is applied (a refused or failed change leaves none)
and goes to the event log through the writer (``LogSink.submit_audit``): never blocking
the change, spooled durably while the database is down, logged exactly once (its id is
unique). A record is readable (:meth:`AuditTrail.history`) once the writer has flushed
it, within ``BANDIT_LOG_FLUSH_SECONDS`` while the database is up.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from service.errors import InvalidRequest
from service.observability import metrics
from service.observability.request_context import CURRENT_REQUEST, current_request_id
from service.policies import spec_of
from service.schemas import AuditEntry, AuditHistory, PolicyInfo
from service.storage.base import AuditRecord, EventLog, LogSink

if TYPE_CHECKING:
    from service.usecases.rebuild import RebuildReport

SYSTEM = "system"
POLICIES_FILE = "policies-file"
LOOPBACK = "loopback"
CLI = "cli"

# the actions recorded
CREATE = "create"
UPDATE = "update"
DELETE = "delete"
RESET = "reset"
RETIRE_ARMS = "retire_arms"
MODEL_IMPORT = "model_import"
SNAPSHOT_RESTORE = "snapshot_restore"
REBUILD = "rebuild"
LOG_DELETE = "log_delete"
RETENTION = "retention"
DRIFT = "drift"  # the drift detector's detection (service.usecases.drift_watch)

# who acts outside a request (acting_as); None: the request's actor, else SYSTEM
_ACTOR: ContextVar[str | None] = ContextVar("bandit_actor", default=None)
# a page's cursor: the last record's time (repr of the float) and id
_CURSOR = re.compile(r"([0-9.e+-]+)_([0-9a-f]{32})")


@functools.lru_cache(maxsize=64)
def key_actor(key: str) -> str:
    """The actor naming API key ``key``: ``key:`` and the first 12 hex digits of its
    SHA-256 (docs/operations.md, "Audit trail", tells which key it is)."""
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:12]


def act_as(actor: str) -> None:
    """Make ``actor`` the one the request being served acts as."""
    request = CURRENT_REQUEST.get()
    if request is not None:
        request.actor = actor


@contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """``actor`` acts inside the block (outside a request: the policies file, the CLI)."""
    token = _ACTOR.set(actor)
    try:
        yield
    finally:
        _ACTOR.reset(token)


def current_actor() -> str:
    """Who acts now: the one of :func:`acting_as`, else the request's, else
    :data:`SYSTEM`."""
    actor = _ACTOR.get()
    if actor is not None:
        return actor
    request = CURRENT_REQUEST.get()
    return SYSTEM if request is None or request.actor is None else request.actor


def settings_of(info: PolicyInfo) -> dict[str, Any]:
    """The settings of a policy as JSON (its spec: no name, times or revision)."""
    return spec_of(info).model_dump(mode="json")


def changed_settings(old: PolicyInfo, new: PolicyInfo) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings that differ between ``old`` and ``new``: their values before and
    after."""
    return settings_diff(settings_of(old), settings_of(new))


def settings_diff(
    before: dict[str, Any], after: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The keys of ``after`` whose values differ in ``before``: their values in each."""
    changed = [k for k in after if before.get(k) != after[k]]
    return {k: before.get(k) for k in changed}, {k: after[k] for k in changed}


def settings_versions(records: list[AuditEntry]) -> dict[str, dict[str, Any]]:
    """The whole settings after each creation or change of ``records`` (one policy's,
    oldest first), by record id: a creation's settings, then each change applied over
    them; changes before the first creation in ``records`` are left out (their settings
    are not whole)."""
    versions: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for record in records:
        if record.action == CREATE and record.after is not None:
            current = dict(record.after)
        elif record.action == UPDATE and record.after is not None and current is not None:
            current = {**current, **record.after}
        elif record.action == DELETE:
            current = None
            continue
        else:
            continue
        if current is not None:
            versions[record.id] = current
    return versions


def audit_record(
    policy: str,
    action: str,
    created_at: float,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditRecord:
    """A record of ``action`` on ``policy`` by :func:`current_actor`, with a new id and
    the current request's id."""
    return AuditRecord(
        record_id=uuid.uuid4().hex,
        created_at=created_at,
        policy=policy,
        action=action,
        actor=current_actor(),
        request_id=current_request_id(),
        before=before,
        after=after,
        detail=detail,
    )


def rebuild_record(report: RebuildReport, created_at: float) -> AuditRecord:
    """The record of a replay of the log into the state (``bandit rebuild``, or at
    start): the decisions and rewards replayed and the state parts written."""
    detail = {"decisions": report.decisions, "rewards": report.rewards, "parts": report.parts}
    return audit_record(report.policy, REBUILD, created_at, detail=detail)


def parse_cursor(cursor: str) -> tuple[float, str]:
    """The ``(created_at, record id)`` a page's ``next`` cursor names; 422 naming
    ``after`` for anything else."""
    match = _CURSOR.fullmatch(cursor)
    try:
        if match is not None:
            return float(match[1]), match[2]
    except ValueError:
        pass
    raise InvalidRequest(
        f"after must be the 'next' of a history page, but got {cursor!r}", ["query", "after"]
    )


def cursor_of(record: AuditRecord) -> str:
    """The cursor of the page after ``record`` (:func:`parse_cursor` reads it)."""
    return f"{record.created_at!r}_{record.record_id}"


@dataclass
class AuditTrail:
    """The audit use cases: record a change, read the history; one per process."""

    sink: LogSink
    event_log: EventLog
    clock: Callable[[], float] = time.time

    def record(
        self,
        policy: str,
        action: str,
        before: dict[str, Any] | None = None,
        after: dict[str, Any] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> AuditRecord:
        """Record ``action`` on ``policy``, made now by :func:`current_actor` (it goes
        to the log through the writer)."""
        return self._submit(audit_record(policy, action, self.clock(), before, after, detail))

    def _submit(self, record: AuditRecord) -> AuditRecord:
        self.sink.submit_audit(record)
        metrics.AUDIT_RECORDS.labels(record.policy, record.action).inc()
        return record

    def rebuilt(self, report: RebuildReport) -> AuditRecord:
        """Record a replay of the log into the state (at start)."""
        return self._submit(rebuild_record(report, self.clock()))

    def settings_change(
        self, old: PolicyInfo | None, new: PolicyInfo, detail: dict[str, Any] | None = None
    ) -> AuditRecord | None:
        """Record the creation of ``new`` (``old`` None) or the change of its settings
        from ``old``: the changed settings before and after; a change of nothing but
        times is no change (None)."""
        if old is None:
            return self.record(new.name, CREATE, after=settings_of(new), detail=detail)
        before, after = changed_settings(old, new)
        if not after and not detail:
            return None
        return self.record(new.name, UPDATE, before, after, detail)

    async def history(
        self,
        policy: str | None,
        since: float | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> AuditHistory:
        """Up to ``limit`` records of ``policy`` (None: every policy) from ``since`` on,
        oldest first, starting after the cursor ``after`` (a page's ``next``; a 422
        naming ``after`` for anything else)."""
        position = None if after is None else parse_cursor(after)
        records = await asyncio.to_thread(
            self.event_log.audit_records, policy, since, position, limit + 1
        )
        page = records[:limit]
        return AuditHistory(
            records=[
                AuditEntry(
                    id=r.record_id,
                    created_at=r.created_at,
                    policy=r.policy,
                    action=r.action,
                    actor=r.actor,
                    request_id=r.request_id,
                    before=r.before,
                    after=r.after,
                    detail=r.detail,
                )
                for r in page
            ],
            next=cursor_of(page[-1]) if len(records) > limit else None,
        )
