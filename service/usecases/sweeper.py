"""The default-reward sweeper: finalizes the events whose deadline passed.

A pending event past ``reward_wait_seconds`` gets the sum of the rewards it received
(``rewardAggregation: sum``), or else the policy's ``default_reward`` when it was
activated (and the policy was not reset since), else it expires unlearned; a
finished event past ``done_event_retention_seconds`` is deleted (its reward logged once
more, in case the process that applied it died before logging). For a policy with
``arm_idle_seconds`` the state of arms not seen for that long is forgotten
(:meth:`Sweeper.forget_idle_arms`). Safe to run in every replica at once: each
transition is one transaction (``Finalizations.finalize``,
:mod:`service.usecases.finalizations`), and an idle arm is taken off the last-seen
index by one sweeper only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from typing import Protocol

from service.errors import Conflict, NotFound
from service.observability import metrics
from service.policies import Runtime
from service.settings import Settings
from service.storage.base import StoreUnavailableError
from service.storage.state_store import (
    CounterStore,
    DeadlineIndex,
    LastSeenIndex,
    PolicyDirectory,
)
from service.usecases.events import SOURCE_OF_STATE, EventState, PendingEvent, event_key
from service.usecases.finalizations import EventAlreadyFinalError, Outcome, contained
from service.usecases.periodic import every
from service.usecases.policy_cache import PolicyCache
from service.usecases.rewards import Rewards


class SweptStore(PolicyDirectory, DeadlineIndex, CounterStore, LastSeenIndex, Protocol):
    """The state store's roles the sweeper calls: the policy list, the deadlines, the
    pending count and the last-seen index (``service.storage.state_store``)."""


@dataclass
class Sweeper:
    """The sweeper use case; one per process."""

    cache: PolicyCache
    store: SweptStore
    rewards: Rewards
    settings: Settings
    clock: Callable[[], float] = time.time

    async def sweep_once(self) -> int:
        """Finalize the due events of every policy; returns how many this call finalized.
        A policy whose sweep fails is logged and counted (``bandit_sweeper_errors_total``)
        and the other policies are swept; an unreachable store ends the call."""
        done = 0
        for name in await self.store.list_policies():
            with (
                contained(
                    f"sweeper: policy {name!r}",
                    metrics.SWEEPER_ERRORS,
                    name,
                    passing=(StoreUnavailableError,),
                ),
                suppress(NotFound),  # deleted meanwhile
            ):
                done += await self._sweep_policy(name)
        return done

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every ``sweeper_interval_seconds`` until ``stop`` is set."""
        await every(self.settings.sweeper_interval_seconds, stop, self.sweep_once, "sweeper")

    async def _sweep_policy(self, name: str) -> int:
        """Finalize up to ``sweeper_batch`` due events of ``name``, oldest first; an event
        that fails is logged with its id and counted, and the others go on."""
        store = self.store
        now = self.clock()
        due, counters = await asyncio.gather(
            store.due_events(name, now, self.settings.sweeper_batch),
            store.counters(name),
        )
        metrics.PENDING_EVENTS.labels(name).set(counters.get("pending", 0.0))
        if due:
            runtime, _, raw = await self.cache.load(name, extra=[event_key(e) for e in due])
        else:  # no store call for the config: the requests keep the cached one current
            cached, raw = self.cache.cached(name), {}
            if cached is None:
                metrics.OVERDUE_PENDING.labels(name).set(0.0)
                return 0
            runtime = cached
        events: dict[str, PendingEvent | None] = {}
        for event_id in due:
            with self._isolated(name, event_id):
                data = raw[event_key(event_id)]
                events[event_id] = None if data is None else PendingEvent.from_json(data)
        metrics.OVERDUE_PENDING.labels(name).set(_overdue(events.values(), now))
        if runtime.info.arm_idle_seconds is not None:
            await self.forget_idle_arms(name, runtime)

        async def sweep(event_id: str, event: PendingEvent | None) -> int:
            with self._isolated(name, event_id):
                return await self._sweep_event(runtime, name, event_id, event)
            return 0

        if not self.settings.reward_batching:  # concurrent, they would conflict and retry
            return sum([await sweep(event_id, event) for event_id, event in events.items()])
        # together: their finalizations coalesce into a few transactions (Finalizations)
        swept = await asyncio.gather(
            *(sweep(event_id, event) for event_id, event in events.items()),
            return_exceptions=True,
        )
        total = 0
        for result in swept:
            if isinstance(result, BaseException):
                raise result
            total += result
        return total

    @staticmethod
    def _isolated(name: str, event_id: str) -> AbstractContextManager[None]:
        """The work on one due event: its failure is logged and counted, not raised (an
        unreachable store is: it ends the sweep)."""
        return contained(
            f"sweeper: policy {name!r}, event {event_id!r}",
            metrics.SWEEPER_ERRORS,
            name,
            passing=(StoreUnavailableError,),
        )

    async def _sweep_event(
        self, runtime: Runtime, name: str, event_id: str, event: PendingEvent | None
    ) -> int:
        """Finalize (1) or delete (0) the due event ``event_id`` (None: gone)."""
        if event is None:
            await self.store.unschedule(name, event_id)
            return 0
        if not event.pending:
            await self._delete_done(runtime, name, event_id)
            return 0
        try:
            applied = await self.rewards.finalizations.finalize(
                name, runtime, event_id, event, None, EventState.EXPIRED, self._outcome(runtime)
            )
        except (EventAlreadyFinalError, NotFound, Conflict):
            return 0
        await self.rewards.record_final(name, event_id, applied, SOURCE_OF_STATE.get(applied.state))
        return 1

    @staticmethod
    def _outcome(runtime: Runtime) -> Outcome:
        """How the wait of a pending event ends: the sum of the rewards it received
        (``rewardAggregation: sum``) or, with none, the default reward when it was
        activated; it expires unlearned when neither applies or the policy was reset
        since it was served (a model relearned from the log since is no reset: the
        reward is logged, and the relearned model takes it from the log)."""
        default = runtime.info.default_reward

        def outcome(event: PendingEvent) -> tuple[float | None, EventState]:
            relearned = event.reset_at == runtime.info.retrained_from is not None
            if event.reset_at != runtime.info.reset_at and not relearned:
                return None, EventState.EXPIRED
            if event.reward_sum is not None:
                return clipped(event.reward_sum, runtime.info.reward_range), EventState.REWARDED
            if event.activated and default is not None:
                return default, EventState.DEFAULTED
            return None, EventState.EXPIRED

        return outcome

    async def forget_idle_arms(self, name: str, runtime: Runtime) -> list[str]:
        """Forget the state of the arms of ``name`` neither served nor rewarded for the
        policy's ``arm_idle_seconds`` (registered arms excepted: they only leave the
        last-seen index until next seen), at most ``sweeper_batch`` per call, and drop
        the arms this process cached but never stored; returns the arms forgotten."""
        store = self.store
        cutoff = self.clock() - float(runtime.info.arm_idle_seconds or 0.0)
        taken = await store.take_idle(name, cutoff, self.settings.sweeper_batch)
        registered = set(runtime.info.arms or ())
        idle = [a for a in taken if a not in registered]
        forgotten: list[str] = []
        if idle:
            try:
                forgotten = await self.cache.forget_arms(name, idle)
            except BaseException:
                # put them back so a later sweep retries (a live store keeps their state)
                await asyncio.shield(self._put_back(name, idle, cutoff))
                raise
            metrics.ARMS_FORGOTTEN.labels(name).inc(len(forgotten))
        self.cache.drop_unstored_arms(name)
        return forgotten

    async def _put_back(self, name: str, arms: list[str], when: float) -> None:
        try:
            await self.store.mark_seen(name, dict.fromkeys(arms, when))
        except StoreUnavailableError:
            pass  # the store is down: the arms' state stays until they are seen again

    async def _delete_done(self, runtime: Runtime, name: str, event_id: str) -> None:
        key = event_key(event_id)
        deleted: list[PendingEvent] = []
        kept_until: list[float | None] = []
        now = self.clock()

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            kept_until.clear()
            data = values[key]
            if data is None:
                return {}
            event = PendingEvent.from_json(data)
            # a sweeper that listed the event while it was pending must not delete it
            # once another process finalized it: it is kept for its retention period
            if event.pending:
                kept_until.append(None)
                return {}
            assert event.finalized_at is not None  # set by the transition out of pending
            until = event.finalized_at + self.settings.done_event_retention_seconds
            if until > now:
                kept_until.append(until)
                return {}
            deleted[:] = [event]
            return {key: None}

        await self.cache.transact(runtime, name, [key], fn)
        if kept_until:
            if kept_until[0] is not None:
                # still on its pending deadline: finalized by a version that scheduled the
                # retention after the commit and failed to (a rolling upgrade), or listed
                # while pending and finalized since; move it, or it comes due every sweep
                await self.store.schedule(name, event_id, kept_until[0])
            return
        if deleted and deleted[0].state in (EventState.REWARDED, EventState.DEFAULTED):
            self.rewards.log_reward(name, event_id, deleted[0])
        await self.store.unschedule(name, event_id)


def _overdue(events: Iterable[PendingEvent | None], now: float) -> float:
    """Seconds the oldest of the pending ``events`` is past its deadline at ``now`` (0: none)."""
    return max(
        (
            now - e.deadline
            for e in events
            if e is not None and e.pending and e.deadline is not None
        ),
        default=0.0,
    )


def clipped(total: float, reward_range: tuple[float, float]) -> float:
    """``total`` clipped to ``reward_range`` (a summed reward; the models' bounds assume
    the range)."""
    low, high = reward_range
    return min(max(total, low), high)
