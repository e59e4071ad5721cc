"""``POST /reward`` and ``POST /events/{id}/activate``. Every finalization (a reward
here, a default reward or expiry by the sweeper) goes through ``Rewards.finalizations``
(:mod:`service.usecases.finalizations`: one transaction per batch of a policy's rewards).

Repeated reward: ``200`` with ``applied: false`` and ``status: "already_rewarded"``
and the originally applied value; the model is not changed again. A second reward with
another value than the applied one is not applied either: ``status:
"conflicting_reward"``, the applied value in ``reward`` and the one ignored in
``ignored_reward``. A reward for an
event finalized by the sweeper (default reward or expiry) is ``409``. A finished event
stays ``done_event_retention_seconds`` so repeats are answered, then the sweeper
deletes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from bandit_core.drift import PageHinkleyConfig
from service.errors import Conflict, InvalidRequest, NotFound
from service.observability import metrics
from service.policies import Runtime
from service.schemas import ActivateResponse, RewardRequest, RewardResponse
from service.settings import Settings
from service.storage.base import LATE_SOURCE, LogSink, RewardRecord, Schedule, VersionedValue
from service.storage.state_store import EventRegistry
from service.usecases.drift_watch import DriftWatch
from service.usecases.events import EventState, PendingEvent, event_key
from service.usecases.finalizations import (
    EventAlreadyFinalError,
    Finalizations,
    ServedTally,
    contained,
    stored_event,
)
from service.usecases.policy_cache import PolicyCache


@dataclass
class Rewards:
    """The reward and activation use cases; one per process."""

    cache: PolicyCache
    store: EventRegistry  # which policy owns an event; the rest goes through the cache
    sink: LogSink
    settings: Settings
    clock: Callable[[], float] = time.time
    drift: DriftWatch = field(default_factory=DriftWatch)
    tally: ServedTally | None = None
    finalizations: Finalizations = field(init=False)

    def __post_init__(self) -> None:
        # the finalized events' time is this use case's clock, read when they finalize
        self.finalizations = Finalizations(
            self.cache,
            lambda: self.clock(),
            self.settings.done_event_retention_seconds,
            self.settings.reward_batching,
            self.tally,
        )

    async def reward(self, req: RewardRequest) -> RewardResponse:
        """Apply ``req.reward`` to the served arm of ``req.event_id`` exactly once."""
        name = await self.store.event_policy(req.event_id)
        if name is None:
            raise NotFound(f"event_id {req.event_id!r} is unknown or expired", reason="event")
        runtime, _, read = await self.cache.load_versioned(name, extra=[event_key(req.event_id)])
        return await self.reward_read(name, runtime, req, read[event_key(req.event_id)])

    async def reward_read(
        self, name: str, runtime: Runtime, req: RewardRequest, stored: VersionedValue
    ) -> RewardResponse:
        """:meth:`reward` of an event of policy ``name`` whose key was just read as
        ``stored`` with ``runtime`` loaded (:meth:`PolicyCache.load_versioned`): the
        transaction assumes that read (re-read only on a conflict)."""
        event = stored_event(req.event_id, stored.data)
        if req.arm_id is not None and req.arm_id != event.arm_id:
            raise InvalidRequest(
                f"arm_id must be the served arm {event.arm_id!r} of this event, but got {req.arm_id!r}",
                ["body", "arm_id"],
            )
        low, high = runtime.info.reward_range
        if not low <= req.reward <= high:
            raise InvalidRequest(
                f"reward must lie in the policy's reward_range [{low}, {high}], but got {req.reward}",
                ["body", "reward"],
            )
        if event.pending and not event.activated:
            raise Conflict(
                f"event {req.event_id!r} was deferred and is not activated; activate it first"
            )
        try:
            applied = await self.finalizations.finalize(
                name, runtime, req.event_id, event, req.reward, EventState.REWARDED, stored=stored
            )
        except EventAlreadyFinalError as final:
            event = final.event
            if event.state is EventState.REWARDED:
                self.log_reward(name, req.event_id, event)
                same = event.reward == req.reward
                return RewardResponse(
                    event_id=req.event_id,
                    arm_id=event.arm_id,
                    reward=event.reward,
                    applied=False,
                    status="already_rewarded" if same else "conflicting_reward",
                    ignored_reward=None if same else req.reward,
                )
            raise Conflict(
                f"event {req.event_id!r} is already finalized ({event.state.value})"
            ) from None
        await self.record_final(name, req.event_id, applied, "explicit")
        return RewardResponse(
            event_id=req.event_id,
            arm_id=event.arm_id,
            reward=req.reward,
            applied=True,
            status="applied",
        )

    async def owner(self, event_id: str) -> str | None:
        """The policy that made the decision ``event_id`` (None: unknown or expired)."""
        return await self.store.event_policy(event_id)

    async def activate(self, event_id: str) -> ActivateResponse:
        """Activate a deferred event: from now on it is learned from, and its default
        reward is due ``reward_wait_seconds`` from now (its deadline, set by the commit
        that activates it: an event is never activated without it)."""
        name = await self.store.event_policy(event_id)
        if name is None:
            raise NotFound(f"event_id {event_id!r} is unknown or expired", reason="event")
        runtime, _, raw = await self.cache.load(name, extra=[event_key(event_id)])
        key = event_key(event_id)
        stored_event(event_id, raw[key])

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            ev = stored_event(event_id, values[key])
            if ev.state is EventState.REWARDED or (ev.pending and ev.activated):
                return {}
            if not ev.pending:
                raise Conflict(f"event {event_id!r} is already finalized ({ev.state.value})")
            ev.activated = True
            ev.deadline = deadline
            return {key: ev.to_json()}

        deadline = self.clock() + runtime.info.reward_wait_seconds
        due = Schedule(event_id, deadline)
        await self.cache.transact(runtime, name, [key], fn, schedule=lambda: due)
        return ActivateResponse(event_id=event_id, activated=True)

    async def record_final(
        self, name: str, event_id: str, event: PendingEvent, source: str | None
    ) -> None:
        """Once an event left ``pending`` (its commit scheduled its retention and counted
        it: ``service.usecases.events.retention_schedule``): log the applied reward
        first (the model already holds it; ``source`` ``"explicit"`` or ``"default"``,
        None for an expiry: then the rewards it held for an activation are logged as
        late), then the metrics. Never raises: the transition is done, so a failing step
        is logged and counted (``bandit_reward_record_errors_total``) and the other still
        runs; a reward the log missed is logged again when the sweeper deletes the event."""
        now = self.clock()

        def step(which: str) -> AbstractContextManager[None]:
            what = f"policy {name!r}, event {event_id!r}: recording step {which!r}"
            return contained(what, metrics.REWARD_RECORD_ERRORS, name, which)

        if source is None:
            with step("log"):
                self.log_held_rewards(name, event_id, event)
        else:
            with step("log"):
                self.log_reward(name, event_id, event)
        with step("metrics"):
            if source is None:
                metrics.EXPIRED_EVENTS.labels(name).inc()
            else:
                assert event.reward is not None  # a finalized event with a source has one
                label = metrics.arm_label(event.arm_id, self.cache.labelled_arms(name))
                metrics.count_reward(name, label, source, float(event.reward))
                if source == "default":
                    metrics.DEFAULT_REWARDS.labels(name).inc()
                runtime = self.cache.cached(name)
                config = PageHinkleyConfig() if runtime is None else runtime.info.drift_config
                response = None if runtime is None else runtime.info.drift_response
                self.drift.observe(name, float(event.reward), config, now, response)

    def log_held_rewards(self, name: str, event_id: str, event: PendingEvent) -> None:
        """Submit the rewards an expired event held for an activation that never came
        (``PendingEvent.held_rewards``) to the log as ``late``: kept, never learned."""
        for value, received_at in event.held_rewards or []:
            self.sink.submit_reward(
                RewardRecord(
                    event_id=event_id,
                    policy=name,
                    arm_id=event.arm_id,
                    value=value,
                    source=LATE_SOURCE,
                    created_at=received_at,
                )
            )

    def log_reward(self, name: str, event_id: str, event: PendingEvent) -> None:
        """Submit the reward of a finalized event to the log; safe to repeat (the log is
        idempotent on event id), which is how a reward applied by a process that died
        before logging it still reaches the log: on the client's repeat, or at the
        latest when the sweeper deletes the finished event."""
        source = "explicit" if event.state is EventState.REWARDED else "default"
        # set together by the transition out of pending into either state
        assert event.reward is not None and event.finalized_at is not None
        # the weights are the stored event's: a repeat logs the same record, which the
        # log skips as a duplicate (so its IPS terms are counted once)
        baseline_weight, random_weight = event.ips_weights or (None, None)
        self.sink.submit_reward(
            RewardRecord(
                event_id=event_id,
                policy=name,
                arm_id=event.arm_id,
                value=float(event.reward),
                source=source,
                created_at=float(event.finalized_at),
                baseline_weight=baseline_weight,
                random_weight=random_weight,
            )
        )
