"""Both StateStore implementations against the same contract (Redis: the real server)."""

from __future__ import annotations

import asyncio
import multiprocessing
import struct
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bandit_core.errors import InvalidInputError
from service.storage.base import (
    Claim,
    EventIdTakenError,
    Schedule,
    StoreUnavailableError,
    TransactionConflictError,
    VersionedValue,
)
from service.storage.memory_store import InProcessStateStore
from service.storage.redis_store import RedisStateStore
from service.storage.state_store import (
    CounterStore,
    DeadlineIndex,
    EventRegistry,
    LastSeenIndex,
    PartStore,
    PeriodClaims,
    PolicyDirectory,
    StateStore,
    StoreConnection,
)
from tests.service.storage.conftest import DEPLOYMENTS, RedisDeployment, deployment

pytestmark = pytest.mark.anyio


def _int(data: bytes | None) -> int:
    return 0 if data is None else struct.unpack("<q", data)[0]


def _pack(n: int) -> bytes:
    return struct.pack("<q", n)


def _increment(key: str):
    return lambda values: {key: _pack(_int(values[key]) + 1)}


@pytest.fixture(params=["memory", *DEPLOYMENTS])
def backend(request: pytest.FixtureRequest) -> RedisDeployment | None:
    """None for the in-process store, else the Redis deployment under test."""
    return None if request.param == "memory" else deployment(request, request.param)


@pytest.fixture
async def store(backend: RedisDeployment | None) -> AsyncIterator[StateStore]:
    s: StateStore = InProcessStateStore() if backend is None else RedisStateStore(backend.url)
    yield s
    await s.close()


@pytest.fixture
async def policy(store: StateStore) -> AsyncIterator[str]:
    name = f"test-{uuid.uuid4().hex}"
    yield name
    await store.delete_policy(name)


def _redis_keys(backend: RedisDeployment, policy: str) -> list[bytes]:
    return list(backend.client().scan_iter(match=f"bandit:{{{policy}}}:*"))


async def test_read_returns_only_changed_keys(store: StateStore, policy: str) -> None:
    assert await store.read(policy, ["a", "b"], {}) == {
        "a": VersionedValue(0, None),
        "b": VersionedValue(0, None),
    }
    assert await store.read(policy, ["a", "b"], {"a": 0, "b": 0}) == {}
    versions = await store.transact(policy, ["a", "b"], lambda v: {"a": b"A1", "b": b"B1"})
    assert set(versions) == {"a", "b"} and min(versions.values()) > 0
    got = await store.read(policy, ["a", "b"], {"a": 0, "b": versions["b"]})
    assert got == {"a": VersionedValue(versions["a"], b"A1")}
    assert await store.read(policy, ["a", "b"], versions) == {}
    # writing one key bumps only that key's version, strictly upwards
    v2 = await store.transact(policy, ["a", "b"], lambda v: {"a": v["a"] + b"+"})
    assert list(v2) == ["a"] and v2["a"] > versions["a"]
    assert await store.read(policy, ["a", "b"], versions) == {"a": VersionedValue(v2["a"], b"A1+")}
    # deleting returns the key to version 0
    await store.transact(policy, ["a"], lambda v: {"a": None})
    assert await store.read(policy, ["a"], v2) == {"a": VersionedValue(0, None)}
    assert await store.read(policy, ["a"], {"a": 0}) == {}


async def test_versions_are_not_reused_after_delete_policy(store: StateStore, policy: str) -> None:
    before = await store.transact(policy, ["k"], lambda v: {"k": b"old"})
    await store.delete_policy(policy)
    assert await store.read(policy, ["k"], before) == {"k": VersionedValue(0, None)}
    after = await store.transact(policy, ["k"], lambda v: {"k": b"new"})
    assert after["k"] > before["k"]
    assert await store.read(policy, ["k"], before) == {"k": VersionedValue(after["k"], b"new")}


