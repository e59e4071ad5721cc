"""The process's cached engine policies and the store transactions that keep them honest.

State parts live in the store under the engine's part names (``arm:<id>``, ``shared``,
``user:<id>``) beside the policy's ``config``; every process keeps one
:class:`~service.policies.Runtime` per policy name and loads only the parts whose store
version changed (one round trip per decision). Every use case reads and writes policy
state through one :class:`PolicyCache`, which takes of the state store only the roles
it calls (:class:`CachedStore`); a use case that needs another role takes it itself.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from bandit_core import BasePolicy, ModelError, StateFormatError
from bandit_core.policy import ARM_PREFIX, SHARED_PART
from service.errors import NotFound, with_policy
from service.observability import metrics
from service.policies import CONFIG_KEY, Runtime, build_policy, decode_info, spec_of
from service.schemas import PolicyInfo
from service.storage.base import (
    Claim,
    Schedule,
    StoreUnavailableError,
    TransactionFn,
    VersionedValue,
)
from service.storage.state_store import CounterStore, LastSeenIndex, PartStore
from service.usecases.events import DELTA_PREFIX, EVENT_PREFIX

PULLS_PREFIX = "pulls:"  # the counter of an arm's decisions: pulls:<id>
METRICS_PREFIX = "metrics:"  # a use case's own record beside the parts (metrics:apprentice)
NOT_PARTS = (EVENT_PREFIX, METRICS_PREFIX, DELTA_PREFIX)
ARM_LISTINGS = 3  # listings of the stored arm parts per load at most (selects_every_arm)


class CachedStore(PartStore, CounterStore, LastSeenIndex, Protocol):
    """The state store's roles :class:`PolicyCache` calls: the parts and their
    transactions, the counters (the arms ever served) and the last-seen index (arms
    forgotten) (``service.storage.state_store``)."""


class PolicyRebuilding(StoreUnavailableError):
    """The store lost the policy's state and it is being rebuilt from the event log
    (:mod:`service.usecases.recovery`): a 503 to retry; decisions are served degraded
    from ``stand_in``."""

    def __init__(self, name: str, stand_in: Runtime) -> None:
        super().__init__(f"policy {name!r} is being rebuilt from the event log")
        self.stand_in = stand_in


StandIn = Callable[[str, Runtime | None], Awaitable[Runtime | None]]
"""``(name, the runtime this process had cached) -> the runtime to serve degraded
decisions from while the policy is rebuilt``, or None when the policy does not exist."""


async def no_stand_in(name: str, lost: Runtime | None) -> None:
    """The :data:`StandIn` of a cache no one rebuilds for: a policy not in the store
    does not exist."""


class ConfigWrites:
    """The config writes of this process (policy create, replace, reset) in progress or
    finished since a mark. Such a write records the config in the event log, then in the
    store, and a reset clears the store's entry before it writes the new one: a policy
    read meanwhile is in the log and not in the store without being lost
    (:meth:`service.usecases.recovery.Recovery.check` leaves it alone, and a load waits
    for the write to end: :meth:`PolicyCache.load`)."""

    def __init__(self) -> None:
        self._running: Counter[str] = Counter()
        self._ended: dict[str, asyncio.Event] = {}  # set when no write of the name runs
        self._finished: dict[str, int] = {}  # name -> the count of writes when its last ended
        self._count = 0

    def mark(self) -> int:
        """The mark to pass to :meth:`since`."""
        return self._count

    @contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """The block that writes the config of ``name`` to the event log and the store.
        It must not load ``name`` through the cache: such a load would wait for the
        block's own end (:meth:`ended`)."""
        self._running[name] += 1
        self._ended.setdefault(name, asyncio.Event())
        try:
            yield
        finally:
            self._running[name] -= 1
            if not self._running[name]:
                del self._running[name]
                self._ended.pop(name).set()
            self._count += 1
            self._finished[name] = self._count

    async def ended(self, name: str) -> bool:
        """Wait for the config writes of ``name`` in progress to end; whether there were
        any (a config found missing meanwhile was being written, not lost)."""
        ended = self._ended.get(name)
        if ended is None:
            return False
        await ended.wait()
        return True

    def since(self, mark: int) -> set[str]:
        """The names whose config write is in progress, or ended after ``mark``."""
        return set(self._running) | {n for n, end in self._finished.items() if end > mark}


