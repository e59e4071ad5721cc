"""The evaluations use case: submit, read, delete and apply offline evaluations of a
loop's log, whose estimates :mod:`service.usecases.evaluations` computes (docs/offline.md
"Evaluations", docs/personalizer.md "Offline evaluations").

Runs never happen on the request path: :class:`Evaluations` queues them on a bounded
:class:`~service.usecases.worker_pool.WorkerPool` (``evaluation_workers`` spawned
processes; a run is CPU-bound numpy and Python, which a thread would run under the
server's GIL). The record lives in the
event-log database (:mod:`service.storage.evaluations`); the worker writes its progress
and result there, so any replica answers, and one whose run's process died
(restart, crash) sees its heartbeat age and runs it again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime

from service.errors import Conflict, InvalidRequest, NotFound
from service.schemas import PolicySpec
from service.schemas.evaluations import EvaluationPolicy, PolicyArguments
from service.settings import Settings
from service.storage.evaluations import (
    FINAL,
    EvaluationExistsError,
    EvaluationRecord,
    EvaluationStore,
    SqlEvaluationStore,
)
from service.storage.schema import create_log_engine
from service.usecases.admin import PolicyAdmin
from service.usecases.evaluation_streams import DecisionQuery, evaluate_on
from service.usecases.evaluations import (
    BASELINE,
    ONLINE,
    PROGRESS_EVERY_SECONDS,
    RANDOM,
    Candidate,
    logged_span,
    plan,
)
from service.usecases.importance import scores_over_log_on
from service.usecases.learning_settings import ApplySetting, LearningSettings
from service.usecases.offline_engine import OfflineEngine
from service.usecases.worker_pool import WorkerPool

log = logging.getLogger("bandit.service")


class EvaluationDeleted(Exception):
    """The record went away while its run was going (DELETE): the run stops."""


def run_evaluation(
    log_url: str,
    policy: str,
    evaluation_id: str,
    timeout_seconds: float,
    engine: OfflineEngine,
    learning: LearningSettings,
) -> str:
    """Worker entry point (a spawned process): run the evaluation stored as ``(policy,
    evaluation_id)`` on ``engine`` (:func:`evaluate_on`, settings written by
    ``learning``) and store its result; returns the final status. A deleted record stops the run (on Ray, its tasks are cancelled)."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    store = SqlEvaluationStore(event_log.engine)
    started = time.monotonic()
    try:
        record = store.get(policy, evaluation_id)
        if record is None or record.status in FINAL:
            return "gone" if record is None else record.status
        if not store.update(
            policy, evaluation_id, status="running", progress=0.0, heartbeat_at=time.time()
        ):
            return "gone"
        done = [0.0, time.monotonic()]

        def check() -> None:
            now = time.monotonic()
            if now - done[1] < PROGRESS_EVERY_SECONDS:
                return
            done[1] = now
            if now - started > timeout_seconds:
                raise TimeoutError
            if not store.update(
                policy, evaluation_id, progress=min(done[0], 0.99), heartbeat_at=time.time()
            ):
                raise EvaluationDeleted

        def progress(events: int, to_do: int) -> None:
            done[0] += events / to_do
            check()

        candidates = [Candidate.from_json(c) for c in record.request["candidates"]]
        grid = [PolicySpec.model_validate(g) for g in record.request.get("grid", [])]
        query = DecisionQuery(log_url, policy, record.start_time, record.end_time)
        try:
            result = evaluate_on(
                engine,
                query,
                candidates,
                grid,
                progress,
                check,
                describe=learning.arguments,
                estimator=record.request.get("estimator", "ips"),
            )
        except TimeoutError:
            store.update(
                policy,
                evaluation_id,
                status="timeout",
                progress=min(done[0], 0.99),
                message=f"stopped after {timeout_seconds:g} s (evaluation_timeout_seconds)",
            )
            return "timeout"
        if record.request.get("policy_info") is not None:
            result["feature_importance"] = importance_groups(engine, log_url, record)
        status = "succeeded"
        message = None if result["events"] else "no rewarded decision in [startTime, endTime)"
        store.update(
            policy,
            evaluation_id,
            status=status,
            progress=1.0,
            result=result,
            message=message,
            heartbeat_at=time.time(),
        )
        return status
    except EvaluationDeleted:
        return "gone"
    except Exception as exc:  # reported on the record: the API answers it as Failed
        log.exception("evaluation %s of %s failed", evaluation_id, policy)
        store.update(policy, evaluation_id, status="failed", message=f"{type(exc).__name__}: {exc}")
        return "failed"
    finally:
        event_log.close()


