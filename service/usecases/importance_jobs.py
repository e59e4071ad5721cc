"""Feature-importance jobs over a time range of a loop's log (Personalizer's
``featureImportances`` routes, ``/policies/{name}/feature-importances``, ``bandit
features --since``; docs/personalizer.md "Feature importances").

A job is created ``Running`` and computed in the background, one job at a time per
process, in a worker process of its own (a :class:`~service.usecases.worker_pool.WorkerPool`
of one, spawned at the first job and kept for the next;
:func:`~service.usecases.importance.scores_over_log_on`, which runs it on the
``offline_engine``: here, or as a task of the Ray cluster): the replays are Python,
which a thread would run under the serving process's GIL, so ``rank`` neither waits on
a job nor shares its interpreter. A job ends ``Succeeded`` with the feature scores or
``Failed`` with the reason in ``description``. Jobs live in the state store beside the
loop, in the namespace ``<loop>#featureImportances`` (a ``#`` no policy name holds, so
resetting or replacing the loop's model keeps them): one value per job (``job:<id>``,
JSON) and an ``index`` of the ids in creation order, written together in one
transaction. Every replica sees every job; a job whose process stopped before it
finished stays ``Running`` (delete it and create it again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from service.errors import ApiError, Conflict, InvalidRequest, NotFound
from service.schemas import FeatureImportanceJob, PolicyInfo
from service.settings import Settings
from service.storage.state_store import PartStore
from service.usecases.admin import PolicyAdmin
from service.usecases.importance import log_range_featurizer, scores_over_log_on
from service.usecases.offline_engine import OfflineEngine
from service.usecases.worker_pool import WorkerPool

log = logging.getLogger(__name__)

JOBS_SUFFIX = "#featureImportances"
INDEX_KEY = "index"
JOB_PREFIX = "job:"
RUNNING, SUCCEEDED, FAILED = "Running", "Succeeded", "Failed"


def jobs_namespace(loop: str) -> str:
    """The state-store namespace of ``loop``'s jobs."""
    return loop + JOBS_SUFFIX


@dataclass
class FeatureImportances:
    """The feature-importance job use cases; one per process."""

    admin: PolicyAdmin
    store: PartStore  # the jobs' records, beside the loop's namespace
    settings: Settings
    clock: Callable[[], float] = time.time
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _one_at_a_time: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    _worker: WorkerPool = field(default_factory=lambda: WorkerPool(1), init=False)

    async def create(
        self,
        loop: str,
        job_id: str,
        name: str,
        start: float,
        end: float,
        fields: tuple[str, str] = ("startTime", "endTime"),
    ) -> FeatureImportanceJob:
        """Record a ``Running`` job over ``[start, end)`` of ``loop``'s log and start it
        (404 unknown loop; 409 the id exists; 422 ``end`` not after ``start``, naming the
        request's ``fields`` for them)."""
        info = await self.admin.get_policy(loop)
        if not end > start:
            start_field, end_field = fields
            raise InvalidRequest(
                f"{end_field} must be later than {start_field}", ["body", end_field]
            )
        job = FeatureImportanceJob(
            id=job_id,
            name=name,
            start_time=start,
            end_time=end,
            creation_time=self.clock(),
            status=RUNNING,
        )
        key = JOB_PREFIX + job_id

        def add(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if values[key] is not None:
                raise Conflict(
                    f"feature importance {job_id!r} exists; delete it first",
                    code="FeatureImportanceAlreadyExists",
                )
            ids = json.loads(values[INDEX_KEY] or b"[]")
            return {
                key: job.model_dump_json().encode(),
                INDEX_KEY: json.dumps([*ids, job_id]).encode(),
            }

        await self.store.transact(jobs_namespace(loop), [INDEX_KEY, key], add)
        task = asyncio.create_task(self._run(loop, info.model_copy(), job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(self, loop: str, info: PolicyInfo, job: FeatureImportanceJob) -> None:
        async with self._one_at_a_time:
            try:
                log_range_featurizer(info)  # a 422 here, not pickled back from the worker
                result = await asyncio.wrap_future(
                    self._worker.submit(
                        scores_over_log_on,
                        OfflineEngine.from_settings(self.settings),
                        self.settings.log_url,
                        info.model_dump_json(),
                        job.start_time,
                        job.end_time,
                    )
                )
                description = (
                    f"leave-one-feature-out over {result.events} rewarded decisions; the "
                    f"learning policy's SNIPS value with every feature: {result.value:.4g}"
                )
                done = job.model_copy(
                    update={
                        "status": SUCCEEDED,
                        "feature_scores": result.scores,
                        "description": description,
                    }
                )
            except ApiError as exc:  # a policy without JSON features
                done = job.model_copy(update={"status": FAILED, "description": exc.message})
            except Exception as exc:  # the job's failure is reported, not raised anywhere
                log.exception("feature importance %r of loop %r failed", job.id, loop)
                done = job.model_copy(
                    update={"status": FAILED, "description": f"{type(exc).__name__}: {exc}"}
                )
            key = JOB_PREFIX + job.id

            def finish(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
                if values[key] is None:  # deleted while it ran
                    return {}
                return {key: done.model_dump_json().encode()}

            try:
                await self.store.transact(jobs_namespace(loop), [key], finish)
            except Exception:
                log.exception("could not store feature importance %r of loop %r", job.id, loop)

    async def get(self, loop: str, job_id: str) -> FeatureImportanceJob:
        """The job ``job_id`` of ``loop`` (404 when either is unknown)."""
        await self.admin.get_policy(loop)
        key = JOB_PREFIX + job_id
        value = (await self.admin.cache.read(jobs_namespace(loop), [key], {}))[key].data
        if value is None:
            raise NotFound(f"feature importance {job_id!r} does not exist", reason="job")
        return FeatureImportanceJob.model_validate_json(value)

    async def list_jobs(self, loop: str, top: int | None, skip: int) -> list[FeatureImportanceJob]:
        """``loop``'s jobs, newest first, ``skip`` of them skipped, at most ``top``."""
        await self.admin.get_policy(loop)
        namespace = jobs_namespace(loop)
        index = (await self.admin.cache.read(namespace, [INDEX_KEY], {}))[INDEX_KEY].data
        ids = list(reversed(json.loads(index or b"[]")))[skip:]
        ids = ids if top is None else ids[:top]
        keys = [JOB_PREFIX + i for i in ids]
        values = await self.admin.cache.read(namespace, keys, {})
        return [
            FeatureImportanceJob.model_validate_json(values[k].data)
            for k in keys
            if values[k].data is not None
        ]

    async def delete(self, loop: str, job_id: str) -> None:
        """Delete the job (404 when unknown); a running one finishes unseen."""
        await self.admin.get_policy(loop)
        key = JOB_PREFIX + job_id

        def remove(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if values[key] is None:
                raise NotFound(f"feature importance {job_id!r} does not exist", reason="job")
            ids = [i for i in json.loads(values[INDEX_KEY] or b"[]") if i != job_id]
            return {key: None, INDEX_KEY: json.dumps(ids).encode()}

        await self.store.transact(jobs_namespace(loop), [INDEX_KEY, key], remove)

    async def close(self) -> None:
        """Cancel the jobs still running and stop the job process (at shutdown; the jobs
        stay ``Running``)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._worker.shutdown()
