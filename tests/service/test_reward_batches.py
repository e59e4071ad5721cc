"""Rewards of one policy applied in batches (service/usecases/finalizations.py): a batch
leaves the stored state bit for bit as one transaction per reward in the same order
leaves it, concurrent rewards are coalesced, and a failing reward fails alone. On the
embedded default and on Redis + PostgreSQL."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import numpy as np
import orjson
import pytest
import redis

from bandit_core.errors import InvalidInputError
from service.errors import Conflict, NotFound
from service.schemas import RewardRequest
from service.usecases.events import EventState, PendingEvent, event_key
from service.usecases.finalizations import EventAlreadyFinalError, Finalization
from tests.service.conftest import running

pytestmark = pytest.mark.anyio

JSON = {"bits": 3, "interactions": [["*", "*"]]}
CONTEXT = {"user": {"segment": "a", "tenure": 2}}
# name -> (policy spec, body of a /recommend with the decision index j)
POLICIES: dict[str, tuple[dict[str, Any], Any]] = {
    "linucb": (
        {"algorithm": "linucb", "dimension": 2, "params": {"alpha": 0.3}, "arms": ["a", "b", "c"]},
        lambda j: {"context": [0.5 + (j % 3) / 4, 1.0 - (j % 5) / 8]},
    ),
    "lnucb_ta": (
        {"algorithm": "lnucb_ta", "dimension": 2, "arms": ["a", "b", "c"]},
        lambda j: {"context": [0.5 + (j % 3) / 4, 1.0 - (j % 5) / 8]},
    ),
    "hybrid_shared": (
        {"algorithm": "hybrid_linucb", "features": JSON, "params": {"alpha": 0.3}},
        lambda j: {"context": CONTEXT, "arms": _items(j)},
    ),
    "hybrid_per_arm": (
        {
            "algorithm": "hybrid_linucb",
            "features": JSON,
            "params": {"alpha": 0.3, "context_dim": 9},
        },
        lambda j: {"context": CONTEXT, "arms": _items(j % 2)},
    ),
    "diag_linucb": (
        {"algorithm": "diag_linucb", "features": JSON, "params": {"alpha": 0.3}},
        lambda j: {"context": CONTEXT, "arms": _items(j)},
    ),
}


def _items(j: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"i{j}-{k}",
            "features": {"item": {"cat": ("x", "y", "z")[(j + k) % 3], "price": k + j % 4}},
        }
        for k in range(3)
    ]


async def _decide(http: Any, policy: str, body: Any, n: int) -> list[str]:
    return [event_id for event_id, _ in await _decisions(http, policy, body, n)]


async def _decisions(http: Any, policy: str, body: Any, n: int) -> list[tuple[str, str]]:
    """``(event id, served arm)`` of ``n`` decisions of ``policy``, one after the other."""
    served = []
    for j in range(n):
        r = await http.post("/recommend", json={"policy": policy, **body(j)})
        assert r.status_code == 200, r.text
        served.append((r.json()["event_id"], r.json()["arm_id"]))
    return served


async def _same_decisions(
    http: Any, policies: tuple[str, str], body: Any, n: int
) -> tuple[list[str], list[str]]:
    """The event ids of ``n`` decisions of each of two identically configured policies,
    checked to have served the same arms: each cached policy draws its tie-breaks and
    exploration from one rng stream seeded alike (service/usecases/policy_cache.py keeps
    one runtime per policy, whatever loads it concurrently)."""
    first, second = [await _decisions(http, name, body, n) for name in policies]
    assert [arm for _, arm in first] == [arm for _, arm in second]
    return [e for e, _ in first], [e for e, _ in second]


async def _stored(app: Any, policy: str, keys: list[str]) -> dict[str, bytes | None]:
    values = await app.state.use_cases.store.read(policy, keys, {})
    return {k: values[k].data for k in keys}


async def _finalization(app: Any, policy: str, event_id: str, value: float) -> Finalization:
    cache = app.state.use_cases.cache
    runtime, _, raw = await cache.load(policy, extra=[event_key(event_id)])
    event = PendingEvent.from_json(raw[event_key(event_id)]) if raw[event_key(event_id)] else None
    return Finalization(runtime, event_id, event or _nobody(), value, EventState.REWARDED)


def _nobody() -> PendingEvent:
    return PendingEvent(EventState.PENDING, "a", [], None, True, 0.0, None, {})


async def _parts(app: Any, policy: str, events: list[str]) -> list[str]:
    runtime, _, raw = await app.state.use_cases.cache.load(
        policy, extra=[event_key(e) for e in events]
    )
    arms = {PendingEvent.from_json(raw[event_key(e)]).arm_id for e in events}
    return sorted({p for a in arms for p in runtime.policy.parts_for_update(a)})


@pytest.mark.parametrize("algorithm", list(POLICIES))
async def test_a_coalesced_batch_leaves_the_state_of_one_transaction_per_reward(
    make_settings: Any, algorithm: str
) -> None:
    """Two identical policies get the same decisions; 24 concurrent rewards to one are
    coalesced (batches of more than one), the other gets them one transaction each in
    the order the batches applied them: equal stored parts, byte for byte."""
    spec, body = POLICIES[algorithm]
    n = 24
    async with running(make_settings()) as (app, http, _):
        for name in ("batched", "single"):
            assert (await http.put(f"/policies/{name}", json=spec)).status_code == 200
        batched, single = await _same_decisions(http, ("batched", "single"), body, n)
        same = dict(zip(batched, single, strict=True))
        rewards = [(j % 5) / 4 for j in range(n)]
        value_of = dict(zip(batched, rewards, strict=True))

        finalizations = app.state.use_cases.rewards.finalizations
        applied: list[list[str]] = []
        apply = finalizations.apply

        async def recording(name: str, batch: list[Finalization]) -> list[PendingEvent]:
            if name == "batched":
                applied.append([item.event_id for item in batch])
            return await apply(name, batch)

        finalizations.apply = recording
        responses = await asyncio.gather(
            *(http.post("/reward", json={"event_id": e, "reward": value_of[e]}) for e in batched)
        )
        assert all(r.status_code == 200 and r.json()["applied"] for r in responses)
        assert sorted(e for b in applied for e in b) == sorted(batched)
        assert max(map(len, applied)) > 1, applied  # concurrent rewards were coalesced

        finalizations.coalesce = False
        for event_id in (e for b in applied for e in b):  # the same order, one at a time
            r = await http.post(
                "/reward", json={"event_id": same[event_id], "reward": value_of[event_id]}
            )
            assert r.status_code == 200 and r.json()["applied"], r.text

        parts = await _parts(app, "batched", batched)
        assert parts == await _parts(app, "single", single)
        assert await _stored(app, "batched", parts) == await _stored(app, "single", parts)


async def test_a_failing_reward_fails_alone_and_the_rest_of_its_batch_commits(
    make_settings: Any,
) -> None:
    """One batch: two good rewards, the same event twice, an unknown event, an event of
    a decision made before a reset, and an event whose stored row overflows the update.
    The good ones commit (state equal to applying them alone), each other one gets its
    own error, nothing of theirs is written."""
    spec = {
        "algorithm": "linucb",
        "dimension": 2,
        "params": {"alpha": 0.3},
        "arms": ["a", "b", "c"],
    }
    body = POLICIES["linucb"][1]
    async with running(make_settings()) as (app, http, _):
        finalizations = app.state.use_cases.rewards.finalizations
        for name in ("p", "q"):  # the same decisions on both
            assert (await http.put(f"/policies/{name}", json=spec)).status_code == 200
        (
            (good1, good2, twice, overflow, stale),
            (ref1, ref2, ref_twice, _, _),
        ) = await _same_decisions(http, ("p", "q"), body, 5)
        # events no request can make: a row that overflows the update, a decision of
        # the policy before a reset
        await _edit_event(app, "p", overflow, x=[1e300, 1e300])
        await _edit_event(app, "p", stale, reset_at=12345.0)

        batch = [
            await _finalization(app, "p", good1, 0.5),
            await _finalization(app, "p", twice, 1.0),
            await _finalization(app, "p", "never-served", 1.0),
            await _finalization(app, "p", stale, 1.0),
            await _finalization(app, "p", overflow, 1.0),
            await _finalization(app, "p", twice, 0.25),
            await _finalization(app, "p", good2, 0.75),
        ]
        outcomes = await finalizations.apply("p", batch)
        assert [type(o) for o in outcomes] == [
            PendingEvent,
            PendingEvent,
            NotFound,
            Conflict,
            InvalidInputError,
            EventAlreadyFinalError,
            PendingEvent,
        ]
        assert outcomes[5].event.reward == 1.0  # the first of the two was applied
        stored = await _stored(app, "p", [event_key(e) for e in (stale, overflow, good2)])
        assert orjson.loads(stored[event_key(stale)])["state"] == "pending"
        assert orjson.loads(stored[event_key(overflow)])["state"] == "pending"
        assert orjson.loads(stored[event_key(good2)])["state"] == "rewarded"

        finalizations.coalesce = False
        for event_id, value in ((ref1, 0.5), (ref_twice, 1.0), (ref2, 0.75)):
            await finalizations.finalize(
                "q", *(await _single(app, "q", event_id)), value, EventState.REWARDED
            )
        with pytest.raises(EventAlreadyFinalError):
            await finalizations.finalize(
                "q", *(await _single(app, "q", ref_twice)), 0.25, EventState.REWARDED
            )
        parts = await _parts(app, "p", [good1, good2, twice])
        assert parts == await _parts(app, "q", [ref1, ref2, ref_twice])
        assert await _stored(app, "p", parts) == await _stored(app, "q", parts)
        # the HTTP answers of the refused ones are today's
        r = await http.post("/reward", json={"event_id": overflow, "reward": 1.0})
        assert r.status_code == 422, r.text
        r = await http.post("/reward", json={"event_id": stale, "reward": 1.0})
        assert r.status_code == 409, r.text


async def _edit_event(app: Any, policy: str, event_id: str, **fields: Any) -> None:
    key = event_key(event_id)
    event = {**orjson.loads((await _stored(app, policy, [key]))[key]), **fields}
    await app.state.use_cases.store.transact(policy, [key], lambda _v: {key: orjson.dumps(event)})


async def _single(app: Any, policy: str, event_id: str) -> tuple[Any, str, PendingEvent]:
    item = await _finalization(app, policy, event_id, 0.0)
    return item.runtime, event_id, item.event


async def test_one_reward_alone_is_one_transaction_and_the_queue_is_left_empty(
    make_settings: Any,
) -> None:
    spec, body = POLICIES["linucb"]
    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        (event_id,) = await _decide(http, "p", body, 1)
        finalizations = app.state.use_cases.rewards.finalizations
        sizes: list[int] = []
        apply = finalizations.apply

        async def recording(name: str, batch: list[Finalization]) -> list[PendingEvent]:
            sizes.append(len(batch))
            return await apply(name, batch)

        finalizations.apply = recording
        r = await http.post("/reward", json={"event_id": event_id, "reward": 1.0})
        assert r.json()["status"] == "applied" and sizes == [1]
        r = await http.post("/reward", json={"event_id": event_id, "reward": 1.0})
        assert r.json()["status"] == "already_rewarded" and sizes == [1, 1]
        assert finalizations.idle
        assert np.isfinite(
            (await http.get("/policies/p/stats")).json()["arms"][r.json()["arm_id"]]["reward_sum"]
        )


async def test_a_caller_that_stops_waiting_does_not_stall_the_queue(make_settings: Any) -> None:
    """Three concurrent finalizations: the first is applied alone, the two others queue;
    the caller of the second is cancelled while it waits. The batch still applies both
    (the cancelled caller's reward is in, as a request cut after its commit would be: a
    retry answers ``already_rewarded``), the third gets its event, the queue empties."""
    spec, body = POLICIES["linucb"]
    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        events = await _decide(http, "p", body, 3)
        finalizations = app.state.use_cases.rewards.finalizations
        items = [await _finalization(app, "p", e, 1.0) for e in events]
        tasks = [
            asyncio.create_task(
                finalizations.finalize(
                    "p", item.runtime, item.event_id, item.event, 1.0, EventState.REWARDED
                )
            )
            for item in items
        ]
        while finalizations.queued("p") < 2 and not tasks[0].done():
            await asyncio.sleep(0)
        assert finalizations.queued("p") == 2  # the first one's transaction is in flight
        tasks[1].cancel()
        first, third = await asyncio.gather(tasks[0], tasks[2])
        assert first.state is third.state is EventState.REWARDED
        assert tasks[1].cancelled() and finalizations.idle
        r = await http.post("/reward", json={"event_id": events[1], "reward": 1.0})
        assert r.json()["status"] == "already_rewarded"


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_transaction_redone_after_a_conflict_is_counted(make_settings: Any) -> None:
    """A concurrent write to a key between a transaction's read and its commit: the
    transaction is redone on fresh values, and ``/metrics`` counts one retry."""
    settings = make_settings()
    async with running(settings) as (app, http, _):
        spec, _body = POLICIES["linucb"]
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        cache = app.state.use_cases.cache
        runtime, _, _ = await cache.load("p")
        other = redis.Redis.from_url(settings.redis_url)
        seen: list[bytes | None] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if not seen:  # another writer gets in first
                other.set("bandit:{p}:k:note", b"theirs")
                other.hset("bandit:{p}:versions", "note", 1)
            seen.append(values["note"])
            return {"note": b"ours"}

        before = await _retries(http)
        await cache.transact(runtime, "p", ["note"], fn)
        assert seen == [None, b"theirs"] and await _retries(http) == before + 1


async def _retries(http: Any) -> float:
    text = (await http.get("/metrics")).text
    found = re.findall(
        r'^bandit_store_transaction_retries_total\{policy="p"\} (\S+)$', text, re.MULTILINE
    )
    return float(found[0]) if found else 0.0


@pytest.mark.parametrize("algorithm", ["linucb", "hybrid_shared"])
async def test_a_reward_assuming_a_stale_read_of_its_event_is_applied_once(
    make_settings: Any, algorithm: str
) -> None:
    """The finalizing transaction assumes the event as the reward's load read it: when
    another reward finalized the event after that read, the commit's version check fails,
    the event is read afresh, and the reward is answered as a repeat, not applied again."""
    spec, body = POLICIES[algorithm]
    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        (event_id,) = await _decide(http, "p", body, 1)
        rewards = app.state.use_cases.rewards
        key = event_key(event_id)
        runtime, _, read = await rewards.cache.load_versioned("p", extra=[key])
        assert PendingEvent.from_json(read[key].data).pending
        first = await rewards.reward(RewardRequest(event_id=event_id, reward=1.0))
        assert first.applied
        model = await _stored(app, "p", runtime.policy.parts_for_update(first.arm_id))
        request = RewardRequest(event_id=event_id, reward=0.5)
        again = await rewards.reward_read("p", runtime, request, read[key])
        assert (again.applied, again.status, again.reward) == (False, "conflicting_reward", 1.0)
        stats = (await http.get("/policies/p/stats")).json()
        assert stats["rewards"] == 1
        assert await _stored(app, "p", list(model)) == model  # the model took it once
