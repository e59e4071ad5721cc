"""A pending event's stored JSON: what earlier versions wrote reads back and is written
again byte for byte (replicas of two versions share events during a rolling upgrade),
except that a finalized event keeps no row (``"x": null``: nothing reads it after the
reward); the response is stored only under a client's event id."""

from __future__ import annotations

from typing import Any

import pytest

from service.usecases.events import EventState, PendingEvent, event_key
from tests.service.conftest import POLICY, running

PENDING = (
    b'{"state":"pending","arm_id":"a","x":[0.5,-0.0,1e-300],"user_id":null,'
    b'"activated":true,"created_at":1700000000.25,"reset_at":1699999999.5,'
    b'"response":{"event_id":"e","arm_id":"a","degraded":false}}'
)
DENSE_ROW = b'"x":[0.5,-0.0,1e-300]'
NO_ROW = b'"x":null'
FINALIZED = PENDING.replace(DENSE_ROW, NO_ROW)


@pytest.mark.parametrize(
    ("data", "state", "reward"),
    [
        (PENDING, EventState.PENDING, None),
        (
            FINALIZED.replace(b'"pending"', b'"rewarded"')[:-1]
            + b',"reward":0.75,"finalized_at":1700000001.5}',
            EventState.REWARDED,
            0.75,
        ),
        (
            FINALIZED.replace(b'"pending"', b'"expired"').replace(
                b'"activated":true', b'"activated":false'
            )[:-1]
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
    assert (event.state, event.reward, event.pending) == (
        state,
        reward,
        state is EventState.PENDING,
    )
    if event.pending:
        assert event.x == [0.5, -0.0, 1e-300] and str(event.x[1]) == "-0.0"
        assert event.row().tolist() == [0.5, 0.0, 1e-300]
    else:
        assert event.x is None
    assert event.to_json() == data


def test_finalizing_appends_reward_and_time_after_the_pending_fields() -> None:
    event = PendingEvent.from_json(PENDING)
    event.state, event.reward, event.finalized_at = EventState.DEFAULTED, 0.0, 1700000003.0
    assert event.to_json() == (
        FINALIZED.replace(b'"pending"', b'"defaulted"')[:-1]
        + b',"reward":0.0,"finalized_at":1700000003.0}'
    )
    assert PendingEvent.from_json(event.to_json()).x is None


@pytest.mark.parametrize(
    "row",
    [DENSE_ROW, b'"x":{"dim":3,"indices":[0,2],"values":[0.5,1e-300],"dense":true}'],
)
def test_a_finalized_event_stored_with_its_row_is_written_without_it(row: bytes) -> None:
    """Finalized events written by earlier versions (the dense row, then its nonzeros)
    read back and are written again without the row."""
    data = PENDING.replace(b'"pending"', b'"rewarded"')[:-1] + b',"reward":1.0,"finalized_at":2.0}'
    event = PendingEvent.from_json(data.replace(DENSE_ROW, row))
    assert event.reward == 1.0 and event.to_json() == data.replace(DENSE_ROW, NO_ROW)


def test_an_event_without_a_response_round_trips_without_the_field() -> None:
    data = PENDING[: PENDING.index(b',"response"')] + b"}"
    event = PendingEvent.from_json(data)
    assert event.response is None and event.to_json() == data


@pytest.mark.anyio
async def test_only_a_client_event_id_stores_the_response(make_settings: Any) -> None:
    """A generated id is never repeated, so its stored event has no response (most of
    its bytes at K = 50); a client's id keeps it for repeats; a client sending an id the
    service generated is a 409."""
    async with running(make_settings()) as (app, http, _typed):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        body = {"policy": "p", "context": [1.0, 0.0, 0.5]}
        generated = (await http.post("/recommend", json=body)).json()
        client = await http.post("/recommend", json={**body, "event_id": "mine-1"})
        assert client.status_code == 200, client.text
        store = app.state.use_cases.store
        keys = [event_key(generated["event_id"]), event_key("mine-1")]
        stored = await store.read("p", keys, {})
        events = [PendingEvent.from_json(stored[key].data) for key in keys]
        assert events[0].response is None and events[0].request_digest is None
        assert events[1].response == client.json() and events[1].request_digest is not None
        repeat = await http.post("/recommend", json={**body, "event_id": "mine-1"})
        assert repeat.json() == client.json()
        reused = await http.post("/recommend", json={**body, "event_id": generated["event_id"]})
        assert reused.status_code == 409 and "generated" in reused.json()["detail"], reused.text
        rewarded = await http.post(
            "/reward", json={"event_id": generated["event_id"], "reward": 1.0}
        )
        assert rewarded.status_code == 200 and rewarded.json()["applied"], rewarded.text
