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
   (:func:`relearn_task`, the replay of :func:`~service.usecases.rebuild.learn_logged`).
3. Catch-up: the rewards logged meanwhile (the writer flushed first) are learned too
   (:func:`updates_task`, a second pass of the worker skipping the events learned).
4. The switch: one store transaction writes the new config (``reset_at`` the window's
   start, so that ``bandit rebuild`` replays the same events; ``retrained_from`` the old
   model's ``reset_at``), every part of the new model (stored parts it lacks deleted) and
   the record ``done``, only if the config is still the one the retrain started from
   and the record is still this retrain's: a reset or another configuration change in
   between wins (the record says ``superseded``). The audit trail records it.
5. Rewards of the old model's events that are applied after the catch-up read (a
   reward racing the switch, or one for an event still pending at the switch, which the
   finalization logs without learning: its row was featurized for the old model) reach
   the new model from the log once those events' reward wait is over
   (:meth:`Retrains._reconcile`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from bandit_core import clock_at, policy_from_bytes
from service.policies import CONFIG_KEY, build_policy, encode_info, spec_of
from service.schemas import PolicyInfo, RetrainState
from service.settings import Settings
from service.storage.base import EventLog, LoggedDecision, LogSink
from service.storage.state_store import PartStore
from service.usecases.audit import AuditTrail, changed_settings
from service.usecases.events import DELTA_PREFIX
from service.usecases.learning_settings import LearningSettings
from service.usecases.models import PART_PREFIXES
from service.usecases.policy_cache import METRICS_PREFIX, PolicyCache
from service.usecases.rebuild import learn_logged, served_rows
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

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> RetrainStatus:
        return cls(**orjson.loads(data))


@dataclass(frozen=True)
class Relearned:
    """A pass of the worker: the engine bytes of the model (None for a pass of updates),
    the updates to apply (arm, row, reward, decided at, user), the ids of the events
    learned whose reward came after the pass's horizon, and how many it learned."""

    model: bytes | None
    updates: list[tuple[str, Any, float, float, str | None]]
    recent: list[str]
    events: int


def window_rewards(
    event_log: EventLog,
    info: PolicyInfo,
    learning: LearningSettings,
    since: float,
    until: float | None = None,
    after: float = -math.inf,
    skip: Iterable[str] = (),
) -> list[LoggedDecision]:
    """The rewarded decisions of ``info.name`` made in ``[since, until)`` that the policy
    learns from (not degraded, :meth:`LearningSettings.learns_at`), whose reward was
    applied after ``after`` and whose event id is not in ``skip``; in the order their
    rewards were applied."""
    skipped = set(skip)
    out = [
        e
        for e in event_log.iter_events(info.name, since=since, until=until)
        if e.reward is not None
        and not e.decision.degraded
        and e.reward.created_at > after
        and e.decision.event_id not in skipped
        and learning.learns_at(info, e.decision.created_at)
    ]
    out.sort(key=_rewarded_at)
    return out


def _rewarded_at(event: LoggedDecision) -> float:
    assert event.reward is not None  # window_rewards keeps rewarded events only
    return event.reward.created_at


def _recent(events: list[LoggedDecision], horizon: float) -> list[str]:
    return [e.decision.event_id for e in events if _rewarded_at(e) > horizon]


def relearn_task(
    log_url: str, target: dict[str, Any], since: float, horizon: float, learning: LearningSettings
) -> Relearned:
    """Worker entry point: the model of the config ``target`` learned from the window
    ``[since, ...)`` of the log at ``log_url`` (:func:`window_rewards`); ``recent`` the
    events learned whose reward came after ``horizon``."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    try:
        info = PolicyInfo.model_validate(target)
        events = window_rewards(event_log, info, learning, since)
        policy = build_policy(spec_of(info))
        learn_logged(policy, info, events)
        return Relearned(policy.to_bytes(), [], _recent(events, horizon), len(events))
    finally:
        event_log.close()


def updates_task(
    log_url: str,
    target: dict[str, Any],
    since: float,
    until: float | None,
    horizon: float,
    skip: list[str],
    learning: LearningSettings,
) -> Relearned:
    """Worker entry point: the updates of the rewarded decisions of ``target``'s policy in
    ``[since, until)`` rewarded after ``horizon`` and not in ``skip``, their rows
    featurized for ``target``."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    try:
        info = PolicyInfo.model_validate(target)
        events = window_rewards(event_log, info, learning, since, until, horizon, skip)
        row = served_rows(build_policy(spec_of(info)), info)
        updates = []
        for e in events:
            d, reward = e.decision, e.reward
            assert reward is not None  # window_rewards keeps rewarded events only
            updates.append((d.arm_id, row(d), reward.value, d.created_at, d.user_id))
        return Relearned(None, updates, _recent(events, horizon), len(events))
    finally:
        event_log.close()


def apply_updates(policy: Any, updates: list[tuple[str, Any, float, float, str | None]]) -> None:
    """Learn ``updates`` (:attr:`Relearned.updates`) in order."""
    for arm, x, value, decided_at, user in updates:
        policy.add_arm(arm)
        with clock_at(policy, decided_at):
            policy.update(arm, x, value, user_id=user)


@dataclass
class Retrains:
    """Relearn a policy's model from the log (module docstring); one per process."""

    cache: PolicyCache
    store: PartStore
    event_log: EventLog
    sink: LogSink
    settings: Settings
    audit: AuditTrail
    learning: LearningSettings
    clock: Callable[[], float] = time.time
    _workers: WorkerPool = field(init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

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
        task = asyncio.get_running_loop().create_task(self._run(old, status))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return status

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
            learned = [*first.recent, *caught.recent]
            switched = await self._switch(name, status, policy, first.events + caught.events)
        except Exception as exc:  # the old model keeps serving; the record says why
            log.exception("retrain of %s failed", name)
            status.state, status.finished_at = FAILED, self.clock()
            status.message = f"{type(exc).__name__}: {exc}"
            await self._finish(name, status)
            return
        if switched is not None:
            await self._reconcile(name, switched, status, horizon, learned)

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

    async def _reconcile(
        self,
        name: str,
        switched: PolicyInfo,
        status: RetrainStatus,
        horizon: float,
        learned: list[str],
    ) -> None:
        """Once the old model's events are past their wait (and a sweep), learn the rewards
        of the window's decisions made before the switch that no pass learned (module
        docstring, step 5), onto the stored model, unless it changed config since."""
        wait = switched.reward_wait_seconds + 2 * self.settings.sweeper_interval_seconds
        await asyncio.sleep(wait)
        await asyncio.to_thread(self.sink.flush, FLUSH_SECONDS)
        late: Relearned = await asyncio.wrap_future(
            self._workers.submit(
                updates_task,
                self.settings.log_url,
                switched.model_dump(mode="json"),
                status.since,
                switched.updated_at,
                horizon,
                learned,
                self.learning,
            )
        )
        if late.updates:
            await self.apply_to_stored(name, switched.revision, late.updates)

    async def apply_to_stored(
        self,
        name: str,
        revision: str,
        updates: list[tuple[str, Any, float, float, str | None]],
    ) -> bool:
        """Learn ``updates`` on the stored model of ``name`` in one transaction, if its
        config is still ``revision``; whether it was."""
        runtime, _, _ = await self.cache.load(name)
        if runtime.info.revision != revision:
            return False
        policy = build_policy(spec_of(runtime.info))
        keys = list(dict.fromkeys(p for u in updates for p in policy.parts_for_update(u[0], u[4])))

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            config = values[CONFIG_KEY]
            if config is None or PolicyInfo.model_validate_json(config).revision != revision:
                return {}
            fresh = build_policy(spec_of(runtime.info))
            fresh.import_parts({k: values[k] for k in keys})
            apply_updates(fresh, updates)
            return dict(fresh.export_parts(keys))

        written = await self.store.transact(name, [CONFIG_KEY, *keys], fn)
        return bool(written)

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._workers.shutdown()
