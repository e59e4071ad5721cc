"""Coalesced ``/recommend`` (``Settings.recommend_coalescing``, docs/performance.md
"Coalesced /recommend"): while a batch of a policy's decisions is being served, the
requests of that policy that arrive wait, and when it finishes they become the next batch
(a "group commit": no timer, and a request that finds no batch in flight is served at
once, as without).

A batch takes one store read for every candidate part it needs, one
:meth:`~bandit_core.BasePolicy.select_batch` (the decisions of one ``select`` after
another in arrival order, bit for bit), one transaction that writes, schedules and claims
every pending event, and one submission to the log writer. A request's own failure (bad
input found late, an event id in use) fails it alone. A client's ``event_id`` is
registered for the batch in one more round trip once its decision is made; one that is
taken already (a repeat, another policy's id, a concurrent request's) is served again on
its own by the plain path (:meth:`Recommender.serve_one`), which answers a repeat with
the original decision or a 409.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bandit_core import BanditError, SelectRequest, clock_at
from service.errors import Conflict
from service.observability import metrics
from service.policies import Runtime
from service.schemas import RecommendRequest
from service.storage.base import (
    Claim,
    EventIdTakenError,
    Schedule,
    StoreUnavailableError,
    VersionedValue,
)
from service.usecases.events import event_key, request_digest
from service.usecases.policy_cache import PULLS_PREFIX
from service.usecases.recommendation import (
    Recommendation,
    ServedDecision,
    recommendation_of,
)

if TYPE_CHECKING:
    from service.usecases.recommend import Recommender

Outcome = Recommendation | BaseException | None
"""A batched request's recommendation, the error it failed with, or None: serve it on its
own (a client event id the batch could not register)."""
Waiting = tuple[RecommendRequest, "asyncio.Future[Recommendation]", float]
"""A request waiting for the next batch: its future and when it was received
(``time.perf_counter``)."""


@dataclass
class Coalescer:
    """The batches of one process's :class:`Recommender`."""

    recommender: Recommender
    # policy name -> the requests waiting for the batch in flight to finish (present
    # while a batch of that policy is being served)
    waiting: dict[str, list[Waiting]] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # referenced until done

    async def recommend(self, req: RecommendRequest, received: float) -> Recommendation:
        """``req`` (received at ``received``, ``time.perf_counter``) served at once when
        no batch of its policy is in flight, else in the next batch."""
        waiting = self.waiting.get(req.policy)
        if waiting is not None:  # a batch is in flight: join the next one
            future: asyncio.Future[Recommendation] = asyncio.get_running_loop().create_future()
            waiting.append((req, future, received))
            return await future
        self.waiting[req.policy] = []
        try:
            return await self.recommender.serve_one(req, received=received)
        finally:
            self._start_next_batch(req.policy)

    def _start_next_batch(self, name: str) -> None:
        """The batch of ``name`` in flight finished: serve the requests that waited."""
        batch = self.waiting.pop(name)
        if batch:
            self.waiting[name] = []
            self._spawn(self._serve_batch(name, batch))

    def _spawn(self, work: Awaitable[None]) -> None:
        """Run ``work`` as a task of its own, referenced until it is done."""
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve_batch(self, name: str, batch: list[Waiting]) -> None:
        try:
            results = await self.serve([req for req, _, _ in batch], [t for _, _, t in batch])
        except Exception as exc:  # noqa: BLE001 -- the batch failed (no such policy...): each request did
            results = [exc] * len(batch)
        except BaseException:  # cancelled: so are the requests that waited for it
            for _, future, _ in batch:
                future.cancel()
            raise
        finally:
            self._start_next_batch(name)
        for (req, future, received), result in zip(batch, results):
            if result is None:  # served on its own, not holding up the next batch
                self._spawn(_settle(future, self.recommender.serve_one(req, received=received)))
            else:
                _resolve(future, result)

    async def serve(self, reqs: list[RecommendRequest], received: list[float]) -> list[Outcome]:
        """The outcome of each of a batch of one policy's requests, received at
        ``received`` (``time.perf_counter``)."""
        recommender = self.recommender
        cached = recommender.cache.cached(reqs[0].policy)
        if len(reqs) == 1 or cached is None or not cached.policy.batches_selections:
            alone = (recommender.serve_one(r, received=t) for r, t in zip(reqs, received))
            return await asyncio.gather(*alone, return_exceptions=True)
        runtime, candidates, degraded = await recommender.load_for_select(reqs)
        policy = runtime.policy
        if any(
            not isinstance(c, Exception) and policy.cold_start_changes_state(c.ids)
            for c in candidates
        ):
            # rare (arms new to LNUCB-TA): served one after another in order, each
            # selection redone inside its own transaction as on the plain path
            return [
                await _outcome(recommender.serve_one(r, received=t)) for r, t in zip(reqs, received)
            ]
        results: list[Outcome] = [c if isinstance(c, Exception) else None for c in candidates]
        chosen = [(i, c) for i, c in enumerate(candidates) if not isinstance(c, Exception)]
        selections = [
            SelectRequest(c.ids, c.rows, reqs[i].user_id, c.context, reqs[i].explore)
            for i, c in chosen
        ]
        now = recommender.clock()
        served: dict[int, ServedDecision] = {}
        versions: dict[tuple[Any, ...], int] = {}  # model_version by candidates and user
        with clock_at(policy, now), recommender.exploring(runtime, now):
            decisions = policy.select_batch(selections)
        for (i, c), decision in zip(chosen, decisions):
            req = reqs[i]
            if isinstance(decision, BanditError):
                results[i] = recommender.engine_error(runtime, decision)
                continue
            key = (*c.ids, req.user_id)
            if key not in versions:
                versions[key] = runtime.model_version(policy.parts_for_select(c.ids, req.user_id))
            event_id = req.event_id or secrets.token_hex(16)
            rec = recommendation_of(req, runtime, decision, event_id, versions[key], degraded)
            digest = None if req.event_id is None else request_digest(req)
            served[i] = ServedDecision(req, c, decision, rec, digest, received=received[i])
        own = {i: s for i, s in served.items() if s.req.event_id is not None}
        if own and not degraded:
            free = await recommender.event_ids.register_all(
                [s.event_id for s in own.values()], reqs[0].policy
            )
            taken = [i for i, ok in zip(own, free) if not ok]
        else:
            taken = list(own)
        for i in taken:  # served again on its own
            del served[i]
        with recommender.event_ids.held(s.event_id for i, s in own.items() if i not in taken):
            if served and not degraded:
                try:
                    unwritten = await self._store(runtime, list(served.values()), now)
                    for i, s in list(served.items()):
                        if s in unwritten:
                            del served[i]
                            results[i] = Conflict(f"event_id {s.event_id!r} is already in use")
                except StoreUnavailableError:
                    metrics.STORE_ERRORS.labels("decision").inc()
                    for s in served.values():
                        s.recommendation = s.recommendation.marked_degraded()
                except EventIdTakenError:
                    for i in list(served):
                        del served[i]
                        results[i] = Conflict("a generated event_id collided; retry")
        recommender.sink.submit_decisions([s.record(now) for s in served.values()])
        for i, s in served.items():
            if s.recommendation.degraded:
                metrics.DEGRADED_DECISIONS.labels(s.req.policy).inc()
            s.count(runtime)
            results[i] = s.recommendation
        return results

    async def _store(
        self, runtime: Runtime, served: list[ServedDecision], now: float
    ) -> list[ServedDecision]:
        """Write every pending event of ``served``, schedule their deadlines, count them
        and claim their ids, in one transaction; the events whose id turned out to be in
        use (each fails alone)."""
        recommender = self.recommender
        name = served[0].req.policy
        keys = [event_key(s.event_id) for s in served]
        written: list[ServedDecision] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            written.clear()
            out: dict[str, bytes | None] = {}
            for key, s in zip(keys, served):
                if values[key] is None:
                    out[key] = s.pending_event(runtime, now)
                    written.append(s)
            return out

        def schedule() -> Schedule:
            counters = {"decisions": float(len(written)), "pending": float(len(written))}
            seen: dict[str, float] = {}
            for s in written:
                pulls = f"{PULLS_PREFIX}{s.decision.arm_id}"
                counters[pulls] = counters.get(pulls, 0.0) + 1.0
                seen[s.decision.arm_id] = now
            deadline = now + runtime.info.reward_wait_seconds
            first, *more = [s.event_id for s in written]
            return Schedule(first, deadline, counters, seen, dict.fromkeys(more, deadline))

        # the generated ids; a client's id was registered already (register_all)
        event_ids = [s.event_id for s in served if s.req.event_id is None]
        ttl = recommender.settings.event_ttl_seconds
        claim = Claim(event_ids[0], ttl, tuple(event_ids[1:])) if event_ids else None
        assumed = dict.fromkeys(keys, VersionedValue(0, None))
        await recommender.cache.transact(runtime, name, keys, fn, assumed, schedule, claim)
        return [s for s in served if s not in written]


def _resolve(
    future: asyncio.Future[Recommendation], result: Recommendation | BaseException
) -> None:
    """Answer a waiting request with its recommendation or error (unless its client went
    away)."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


async def _settle(
    future: asyncio.Future[Recommendation], request: Awaitable[Recommendation]
) -> None:
    """Resolve ``future`` with what ``request`` answers or fails with."""
    _resolve(future, await _outcome(request))


async def _outcome(request: Awaitable[Recommendation]) -> Recommendation | BaseException:
    """The recommendation ``request`` gives, or the error it fails with."""
    try:
        return await request
    except Exception as exc:  # noqa: BLE001 -- handed to the request's own handler
        return exc
