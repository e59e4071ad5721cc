"""Redis :class:`~service.storage.state_store.StateStore` on ``redis.asyncio``.

Key layout: :mod:`service.storage.redis_scripts` (every key of a policy shares the hash
tag ``{<policy>}``, so a policy lives in one Redis Cluster slot and its Lua scripts
touch a single slot).

``read`` is one Lua script (one round trip) that compares versions server-side and
returns only the values that changed. ``transact`` is optimistic: one atomic read of
values and versions, ``fn`` in this process, then a Lua compare-and-set that writes
only if none of the keys' versions moved; on a conflict it retries with fresh values
after a jittered exponential backoff ("full jitter"), and raises
:class:`TransactionConflictError` after ``max_attempts``. Two transactions on disjoint
keys of one policy never conflict.

A policy's clock starts at the current time in microseconds, so versions after
``delete_policy`` and re-creation are larger than any version of the old incarnation
(unless it sustained more than a million writes a second), and caches keyed by version
across replicas never mistake an old value for a new one.

Every failure of Redis (unreachable, timeout, error reply) is raised as
:class:`StoreUnavailableError` (:func:`~service.storage.redis_errors.store_unavailable`).
Every call goes through the store's :class:`~service.storage.breaker.CircuitBreaker` when
it has one: a call that timed out counts as a failure
(:func:`~service.storage.redis_errors.no_answer`), any other outcome as an answer.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import NoScriptError

from bandit_core.errors import InvalidInputError
from service.storage.base import (
    Claim,
    EventIdTakenError,
    Schedule,
    StoreUnavailableError,
    TransactionConflictError,
    TransactionFn,
    VersionedValue,
)
from service.storage.breaker import CircuitBreaker
from service.storage.checks import check_ttl, checked_writes
from service.storage.redis_errors import no_answer, store_unavailable
from service.storage.redis_scripts import (
    CLAIM_PERIOD_SCRIPT,
    COMMIT_SCRIPT,
    DELETE_SCRIPT,
    POLICIES_KEY,
    READ_SCRIPT,
    TAKE_IDLE_SCRIPT,
    glob_literal,
    policy_prefix,
    registry_key,
    reply_text,
)
from service.storage.redis_urls import redis_client

T = TypeVar("T")


class RedisStateStore:
    """State of every policy in Redis; safe to share between app processes.

    ``url`` is a ``redis://`` / ``rediss://`` / ``unix://`` URL, or names a Redis
    Cluster or a Sentinel group (``service.storage.redis_urls``). ``max_attempts``,
    ``backoff_base`` and ``backoff_cap`` (seconds) bound the optimistic retries of
    :meth:`transact`. ``breaker``: every call goes through it (None: none does).
    """

    def __init__(
        self,
        url: str,
        *,
        socket_timeout: float = 2.0,
        max_attempts: int = 100,
        backoff_base: float = 0.0005,
        backoff_cap: float = 0.05,
        max_connections: int = 64,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        if max_attempts < 1:
            raise InvalidInputError(f"max_attempts must be >= 1, but got {max_attempts}")
        self._client = redis_client(
            url, socket_timeout=socket_timeout, max_connections=max_connections
        )
        self._redis = self._client.redis
        self._read_script = self._redis.register_script(READ_SCRIPT)
        self._commit_script = self._redis.register_script(COMMIT_SCRIPT)
        self._delete_script = self._redis.register_script(DELETE_SCRIPT)
        self._take_idle_script = self._redis.register_script(TAKE_IDLE_SCRIPT)
        self._claim_period_script = self._redis.register_script(CLAIM_PERIOD_SCRIPT)
        self._max_attempts = max_attempts
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._breaker = breaker

    @property
    def client(self) -> aioredis.Redis | RedisCluster:
        """The redis-py client this store talks through (built from the URL's options)."""
        return self._redis

    @property
    def breaker(self) -> CircuitBreaker | None:
        """The circuit breaker every call goes through, if any."""
        return self._breaker

    @property
    def commit_script_sha(self) -> str:
        """SHA1 of the compare-and-set script a transaction commits with (``EVALSHA``)."""
        return self._commit_script.sha

    async def _call(self, awaitable: Awaitable[T]) -> T:
        if self._breaker is not None:
            awaitable = self._breaker.call(awaitable, no_answer)
        return await store_unavailable(awaitable)

    async def _pipeline(
        self, queue: Callable[[Any], None], transaction: bool, raise_on_error: bool = True
    ) -> list[Any]:
        """The commands ``queue`` puts on a pipeline (MULTI/EXEC when ``transaction``;
        on a Redis Cluster only for keys of one slot), in one round trip per node."""

        async def run() -> list[Any]:
            async with self._redis.pipeline(transaction=transaction) as pipe:
                queue(pipe)
                return await pipe.execute(raise_on_error=raise_on_error)

        return await self._call(run())

    async def _read(
        self, policy: str, keys: Sequence[str], known: Mapping[str, int]
    ) -> dict[str, VersionedValue]:
        prefix = policy_prefix(policy)
        known_csv = ",".join([str(known.get(key, -1)) for key in keys])
        flat = await self._call(
            self._read_script(
                keys=[prefix + "versions", *(prefix + "k:" + k for k in keys)], args=[known_csv]
            )
        )
        out: dict[str, VersionedValue] = {}
        for i in range(0, len(flat), 3):
            version = int(flat[i + 1])
            out[keys[int(flat[i]) - 1]] = VersionedValue(version, flat[i + 2] if version else None)
        return out

    async def read(
        self, policy: str, keys: Sequence[str], known_versions: Mapping[str, int]
    ) -> dict[str, VersionedValue]:
        """Values of ``keys`` whose version differs from ``known_versions``, one round trip."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            return {}
        return await self._read(policy, keys, known_versions)

    async def transact(
        self,
        policy: str,
        keys: Sequence[str],
        fn: TransactionFn,
        assumed: Mapping[str, VersionedValue] | None = None,
        schedule: Callable[[], Schedule] | None = None,
        claim: Claim | None = None,
    ) -> dict[str, int]:
        """Optimistic read-modify-write of ``keys`` (see the module docstring). The first
        attempt takes the ``assumed`` values instead of reading those keys (one round
        trip fewer when it assumes them all); the commit checks their versions as it
        checks read ones, and does the ``schedule`` in the same script. The ``claim``
        (``SET NX``) is pipelined with the first commit."""
        keys = list(dict.fromkeys(keys))
        if not keys:
            checked_writes(keys, fn({}))
            return {}
        prefix = policy_prefix(policy)
        redis_keys = [
            prefix + "versions",
            prefix + "clock",
            prefix + "deadlines",
            prefix + "counters",
            prefix + "seen",
            *(prefix + "k:" + k for k in keys),
        ]
        wanted = set(keys)  # a fold's transaction holds a thousand keys
        assume = {k: v for k, v in (assumed or {}).items() if k in wanted}
        taken: str | None = None
        for attempt in range(self._max_attempts):
            unread = [k for k in keys if k not in assume]
            current = {**assume, **(await self._read(policy, unread, {}) if unread else {})}
            writes = checked_writes(keys, fn({k: current[k].data for k in keys}))
            if not writes:
                return {}
            args: list[Any] = [time.time_ns() // 1000, "", 0, 0, 0, 0]
            if schedule is not None:
                due = schedule()
                args[1:] = [due.event_id, due.deadline, len(due.counters)]
                for name, delta in due.counters.items():
                    args += [name, float(delta)]
                args.append(len(due.seen))
                for name, when in due.seen.items():
                    args += [name, float(when)]
                args.append(len(due.more_events))
                for event_id, deadline in due.more_events.items():
                    args += [float(deadline), event_id]
            data: list[bytes] = []
            for key in keys:
                op = "" if key not in writes else ("d" if writes[key] is None else "s")
                args += [key, current[key].version, op]
                if op == "s":
                    data.append(writes[key])  # type: ignore[arg-type]
            if claim is not None:
                refused, version = await self._claim_and_commit(
                    claim, policy, redis_keys, args + data
                )
                if refused:
                    taken = refused[0]
                claim = None
            else:
                version = int(
                    await self._call(self._commit_script(keys=redis_keys, args=args + data))
                )
            if version >= 0:
                if taken is not None:
                    raise EventIdTakenError(f"event id {taken!r} is registered already")
                return {key: version for key in writes}
            if assume:  # a wrong assumption: read everything next time, without waiting
                assume = {}
                continue
            delay = min(self._backoff_cap, self._backoff_base * 2**attempt)
            await asyncio.sleep(random.uniform(0, delay))
        raise TransactionConflictError(
            f"transaction on policy {policy!r} keys {keys} conflicted {self._max_attempts} times"
        )

    async def _claim_and_commit(
        self, claim: Claim, policy: str, keys: list[str], args: list[Any]
    ) -> tuple[list[str], int]:
        """``SET NX`` of each id of the claim and the commit script in one pipeline
        (the script by its SHA; loaded and run again if the server does not know it);
        the ids that were registered already, and the commit's version. On a Redis Cluster
        the claims' keys live in other slots, often on other nodes: they are sent
        concurrently instead (its pipelines refuse EVALSHA)."""
        check_ttl(claim.ttl_seconds)
        claim_keys = [registry_key(event_id) for event_id in claim.event_ids]
        ttl_ms = max(1, round(claim.ttl_seconds * 1000))
        replies: list[Any]
        if isinstance(self._redis, RedisCluster):
            cluster = self._redis

            async def concurrently() -> list[Any]:
                return await asyncio.gather(
                    *(cluster.set(key, policy, nx=True, px=ttl_ms) for key in claim_keys),
                    cluster.evalsha(self._commit_script.sha, len(keys), *keys, *args),
                    return_exceptions=True,
                )

            replies = await self._call(concurrently())
        else:

            def queue(pipe: Any) -> None:
                for key in claim_keys:
                    pipe.set(key, policy, nx=True, px=ttl_ms)
                pipe.evalsha(self._commit_script.sha, len(keys), *keys, *args)

            replies = await self._pipeline(queue, False, raise_on_error=False)
        *registered, version = replies
        if isinstance(version, NoScriptError):
            version = await self._call(self._commit_script(keys=keys, args=args))
        for reply in (*registered, version):
            if isinstance(reply, Exception):
                raise StoreUnavailableError(f"Redis: {type(reply).__name__}: {reply}")
        return [e for e, ok in zip(claim.event_ids, registered) if not ok], int(version)

    async def keys(self, policy: str, prefixes: Sequence[str]) -> list[str]:
        """The fields of the policy's versions hash (one per stored value) starting with
        one of ``prefixes``, read with HSCAN (no long block of the server), sorted."""
        found: list[str] = []
        cursor = 0
        match = glob_literal(prefixes[0]) + "*" if len(prefixes) == 1 else None  # filtered there
        key = policy_prefix(policy) + "versions"
        while True:
            cursor, fields = await self._call(self._redis.hscan(key, cursor, match, count=1000))
            found += [reply_text(f) for f in fields if reply_text(f).startswith(tuple(prefixes))]
            if cursor == 0:
                return sorted(found)

    async def add_counters(self, policy: str, increments: Mapping[str, float]) -> None:
        """HINCRBYFLOAT each increment, all in one MULTI/EXEC."""
        if not increments:
            return
        key = policy_prefix(policy) + "counters"

        def queue(pipe: Any) -> None:
            for name, delta in increments.items():
                pipe.hincrbyfloat(key, name, float(delta))

        await self._pipeline(queue, True)

    async def counters(self, policy: str) -> dict[str, float]:
        """All counters of ``policy``."""
        raw = await self._call(self._redis.hgetall(policy_prefix(policy) + "counters"))
        return {reply_text(name): float(value) for name, value in raw.items()}

    async def register_event(self, event_id: str, policy: str, ttl_seconds: float) -> bool:
        """``SET bandit:event:<id> <policy> NX PX <ttl>``."""
        check_ttl(ttl_seconds)
        ok = await self._call(
            self._redis.set(
                registry_key(event_id), policy, nx=True, px=max(1, round(ttl_seconds * 1000))
            )
        )
        return bool(ok)

    async def register_events(
        self, event_ids: Sequence[str], policy: str, ttl_seconds: float
    ) -> list[bool]:
        """``SET bandit:event:<id> <policy> NX PX <ttl>`` of each id, pipelined (on a
        Redis Cluster, a pipeline sends each node its own ids)."""
        check_ttl(ttl_seconds)
        ttl_ms = max(1, round(ttl_seconds * 1000))

        def queue(pipe: Any) -> None:
            for event_id in event_ids:
                pipe.set(registry_key(event_id), policy, nx=True, px=ttl_ms)

        return [bool(ok) for ok in await self._pipeline(queue, False)] if event_ids else []

    async def event_policy(self, event_id: str) -> str | None:
        """Owner of ``event_id`` unless unknown or expired."""
        raw = await self._call(self._redis.get(registry_key(event_id)))
        return None if raw is None else reply_text(raw)

    async def schedule(self, policy: str, event_id: str, deadline: float) -> None:
        """ZADD to the policy's deadline index."""
        await self._call(
            self._redis.zadd(policy_prefix(policy) + "deadlines", {event_id: deadline})
        )

    async def mark_seen(self, policy: str, seen: Mapping[str, float]) -> None:
        """ZADD the names to the policy's last-seen index."""
        if seen:
            mapping = {name: float(t) for name, t in seen.items()}
            await self._call(self._redis.zadd(policy_prefix(policy) + "seen", mapping))

    async def take_idle(self, policy: str, before: float, limit: int) -> list[str]:
        """ZRANGEBYSCORE -inf..before and ZREM of those names, in one script."""
        if limit <= 0:
            return []
        raw = await self._call(
            self._take_idle_script(keys=[policy_prefix(policy) + "seen"], args=[before, limit])
        )
        return [reply_text(name) for name in raw]

    async def forget(
        self, policy: str, seen: Sequence[str] = (), counters: Sequence[str] = ()
    ) -> None:
        """ZREM the ``seen`` names and HDEL the ``counters`` in one MULTI/EXEC."""
        prefix = policy_prefix(policy)
        if not seen and not counters:
            return

        def queue(pipe: Any) -> None:
            if seen:
                pipe.zrem(prefix + "seen", *seen)
            if counters:
                pipe.hdel(prefix + "counters", *counters)

        await self._pipeline(queue, True)

    async def unschedule(self, policy: str, event_id: str) -> None:
        """ZREM from the policy's deadline index."""
        await self._call(self._redis.zrem(policy_prefix(policy) + "deadlines", event_id))

    async def due_events(self, policy: str, now: float, limit: int) -> list[str]:
        """ZRANGEBYSCORE -inf..now, oldest first."""
        if limit <= 0:
            return []
        raw = await self._call(
            self._redis.zrangebyscore(
                policy_prefix(policy) + "deadlines", "-inf", now, start=0, num=limit
            )
        )
        return [reply_text(member) for member in raw]

    async def claim_period(self, policy: str, job: str, period: int) -> bool:
        """Compare and set the job's field of ``bandit:{p}:claimed`` in one script."""
        claimed = await self._call(
            self._claim_period_script(
                keys=[policy_prefix(policy) + "claimed"], args=[job, int(period)]
            )
        )
        return bool(claimed)

    async def list_policies(self) -> list[str]:
        """Sorted names in ``bandit:policies``."""
        raw = await self._call(self._redis.smembers(POLICIES_KEY))
        return sorted(reply_text(member) for member in raw)

    async def add_policy(self, policy: str) -> None:
        """SADD to ``bandit:policies``."""
        policy_prefix(policy)
        await self._call(self._redis.sadd(POLICIES_KEY, policy))

    async def delete_policy(self, policy: str) -> None:
        """SREM the name, then delete every key of the namespace in one script."""
        prefix = policy_prefix(policy)
        await self._call(self._redis.srem(POLICIES_KEY, policy))
        await self._call(
            self._delete_script(
                keys=[
                    prefix + s
                    for s in ("versions", "clock", "counters", "deadlines", "seen", "claimed")
                ],
                args=[prefix + "k:"],
            )
        )

    async def ping(self) -> None:
        """PING, or raise :class:`StoreUnavailableError`."""
        await self._call(self._redis.ping())

    async def close(self) -> None:
        """Close the connections (to the sentinels too)."""
        await self._client.close()
