"""The state store's roles: small protocols a use case depends on, and their union.

A use case names the narrowest role it needs (a type hint); the wiring
(``service.usecases.build_use_cases``) passes one store object, which implements them
all: :class:`~service.storage.redis_store.RedisStateStore` and
:class:`~service.storage.memory_store.InProcessStateStore`, both run against the one
contract suite ``tests/service/storage/test_state_stores.py``.

| Role | Methods | What it keeps |
|---|---|---|
| :class:`PartStore` | ``read``, ``transact``, ``keys`` | a policy's versioned parts (engine state, config, pending events), written in atomic multi-key transactions |
| :class:`EventRegistry` | ``register_event``, ``register_events``, ``event_policy`` | which policy owns an event id |
| :class:`DeadlineIndex` | ``schedule``, ``unschedule``, ``due_events`` | when the sweeper acts on each pending event |
| :class:`LastSeenIndex` | ``mark_seen``, ``take_idle``, ``forget`` | when each arm was last served or updated |
| :class:`CounterStore` | ``add_counters``, ``counters`` | a policy's float counters (``decisions``, ``pulls:<arm>``, ...) |
| :class:`PolicyDirectory` | ``list_policies``, ``add_policy``, ``delete_policy`` | which policies exist |
| :class:`PeriodClaims` | ``claim_period`` | which replica does a periodic job's period |
| :class:`StoreConnection` | ``ping``, ``breaker``, ``close`` | the connection: health, circuit breaker, release |

Key names inside a policy's namespace and the data types the methods take
(:class:`~service.storage.base.VersionedValue`, :class:`~service.storage.base.Schedule`,
:class:`~service.storage.base.Claim`) are described in :mod:`service.storage.base`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from service.storage.base import Claim, Schedule, TransactionFn, VersionedValue

if TYPE_CHECKING:
    from service.storage.breaker import CircuitBreaker


@runtime_checkable
class PartStore(Protocol):
    """Versioned key/value parts of each policy with atomic multi-key transactions."""

    async def read(
        self, policy: str, keys: Sequence[str], known_versions: Mapping[str, int]
    ) -> dict[str, VersionedValue]:
        """Return the keys whose stored version differs from ``known_versions`` (a key
        missing from ``known_versions`` is always returned), in one round trip."""
        ...

    async def transact(
        self,
        policy: str,
        keys: Sequence[str],
        fn: TransactionFn,
        assumed: Mapping[str, VersionedValue] | None = None,
        schedule: Callable[[], Schedule] | None = None,
        claim: Claim | None = None,
    ) -> dict[str, int]:
        """Atomically read ``keys``, call ``fn`` with their values and write what it
        returns (only keys among ``keys``), bumping each written key's version.

        All-or-nothing across processes: on a concurrent write to any of ``keys`` the
        whole step is retried with fresh values (``fn`` must be pure; it may run more
        than once); an exception from ``fn`` aborts with nothing written and
        propagates. Returns the new versions of the written keys.

        ``assumed``: values the caller expects some keys to hold (e.g. ``VersionedValue(0,
        None)`` for a key it is about to create); a store may give them to ``fn`` on the
        first attempt instead of reading those keys. A wrong assumption is a conflict
        like any other (the attempt is redone with fresh values), so it never changes
        the outcome, only saves a read.

        ``schedule``: called after each ``fn``; the commit does the
        :class:`~service.storage.base.Schedule` it
        returns atomically with the writes (nothing when ``fn`` writes nothing or
        raises): one round trip instead of two, and no moment where the writes are
        visible but the schedule is not.

        ``claim``: registered in the round trip of the first commit (one round trip
        instead of two). If an id was taken,
        :class:`~service.storage.base.EventIdTakenError` is raised, on
        a store that cannot make the two atomic (Redis: the registry lives outside the
        policy's hash slot) after the transaction committed: claim only ids drawn at
        random (128 bits never collide); register a client's id first.
        """
        ...

    async def keys(self, policy: str, prefixes: Sequence[str]) -> list[str]:
        """The sorted names of the policy's stored values starting with one of
        ``prefixes`` (a whole-model export lists every ``arm:``, ``user:`` and ``shared``
        part this way; not for the request path)."""
        ...


@runtime_checkable
class EventRegistry(Protocol):
    """The global registry of event ids: which policy owns each one."""

    async def register_event(self, event_id: str, policy: str, ttl_seconds: float) -> bool:
        """Record which policy owns ``event_id``; False if the id is already taken."""
        ...

    async def register_events(
        self, event_ids: Sequence[str], policy: str, ttl_seconds: float
    ) -> list[bool]:
        """:meth:`register_event` of each of ``event_ids`` in order, in one round trip:
        whether each was registered (False: taken, also by an earlier id of the list)."""
        ...

    async def event_policy(self, event_id: str) -> str | None:
        """The policy that owns ``event_id``, or None if unknown or expired."""
        ...


@runtime_checkable
class DeadlineIndex(Protocol):
    """Each policy's deadline index: event id -> when the sweeper acts on it."""

    async def schedule(self, policy: str, event_id: str, deadline: float) -> None:
        """Put ``event_id`` on the policy's deadline index (unix seconds), replacing an
        earlier deadline; a transaction's commit does the same with its
        :class:`~service.storage.base.Schedule`."""
        ...

    async def unschedule(self, policy: str, event_id: str) -> None:
        """Take ``event_id`` off the deadline index (no-op if absent)."""
        ...

    async def due_events(self, policy: str, now: float, limit: int) -> list[str]:
        """Up to ``limit`` event ids whose deadline is <= ``now``, oldest first."""
        ...


@runtime_checkable
class LastSeenIndex(Protocol):
    """Each policy's last-seen index: name (arm id) -> when it was last seen."""

    async def mark_seen(self, policy: str, seen: Mapping[str, float]) -> None:
        """Put each name of ``seen`` on the policy's last-seen index at its time (unix
        seconds), replacing an earlier time (the service names arms by id)."""
        ...

    async def take_idle(self, policy: str, before: float, limit: int) -> list[str]:
        """Atomically take up to ``limit`` names last seen at or before ``before`` off
        the last-seen index, least recently seen first, and return them (two sweepers
        never take the same name)."""
        ...

    async def forget(
        self, policy: str, seen: Sequence[str] = (), counters: Sequence[str] = ()
    ) -> None:
        """Take the ``seen`` names off the last-seen index and delete the named
        ``counters``, in one round trip (absent ones are skipped)."""
        ...


@runtime_checkable
class CounterStore(Protocol):
    """Each policy's named float counters."""

    async def add_counters(self, policy: str, increments: Mapping[str, float]) -> None:
        """Add to named float counters of the policy (e.g. ``pulls:<arm>``)."""
        ...

    async def counters(self, policy: str) -> dict[str, float]:
        """All counters of the policy."""
        ...


@runtime_checkable
class PolicyDirectory(Protocol):
    """The list of the policies that exist in the store."""

    async def list_policies(self) -> list[str]:
        """Names of the policies that exist in the store."""
        ...

    async def add_policy(self, policy: str) -> None:
        """Add ``policy`` to the list of policies."""
        ...

    async def delete_policy(self, policy: str) -> None:
        """Remove the policy from the list and delete every key of its namespace."""
        ...


@runtime_checkable
class PeriodClaims(Protocol):
    """One claim per period of a periodic job across replicas."""

    async def claim_period(self, policy: str, job: str, period: int) -> bool:
        """True for exactly one caller of ``period`` of the policy's ``job``, and only if
        no later period of that job was claimed before (a period is a number that grows
        with time, e.g. the snapshot interval since the epoch). Several replicas run the
        same periodic jobs; the one whose claim succeeds does the period's work
        (docs/operations.md, "Several replicas"). Claims go with
        :meth:`PolicyDirectory.delete_policy`."""
        ...


@runtime_checkable
class StoreConnection(Protocol):
    """The store's connection: health, circuit breaker, release."""

    async def ping(self) -> None:
        """Raise :class:`StoreUnavailableError` if the store is unreachable."""
        ...

    @property
    def breaker(self) -> CircuitBreaker | None:
        """The circuit breaker the store's calls go through (``service.storage.breaker``);
        None for a store whose calls cannot hang (in-process)."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class StateStore(
    PartStore,
    EventRegistry,
    DeadlineIndex,
    LastSeenIndex,
    CounterStore,
    PolicyDirectory,
    PeriodClaims,
    StoreConnection,
    Protocol,
):
    """Every role at once: what a store class implements and the wiring passes."""
