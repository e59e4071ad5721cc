"""Relearning a policy's model from the event log (docs/personalizer.md "Relearning from
the log"): when a change of a policy's engine (another interaction, a JSON spec with
other engine fields, an applied evaluation) needs a new model and the policy has
``retrain_days``, the new model learns the rewarded decisions of the last
``retrain_days`` of the log instead of starting from nothing.

1. :meth:`Retrains.start`: the current config and model keep serving; a record
   (:class:`RetrainStatus`, ``running``) goes to the store beside the model
   (:data:`RETRAIN_KEY`, kept across resets). A window with no logged reward needs no
   retrain: the caller starts the model over at once, as without ``retrain_days``.
2. A worker process (:class:`~service.usecases.worker_pool.WorkerPool`) replays the
   window's rewards under the new settings in the order they were applied
   (:func:`~service.usecases.retrain_passes.relearn_task`, the replay of
   :func:`~service.usecases.rebuild.learn_logged`).
3. Catch-up: the rewards logged meanwhile (the writer flushed first) are learned too
   (:func:`~service.usecases.retrain_passes.updates_task`, a second pass of the worker
   skipping the events learned).
4. The switch: one store transaction writes the new config (``reset_at`` the window's
   start, so that ``bandit rebuild`` replays the same events; ``retrained_from`` the old
   model's ``reset_at``), every part of the new model (stored parts it lacks deleted) and
   the record ``done``, only if the config is still the one the retrain started from
   and the record is still this retrain's: a reset or another configuration change in
   between wins (the record says ``superseded``). The audit trail records it.
5. Rewards of the old model's events that are applied after the catch-up read (a
   reward racing the switch, or one for an event the old model served, rewarded after
   the switch, which the finalization logs without learning: its row was featurized for
   the old model, and the finalization adds its id to :data:`RELEARNED_KEY`) reach the
   new model from the log once those events' reward wait is over
   (:meth:`Retrains.reconcile`), in one transaction that also marks the record
   ``reconciled``. What that needs is in the store (the record's ``horizon`` and
   ``learned``, the ids under :data:`RELEARNED_KEY`), so a process that restarts
   before it learns them on its next check (:meth:`Retrains.run`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import orjson

from bandit_core import policy_from_bytes
from service.policies import CONFIG_KEY, build_policy, encode_info, spec_of
from service.schemas import PolicyInfo, RetrainState
from service.settings import Settings
from service.storage.base import EventLog, LogSink
from service.storage.state_store import PartStore, PolicyDirectory
from service.usecases.audit import AuditTrail, changed_settings
from service.usecases.events import DELTA_PREFIX
from service.usecases.finalizations import RELEARNED_KEY
from service.usecases.learning_settings import LearningSettings
from service.usecases.models import PART_PREFIXES
from service.usecases.policy_cache import METRICS_PREFIX, PolicyCache
from service.usecases.retrain_passes import Relearned, apply_updates, relearn_task, updates_task
from service.usecases.worker_pool import WorkerPool

log = logging.getLogger("bandit.service")

RETRAIN_KEY = METRICS_PREFIX + "retrain"
"""The store key of a policy's latest retrain record (kept across resets)."""
RETRAIN = "retrain"
"""The audit trail's action of a switch to a relearned model."""
DAY_SECONDS = 86_400.0
LOG_LAG_SECONDS = 60.0
"""A reward is in the log this long after it was applied (the writer's queue); older
rewards are never looked for again after the first pass."""
FLUSH_SECONDS = 30.0
RUNNING: RetrainState = "running"
DONE: RetrainState = "done"
FAILED: RetrainState = "failed"
SUPERSEDED: RetrainState = "superseded"


@dataclass
class RetrainStatus:
    """A retrain as the store keeps it: ``state`` running, done, failed or superseded;
    ``since`` the window's start; ``events`` the rewarded decisions learned (at the
    switch); ``target`` the config the switch writes; ``from_revision`` the config it
    starts from (unix seconds throughout)."""

    retrain_id: str
    state: RetrainState
    started_at: float
    since: float
    target: dict[str, Any]
    from_revision: str
    finished_at: float | None = None
    events: int | None = None
    message: str | None = None
    horizon: float | None = None
    """Rewards applied before it are in the passes; after it, the ``learned`` ones are."""
    learned: list[str] = field(default_factory=list)
    reconciled: bool = False
    """Whether the rewards the passes missed were learned (step 5)."""

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> RetrainStatus:
        return cls(**orjson.loads(data))


class RetrainStore(PartStore, PolicyDirectory, Protocol):
    """The state store's roles a retrain uses (``service.storage.state_store``)."""


