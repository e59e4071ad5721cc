"""Finalizations of pending events, coalesced per policy: rewards applied in batches.

Every move of a pending event out of ``pending`` (an explicit reward, the sweeper's
default reward or expiry; :mod:`service.usecases.events`) goes through
:meth:`Finalizations.finalize`. With ``Settings.reward_batching`` (the default) the
finalizations of one policy are coalesced the way a database coalesces commits ("group
commit"): while one batch of a policy is being applied, arriving finalizations queue;
when it is done the queue becomes the next batch. There is no timer: a finalization
that finds nothing in flight is applied at once, alone, as the unbatched path applies
it, and a batch waits for nothing but the batch before it.

A batch is one store transaction (:meth:`~service.storage.state_store.PartStore.transact`)
over the event keys and the union of the parts their updates touch. Inside it the
finalizations are applied in arrival order, each exactly as alone: the event checked
``pending`` (a second finalization of the same event in one batch sees the first's
result), the served arm's parts updated, the event written in its new state. So the
stored state after a batch is, bit for bit, the state the same finalizations leave one
transaction each (``tests/service/test_reward_batches.py``), and each is still atomic
and exactly once: the batch commits whole or not at all, and a store conflict redoes
the whole batch on fresh values. A finalization that fails (the event unknown,
already finalized, refused after a reset, an update the engine refuses) fails alone:
the batch is redone without it, the others commit. A policy whose updates are folded
(:mod:`service.usecases.folds`) reads and writes no part here: each learned reward
writes its delta beside its event, in the same transaction.

Why: rewards to one policy all write its ``shared`` part when the policy is a shared
model (``hybrid_linucb``, ``diag_linucb``), and per-arm models write the same arm part
when rewards go to one arm. One transaction per reward made concurrent rewards of a
process conflict with each other in the optimistic store and retry; coalesced, a
process has at most one transaction per policy in flight (a single writer per policy
and process), and a batch reads and writes each part once however many rewards it
holds (docs/performance.md, "Rewards in batches").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import orjson
from prometheus_client import Counter

from bandit_core import clock_at
from service.errors import Conflict, NotFound
from service.observability import metrics
from service.policies import CONFIG_KEY, Runtime, decode_info
from service.schemas import PolicyInfo
from service.storage.base import Schedule, VersionedValue
from service.usecases.events import (
    EventState,
    PendingEvent,
    delta_key,
    event_key,
    retention_schedule,
)
from service.usecases.folds import defers_updates, encode_delta
from service.usecases.policy_cache import METRICS_PREFIX, PolicyCache, import_stored

log = logging.getLogger("bandit.service")

RELEARNED_KEY = METRICS_PREFIX + "relearned"
"""The ids (a JSON list) of the events a relearned model's predecessor served whose
reward was applied after the switch: logged, not learned live; the retrain's
reconciliation learns them from the log and takes them off (service.usecases.retrain)."""


class EventAlreadyFinalError(Exception):
    """The event left ``pending`` before this transition (it happened elsewhere)."""

    def __init__(self, event: PendingEvent) -> None:
        super().__init__(event.state.value)
        self.event = event


def stored_event(event_id: str, data: bytes | None) -> PendingEvent:
    """The event stored as ``data``; 404 when it is gone (unknown or expired)."""
    if data is None:
        raise NotFound(f"event_id {event_id!r} is unknown or expired", reason="event")
    return PendingEvent.from_json(data)


@contextmanager
def contained(
    what: str, counter: Counter, *labels: str, passing: tuple[type[Exception], ...] = ()
) -> Iterator[None]:
    """Run a step whose failure must not stop the steps after it (the work after a
    finalization, one due event of the sweeper's batch): an exception other than
    ``passing`` is logged with ``what`` and counted on ``counter`` with ``labels``."""
    try:
        yield
    except passing:
        raise
    except Exception:
        counter.labels(*labels).inc()
        log.exception("%s failed", what)


Outcome = Callable[[PendingEvent], tuple[float | None, EventState]]
"""What finalizing a pending event does, decided on the event as stored when the
transaction runs: the reward to apply (None: none) and the state it moves to (the
sweeper's: a summed reward, the default reward or expiry)."""


@dataclass
class Finalization:
    """One requested move of the event ``event_id`` (``event`` as read before the
    transaction: its arm and user name the parts) to ``state``, learning ``value`` when
    it is not None; ``outcome`` receives the finalized event or the error."""

    runtime: Runtime
    event_id: str
    event: PendingEvent
    value: float | None
    state: EventState
    outcome: asyncio.Future[PendingEvent] | None = None
    decide: Outcome | None = None  # when set, it gives the value and the state instead
    stored: VersionedValue | None = None  # the event key as read: the transaction assumes it

    @property
    def learns(self) -> bool:
        """Whether this finalization may update the model (it has or decides a value,
        and the event is learned from)."""
        return (self.value is not None or self.decide is not None) and self.event.learn

    def parts(self) -> list[str]:
        """The state parts this finalization's update reads and writes (none when the
        policy's updates are folded: the update is a delta, :mod:`service.usecases.folds`)."""
        if not self.learns or defers_updates(self.runtime):
            return []
        return self.runtime.policy.parts_for_update(self.event.arm_id, self.event.user_id)


@dataclass
class _PolicyQueue:
    """The finalizations of one policy waiting for the batch in flight to finish."""

    waiting: list[Finalization] = field(default_factory=list)


# The errors that fail one finalization before it changed anything: the batch goes on.
_REFUSALS = (EventAlreadyFinalError, NotFound, Conflict)


class ServedTally(Protocol):
    """Counts an API family keeps of the applied rewards of events served other than by
    the model's own decision (those with ``PendingEvent.imitated`` set; e.g.
    Personalizer's apprentice metrics, service/personalizer/learning_modes.py), kept in
    the policy's state under :attr:`key` and updated in the transaction that applies the
    reward, so each event counts exactly once."""

    @property
    def key(self) -> str: ...

    def count(
        self, info: PolicyInfo, stored: bytes | None, event: PendingEvent, reward: float, now: float
    ) -> dict[str, bytes]:
        """What to write under :attr:`key` (``stored`` now) after ``event``'s ``reward``
        was applied at ``now``; nothing when it does not count."""
        ...


@dataclass
class Finalizations:
    """Applies finalizations one store transaction per batch (see the module docstring);
    one per process, shared by the reward use case and the sweeper; ``tally`` counts the
    events served other than by the model's own decision; a finalized event is kept
    ``retention_seconds`` (``Settings.done_event_retention_seconds``) from its
    finalization."""

    cache: PolicyCache
    clock: Callable[[], float]
    retention_seconds: float
    coalesce: bool = True
    tally: ServedTally | None = None
    # told how many deltas of a policy a transaction wrote (Folds.accepted)
    deltas_written: Callable[[str, int], None] = lambda name, count: None
    _queues: dict[str, _PolicyQueue] = field(default_factory=dict, init=False, repr=False)
    _drains: set[asyncio.Task[None]] = field(default_factory=set, init=False, repr=False)
    _configs: dict[str, tuple[bytes, PolicyInfo]] = field(
        default_factory=dict, init=False, repr=False
    )

    @property
    def idle(self) -> bool:
        """No batch of any policy in flight or queued."""
        return not self._queues

    def queued(self, name: str) -> int:
        """How many finalizations of policy ``name`` wait for the batch in flight."""
        queue = self._queues.get(name)
        return 0 if queue is None else len(queue.waiting)

    async def finalize(
        self,
        name: str,
        runtime: Runtime,
        event_id: str,
        event: PendingEvent,
        value: float | None,
        state: EventState,
        decide: Outcome | None = None,
        stored: VersionedValue | None = None,
    ) -> PendingEvent:
        """Move the pending event ``event_id`` of policy ``name`` to ``state`` and, when
        ``value`` is not None, update the served arm's parts with it; returns the
        finalized event. ``stored``: the event's key as just read (with its version),
        which the transaction assumes instead of reading it again. Raises :class:`EventAlreadyFinalError` if the event is no longer
        pending, :class:`~service.errors.Conflict` if the policy was reset after it."""
        item = Finalization(runtime, event_id, event, value, state, decide=decide, stored=stored)
        queue = self._queues.get(name)
        if not self.coalesce or queue is None:
            if self.coalesce:  # nothing in flight: apply alone, and queue what arrives
                self._queues[name] = _PolicyQueue()
            try:
                (outcome,) = await self.apply(name, [item])
                assert isinstance(outcome, PendingEvent)  # alone, its error was raised
                return outcome
            finally:
                if self.coalesce:
                    self._next_batch(name)
        item.outcome = asyncio.get_running_loop().create_future()
        queue.waiting.append(item)
        return await item.outcome

    def _next_batch(self, name: str) -> None:
        """After a batch of ``name``: drain its queue in a task, or mark it idle."""
        queue = self._queues[name]
        if not queue.waiting:
            del self._queues[name]
            return
        task = asyncio.get_running_loop().create_task(self._drain(name, queue))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)

    async def _drain(self, name: str, queue: _PolicyQueue) -> None:
        """Apply the queue of ``name`` batch by batch until it is empty. A batch holds
        the finalizations made against one cached policy object (a reconfigured policy
        is rebuilt: the later ones wait for the next batch)."""
        try:
            while queue.waiting:
                runtime = queue.waiting[0].runtime
                batch = [item for item in queue.waiting if item.runtime is runtime]
                queue.waiting = [item for item in queue.waiting if item.runtime is not runtime]
                try:
                    results = await self.apply(name, batch)
                except BaseException as exc:  # the store failed: every one of them failed
                    for item in batch:
                        _settle(item, exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for item, result in zip(batch, results, strict=True):
                    _settle(item, result)
        finally:
            for item in queue.waiting:  # only when cancelled at shutdown
                _settle(item, asyncio.CancelledError())
            del self._queues[name]

    async def apply(self, name: str, batch: list[Finalization]) -> list[PendingEvent | Exception]:
        """One transaction applying ``batch`` (finalizations made against one cached
        policy) in order; returns each finalized event. With one finalization its error
        is raised; with several, each failed one's error is in its place in the list
        instead of an event (see the module docstring)."""
        runtime = batch[0].runtime
        # the stored config, not the cached one, says which model an event's reward is for
        keys = [CONFIG_KEY, RELEARNED_KEY]
        keys += dict.fromkeys(event_key(item.event_id) for item in batch)
        parts_of = [item.parts() for item in batch]
        parts = list(dict.fromkeys(p for item_parts in parts_of for p in item_parts))
        if self.tally is not None and any(item.event.imitated is not None for item in batch):
            parts.append(self.tally.key)
        outcomes: list[PendingEvent | Exception] = []
        alphas: dict[str, float] = {}

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            failed: dict[int, Exception] = {}  # updates the engine refused: left out
            while True:
                out = self._attempt(runtime, name, batch, parts_of, values, failed, outcomes)
                if out is not None:
                    # read here: a concurrent load may drop a new arm from the cache later
                    alphas.clear()
                    alphas.update(_alphas(runtime, batch, outcomes))
                    return out

        deltas = [delta_key(item.event_id) for item in batch if item.learns]
        deltas = list(dict.fromkeys(deltas)) if defers_updates(runtime) else []
        assumed = dict.fromkeys(deltas, VersionedValue(0, None))  # a delta is written once
        for item in batch:  # a stale assumption fails the commit, which then reads afresh
            if item.stored is not None:
                assumed.setdefault(event_key(item.event_id), item.stored)

        def schedule() -> Schedule:  # called after fn, on the outcomes it left
            finalized = [
                (item.event_id, o)
                for item, o in zip(batch, outcomes)
                if isinstance(o, PendingEvent)
            ]
            return retention_schedule(finalized, self.retention_seconds)

        all_keys = [*keys, *parts, *deltas]
        await self.cache.transact(runtime, name, all_keys, fn, assumed, schedule)
        written = sum(isinstance(o, PendingEvent) and o.reward is not None for o in outcomes)
        if deltas and written:
            self.deltas_written(name, written)
        if len(batch) == 1 and isinstance(outcomes[0], Exception):
            raise outcomes[0]
        for arm, alpha in alphas.items():
            metrics.LNUCB_TA_ALPHA.labels(name, arm).set(alpha)
        return outcomes

    def _attempt(
        self,
        runtime: Runtime,
        name: str,
        batch: list[Finalization],
        parts_of: list[list[str]],
        values: dict[str, bytes | None],
        failed: dict[int, Exception],
        outcomes: list[PendingEvent | Exception],
    ) -> dict[str, bytes | None] | None:
        """The writes of ``batch`` over the read ``values``, the finalizations in
        ``failed`` left out; None when one more failed (its update may have changed the
        cached policy half-way: the caller starts over from ``values``)."""
        parts = list(dict.fromkeys(p for item_parts in parts_of for p in item_parts))
        imported = False  # the parts are read into the cached policy before the first update
        policy = runtime.policy
        folded = defers_updates(runtime)
        deltas: dict[str, bytes] = {}
        config = values[CONFIG_KEY]
        serving = runtime.info if config is None else self._decoded(name, config)
        relearned_ids: list[str] = orjson.loads(values[RELEARNED_KEY] or b"[]")
        marked = len(relearned_ids)
        events: dict[str, PendingEvent] = {}
        changed: dict[str, None] = {}
        counted: dict[str, bytes] = {}
        results: list[PendingEvent | Exception] = []
        for i, item in enumerate(batch):
            if i in failed:
                results.append(failed[i])
                continue
            key = event_key(item.event_id)
            try:
                ev = events.get(key) or stored_event(item.event_id, values[key])
                if not ev.pending:
                    raise EventAlreadyFinalError(ev)
                value, state = (item.value, item.state) if item.decide is None else item.decide(ev)
                relearned = ev.reset_at == serving.retrained_from is not None
                current = ev.reset_at == serving.reset_at == runtime.info.reset_at
                if value is not None and not (current or relearned):
                    raise Conflict(
                        f"policy {name!r} was reset or reconfigured after event {item.event_id!r}"
                    )
            except _REFUSALS as refusal:
                results.append(refusal)
                continue
            now = self.clock()
            # an event of the model a relearned one replaced: its reward is logged and
            # reaches the relearned model from the log (service.usecases.retrain)
            learns = ev.learn and not relearned
            if value is not None and ev.learn and relearned:
                relearned_ids.append(item.event_id)
            if value is not None and learns and folded:
                deltas[delta_key(item.event_id)] = encode_delta(ev, value, now)
            elif value is not None and learns:
                if not imported:
                    import_stored(runtime, {p: values[p] for p in parts})
                    imported = True
                try:
                    policy.add_arm(ev.arm_id)
                    with clock_at(policy, ev.created_at):  # observed when it was decided
                        policy.update(ev.arm_id, ev.row(), value, user_id=ev.user_id)
                except Exception as exc:
                    if len(batch) == 1:
                        raise
                    failed[i] = exc
                    return None
                changed.update(dict.fromkeys(parts_of[i]))
            if self.tally is not None and value is not None and ev.imitated is not None:
                tally_key = self.tally.key
                stored = counted.get(tally_key, values.get(tally_key))
                counted.update(self.tally.count(runtime.info, stored, ev, value, now))
            ev.state, ev.reward, ev.finalized_at = state, value, now
            events[key] = ev
            results.append(ev)
        outcomes[:] = results
        out: dict[str, bytes | None] = dict(policy.export_parts(list(changed))) if changed else {}
        out.update({key: ev.to_json() for key, ev in events.items()})
        out.update(counted)
        out.update(deltas)
        if len(relearned_ids) > marked:
            out[RELEARNED_KEY] = orjson.dumps(relearned_ids)
        return out

    def _decoded(self, name: str, config: bytes) -> PolicyInfo:
        """Policy ``name``'s stored config ``config`` decoded (the last one of each policy
        is kept: it rarely changes)."""
        known = self._configs.get(name)
        if known is None or known[0] != config:
            known = self._configs[name] = (config, decode_info(config))
        return known[1]


def _alphas(
    runtime: Runtime, batch: list[Finalization], outcomes: list[PendingEvent | Exception]
) -> dict[str, float]:
    """LNUCB-TA's exploration weight of each labelled arm the batch updated (its metric)."""
    out: dict[str, float] = {}
    for item, outcome in zip(batch, outcomes, strict=True):
        arm = item.event.arm_id
        if item.value is None or isinstance(outcome, Exception) or arm not in runtime.labelled_arms:
            continue
        alpha = runtime.policy.arm_stats(arm).extras.get("alpha")
        if alpha is not None:
            out[arm] = alpha
    return out


def _settle(item: Finalization, result: PendingEvent | BaseException) -> None:
    """Give a waiting finalization its result (unless its caller stopped waiting)."""
    future = item.outcome
    if future is None or future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