async def test_transaction_sees_values_and_writes_only_returned_keys(
    store: StateStore, policy: str
) -> None:
    await store.transact(policy, ["x", "y"], lambda v: {"x": b"1", "y": b"2"})
    seen: list[dict[str, bytes | None]] = []

    def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        seen.append(dict(values))
        return {"y": values["x"] + values["y"]}

    await store.transact(policy, ["x", "y", "z"], fn)
    assert seen == [{"x": b"1", "y": b"2", "z": None}]
    got = await store.read(policy, ["x", "y", "z"], {})
    assert {k: v.data for k, v in got.items()} == {"x": b"1", "y": b"12", "z": None}


async def test_wrong_assumption_is_redone_with_fresh_values(store: StateStore, policy: str) -> None:
    # Right: the key is absent as assumed, the first attempt commits.
    seen: list[dict[str, bytes | None]] = []

    def append(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        seen.append(dict(values))
        return {"e": (values["e"] or b"") + b"+"}

    first = await store.transact(policy, ["e"], append, {"e": VersionedValue(0, None)})
    assert seen == [{"e": None}]
    # Wrong: "e" exists now; whatever fn saw first, what commits is built on b"+".
    seen.clear()
    second = await store.transact(policy, ["e"], append, {"e": VersionedValue(0, None)})
    assert seen[-1] == {"e": b"+"} and second["e"] > first["e"]
    assert await store.read(policy, ["e"], first) == {"e": VersionedValue(second["e"], b"++")}
    # A stale version with the right bytes is as wrong as wrong bytes.
    seen.clear()
    await store.transact(policy, ["e"], append, {"e": VersionedValue(first["e"], b"++")})
    assert seen[-1] == {"e": b"++"}
    got = await store.read(policy, ["e"], {})
    assert got["e"].data == b"+++"


async def test_exception_in_fn_aborts_with_nothing_written(store: StateStore, policy: str) -> None:
    first = await store.transact(policy, ["x"], lambda v: {"x": b"keep"})

    def boom(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        raise RuntimeError("model update failed")

    with pytest.raises(RuntimeError, match="model update failed"):
        await store.transact(policy, ["x", "new"], boom)
    assert await store.read(policy, ["x", "new"], {**first, "new": 0}) == {}


@pytest.mark.parametrize(
    ("writes", "match"),
    [
        ({"other": b"v"}, r"writes must be among keys \['x'\], but got \['other'\]"),
        ({"x": "text"}, r"value for 'x' must be bytes or None, but got str"),
    ],
)
async def test_invalid_writes_abort(
    store: StateStore, policy: str, writes: dict, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        await store.transact(policy, ["x"], lambda v: writes)
    assert await store.read(policy, ["x", "other"], {"x": 0, "other": 0}) == {}


async def test_concurrent_tasks_lose_no_update(store: StateStore, policy: str) -> None:
    async def worker() -> None:
        for _ in range(25):
            await store.transact(policy, ["n"], _increment("n"))

    await asyncio.gather(*(worker() for _ in range(8)))
    assert _int((await store.read(policy, ["n"], {}))["n"].data) == 200


async def test_counters(store: StateStore, policy: str) -> None:
    assert await store.counters(policy) == {}
    await store.add_counters(policy, {"pulls:a": 1, "reward_sum:a": 0.25})
    await asyncio.gather(
        *(store.add_counters(policy, {"pulls:a": 1, "pulls:b": 2}) for _ in range(10))
    )
    assert await store.counters(policy) == {"pulls:a": 11.0, "pulls:b": 20.0, "reward_sum:a": 0.25}


async def test_one_claim_per_period_and_never_backwards(store: StateStore, policy: str) -> None:
    claims = await asyncio.gather(*(store.claim_period(policy, "job", 5) for _ in range(10)))
    assert sorted(claims) == [False] * 9 + [True]
    assert await store.claim_period(policy, "job", 4) is False  # an earlier period: too late
    assert await store.claim_period(policy, "other-job", 4) is True
    assert await store.claim_period(policy, "job", 6) is True
    assert await store.claim_period(f"{policy}-2", "job", 6) is True  # per policy
    await store.delete_policy(policy)
    await store.delete_policy(f"{policy}-2")
    assert await store.claim_period(policy, "job", 6) is True  # the claims went with it
    await store.delete_policy(policy)


async def test_event_registry_is_first_come_and_expires(
    store: StateStore, policy: str, backend: RedisDeployment | None
) -> None:
    event = uuid.uuid4().hex
    assert await store.event_policy(event) is None
    assert await store.register_event(event, policy, ttl_seconds=0.3) is True
    assert await store.register_event(event, "someone-else", ttl_seconds=10) is False
    assert await store.event_policy(event) == policy
    await asyncio.sleep(0.45)
    assert await store.event_policy(event) is None
    assert await store.register_event(event, "someone-else", ttl_seconds=10) is True
    assert await store.event_policy(event) == "someone-else"
    if backend is not None:
        backend.client().delete(f"bandit:event:{event}")


async def test_registering_many_events_is_first_come_in_list_order(
    store: StateStore, policy: str, backend: RedisDeployment | None
) -> None:
    """On every deployment (a cluster spreads the ids over its nodes): taken ids, also
    one repeated within the list, are refused; the others are the policy's."""
    ids = [uuid.uuid4().hex for _ in range(12)]
    assert await store.register_event(ids[3], "someone-else", ttl_seconds=10) is True
    registered = await store.register_events([*ids, ids[5]], policy, ttl_seconds=10)
    assert registered == [i != 3 for i in range(12)] + [False]
    assert [await store.event_policy(e) for e in ids] == [
        "someone-else" if i == 3 else policy for i in range(12)
    ]
    assert await store.register_events([], policy, ttl_seconds=10) == []
    if backend is not None:
        backend.client().delete(*(f"bandit:event:{e}" for e in ids))


# Azure's event ids: any characters; the braces would pick a Redis Cluster hash tag, and
# each pair here is one a naive escape of braces or of '%' would merge into one key.
ODD_EVENT_IDS = ["a{b}", "a%7Bb%7D", "a%257Bb%257D", "{}", "}{", "u@x|s/42 #?&+", "ü日本", "a:b"]


async def test_event_ids_of_any_characters_keep_apart(
    store: StateStore, policy: str, backend: RedisDeployment | None
) -> None:
    """Registered, stored and read back each under its own key, exactly; on Redis no
    registry key holds a brace (no hash tag an id chooses)."""
    run = uuid.uuid4().hex
    ids = [run + e for e in ODD_EVENT_IDS]
    assert await store.register_events(ids, policy, ttl_seconds=10) == [True] * len(ids)
    assert [await store.event_policy(e) for e in ids] == [policy] * len(ids)
    assert await store.register_event(ids[1], "someone-else", ttl_seconds=10) is False
    keys = [f"event:{e}" for e in ids]
    await store.transact(policy, keys, lambda _values: {k: k.encode() for k in keys})
    stored = await store.read(policy, keys, {})
    assert {k: v.data for k, v in stored.items()} == {k: k.encode() for k in keys}
    if backend is not None:
        client = backend.client()
        registry = [k for k in client.scan_iter(match=f"bandit:event:{run}*", count=1000)]
        assert len(registry) == len(ids)
        assert not any(b"{" in k or b"}" in k for k in registry)
        client.delete(*registry)


@pytest.mark.parametrize("ttl", [0, -1.0, float("inf"), float("nan")])
async def test_event_ttl_must_be_positive(store: StateStore, policy: str, ttl: float) -> None:
    with pytest.raises(InvalidInputError, match="ttl_seconds must be a finite number > 0"):
        await store.register_event(uuid.uuid4().hex, policy, ttl)


async def test_deadline_index(store: StateStore, policy: str) -> None:
    now = time.time()
    await store.schedule(policy, "late", now + 60)
    await store.schedule(policy, "b", now - 5)
    await store.schedule(policy, "a", now - 5)
    await store.schedule(policy, "first", now - 10)
    assert await store.due_events(policy, now, limit=10) == ["first", "a", "b"]
    assert await store.due_events(policy, now, limit=2) == ["first", "a"]
    await store.unschedule(policy, "first")
    await store.unschedule(policy, "never-scheduled")
    await store.schedule(policy, "b", now + 120)  # rescheduling moves it
    assert await store.due_events(policy, now, limit=10) == ["a"]
    assert await store.due_events(policy, now + 100, limit=10) == ["a", "late"]
    assert await store.due_events(policy, now, limit=0) == []


async def test_transaction_does_its_schedule_with_the_commit(
    store: StateStore, policy: str
) -> None:
    now = time.time()
    served: list[str] = []

    def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        served.append("b")  # what the schedule counts is decided by fn
        return {"event:1": b"pending"}

    def schedule() -> Schedule:
        return Schedule("1", now - 1, {"pending": 1.0, f"pulls:{served[-1]}": 1.0})

    versions = await store.transact(policy, ["event:1"], fn, schedule=schedule)
    got = await store.read(policy, ["event:1"], {})
    assert got == {"event:1": VersionedValue(versions["event:1"], b"pending")}
    assert await store.due_events(policy, now, limit=10) == ["1"]
    assert await store.counters(policy) == {"pending": 1.0, "pulls:b": 1.0}

    # fn raising, or writing nothing: nothing is scheduled or counted either
    def boom(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        raise RuntimeError("abort")

    never = lambda: Schedule("2", now - 1, {"pending": 1.0})
    with pytest.raises(RuntimeError):
        await store.transact(policy, ["event:2"], boom, schedule=never)
    assert await store.transact(policy, ["event:2"], lambda v: {}, schedule=never) == {}
    assert await store.due_events(policy, now, limit=10) == ["1"]
    assert await store.counters(policy) == {"pending": 1.0, "pulls:b": 1.0}


async def test_last_seen_index(store: StateStore, policy: str) -> None:
    await store.mark_seen(policy, {"b": 20.0, "a": 20.0, "old": 10.0, "new": 40.0})
    await store.schedule(policy, "e", 99.0)
    await store.add_counters(policy, {"pulls:x": 1.0})
    await store.mark_seen(policy, {"x": 15.0})
    await store.mark_seen(policy, {"new": 30.0})  # a later time replaces the earlier one
    await store.mark_seen(policy, {"seen-again": 5.0})
    await store.mark_seen(policy, {"seen-again": 50.0})
    assert await store.take_idle(policy, 20.0, limit=3) == ["old", "x", "a"]
    # taken names are off the index: a second sweeper never gets them
    assert await store.take_idle(policy, 20.0, limit=10) == ["b"]
    assert await store.take_idle(policy, 20.0, limit=10) == []
    assert await store.take_idle(policy, 100.0, limit=0) == []
    await store.forget(policy, seen=["new", "never-seen"], counters=["pulls:x", "pulls:none"])
    assert await store.take_idle(policy, 100.0, limit=10) == ["seen-again"]
    assert await store.counters(policy) == {}
    assert await store.due_events(policy, 100.0, 10) == ["e"]


async def test_transaction_marks_its_schedule_seen(store: StateStore, policy: str) -> None:
    def schedule() -> Schedule:
        return Schedule("1", 99.0, {"pulls:a": 1.0}, seen={"a": 10.0, "b": 11.0})

    await store.transact(policy, ["event:1"], lambda v: {"event:1": b"p"}, schedule=schedule)
    # nothing written: nothing seen
    later = lambda: Schedule("2", 99.0, seen={"c": 1.0})
    assert await store.transact(policy, ["event:2"], lambda v: {}, schedule=later) == {}
    assert await store.take_idle(policy, 100.0, limit=10) == ["a", "b"]


async def test_transaction_claims_its_event_id(store: StateStore, policy: str) -> None:
    eid = uuid.uuid4().hex
    first = lambda v: {"event:1": b"pending"}
    await store.transact(policy, ["event:1"], first, claim=Claim(eid, 60))
    assert await store.event_policy(eid) == policy
    assert (await store.read(policy, ["event:1"], {}))["event:1"].data == b"pending"
    with pytest.raises(EventIdTakenError):
        await store.transact(policy, ["event:2"], lambda v: {"event:2": b"x"}, claim=Claim(eid, 9))
    assert await store.event_policy(eid) == policy  # still the first owner's


async def test_one_transaction_schedules_and_claims_several_events(
    store: StateStore, policy: str
) -> None:
    """A coalesced batch of decisions (docs/performance.md): one commit writes every
    event, puts each on the deadline index and registers each id."""
    ids = [uuid.uuid4().hex for _ in range(3)]
    keys = [f"event:{e}" for e in ids]

    def schedule() -> Schedule:
        more = {ids[1]: 2.0, ids[2]: 3.0}
        return Schedule(ids[0], 1.0, {"pending": 3.0}, seen={"a": 1.0}, more_events=more)

    claim = Claim(ids[0], 60, more_ids=tuple(ids[1:]))
    write = lambda v: dict.fromkeys(keys, b"pending")
    versions = await store.transact(policy, keys, write, schedule=schedule, claim=claim)
    assert sorted(versions) == sorted(keys)
    assert await store.due_events(policy, 10.0, 10) == ids
    assert await store.counters(policy) == {"pending": 3.0}
    assert [await store.event_policy(e) for e in ids] == [policy] * 3
    taken = Claim(uuid.uuid4().hex, 60, more_ids=(ids[1],))
    with pytest.raises(EventIdTakenError, match=ids[1]):
        await store.transact(policy, ["event:x"], lambda v: {"event:x": b"x"}, claim=taken)


async def test_policies_and_delete_policy(
    store: StateStore, policy: str, backend: RedisDeployment | None
) -> None:
    await store.add_policy(policy)
    await store.add_policy(policy)
    assert (await store.list_policies()).count(policy) == 1
    await store.transact(policy, ["arm:1", "shared"], lambda v: {"arm:1": b"s", "shared": b"t"})
    await store.add_counters(policy, {"pulls:1": 1})
    await store.schedule(policy, "e", 1.0)
    await store.mark_seen(policy, {"1": 1.0})
    await store.claim_period(policy, "job", 1)
    if backend is not None:
        # 2 values, versions, clock, counters, deadlines, seen, claimed
        assert len(_redis_keys(backend, policy)) == 8
    await store.delete_policy(policy)
    assert policy not in await store.list_policies()
    assert await store.read(policy, ["arm:1", "shared"], {"arm:1": 0, "shared": 0}) == {}
    assert await store.counters(policy) == {}
    assert await store.due_events(policy, 2.0, 10) == []
    assert await store.take_idle(policy, 2.0, 10) == []
    if backend is not None:
        assert _redis_keys(backend, policy) == []


async def test_ping(store: StateStore) -> None:
    await store.ping()


ROLES = (
    PartStore,
    EventRegistry,
    DeadlineIndex,
    LastSeenIndex,
    CounterStore,
    PolicyDirectory,
    PeriodClaims,
    StoreConnection,
)


async def test_store_implements_every_role(store: StateStore) -> None:
    """The store has the methods of each role (service/storage/state_store.py)."""
    for role in ROLES:
        assert isinstance(store, role), role.__name__


ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from("abc"), st.binary(max_size=8)),
        st.tuples(st.just("del"), st.sampled_from("abc")),
        st.tuples(st.just("swap"), st.just("a"), st.just("b")),
        st.tuples(st.just("drop")),
    ),
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_both_stores_agree_on_any_sequence_of_writes(
    redis_deployment: RedisDeployment, sequence: list[tuple]
) -> None:
    """Same data after every step; version 0 exactly for missing keys; a written key's
    version only grows; an unchanged key keeps its version."""

    async def run(store: StateStore, policy: str) -> list[dict[str, bytes | None]]:
        seen: list[dict[str, bytes | None]] = []
        last: dict[str, int] = {}
        for op in sequence:
            if op[0] == "set":
                await store.transact(policy, [op[1]], lambda v, op=op: {op[1]: op[2]})
            elif op[0] == "del":
                await store.transact(policy, [op[1]], lambda v, op=op: {op[1]: None})
            elif op[0] == "swap":
                await store.transact(policy, ["a", "b"], lambda v: {"a": v["b"], "b": v["a"]})
            else:
                await store.delete_policy(policy)
            got = await store.read(policy, ["a", "b", "c"], {})
            for key, value in got.items():
                assert (value.version == 0) == (value.data is None)
                if value.version and op[0] != "drop" and key in op[1:2]:
                    assert value.version > last.get(key, 0)
                elif value.version and key not in op[1:]:
                    assert value.version == last.get(key, value.version)
                last[key] = value.version
            seen.append({k: v.data for k, v in got.items()})
        await store.delete_policy(policy)
        await store.close()
        return seen

    name = f"test-{uuid.uuid4().hex}"
    memory = asyncio.run(run(InProcessStateStore(), name))
    assert asyncio.run(run(RedisStateStore(redis_deployment.url), name)) == memory


# --- Redis only -----------------------------------------------------------------------


async def test_redis_keys_share_the_policy_hash_tag(redis_deployment: RedisDeployment) -> None:
    store = RedisStateStore(redis_deployment.url)
    policy = f"test-{uuid.uuid4().hex}"
    try:
        await store.transact(policy, ["arm:7"], lambda v: {"arm:7": b"x"})
        await store.add_counters(policy, {"pulls:7": 1})
        keys = sorted(k.decode() for k in _redis_keys(redis_deployment, policy))
        prefix = f"bandit:{{{policy}}}:"
        assert keys == [prefix + s for s in ("clock", "counters", "k:arm:7", "versions")]
        client = redis_deployment.client()
        assert client.hgetall(prefix + "versions").keys() == {b"arm:7"}
    finally:
        await store.delete_policy(policy)
        await store.close()


async def test_redis_commit_retries_when_another_writer_interleaves(
    redis_deployment: RedisDeployment,
) -> None:
    store = RedisStateStore(redis_deployment.url)
    other = RedisStateStore(redis_deployment.url)
    policy = f"test-{uuid.uuid4().hex}"
    calls: list[int] = []
    try:
        await store.transact(policy, ["n", "m"], lambda v: {"n": _pack(10), "m": _pack(0)})
        sync_other = redis_deployment.client()
        commit_sha = other.commit_script_sha

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            calls.append(_int(values["n"]))
            if len(calls) == 1:  # a write to "n" by another process lands after our read
                version = int(sync_other.hget(f"bandit:{{{policy}}}:versions", "n"))
                prefix = f"bandit:{{{policy}}}:"
                sync_other.evalsha(
                    commit_sha,
                    6,
                    prefix + "versions",
                    prefix + "clock",
                    prefix + "deadlines",
                    prefix + "counters",
                    prefix + "seen",
                    prefix + "k:n",
                    0,
                    "",  # nothing to schedule
                    0,
                    0,  # no counters
                    0,  # no seen names
                    0,  # no more events
                    "n",
                    version,
                    "s",
                    _pack(100),
                )
            return {"m": _pack(_int(values["n"]))}

        await store.transact(policy, ["n", "m"], fn)
        assert calls == [10, 100]  # retried with the fresh value of the key it only read
        got = await store.read(policy, ["n", "m"], {})
        assert (_int(got["n"].data), _int(got["m"].data)) == (100, 100)
    finally:
        await store.delete_policy(policy)
        await store.close()
        await other.close()


async def test_redis_gives_up_after_bounded_retries(redis_deployment: RedisDeployment) -> None:
    store = RedisStateStore(redis_deployment.url, max_attempts=3)
    policy = f"test-{uuid.uuid4().hex}"
    sync = redis_deployment.client()
    calls = 0
    try:

        def always_interfered(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            nonlocal calls
            calls += 1
            sync.hincrby(f"bandit:{{{policy}}}:versions", "n", 1)
            return {"n": b"lost"}

        with pytest.raises(TransactionConflictError, match=r"conflicted 3 times"):
            await store.transact(policy, ["n"], always_interfered)
        assert calls == 3
        assert sync.get(f"bandit:{{{policy}}}:k:n") is None
    finally:
        await store.delete_policy(policy)
        await store.close()


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("redis://127.0.0.1:1/0", "ConnectionError"),
        ("redis+cluster://127.0.0.1:1,127.0.0.1:2", "RedisClusterException"),
        ("redis+sentinel://127.0.0.1:1/mymaster", "MasterNotFoundError"),
    ],
)
async def test_unreachable_redis_raises_store_unavailable(url: str, error: str) -> None:
    store = RedisStateStore(url, socket_timeout=0.5)
    calls = [
        store.ping(),
        store.read("p", ["a"], {}),
        store.transact("p", ["a"], lambda v: {"a": b"x"}),
        store.add_counters("p", {"c": 1}),
        store.register_event("e", "p", 5),
        store.due_events("p", 0.0, 5),
    ]
    for call in calls:
        with pytest.raises(StoreUnavailableError, match=f"Redis: {error}"):
            await call
    await store.close()


@pytest.mark.parametrize("bad", ["", "a{b", "x}"])
async def test_redis_rejects_policy_names_that_break_the_hash_tag(bad: str) -> None:
    store = RedisStateStore("redis://127.0.0.1:6379/0")  # refused before any call
    with pytest.raises(InvalidInputError, match="policy must be a non-empty name without braces"):
        await store.read(bad, ["a"], {})
    await store.close()


def _hammer(url: str, policy: str, tasks: int, increments: int) -> None:
    async def main() -> None:
        store = RedisStateStore(url)

        async def worker() -> None:
            for _ in range(increments):
                await store.transact(policy, ["arm:hot"], _increment("arm:hot"))

        await asyncio.gather(*(worker() for _ in range(tasks)))
        await store.close()

    asyncio.run(main())


def test_two_processes_lose_no_update_on_one_key(redis_deployment: RedisDeployment) -> None:
    """2 processes x 4 tasks x 250 increments of one key through transact end at 2000."""
    policy = f"test-{uuid.uuid4().hex}"
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_hammer, args=(redis_deployment.url, policy, 4, 250)) for _ in range(2)
    ]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=50)
        assert [p.exitcode for p in procs] == [0, 0]
        value = redis_deployment.client().get(f"bandit:{{{policy}}}:k:arm:hot")
        assert _int(value) == 2000
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        asyncio.run(_delete(redis_deployment.url, policy))


async def _delete(url: str, policy: str) -> None:
    store = RedisStateStore(url)
    await store.delete_policy(policy)
    await store.close()


async def test_keys_lists_the_stored_values_by_prefix(store: StateStore, policy: str) -> None:
    assert await store.keys(policy, ["arm:"]) == []
    names = [f"arm:{i}" for i in range(1500)] + ["shared", "user:u", "event:e"]  # > one HSCAN page
    await store.transact(policy, names, lambda _values: dict.fromkeys(names, b"x"))
    assert await store.keys(policy, ["arm:"]) == sorted(f"arm:{i}" for i in range(1500))
    assert await store.keys(policy, ["shared", "user:"]) == ["shared", "user:u"]
    await store.transact(policy, ["arm:7"], lambda _values: {"arm:7": None})
    assert "arm:7" not in await store.keys(policy, ["arm:"])
    # a prefix is literal, also where Redis's HSCAN MATCH pattern would read a glob
    odd = ["a*[b]?\\x", "a*[b]?\\y", "ab]?", "a-b"]
    await store.transact(policy, odd, lambda _values: dict.fromkeys(odd, b"x"))
    assert await store.keys(policy, ["a*[b]?\\"]) == sorted(odd[:2])
