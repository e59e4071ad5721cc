"""Folded model updates: the rewards of a shared model kept aside as deltas and folded
into the model in batches (docs/architecture.md, "Folded model updates").

A policy whose engine folds its updates (``BasePolicy.folds_updates``: a shared model
without per-arm parts, such as the default Personalizer loop) and whose spec sets
``model_update_interval`` does not rewrite its ``shared`` part per reward. The
transaction that finalizes an event (:mod:`service.usecases.finalizations`) writes the
event in its new state and a small *delta* under ``delta:<event id>`` (:func:`encode_delta`:
the served arm, the row's nonzeros, the reward, when it was decided and accepted)
together, so an accepted reward is durable and exactly once as before. No two rewards
write the same key, so concurrent rewards never conflict.

Every ``model_update_interval`` seconds one replica (the one whose
:meth:`~service.storage.state_store.PeriodClaims.claim_period` of the period succeeds;
another takes the next period over when it dies) folds the pending deltas: it reads the
``shared`` part and up to ``fold_max_deltas`` deltas, applies them as one rank-m update
(``BasePolicy.update_batch``, docs/algorithms.md section 8.1) in a worker thread, and
writes the part and deletes exactly those deltas in one commit. The commit checks the
version of every key it read, so a fold that raced another fold or a reset writes
nothing and is redone on fresh values (the deltas the other fold took replaced by the
next pending ones), and a writer stopped between its read and its commit leaves every
delta pending: each reward is folded once. A process that accepted
``fold_max_deltas`` deltas of a policy since its last fold folds at once.

Decisions read the last folded model; ``bandit_model_staleness_seconds`` is how long the
oldest reward of the latest fold waited for it, ``bandit_folds_total`` counts the folds
committed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import orjson

from bandit_core import BanditError
from bandit_core.parts import SHARED_PART
from service.errors import NotFound
from service.observability import metrics
from service.policies import Runtime
from service.settings import Settings
from service.storage.state_store import PartStore, PeriodClaims, PolicyDirectory
from service.usecases.events import DELTA_PREFIX, PendingEvent, dumps, nonzeros
from service.usecases.periodic import every
from service.usecases.policy_cache import PolicyCache, import_stored

log = logging.getLogger("bandit.service")

FOLD_JOB = "fold"
"""The job name of the folds' period claims (``claim_period``)."""

FOLD_ATTEMPTS = 3
"""How many times a fold whose commit found its keys moved reads and computes again in a
worker thread, the last one computing on the loop (``Folds._fold_keys``)."""


class _Moved(Exception):
    """A fold's commit found keys moved since its read and deltas left to fold: aborted
    (nothing written) to be read and computed again in the thread."""


def defers_updates(runtime: Runtime) -> bool:
    """Whether the rewards of ``runtime``'s policy are kept as deltas and folded: its
    spec sets ``model_update_interval`` and its engine folds its updates."""
    return runtime.info.model_update_interval is not None and runtime.policy.folds_updates


@dataclass(frozen=True)
class Delta:
    """One accepted reward waiting for a fold: the served arm, its row (dense), the
    reward, and when the event was decided and the reward accepted (unix seconds)."""

    arm_id: str
    row: np.ndarray
    reward: float
    decided_at: float
    accepted_at: float


def encode_delta(event: PendingEvent, reward: float, accepted_at: float) -> bytes:
    """The stored delta of ``event``'s ``reward``: JSON holding the row's nonzeros only
    (a hashed JSON row is mostly zeros: about 900 bytes for the default loop's 257); the
    finalized event keeps no row, so this is the only stored copy until the fold."""
    assert event.x is not None, "a pending event's row"
    row = nonzeros(event.x)
    return dumps(
        {
            "arm_id": event.arm_id,
            "dim": int(row["dim"]),
            "indices": row["indices"],
            "values": row["values"],
            "reward": reward,
            "decided_at": event.created_at,
            "accepted_at": accepted_at,
        }
    )


def decode_delta(data: bytes) -> Delta:
    """The delta :func:`encode_delta` stored as ``data``."""
    raw = orjson.loads(data)
    row = np.zeros(int(raw["dim"]))
    row[np.asarray(raw["indices"], dtype=np.int64)] = raw["values"]
    return Delta(
        arm_id=raw["arm_id"],
        row=row,
        reward=float(raw["reward"]),
        decided_at=float(raw["decided_at"]),
        accepted_at=float(raw["accepted_at"]),
    )


