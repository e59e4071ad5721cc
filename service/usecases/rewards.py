"""``POST /reward`` and ``POST /events/{id}/activate``, and the one transition every
finalization goes through (:meth:`Rewards.finalize`, used by the sweeper too).

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
from dataclasses import dataclass

import numpy as np

from service import metrics
from service.errors import Conflict, InvalidRequest, NotFound
from service.policies import Runtime
from service.schemas import ActivateResponse, RewardRequest, RewardResponse
from service.settings import Settings
from service.storage.base import LogSink, RewardRecord
from service.usecases.events import EventState, PendingEvent, event_key
from service.usecases.learning_modes import APPRENTICE_METRICS_KEY, count_apprentice_event
from service.usecases.policy_cache import PolicyCache, import_stored

Outcome = Callable[[PendingEvent], tuple[float | None, EventState]]
"""What finalizing a pending event does, decided on the event as stored when the
transaction runs: the reward to apply (None: none) and the state it moves to."""


class EventAlreadyFinalError(Exception):
    """The event left ``pending`` before this transition (it happened elsewhere)."""

    def __init__(self, event: PendingEvent) -> None:
        super().__init__(event.state.value)
        self.event = event


def stored_event(event_id: str, data: bytes | None) -> PendingEvent:
    """The event stored as ``data``; 404 when it is gone (unknown or expired)."""
    if data is None:
        raise NotFound(f"event_id {event_id!r} is unknown or expired")
    return PendingEvent.from_json(data)


@dataclass
class Rewards:
    """The reward and activation use cases; one per process."""

    cache: PolicyCache
    sink: LogSink
    settings: Settings
    clock: Callable[[], float] = time.time

    async def reward(self, req: RewardRequest) -> RewardResponse:
        """Apply ``req.reward`` to the served arm of ``req.event_id`` exactly once."""
        name = await self.cache.store.event_policy(req.event_id)
        if name is None:
            raise NotFound(f"event_id {req.event_id!r} is unknown or expired")
        runtime, _, raw = await self.cache.load(name, extra=[event_key(req.event_id)])
        event = stored_event(req.event_id, raw[event_key(req.event_id)])
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
            applied = await self.finalize(
                name, runtime, req.event_id, event, lambda _ev: (req.reward, EventState.REWARDED)
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
        return await self.cache.store.event_policy(event_id)

    async def activate(self, event_id: str) -> ActivateResponse:
        """Activate a deferred event: from now on it is learned from (and its default
        reward is due ``reward_wait_seconds`` from now)."""
        name = await self.cache.store.event_policy(event_id)
        if name is None:
            raise NotFound(f"event_id {event_id!r} is unknown or expired")
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
        written = await self.cache.transact(runtime, name, [key], fn)
        if written:
            await self.cache.store.schedule(name, event_id, deadline)
        return ActivateResponse(event_id=event_id, activated=True)

    async def finalize(
        self,
        name: str,
        runtime: Runtime,
        event_id: str,
        event: PendingEvent,
        outcome: Outcome,
    ) -> PendingEvent:
        """One transaction: move a pending event to the state ``outcome(event)`` gives (the
        event as stored when the transaction runs) and, when its value is not None and
        the event learns, update the served arm's parts with it (an Apprentice event also
        counts in the loop's apprentice metrics); returns the finalized event. ``event``
        (as read before) names the arm and user whose parts are read. Raises
        :class:`EventAlreadyFinalError` if the event is no longer pending."""
        key = event_key(event_id)
        arm, user = event.arm_id, event.user_id
        parts = runtime.policy.parts_for_update(arm, user) if event.learn else []
        counted = [APPRENTICE_METRICS_KEY] if event.imitated is not None else []
        result: list[PendingEvent] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            ev = stored_event(event_id, values[key])
            if not ev.pending:
                raise EventAlreadyFinalError(ev)
            value, state = outcome(ev)
            if ev.reset_at != runtime.info.reset_at and value is not None:
                raise Conflict(
                    f"policy {name!r} was reset or reconfigured after event {event_id!r}"
                )
            now = self.clock()
            out: dict[str, bytes | None] = {}
            if value is not None and ev.learn:
                import_stored(runtime, {p: values[p] for p in parts})
                runtime.policy.add_arm(arm)
                runtime.policy.update(arm, np.asarray(ev.x), value, user_id=user)
                out.update(runtime.policy.export_parts(parts))
            if value is not None and counted and ev.imitated is not None:
                out.update(count_apprentice_event(runtime.info, values[counted[0]], ev, value, now))
            ev.state, ev.reward, ev.finalized_at = state, value, now
            out[key] = ev.to_json()
            result[:] = [ev]
            return out

        await self.cache.transact(runtime, name, [key, *parts, *counted], fn)
        if result[0].reward is not None and arm in runtime.labelled_arms:
            alpha = runtime.policy.arm_stats(arm).extras.get("alpha")
            if alpha is not None:
                metrics.LNUCB_TA_ALPHA.labels(name, arm).set(alpha)
        return result[0]

    async def record_final(
        self, name: str, event_id: str, event: PendingEvent, source: str | None
    ) -> None:
        """Once an event left ``pending``: log the applied reward first (the model already
        holds it; ``source`` ``"explicit"`` or ``"default"``, None for an expiry), then the
        retention schedule, the counters and (for an applied reward) the arm as seen."""
        now = self.clock()
        counters = {"pending": -1.0}
        if source is None:
            metrics.EXPIRED_EVENTS.labels(name).inc()
        else:
            arm, value = self.log_reward(name, event_id, event)
            label = metrics.arm_label(arm, self.cache.labelled_arms(name))
            metrics.REWARDS.labels(name, label, source).inc()
            metrics.REWARD_SUM.labels(name, label, source).inc(value)
            counters["rewards"] = 1.0
            if source == "default":
                metrics.DEFAULT_REWARDS.labels(name).inc()
                counters["default_rewards"] = 1.0
        retention = now + self.settings.done_event_retention_seconds
        seen = None if source is None else {event.arm_id: now}  # the update saw the arm
        await self.cache.store.schedule(name, event_id, retention, counters, seen)

    def log_reward(self, name: str, event_id: str, event: PendingEvent) -> tuple[str, float]:
        """Submit the reward of a finalized event to the log; safe to repeat (the log is
        idempotent on event id), which is how a reward applied by a process that died
        before logging it still reaches the log: on the client's repeat, or at the
        latest when the sweeper deletes the finished event."""
        arm, value = event.arm_id, float(event.reward)
        source = "explicit" if event.state is EventState.REWARDED else "default"
        self.sink.submit_reward(
            RewardRecord(
                event_id=event_id,
                policy=name,
                arm_id=arm,
                value=value,
                source=source,
                created_at=float(event.finalized_at),
            )
        )
        return arm, value