def arms_of(parts: Sequence[str]) -> list[str]:
    """The arm ids among the part names ``parts``."""
    return [p[len(ARM_PREFIX) :] for p in parts if p.startswith(ARM_PREFIX)]


class PolicyCache:
    """Engine policies of this process by name, brought up to date from ``store``."""

    def __init__(self, store: CachedStore, metric_arms: int = 0) -> None:
        """``metric_arms``: how many registered arms of a policy get their own metric
        series (``Runtime.labelled_arms``; ``Settings.metrics_arm_series``)."""
        self.store = store
        self.metric_arms = metric_arms
        self._runtimes: dict[str, Runtime] = {}
        # asked when a policy's config is not in the store (set by Recovery)
        self.stand_in: StandIn = no_stand_in
        self.config_writes = ConfigWrites()

    def new_runtime(self, info: PolicyInfo) -> Runtime:
        """An engine policy for ``info`` with no state loaded yet."""
        return Runtime(
            info=info,
            policy=build_policy(spec_of(info)),
            labelled_arms=frozenset((info.arms or [])[: self.metric_arms]),
        )

    def labelled_arms(self, name: str) -> frozenset[str]:
        """The arms of the cached policy ``name`` with their own metric series (none
        when it is not cached)."""
        runtime = self._runtimes.get(name)
        return frozenset() if runtime is None else runtime.labelled_arms

    def cached(self, name: str) -> Runtime | None:
        """The cached policy ``name`` as last loaded (no store call), or None."""
        return self._runtimes.get(name)

    def forget(self, name: str) -> None:
        """Drop the cached policy ``name``: the next load rebuilds it from the store."""
        self._runtimes.pop(name, None)

    async def read(
        self, name: str, keys: Sequence[str], known: Mapping[str, int]
    ) -> dict[str, Any]:
        """``store.read`` timed in ``bandit_store_operation_duration_seconds``, counting
        an unreachable store in ``bandit_store_errors_total``."""
        start = time.perf_counter()
        try:
            return await self.store.read(name, list(keys), known)
        except StoreUnavailableError:
            metrics.STORE_ERRORS.labels("read").inc()
            raise
        finally:
            metrics.STORE_LATENCY.labels("read").observe(time.perf_counter() - start)

    async def load(
        self,
        name: str,
        parts_of: Callable[[BasePolicy], list[str]] = lambda p: [],
        extra: Sequence[str] = (),
    ) -> tuple[Runtime, list[str], dict[str, bytes | None]]:
        """Bring the cached policy ``name`` up to date for the parts ``parts_of(policy)``
        in one round trip (two when its config changed); return it, those parts and the
        raw values of the ``extra`` keys. 404 if the policy does not exist;
        :class:`PolicyRebuilding` if its config is missing from the store but the event
        log has it. A config this process is writing meanwhile is not missing: the load
        waits for the write and reads again."""
        runtime, parts, values = await self.load_versioned(name, parts_of, extra)
        return runtime, parts, {k: v.data for k, v in values.items()}

    async def load_versioned(
        self,
        name: str,
        parts_of: Callable[[BasePolicy], list[str]] = lambda p: [],
        extra: Sequence[str] = (),
    ) -> tuple[Runtime, list[str], dict[str, VersionedValue]]:
        """:meth:`load`, with the ``extra`` keys' values as read with their versions
        (version 0: absent), which a transaction over them may assume
        (:meth:`transact`'s ``assumed``: one round trip fewer)."""
        runtime = self._runtimes.get(name)
        parts = parts_of(runtime.policy) if runtime else []
        known = {p: runtime.versions[p] for p in parts if runtime and p in runtime.versions}
        if runtime is not None and runtime.config_version:
            known[CONFIG_KEY] = runtime.config_version  # the config comes back only if changed
        values = await self.read(name, [CONFIG_KEY, *extra, *parts], known)
        config = values.get(CONFIG_KEY)
        if config is None and runtime is not None and CONFIG_KEY in known:
            info = runtime.info
        elif config is None or config.data is None:
            if await self.config_writes.ended(name):  # written by this process meanwhile
                return await self.load_versioned(name, parts_of, extra)
            stand_in = await self.stand_in(name, self._runtimes.pop(name, None))
            if stand_in is None:
                raise NotFound(f"policy {name!r} does not exist", reason="policy")
            raise PolicyRebuilding(name, stand_in)
        else:
            info = decode_info(config.data)
        if runtime is None or runtime.info.revision != info.revision:
            # A concurrent load may have built this revision while we read: keep one
            # runtime per policy, or decisions made on the replaced one (its rng drawn
            # from) would be followed by decisions of a fresh rng.
            current = self._runtimes.get(name)
            if current is not None and current.info.revision == info.revision:
                runtime = current
            else:
                runtime = self.new_runtime(info)
                self._runtimes[name] = runtime
            parts = parts_of(runtime.policy)
            values.update(await self.read(name, parts, {}))
        runtime.info = info
        if config is not None:
            runtime.config_version = config.version
        _absorb(runtime, {p: values[p] for p in parts if p in values})
        if SHARED_PART in parts and runtime.policy.selects_every_arm:
            parts = await self._load_stored_arms(name, runtime, parts_of)
        absent = VersionedValue(0, None)
        return runtime, parts, {k: values.get(k, absent) for k in extra}

    async def _load_stored_arms(
        self, name: str, runtime: Runtime, parts_of: Callable[[BasePolicy], list[str]]
    ) -> list[str]:
        """Load every arm part stored for ``name`` into a policy whose selection reads
        them all (``selects_every_arm``), so that arms written only by other processes
        enter its fit; return ``parts_of(policy)`` then. Every update writes
        ``"shared"``, so the arm parts are listed (one scan of the policy's keys) only
        when its version moved since the last listing, and listed again when it moved
        during the read of the new arms (up to :data:`ARM_LISTINGS` times)."""
        for _ in range(ARM_LISTINGS):
            shared = runtime.versions.get(SHARED_PART, 0)
            if shared == runtime.arms_listed_at:
                break
            stored = await self.store.keys(name, [ARM_PREFIX])
            parts = list(dict.fromkeys([*parts_of(runtime.policy), *stored]))
            runtime.arms_listed_at = shared
            known = {p: runtime.versions[p] for p in parts if p in runtime.versions}
            _absorb(runtime, await self.read(name, parts, known))
        return parts_of(runtime.policy)

    async def known_arms(self, name: str, runtime: Runtime) -> list[str]:
        """The registered arms of ``name``, then every other arm ever served (by its
        ``pulls:<arm>`` counter), sorted."""
        counters = await self.store.counters(name)
        arms = list(runtime.info.arms or [])
        served = (k[len(PULLS_PREFIX) :] for k in counters if k.startswith(PULLS_PREFIX))
        arms += sorted(a for a in served if a not in arms)
        return arms

    async def load_all(self, name: str) -> tuple[Runtime, list[str]]:
        """The policy ``name`` with the parts of every known arm loaded, and those arms."""
        runtime, _, _ = await self.load(name)
        arms = await self.known_arms(name, runtime)
        runtime, _, _ = await self.load(name, lambda p: p.parts_for_select(arms) if arms else [])
        return runtime, arms

    async def transact(
        self,
        runtime: Runtime,
        name: str,
        keys: list[str],
        fn: TransactionFn,
        assumed: Mapping[str, VersionedValue] | None = None,
        schedule: Callable[[], Schedule] | None = None,
        claim: Claim | None = None,
    ) -> dict[str, int]:
        """``store.transact`` that keeps the cache honest. ``fn`` leaves the committed
        values in the cached policy; their versions are recorded only if no concurrent
        load replaced cached parts meanwhile, and on failure the touched parts are
        reloaded next time. Attempts redone after a conflict count in
        ``bandit_store_transaction_retries_total``; the call is timed in
        ``bandit_store_operation_duration_seconds``."""
        mark = -1
        attempts = 0

        def tracked(values: dict[str, bytes | None]) -> Mapping[str, bytes | None]:
            nonlocal mark, attempts
            attempts += 1
            out = fn(values)
            mark = runtime.absorbed
            return out

        parts = [k for k in keys if not k.startswith(NOT_PARTS) and k != CONFIG_KEY]
        start = time.perf_counter()
        try:
            versions = await self.store.transact(name, keys, tracked, assumed, schedule, claim)
        except BaseException as exc:
            if isinstance(exc, StoreUnavailableError):
                metrics.STORE_ERRORS.labels("transact").inc()
            for k in parts:
                runtime.versions.pop(k, None)
            raise
        finally:
            metrics.STORE_LATENCY.labels("transact").observe(time.perf_counter() - start)
            if attempts > 1:  # fn runs once per attempt: the others were conflicts
                metrics.TRANSACTION_RETRIES.labels(name).inc(attempts - 1)
        for k in parts:
            if k in versions and mark == runtime.absorbed:
                runtime.versions[k] = versions[k]
            else:
                runtime.versions.pop(k, None)
        return versions

    async def forget_arms(self, name: str, arms: Sequence[str]) -> list[str]:
        """Delete the stored state of ``arms`` in one transaction through the engine
        (:meth:`BasePolicy.forget_arm`: shared state that counts an arm, such as
        LNUCB-TA's totals, follows), take them off the last-seen index and delete their
        ``pulls:<id>`` counters; returns the arms that had stored state. Every process's
        cache sees the deleted parts at its next load of them (their version changed)."""
        runtime, _, _ = await self.load(name)
        policy = runtime.policy
        keys = list(dict.fromkeys(k for a in arms for k in policy.parts_for_update(a)))
        had: list[str] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            import_stored(runtime, values)
            had[:] = [a for a in arms if values.get(ARM_PREFIX + a) is not None]
            out: dict[str, bytes | None] = {}
            for arm in had:
                policy.forget_arm(arm)
                out[ARM_PREFIX + arm] = None
            rest = [k for k in keys if k not in out and values[k] is not None]
            out.update({k: v for k, v in policy.export_parts(rest).items() if v != values[k]})
            return out

        if keys:
            await self.transact(runtime, name, keys, fn)
        await self.store.forget(name, list(arms), [PULLS_PREFIX + a for a in arms])
        return had

    def drop_unstored_arms(self, name: str) -> int:
        """Drop from the cached policy ``name`` the arms not known to be stored (cold
        starts a selection made, prior state any load recreates): the cache then holds
        no more arms than the store, plus those of the requests since; returns how many."""
        runtime = self._runtimes.get(name)
        if runtime is None:
            return 0
        versions = runtime.versions
        gone = [ARM_PREFIX + a for a in runtime.policy.arm_ids if not versions.get(ARM_PREFIX + a)]
        if gone:
            runtime.policy.import_parts(dict.fromkeys(gone))
            for part in gone:
                versions.pop(part, None)
            runtime.absorbed += 1
        return len(gone)

    async def replace(self, name: str, values: Mapping[str, bytes | None]) -> None:
        """Write ``values`` (None deletes) in one transaction regardless of what was
        stored, and drop the cached policy."""
        await self.store.transact(name, list(values), lambda _values: values)
        self._runtimes.pop(name, None)


def import_stored(runtime: Runtime, parts: Mapping[str, bytes | None]) -> None:
    """Load state parts read from the store into ``runtime``'s policy. A part that fails
    its format checks (``StateFormatError``: corrupted in the store) is the service's
    fault, not the request's: it becomes a ``ModelError`` naming the policy (a 500)."""
    try:
        runtime.policy.import_parts(parts)
    except StateFormatError as exc:
        error = ModelError(f"a stored state part is corrupt: {exc}")
        raise with_policy(error, runtime.info.name) from exc


def _absorb(runtime: Runtime, values: Mapping[str, VersionedValue]) -> None:
    if values:
        import_stored(runtime, {k: v.data for k, v in values.items()})
        runtime.versions.update({k: v.version for k, v in values.items()})
        runtime.absorbed += 1