def importance_groups(
    engine: OfflineEngine, log_url: str, record: EvaluationRecord
) -> list[list[str]]:
    """The v1 ``featureImportance`` of an evaluation that asked for offline
    experimentation: the loop's JSON features (``namespace.name``) by their
    leave-one-feature-out score over the evaluated range of the log at ``log_url``, on
    ``engine`` (:func:`service.usecases.importance.scores_over_log_on`), in three
    groups, most important first: score at least 2/3, at least 1/3, below (empty groups
    left out); none for a loop without JSON features."""
    info_json = json.dumps(record.request["policy_info"])
    try:
        scores = scores_over_log_on(
            engine, log_url, info_json, record.start_time, record.end_time
        ).scores
    except InvalidRequest:  # no JSON features: nothing to name
        return []
    ranked = sorted(scores, key=lambda f: -f.score)
    groups = [
        [f"{f.namespace}.{f.name}" for f in ranked if low <= f.score < high]
        for low, high in ((2 / 3, float("inf")), (1 / 3, 2 / 3), (-float("inf"), 1 / 3))
    ]
    return [g for g in groups if g]


def _timestamp(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


@dataclass
class Evaluations:
    """Submit, read, delete and apply evaluations (module docstring); one per process.
    ``learning`` reads and writes the evaluated settings (the app's wiring gives it)."""

    admin: PolicyAdmin
    settings: Settings
    learning: LearningSettings
    clock: Callable[[], float] = time.time
    owner: str = field(default_factory=lambda: secrets.token_hex(8))
    store: EvaluationStore = field(init=False)
    _workers: WorkerPool = field(init=False)

    def __post_init__(self) -> None:
        self._workers = WorkerPool(self.settings.evaluation_workers)
        self._engine = create_log_engine(self.settings.log_url)
        self.store = SqlEvaluationStore(self._engine)

    # ---- submission ----------------------------------------------------------------------
    async def create(
        self,
        loop: str,
        name: str,
        start: datetime,
        end: datetime,
        policies: Sequence[PolicyArguments],
        offline_experimentation: bool,
        evaluation_id: str | None = None,
        time_fields: tuple[str, str] = ("startTime", "endTime"),
    ) -> EvaluationRecord:
        """Store a new evaluation of ``loop`` and queue its run; a 400 names a bad field
        (the range's by ``time_fields``, the API's names), 409 when ``evaluation_id`` is
        taken."""
        info = await self.admin.get_policy(loop)
        start_time, end_time = _timestamp(start), _timestamp(end)
        if end_time <= start_time:
            start_field, end_field = time_fields
            raise InvalidRequest(f"{end_field} must be after {start_field}", ["body", end_field])
        now = self.clock()
        span = logged_span(info, start_time, end_time, now)
        candidates, grid = plan(self.learning, info, policies, offline_experimentation, span)
        record = EvaluationRecord(
            policy=loop,
            evaluation_id=evaluation_id or str(uuid.uuid4()),
            name=name,
            status="pending",
            created_at=now,
            heartbeat_at=now,
            start_time=start_time,
            end_time=end_time,
            progress=0.0,
            owner=self.owner,
            request={
                "candidates": [c.to_json() for c in candidates],
                "grid": [g.model_dump(mode="json") for g in grid],
                "offline_experimentation": offline_experimentation,
                "estimator": self.learning.estimator(info),
                # what the feature importance replays (with offline experimentation)
                "policy_info": info.model_dump(mode="json") if offline_experimentation else None,
            },
        )
        try:
            await asyncio.to_thread(self.store.insert, record)
        except EvaluationExistsError:
            raise Conflict(
                f"evaluation {record.evaluation_id!r} of {loop!r} exists already",
                code="EvaluationAlreadyExists",
            ) from None
        self._submit(loop, record.evaluation_id)
        return record

    def _submit(self, loop: str, evaluation_id: str) -> None:
        """Queue the run on the worker processes (which, on Ray, drive its tasks there: a
        lost cluster never takes the serving process with it)."""
        future = self._workers.submit(
            run_evaluation,
            self.settings.log_url,
            loop,
            evaluation_id,
            self.settings.evaluation_timeout_seconds,
            OfflineEngine.from_settings(self.settings),
            self.learning,
        )
        future.add_done_callback(lambda f: self._worker_lost(loop, evaluation_id, f))

    def _worker_lost(self, loop: str, evaluation_id: str, future: Future[str]) -> None:
        """A run whose process died before it stored a final status ends ``failed`` with
        the reason (it can be submitted again). On Ray the reason names a cluster whose
        head no longer answers: Ray ends a driver that cannot reach its cluster for a
        minute, which can come before the run's own check (``lost_after_seconds``) when
        a call to the lost cluster blocks."""
        if future.cancelled() or future.exception() is None:
            return
        log.error("evaluation worker failed: %s", future.exception())
        try:
            record = self.store.get(loop, evaluation_id)
            if record is not None and record.status not in FINAL:
                message = f"the evaluation's worker process stopped: {future.exception()}"
                lost = OfflineEngine.from_settings(self.settings).lost_cluster()
                if lost is not None:
                    message = f"the Ray cluster at {lost} stopped answering; {message}"
                self.store.update(loop, evaluation_id, status="failed", message=message)
        except Exception:  # the log is unreachable: the stale-heartbeat rerun covers it
            log.exception("could not record the failure of evaluation %s", evaluation_id)

    # ---- reading -------------------------------------------------------------------------
    async def get(self, loop: str, evaluation_id: str) -> EvaluationRecord:
        await self.admin.get_policy(loop)
        record = await asyncio.to_thread(self.store.get, loop, evaluation_id)
        if record is None:
            raise NotFound(
                f"evaluation {evaluation_id!r} of {loop!r} not found", reason="evaluation"
            )
        return record

    async def list_evaluations(self, loop: str) -> list[EvaluationRecord]:
        await self.admin.get_policy(loop)
        return await asyncio.to_thread(self.store.list_for, loop)

    async def delete(self, loop: str, evaluation_id: str) -> None:
        """Delete (a running evaluation stops at its next progress update)."""
        await self.get(loop, evaluation_id)
        await asyncio.to_thread(self.store.delete, loop, evaluation_id)

    # ---- applying --------------------------------------------------------------------------
    async def apply(
        self, loop: str, evaluation_id: str, policy_name: str, apply_setting: ApplySetting
    ) -> EvaluationPolicy:
        """Make the learning setting ``policy_name`` of a succeeded evaluation the loop's
        by ``apply_setting`` (the API family's: what was learned starts over when the
        engine changes); the evaluation's status becomes ``optimal_policy_applied``, or
        ``online_policy_retained`` for the online setting. Returns the setting applied."""
        record = await self.get(loop, evaluation_id)
        if record.result is None:
            raise InvalidRequest(
                f"evaluation {evaluation_id!r} has no result (status {record.status})",
                ["body", "evaluationId"],
            )
        found = [p for p in record.result["policies"] if p["name"] == policy_name]
        if not found:
            known = [p["name"] for p in record.result["policies"]]
            raise NotFound(
                f"policyName {policy_name!r} is not in evaluation {evaluation_id!r}; it has {known}",
                reason="evaluation",
            )
        chosen = found[0]
        if chosen["source"] in (BASELINE, RANDOM):
            raise InvalidRequest(
                f"policyName {policy_name!r} is the {chosen['source']} policy, not a learning setting",
                ["body", "policyName"],
            )
        arguments = chosen["arguments"]
        if chosen["source"] == "OfflineExperimentation":
            arguments = PolicySpec.model_validate(chosen["spec"]).model_dump_json(
                exclude={"personalizer"}
            )
        applied = await apply_setting(loop, policy_name, arguments)
        status = (
            "online_policy_retained" if chosen["source"] == ONLINE else "optimal_policy_applied"
        )
        await asyncio.to_thread(self.store.update, loop, evaluation_id, status=status)
        return EvaluationPolicy(name=policy_name, arguments=applied)

    # ---- background --------------------------------------------------------------------------
    async def adopt_once(self) -> list[tuple[str, str]]:
        """Refresh this process's heartbeats and run the evaluations whose process is gone."""
        now = self.clock()
        await asyncio.to_thread(self.store.heartbeat, self.owner, now)
        stale_before = now - self.settings.evaluation_stale_seconds
        claimed = await asyncio.to_thread(self.store.claim_stale, self.owner, now, stale_before)
        for loop, evaluation_id in claimed:
            log.info("evaluation %s of %s lost its process: running it again", evaluation_id, loop)
            self._submit(loop, evaluation_id)
        return claimed

    async def run(self, stop: asyncio.Event) -> None:
        from service.usecases.periodic import every

        await every(
            self.settings.evaluation_heartbeat_seconds, stop, self.adopt_once, "evaluations"
        )

    def close(self) -> None:
        self._workers.shutdown()
        self._engine.dispose()