class FoldedStore(PartStore, PolicyDirectory, PeriodClaims, Protocol):
    """The state store's roles the fold writer calls beside the cache: the pending deltas'
    keys, the policy list and the periods claimed (``service.storage.state_store``)."""


@dataclass
class Folds:
    """The fold writer of one process (see the module docstring)."""

    cache: PolicyCache
    store: FoldedStore
    settings: Settings
    clock: Callable[[], float] = time.time
    _accepted: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, init=False, repr=False)
    _claimed: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _looked: set[str] = field(default_factory=set, init=False, repr=False)  # folded once here
    _eager: set[asyncio.Task[int]] = field(default_factory=set, init=False, repr=False)

    def accepted(self, name: str, count: int) -> None:
        """Count ``count`` deltas of ``name`` this process wrote; at ``fold_max_deltas``
        since its last fold, fold now (in a task) rather than at the period's end."""
        total = self._accepted[name] = self._accepted.get(name, 0) + count
        if total >= self.settings.fold_max_deltas and not self._lock(name).locked():
            task = asyncio.get_running_loop().create_task(self.fold(name))
            self._eager.add(task)
            task.add_done_callback(self._eager_done)

    def _eager_done(self, task: asyncio.Task[int]) -> None:
        self._eager.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("folding the pending rewards failed: %s", task.exception())

    def _lock(self, name: str) -> asyncio.Lock:
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = asyncio.Lock()
        return lock

    async def fold(self, name: str) -> int:
        """Fold up to ``fold_max_deltas`` pending deltas of policy ``name`` into its model
        (the oldest keys first by name: any order folds the same); returns how many were
        folded. The deltas it listed that another writer folded meanwhile (two replicas
        folding at once list the same oldest keys) are replaced by the next pending ones,
        listed again, so a fold never leaves deltas waiting that it had room for."""
        async with self._lock(name):
            self._accepted[name] = 0
            runtime, _, _ = await self.cache.load(name)
            if not runtime.policy.folds_updates:
                return 0
            room, done = self.settings.fold_max_deltas, 0
            while done < room:
                keys = (await self.store.keys(name, [DELTA_PREFIX]))[: room - done]
                if not keys:
                    break
                folded = await self._fold_keys(runtime, name, keys)
                done += folded
                if folded == len(keys):
                    break
            return done

    async def _fold_keys(self, runtime: Runtime, name: str, keys: list[str]) -> int:
        """One transaction: the deltas of ``keys`` still present applied to the ``shared``
        part, which it writes, and deleted; returns how many it folded. The update is
        computed in a worker thread, on a policy of the process's own built for it, from
        the values as read, so the event loop goes on serving meanwhile; the commit
        assumes those values and writes the computed part unless a key changed since.
        Then, when deltas are left to fold, it reads and computes again in the thread, up
        to ``FOLD_ATTEMPTS`` times, the last one computing on the loop from the values
        its commit finds (so a fold always ends)."""
        for _ in range(FOLD_ATTEMPTS - 1):
            with suppress(_Moved):
                return await self._fold_once(runtime, name, keys, last=False)
        return await self._fold_once(runtime, name, keys, last=True)

    async def _fold_once(self, runtime: Runtime, name: str, keys: list[str], last: bool) -> int:
        read = await self.cache.read(name, [SHARED_PART, *keys], {})
        as_read = {k: value.data for k, value in read.items()}
        computed = await asyncio.to_thread(
            lambda: fold_values(self.cache.new_runtime(runtime.info), name, keys, as_read)
        )
        folded: list[Delta] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if values != as_read:  # another fold or a reset moved a key since the read
                if not last and any(values[k] is not None for k in keys):
                    raise _Moved  # deltas left: computed again in the thread
                folded[:], out = fold_values(runtime, name, keys, values)
                return out
            folded[:], out = computed
            if out:  # the cached policy takes the part it commits
                _add_arms(runtime, folded)
                import_stored(runtime, {SHARED_PART: out[SHARED_PART]})
            return out

        await self.cache.transact(runtime, name, [SHARED_PART, *keys], fn, assumed=read)
        if folded:
            oldest = min(d.accepted_at for d in folded)
            metrics.MODEL_STALENESS.labels(name).set(max(0.0, self.clock() - oldest))
            metrics.FOLDS.labels(name).inc()
        return len(folded)

    async def fold_pending(self, name: str) -> int:
        """Fold every delta of ``name`` pending now, batch after batch of
        ``fold_max_deltas``, so that a read of the model after it (export, snapshot,
        stats) sees every reward accepted before it; returns how many were folded. Each
        batch is one :meth:`fold`: exactly once as the periodic folds."""
        done = 0
        while (count := await self.fold(name)) > 0:
            done += count
            if count < self.settings.fold_max_deltas:
                break
        return done

    async def pending(self, name: str) -> tuple[int, float | None]:
        """How many rewards of ``name`` wait as deltas for a fold, and when the oldest of
        them was accepted (unix seconds; None: none waits)."""
        keys = await self.store.keys(name, [DELTA_PREFIX])
        if not keys:
            return 0, None
        values = await self.store.read(name, keys, {})
        accepted = [
            float(orjson.loads(data)["accepted_at"])
            for value in values.values()
            if (data := value.data) is not None
        ]
        return len(accepted), min(accepted, default=None)

    async def fold_due(self) -> int:
        """Fold every folding policy whose ``model_update_interval`` period began since
        its last fold here, when this replica claims that period; returns the rewards
        folded. A folding policy with immediate updates (no interval) is looked at once
        per process and when this process wrote deltas of it since (both: deltas
        written before it was changed to immediate updates), per
        ``sweeper_interval_seconds`` period."""
        done = 0
        now = self.clock()
        for name in await self.store.list_policies():
            with suppress(NotFound):  # deleted meanwhile
                # the cached config (the requests keep it current) or one store call
                runtime = self.cache.cached(name) or (await self.cache.load(name))[0]
                if not runtime.policy.folds_updates:
                    continue
                interval = runtime.info.model_update_interval
                if interval is None:  # immediate updates: only deltas left from before
                    if name in self._looked and not self._accepted.get(name):
                        continue
                    interval = self.settings.sweeper_interval_seconds
                self._looked.add(name)
                # the period's start in milliseconds: grows with time whatever the interval
                period = int(math.floor(now / interval) * interval * 1000)
                if period <= self._claimed.get(name, -1):
                    continue
                self._claimed[name] = period
                if await self.store.claim_period(name, FOLD_JOB, period):
                    done += await self.fold(name)
        return done

    async def run(self, stop: asyncio.Event) -> None:
        """Fold what is due every ``fold_check_seconds`` until ``stop`` is set."""
        await every(self.settings.fold_check_seconds, stop, self.fold_due, "folds")
        for task in list(self._eager):
            with suppress(Exception, asyncio.CancelledError):
                await task