@dataclass
class Retrains:
    """Relearn a policy's model from the log (module docstring); one per process."""

    cache: PolicyCache
    store: RetrainStore
    event_log: EventLog
    sink: LogSink
    settings: Settings
    audit: AuditTrail
    learning: LearningSettings
    clock: Callable[[], float] = time.time
    _workers: WorkerPool = field(init=False)
    _tasks: set[asyncio.Task[object]] = field(default_factory=set, init=False)
    _reconciling: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._workers = WorkerPool(1)

    async def status(self, name: str) -> RetrainStatus | None:
        """The latest retrain of ``name`` (None: never retrained)."""
        values = await self.cache.read(name, [RETRAIN_KEY], {})
        data = values[RETRAIN_KEY].data
        return None if data is None else RetrainStatus.from_json(data)

    async def upcoming(self, info: PolicyInfo) -> PolicyInfo:
        """The config a running retrain from ``info`` switches to, else ``info``."""
        status = await self.status(info.name)
        if status is None or status.state != RUNNING or status.from_revision != info.revision:
            return info
        return PolicyInfo.model_validate(status.target)

    async def start(self, old: PolicyInfo, target: PolicyInfo) -> RetrainStatus | None:
        """Start relearning the model of ``target`` (the config replacing ``old``) from the
        last ``target.retrain_days`` of the log; None when there is nothing to relearn (no
        ``retrain_days``, or no reward logged in the window): the caller starts the
        model over."""
        if not target.retrain_days:
            return None
        now = self.clock()
        since = now - target.retrain_days * DAY_SECONDS
        last = await asyncio.to_thread(self.event_log.last_reward_at, old.name)
        if last is None or last < since:
            return None
        status = RetrainStatus(
            retrain_id=uuid.uuid4().hex,
            state=RUNNING,
            started_at=now,
            since=since,
            target=target.model_dump(mode="json"),
            from_revision=old.revision,
        )
        record = status.to_json()
        await self.store.transact(old.name, [RETRAIN_KEY], lambda _: {RETRAIN_KEY: record})
        self._spawn(self._run(old, status))
        return status

    def _spawn(self, job: Coroutine[Any, Any, object]) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Wait for the retrains (and their reconciliations) this process runs."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run(self, old: PolicyInfo, status: RetrainStatus) -> None:
        name = old.name
        url = self.settings.log_url
        try:
            await asyncio.to_thread(self.sink.flush, FLUSH_SECONDS)
            horizon = self.clock() - LOG_LAG_SECONDS
            first: Relearned = await asyncio.wrap_future(
                self._workers.submit(
                    relearn_task, url, status.target, status.since, horizon, self.learning
                )
            )
            assert first.model is not None
            policy = policy_from_bytes(first.model)
            await asyncio.to_thread(self.sink.flush, FLUSH_SECONDS)
            caught: Relearned = await asyncio.wrap_future(
                self._workers.submit(
                    updates_task,
                    url,
                    status.target,
                    status.since,
                    None,
                    horizon,
                    first.recent,
                    self.learning,
                )
            )
            apply_updates(policy, caught.updates)
            status.horizon, status.learned = horizon, [*first.recent, *caught.recent]
            switched = await self._switch(name, status, policy, first.events + caught.events)
        except Exception as exc:  # the old model keeps serving; the record says why
            log.exception("retrain of %s failed", name)
            status.state, status.finished_at = FAILED, self.clock()
            status.message = f"{type(exc).__name__}: {exc}"
            await self._finish(name, status)
            return
        if switched is not None:
            await self.reconcile(name)

    async def _finish(self, name: str, status: RetrainStatus) -> None:
        """Write the record's end unless another retrain took its place."""
        record = status.to_json()

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            data = values[RETRAIN_KEY]
            if data is None or RetrainStatus.from_json(data).retrain_id != status.retrain_id:
                return {}
            return {RETRAIN_KEY: record}

        await self.store.transact(name, [RETRAIN_KEY], fn)

    async def _switch(
        self, name: str, status: RetrainStatus, policy: Any, events: int
    ) -> PolicyInfo | None:
        """The switch (module docstring, step 4); the config written, or None when a
        reset or another change came first."""
        now = self.clock()
        asked = PolicyInfo.model_validate(status.target)
        target = asked.model_copy(
            update={
                "revision": uuid.uuid4().hex[:16],
                "updated_at": now,
                "reset_at": status.since,
                "retrained_from": None,
            }
        )
        # the relearned model replaces the old one's rewards not folded yet (the log has them)
        stored = await self.store.keys(name, [*PART_PREFIXES, DELTA_PREFIX])
        parts = policy.export_parts(policy.part_names())
        done = RetrainStatus(**{**asdict(status), "state": DONE, "finished_at": now})
        done.events = events
        keys = [CONFIG_KEY, RETRAIN_KEY, *dict.fromkeys([*stored, *parts])]
        outcome: dict[str, Any] = {}

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            outcome.clear()  # a conflict runs it again on fresh values
            config, record = values[CONFIG_KEY], values[RETRAIN_KEY]
            mine = record is not None and (
                RetrainStatus.from_json(record).retrain_id == status.retrain_id
            )
            serving = None if config is None else PolicyInfo.model_validate_json(config)
            outcome.update(serving=serving, mine=mine)
            if not mine or serving is None or serving.revision != status.from_revision:
                return {}
            written = target.model_copy(update={"retrained_from": serving.reset_at})
            outcome["written"] = written
            out: dict[str, bytes | None] = {k: None for k in stored if k not in parts}
            out.update(parts)
            out[CONFIG_KEY] = encode_info(written)
            out[RETRAIN_KEY] = done.to_json()
            return out

        await self.store.transact(name, keys, fn)
        written = outcome.get("written")
        if written is None:
            if outcome.get("mine"):
                status.state, status.finished_at = SUPERSEDED, now
                status.message = "a reset or another configuration change came first"
                await self._finish(name, status)
            return None
        self.cache.forget(name)
        await asyncio.to_thread(self.event_log.upsert_policy, name, written.model_dump(mode="json"))
        serving = outcome.get("serving") or asked
        before, after = changed_settings(serving, written)
        self.audit.record(
            name,
            RETRAIN,
            before or None,
            after or None,
            {"since": status.since, "events": events, "retrain_id": status.retrain_id},
        )
        return written

    async def reconcile(self, name: str) -> bool:
        """Once the events of the model a relearned one replaced are past their wait (and
        a sweep), learn the rewards of the window's decisions that no pass learned (module
        docstring, step 5) onto the stored model, unless its config changed since; whether
        the record is now ``reconciled``. Nothing to do (False) unless the latest retrain
        of ``name`` switched and is not reconciled yet."""
        if name in self._reconciling:
            return False
        self._reconciling.add(name)
        try:
            return await self._reconcile(name)
        finally:
            self._reconciling.discard(name)

    async def _reconcile(self, name: str) -> bool:
        status = await self.status(name)
        if status is None or status.state != DONE or status.reconciled:
            return False
        switched = PolicyInfo.model_validate(status.target)
        assert status.finished_at is not None and status.horizon is not None  # a switch's
        wait = switched.reward_wait_seconds + 2 * self.settings.sweeper_interval_seconds
        await asyncio.sleep(max(0.0, status.finished_at + wait - self.clock()))
        await asyncio.to_thread(self.sink.flush, FLUSH_SECONDS)
        marked = await self.cache.read(name, [RELEARNED_KEY], {})
        ids = tuple(orjson.loads(marked[RELEARNED_KEY].data or b"[]"))
        late: Relearned = await asyncio.wrap_future(
            self._workers.submit(
                updates_task,
                self.settings.log_url,
                status.target,
                status.since,
                status.finished_at,
                status.horizon,
                status.learned,
                self.learning,
                ids,
            )
        )
        done = RetrainStatus(**{**asdict(status), "reconciled": True}).to_json()
        return await self.apply_to_stored(name, status, late, {RETRAIN_KEY: done})

    async def apply_to_stored(
        self,
        name: str,
        status: RetrainStatus,
        late: Relearned,
        writes: dict[str, bytes | None],
    ) -> bool:
        """Learn ``late``'s updates on the stored model of ``name`` and write ``writes`` in
        one transaction, if the latest retrain is still ``status`` (not reconciled) and the
        config the one it switched to; whether they were. The ids under
        :data:`RELEARNED_KEY` the updates learned are taken off."""
        runtime, _, _ = await self.cache.load(name)
        policy = build_policy(spec_of(runtime.info))
        updates = late.updates
        parts = list(dict.fromkeys(p for u in updates for p in policy.parts_for_update(u[0], u[4])))
        keys = [CONFIG_KEY, RETRAIN_KEY, RELEARNED_KEY, *parts, *writes]
        taken = set(late.recent)  # the reconciliation's rewards all came after the horizon
        written: list[bool] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            written.clear()
            config, record = values[CONFIG_KEY], values[RETRAIN_KEY]
            if config is None or record is None:
                return {}
            latest = RetrainStatus.from_json(record)
            info = PolicyInfo.model_validate_json(config)
            if latest.retrain_id != status.retrain_id or latest.reconciled:
                return {}
            if info.reset_at != status.since or info.retrained_from is None:
                return {}  # reset or reconfigured since the switch
            fresh = build_policy(spec_of(info))
            fresh.import_parts({k: values[k] for k in parts})
            apply_updates(fresh, updates)
            out: dict[str, bytes | None] = dict(fresh.export_parts(parts))
            out.update(writes)
            marked: list[str] = orjson.loads(values[RELEARNED_KEY] or b"[]")
            if any(i in taken for i in marked):
                out[RELEARNED_KEY] = orjson.dumps([i for i in marked if i not in taken])
            written.append(True)
            return out

        await self.store.transact(name, list(dict.fromkeys(keys)), fn)
        return bool(written)

    async def run(self, stop: asyncio.Event, seconds: float) -> None:
        """Every ``seconds`` until ``stop``: reconcile the policies whose latest retrain
        switched and is not reconciled (after a restart, the ones the process before left)."""
        from service.usecases.periodic import every

        await every(seconds, stop, self.check, "retrain reconciliation")

    async def check(self) -> None:
        """Start :meth:`reconcile` for each policy that needs it and has none running."""
        for name in await self.store.list_policies():
            status = await self.status(name)
            unreconciled = status is not None and status.state == DONE and not status.reconciled
            if unreconciled and name not in self._reconciling:
                self._spawn(self.reconcile(name))

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._workers.shutdown()
