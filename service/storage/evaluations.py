"""Offline evaluations kept in the event-log database (table ``evaluations``, migration
``4e8b2c6d1a73``): :class:`EvaluationStore` and its SQL implementation on PostgreSQL or
SQLite (the event log's engine).

A record is written when an evaluation is submitted and changes as it runs: ``status``
``pending`` -> ``running`` -> a final one (:data:`FINAL`), ``progress`` in [0, 1] and
``heartbeat_at``, which the process owning the run (``owner``) refreshes while it is
queued or running. An unfinished record whose heartbeat is older than the stale limit
lost its process (a restart, a crash): :meth:`EvaluationStore.claim_stale` hands it to
another process, which runs it again from the start (the result depends only on the
log and the request, so a second run computes the same). Deleting a record while it
runs makes the run stop at its next progress update: nothing is written after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from service.storage.base import EventLogUnavailableError
from service.storage.schema import evaluations

UNFINISHED = ("pending", "running")
FINAL = ("succeeded", "failed", "timeout", "optimal_policy_applied", "online_policy_retained")
STATUSES = (*UNFINISHED, *FINAL)


@dataclass(frozen=True)
class EvaluationRecord:
    """One evaluation of a policy (times in unix seconds; ``request`` and ``result`` JSON)."""

    policy: str
    evaluation_id: str
    name: str
    status: str
    created_at: float
    heartbeat_at: float
    start_time: float
    end_time: float
    progress: float
    request: dict[str, Any]
    owner: str | None = None
    message: str | None = None
    result: dict[str, Any] | None = None


RECORD_FIELDS = [f.name for f in fields(EvaluationRecord)]


class EvaluationExistsError(RuntimeError):
    """An evaluation with this id exists already for the policy."""


class EvaluationStore(Protocol):
    """Where evaluations are kept (module docstring). Every method may raise
    :class:`EventLogUnavailableError`."""

    def insert(self, record: EvaluationRecord) -> None:
        """Add ``record``; :class:`EvaluationExistsError` when its id is taken."""

    def get(self, policy: str, evaluation_id: str) -> EvaluationRecord | None: ...

    def list_for(self, policy: str) -> list[EvaluationRecord]:
        """The policy's evaluations, newest first, without their ``result``."""

    def delete(self, policy: str, evaluation_id: str) -> bool: ...

    def update(self, policy: str, evaluation_id: str, **values: Any) -> bool:
        """Set some columns of an existing record; False when it is gone."""

    def heartbeat(self, owner: str, now: float) -> None:
        """Refresh the heartbeat of ``owner``'s unfinished evaluations."""

    def claim_stale(self, owner: str, now: float, stale_before: float) -> list[tuple[str, str]]:
        """Take the unfinished evaluations whose heartbeat is older than ``stale_before``
        (each at most once across processes); their ``(policy, evaluation_id)``."""


class SqlEvaluationStore:
    """:class:`EvaluationStore` on the event log's SQLAlchemy ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _run(self, statement: Any) -> Any:
        try:
            with self._engine.begin() as conn:
                result = conn.execute(statement)
                return result.fetchall() if result.returns_rows else result.rowcount
        except sa_exc.IntegrityError as exc:
            raise EvaluationExistsError(str(exc.orig or exc)) from exc
        except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
            raise EventLogUnavailableError(
                f"event log database: {getattr(exc, 'orig', None) or exc}"
            ) from exc

    def insert(self, record: EvaluationRecord) -> None:
        self._run(evaluations.insert().values({f: getattr(record, f) for f in RECORD_FIELDS}))

    def get(self, policy: str, evaluation_id: str) -> EvaluationRecord | None:
        rows = self._run(
            sa.select(evaluations).where(
                evaluations.c.policy == policy, evaluations.c.evaluation_id == evaluation_id
            )
        )
        return _record(rows[0]) if rows else None

    def list_for(self, policy: str) -> list[EvaluationRecord]:
        columns = [evaluations.c[f] for f in RECORD_FIELDS if f != "result"]
        rows = self._run(
            sa.select(*columns)
            .where(evaluations.c.policy == policy)
            .order_by(evaluations.c.created_at.desc(), evaluations.c.evaluation_id)
        )
        return [_record(row) for row in rows]

    def delete(self, policy: str, evaluation_id: str) -> bool:
        return bool(self._run(evaluations.delete().where(*_key(policy, evaluation_id))))

    def update(self, policy: str, evaluation_id: str, **values: Any) -> bool:
        return bool(
            self._run(evaluations.update().where(*_key(policy, evaluation_id)).values(values))
        )

    def heartbeat(self, owner: str, now: float) -> None:
        self._run(
            evaluations.update()
            .where(evaluations.c.owner == owner, evaluations.c.status.in_(UNFINISHED))
            .values(heartbeat_at=now)
        )

    def claim_stale(self, owner: str, now: float, stale_before: float) -> list[tuple[str, str]]:
        stale = self._run(
            sa.select(
                evaluations.c.policy, evaluations.c.evaluation_id, evaluations.c.heartbeat_at
            ).where(evaluations.c.status.in_(UNFINISHED), evaluations.c.heartbeat_at < stale_before)
        )
        claimed = []
        for policy, evaluation_id, seen in stale:
            taken = self._run(
                evaluations.update()
                .where(*_key(policy, evaluation_id), evaluations.c.heartbeat_at == seen)
                .values(owner=owner, heartbeat_at=now, status="pending", progress=0.0)
            )
            if taken:
                claimed.append((policy, evaluation_id))
        return claimed


def _key(policy: str, evaluation_id: str) -> Sequence[Any]:
    return (evaluations.c.policy == policy, evaluations.c.evaluation_id == evaluation_id)


def _record(row: Any) -> EvaluationRecord:
    return EvaluationRecord(**row._mapping)
