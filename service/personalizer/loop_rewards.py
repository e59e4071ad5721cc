"""Personalizer's reward call on a loop (docs/personalizer.md, "Rewards"): how the rewards
received for one event within its reward wait become the one reward learned from.

- ``rewardAggregation: earliest``: the first reward is applied at once (the native
  ``/reward``); a repeat within the wait changes nothing.
- ``rewardAggregation: sum``: each reward received within the wait is added to the
  pending event (one transaction per reward on the event's key); the sweeper applies the
  total once when the wait ends (:meth:`service.usecases.sweeper.Sweeper`), clipped to
  the loop's reward range (the models' bounds assume it; Personalizer learned the
  unclipped sum). No reward within the wait: the default reward, as with ``earliest``.
- A reward after the wait (the event finalized with its default or summed reward,
  expired, or gone) is not learned from: it goes to the event log as a ``late`` reward
  record (the ``late_rewards`` table), in both modes.
- A reward for a deferred event not activated yet is held with the pending event
  (``PendingEvent.held_rewards``) and applied, in the order received, when the activation
  comes within the wait (:func:`apply_held_rewards`), under the aggregation above; an
  event never activated expires with its held rewards logged as ``late``, not learned.

Exactly once: the transition out of ``pending`` happens in one transaction
(:meth:`Rewards.finalize`), and a reward added to a sum is added in a transaction that
fails once the event left ``pending``.
"""

from __future__ import annotations

from collections.abc import Callable

from service.errors import Conflict, InvalidRequest, NotFound
from service.personalizer.settings import SUM, LoopSettings
from service.schemas import RewardRequest
from service.storage.base import LATE_SOURCE, RewardRecord
from service.usecases.events import EventState, PendingEvent, event_key
from service.usecases.rewards import EventAlreadyFinalError, Rewards, stored_event


def within_wait(event: PendingEvent, now: float, wait_seconds: float) -> bool:
    """Whether ``now`` is before the end of ``event``'s reward wait."""
    deadline = event.created_at + wait_seconds if event.deadline is None else event.deadline
    return now < deadline


async def reward_loop_event(rewards: Rewards, loop: str, event_id: str, value: float) -> None:
    """Take the reward ``value`` for ``event_id`` of ``loop`` under the loop's
    ``rewardAggregation`` (module docstring). A reward for an event another loop served
    is ignored; one outside the loop's reward range is a 400 naming ``value``; 404 when
    the loop does not exist."""
    owner = await rewards.owner(event_id)
    if owner is not None and owner != loop:
        return
    runtime, _, read = await rewards.cache.load_versioned(loop, extra=[event_key(event_id)])
    aggregation = LoopSettings.of(runtime.info).reward_aggregation
    stored = read[event_key(event_id)]
    data = stored.data
    event = None if owner is None or data is None else PendingEvent.from_json(data)
    low, high = runtime.info.reward_range
    if not low <= value <= high:
        raise InvalidRequest(
            f"value must lie in the loop's reward range [{low}, {high}], but got {value}",
            ["body", "value"],
        )
    if event is not None and event.pending:
        if not event.activated and await _held(rewards, loop, event_id, value):
            return
        try:
            if aggregation == SUM or event.reward_sum is not None:
                event = await _add_to_sum(rewards, loop, event_id, value)
            else:
                request = RewardRequest(event_id=event_id, reward=value)
                await rewards.reward_read(loop, runtime, request, stored)
            return
        except EventAlreadyFinalError as final:  # the wait ended meanwhile
            event = final.event
        except (NotFound, Conflict):  # finalized or gone meanwhile
            event = None
    now = rewards.clock()
    if (
        event is not None
        and event.state is EventState.REWARDED
        and event.reward_sum is None
        and within_wait(event, now, runtime.info.reward_wait_seconds)
    ):
        return  # earliest: a repeat within the wait changes nothing
    rewards.sink.submit_reward(
        RewardRecord(
            event_id=event_id,
            policy=loop,
            arm_id="" if event is None else event.arm_id,
            value=value,
            source=LATE_SOURCE,
            created_at=now,
        )
    )


async def _add_to_sum(rewards: Rewards, loop: str, event_id: str, value: float) -> PendingEvent:
    """Add ``value`` to the pending event's sum in one transaction; raises
    :class:`EventAlreadyFinalError` once the event left ``pending``."""
    runtime, _, _ = await rewards.cache.load(loop)
    key = event_key(event_id)
    result: list[PendingEvent] = []

    def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        ev = stored_event(event_id, values[key])
        if not ev.pending:
            raise EventAlreadyFinalError(ev)
        ev.reward_sum = (ev.reward_sum or 0.0) + value
        result[:] = [ev]
        return {key: ev.to_json()}

    await rewards.cache.transact(runtime, loop, [key], fn)
    return result[0]


async def _changed_event(
    rewards: Rewards, loop: str, event_id: str, change: Callable[[PendingEvent], bool]
) -> bool:
    """Run ``change`` on the stored event ``event_id`` in one transaction (again on a
    conflict) and write the event back when it answers True; whether it was written."""
    runtime, _, _ = await rewards.cache.load(loop)
    key = event_key(event_id)
    written: list[bool] = []

    def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        written.clear()
        data = values[key]
        if data is None:
            return {}
        ev = PendingEvent.from_json(data)
        if not change(ev):
            return {}
        written.append(True)
        return {key: ev.to_json()}

    await rewards.cache.transact(runtime, loop, [key], fn)
    return bool(written)


async def _held(rewards: Rewards, loop: str, event_id: str, value: float) -> bool:
    """Add ``value`` to the rewards the pending event holds for its activation; False
    (nothing held) when it was activated or finalized meanwhile."""
    now = rewards.clock()

    def hold(ev: PendingEvent) -> bool:
        if not ev.pending or ev.activated:
            return False
        ev.held_rewards = [*(ev.held_rewards or []), [value, now]]
        return True

    return await _changed_event(rewards, loop, event_id, hold)


async def apply_held_rewards(rewards: Rewards, loop: str, event_id: str) -> None:
    """Take the rewards the activated event ``event_id`` held (one transaction, so
    concurrent activations take them once) and apply them in the order received under
    the loop's ``rewardAggregation``, as if they came now."""
    taken: list[list[float]] = []

    def take(ev: PendingEvent) -> bool:
        taken.clear()
        if not ev.pending or not ev.activated or not ev.held_rewards:
            return False
        taken.extend(ev.held_rewards)
        ev.held_rewards = None
        return True

    await _changed_event(rewards, loop, event_id, take)
    for value, _received_at in taken:
        await reward_loop_event(rewards, loop, event_id, value)
