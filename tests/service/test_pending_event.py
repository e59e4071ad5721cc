"""A pending event's stored JSON: what earlier versions wrote reads back and is written
again byte for byte (replicas of two versions share events during a rolling upgrade)."""

from __future__ import annotations

import pytest

from service.usecases.events import EventState, PendingEvent

PENDING = (
    b'{"state":"pending","arm_id":"a","x":[0.5,-0.0,1e-300],"user_id":null,'
    b'"activated":true,"created_at":1700000000.25,"reset_at":1699999999.5,'
    b'"response":{"event_id":"e","arm_id":"a","degraded":false}}'
)


@pytest.mark.parametrize(
    ("data", "state", "reward"),
    [
        (PENDING, EventState.PENDING, None),
        (
            PENDING.replace(b'"pending"', b'"rewarded"')[:-1]
            + b',"reward":0.75,"finalized_at":1700000001.5}',
            EventState.REWARDED,
            0.75,
        ),
        (
            PENDING.replace(b'"pending"', b'"expired"').replace(b'"activated":true', b'"activated":false')[:-1]
            + b',"reward":null,"finalized_at":1700000002.0}',
            EventState.EXPIRED,
            None,
        ),
    ],
)
def test_stored_events_round_trip_byte_for_byte(
    data: bytes, state: EventState, reward: float | None
) -> None:
    event = PendingEvent.from_json(data)
    assert (event.state, event.reward, event.pending) == (state, reward, state is EventState.PENDING)
    assert event.x == [0.5, -0.0, 1e-300] and str(event.x[1]) == "-0.0"
    assert event.to_json() == data


def test_finalizing_appends_reward_and_time_after_the_pending_fields() -> None:
    event = PendingEvent.from_json(PENDING)
    event.state, event.reward, event.finalized_at = EventState.DEFAULTED, 0.0, 1700000003.0
    assert event.to_json() == (
        PENDING.replace(b'"pending"', b'"defaulted"')[:-1]
        + b',"reward":0.0,"finalized_at":1700000003.0}'
    )
    assert PendingEvent.from_json(event.to_json()) == event