def fold_values(
    runtime: Runtime, name: str, keys: list[str], values: Mapping[str, bytes | None]
) -> tuple[list[Delta], dict[str, bytes | None]]:
    """The deltas among ``keys`` present in ``values`` applied to the ``shared`` part of
    ``values`` in ``runtime``'s policy as one batch: ``(the deltas, the writes)``, the
    writes being the new part and the deltas' keys deleted (none when no delta is left)."""
    present = {k: v for k in keys if (v := values[k]) is not None}
    deltas = [decode_delta(v) for v in present.values()]
    if not deltas:
        return [], {}
    import_stored(runtime, {SHARED_PART: values[SHARED_PART]})
    _apply(runtime, name, deltas)
    out: dict[str, bytes | None] = dict(runtime.policy.export_parts([SHARED_PART]))
    out.update(dict.fromkeys(present))
    return deltas, out


def _add_arms(runtime: Runtime, deltas: list[Delta]) -> None:
    for arm in dict.fromkeys(d.arm_id for d in deltas):
        runtime.policy.add_arm(arm)


def _apply(runtime: Runtime, name: str, deltas: list[Delta]) -> None:
    """Apply ``deltas`` to the policy as one batch; when the engine refuses the
    batch (a row that overflows its statistics), one by one, leaving out (and logging)
    the ones it refuses, as a refused update leaves out its reward on the immediate path."""
    policy = runtime.policy
    _add_arms(runtime, deltas)
    try:
        policy.update_batch(
            [d.arm_id for d in deltas], [d.row for d in deltas], [d.reward for d in deltas]
        )
    except BanditError:
        for delta in deltas:
            try:
                policy.update(delta.arm_id, delta.row, delta.reward)
            except BanditError:
                log.exception("policy %r: a pending reward could not be folded; left out", name)
