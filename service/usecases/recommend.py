"""``POST /recommend``: choose an arm for a context, store the pending event, log it.

The path of one request (:meth:`Recommender.serve_one`): a repeated client event id
answers the stored response (409 when the body differs from the original's;
:mod:`service.usecases.event_ids`); otherwise the cached policy is brought up to date for
the candidates' parts (:meth:`PolicyCache.load`, one store round trip), the engine
selects, and one transaction writes the pending event, schedules its default-reward
deadline and counts the decision. When the store is down the decision comes from the
cached policy, flagged ``degraded`` (nothing stored: it cannot be rewarded). Every
decision goes to the event-log writer. The answer is a typed
:class:`~service.usecases.recommendation.Recommendation`; the API family serializes it.

Under load the requests of a policy are coalesced into batches
(:mod:`service.usecases.recommend_batch`). Policies whose selections change state
(guardrails, HARE), requests with annotations (multi-slot) and requests whose serving
mode may not be the model's own are served each on its own, concurrently.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from bandit_core import BanditError, BasePolicy, Decision, ModelError, clock_at, exploring
from service.errors import ApiError, Conflict, EngineInputError, with_policy
from service.observability import metrics
from service.policies import Runtime
from service.schemas import RecommendRequest
from service.settings import Settings
from service.storage.base import (
    Claim,
    EventIdTakenError,
    LogSink,
    Schedule,
    StoreUnavailableError,
    VersionedValue,
)
from service.storage.state_store import EventRegistry
from service.usecases.candidates import build_candidates
from service.usecases.drift_watch import DriftWatch
from service.usecases.event_ids import EventIds
from service.usecases.events import event_key, request_digest
from service.usecases.json_features import JsonCandidates
from service.usecases.policy_cache import (
    PULLS_PREFIX,
    PolicyCache,
    PolicyRebuilding,
    arms_of,
    import_stored,
)
from service.usecases.recommend_batch import Coalescer
from service.usecases.recommendation import (
    Candidates,
    Recommendation,
    ServedDecision,
    ServingMode,
    ServingModeOf,
    recommendation_of,
)


@dataclass
class Recommender:
    """The recommend use case; one per process."""

    cache: PolicyCache
    store: EventRegistry  # a client's event ids (:mod:`service.usecases.event_ids`)
    sink: LogSink
    settings: Settings
    clock: Callable[[], float] = time.time
    drift: DriftWatch = field(default_factory=DriftWatch)
    json_candidates: JsonCandidates = field(default_factory=JsonCandidates)
    event_ids: EventIds = field(init=False)
    batches: Coalescer = field(init=False)

    def __post_init__(self) -> None:
        self.event_ids = EventIds(self.cache, self.store, self.settings)
        self.batches = Coalescer(self)

    async def recommend(
        self,
        req: RecommendRequest,
        annotations: Mapping[str, Any] | None = None,
        serving: ServingModeOf | None = None,
    ) -> Recommendation:
        """The recommendation for ``req``; coalesced with the policy's other requests
        under load (:mod:`service.usecases.recommend_batch`). ``annotations`` are fields
        an API family adds to the stored response, e.g. the slot ids a multi-slot event
        keeps on its first slot (service/personalizer/multislot.py). ``serving`` gives
        the serving mode of the request under the policy's configuration at the time of
        the decision (:class:`~service.usecases.recommendation.ServingMode`; None, or
        ``serving`` None: the model's own decision). A request with annotations, or with
        a serving mode under the policy's cached configuration (or none cached), is
        served on its own."""
        received = time.perf_counter()
        if (
            not self.settings.recommend_coalescing
            or annotations
            or (serving is not None and self._may_serve_otherwise(req.policy, serving))
        ):
            return await self.serve_one(req, annotations, serving, received)
        return await self.batches.recommend(req, received)

    def _may_serve_otherwise(self, name: str, serving: ServingModeOf) -> bool:
        """Whether ``serving`` may serve something other than the model's decision: the
        policy's cached configuration has a serving mode, or is not cached yet."""
        cached = self.cache.cached(name)
        return cached is None or serving(cached.info) is not None

    async def serve_one(
        self,
        req: RecommendRequest,
        annotations: Mapping[str, Any] | None = None,
        serving: ServingModeOf | None = None,
        received: float | None = None,
    ) -> Recommendation:
        """``req`` served on its own: the plain path; ``received``: when it was received
        (``time.perf_counter``; None: now)."""
        if received is None:
            received = time.perf_counter()
        digest = None if req.event_id is None else request_digest(req)
        if req.event_id is not None:
            original = await self.event_ids.original(req.policy, req.event_id, digest)
            if original is not None:
                return original
        runtime, [candidates], degraded = await self.load_for_select([req])
        if isinstance(candidates, Exception):
            raise candidates
        parts = runtime.policy.parts_for_select(candidates.ids, req.user_id)
        mode = None if serving is None else serving(runtime.info)
        now = self.clock()
        decision, imitated = self.select(runtime, candidates, req, mode, now)
        event_id = req.event_id or secrets.token_hex(16)
        version = runtime.model_version(parts)
        recommendation = recommendation_of(req, runtime, decision, event_id, version, degraded)
        if annotations:
            recommendation = replace(recommendation, annotations=dict(annotations))
        served = ServedDecision(
            req,
            candidates,
            decision,
            recommendation,
            digest,
            learn=mode is None or mode.learn,
            imitated=imitated,
            received=received,
        )
        if not degraded:
            try:
                if req.event_id is not None:  # a client's id may repeat: register it first
                    if not await self.event_ids.register(event_id, req.policy):
                        return await self.event_ids.wait_original(req.policy, event_id, digest)
                    with self.event_ids.held([event_id]):
                        await self._store_event(runtime, served, parts, mode, now)
                else:  # 128 random bits never collide: claimed with the write
                    claim = Claim(event_id, self.settings.event_ttl_seconds)
                    await self._store_event(runtime, served, parts, mode, now, claim)
            except EventIdTakenError:
                raise Conflict(f"generated event_id {event_id!r} collided; retry") from None
            except StoreUnavailableError:
                metrics.STORE_ERRORS.labels("decision").inc()
                served.recommendation = served.recommendation.marked_degraded()
        if served.recommendation.degraded:
            metrics.DEGRADED_DECISIONS.labels(req.policy).inc()
        self.sink.submit_decision(served.record(now))
        served.count(runtime)
        return served.recommendation

    def _candidates(self, req: RecommendRequest, runtime: Runtime) -> Candidates:
        """Ids, rows, named context and (JSON features only) the features as sent."""
        if runtime.info.features is not None:
            return Candidates(
                *self.json_candidates.build(
                    req, runtime.info, runtime.policy, self.settings.max_candidates
                )
            )
        return Candidates(*build_candidates(req, runtime.info, self.settings.max_candidates), None)

    def _candidates_or_error(
        self, req: RecommendRequest, runtime: Runtime
    ) -> Candidates | Exception:
        try:
            return self._candidates(req, runtime)
        except (ApiError, BanditError) as exc:  # the request's own fault: it fails alone
            return exc

    async def load_for_select(
        self, reqs: list[RecommendRequest]
    ) -> tuple[Runtime, list[Candidates | Exception], bool]:
        """The up-to-date policy and the candidates of each of ``reqs`` (one policy's),
        or the error building them raised: one store round trip for the parts of all
        when the policy is cached and unchanged; from the cache, flagged degraded, when
        the store is down, and from the stand-in while the policy is rebuilt."""
        name = reqs[0].policy
        cached = self.cache.cached(name)
        try:
            runtime = cached or (await self.cache.load(name))[0]
        except PolicyRebuilding as exc:
            runtime = cached = exc.stand_in
        while True:
            candidates = [self._candidates_or_error(req, runtime) for req in reqs]

            def parts_of(
                policy: BasePolicy, candidates: list[Candidates | Exception] = candidates
            ) -> list[str]:
                selections = {  # the distinct candidate lists and users
                    (*c.ids, req.user_id): c.ids
                    for req, c in zip(reqs, candidates)
                    if not isinstance(c, Exception)
                }
                parts = [policy.parts_for_select(ids, key[-1]) for key, ids in selections.items()]
                return (
                    parts[0]
                    if len(parts) == 1
                    else list(dict.fromkeys(p for ps in parts for p in ps))
                )

            try:
                fresh, _, _ = await self.cache.load(name, parts_of)
            except PolicyRebuilding as exc:
                if exc.stand_in is runtime:
                    return runtime, candidates, True
                runtime = exc.stand_in  # the candidates are built again for it
                continue
            except StoreUnavailableError:
                if cached is None:
                    raise
                return cached, candidates, True
            if fresh.info.revision == runtime.info.revision:
                return fresh, candidates, False
            runtime = fresh

    def select(
        self,
        runtime: Runtime,
        candidates: Candidates,
        req: RecommendRequest,
        mode: ServingMode | None,
        now: float,
    ) -> tuple[Decision, bool | None]:
        """The decision to serve at ``now`` and, under a serving ``mode``, whether the
        model's greedy choice was the one served (else None)."""
        ids, X, features, _ = candidates
        explore = req.explore if mode is None else False  # a serving mode takes the greedy choice
        try:
            # a policy that forgets by time ages its arms; one that answers a detected
            # drift explores more for a while
            with clock_at(runtime.policy, now), self.exploring(runtime, now):
                decision = runtime.policy.select(
                    ids, X, user_id=req.user_id, features=features, explore=explore
                )
            return (decision, None) if mode is None else mode.serve(decision)
        except BanditError as exc:
            error = self.engine_error(runtime, exc)
            if error is exc:  # the model's fault
                raise
            raise error from exc

    def exploring(self, runtime: Runtime, now: float) -> AbstractContextManager[None]:
        """The block in which ``runtime``'s policy selects at ``now``: with its
        exploration raised while its ``drift_response`` lasts
        (:meth:`DriftWatch.exploration_boost`)."""
        info = runtime.info
        level = self.drift.exploration_boost(info.name, now, info.drift_response)
        return exploring(runtime.policy, level)

    @staticmethod
    def engine_error(runtime: Runtime, exc: BanditError) -> Exception:
        """The service error for a selection's ``exc``: the model's fault (a 500 naming
        the policy) or the request's (a 422 on its arms)."""
        if isinstance(exc, ModelError):
            return with_policy(exc, runtime.info.name)
        return EngineInputError(exc, ["body", "arms"])

    async def _store_event(
        self,
        runtime: Runtime,
        served: ServedDecision,
        parts: list[str],
        mode: ServingMode | None,
        now: float,
        claim: Claim | None = None,
    ) -> None:
        """Write the pending event of ``served``, put it on the deadline index and count
        the decision, in one transaction; a selection that changed state (guardrail
        counters, a cold start that LNUCB-TA counts) is redone inside it over fresh values
        of those parts (``served`` then holds the decision redone). An attempt after a
        conflict redoes it from the draws the last attempt started from, unless another
        selection drew from the policy's rng meanwhile: the rng stream, and with it later
        tie-breaks, do not depend on how many attempts the store needed."""
        req, event_id = served.req, served.event_id
        key = event_key(event_id)
        changed = list(served.decision.state_changed)
        annotations = served.recommendation.annotations
        policy = runtime.policy
        draws: list[Mapping[str, Any]] = []  # the rng before and after the last redo

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if values[key] is not None:
                raise Conflict(f"event_id {event_id!r} is already in use")
            out: dict[str, bytes | None] = {}
            if changed:
                # rewound only when no other selection drew since: it would draw twice
                if draws and policy.rng_state == draws[1]:
                    policy.rng_state = draws[0]
                before = policy.rng_state
                import_stored(runtime, {p: values[p] for p in changed})
                served.decision, served.imitated = self.select(
                    runtime, served.candidates, req, mode, now
                )
                draws[:] = [before, policy.rng_state]
                version = runtime.model_version(parts)
                redone = recommendation_of(req, runtime, served.decision, event_id, version, False)
                served.recommendation = replace(redone, annotations=annotations)
                out.update(runtime.policy.export_parts(changed))
            out[key] = served.pending_event(runtime, now)
            return out

        def schedule() -> Schedule:
            arm = served.decision.arm_id
            counters = {"decisions": 1.0, "pending": 1.0, f"{PULLS_PREFIX}{arm}": 1.0}
            # the served arm and every arm this selection gave stored state were seen now
            seen = dict.fromkeys([arm, *arms_of(changed)], now)
            return Schedule(event_id, now + runtime.info.reward_wait_seconds, counters, seen)

        # A new event id has no value yet: assuming so saves the store a read.
        await self.cache.transact(
            runtime,
            req.policy,
            [key, *changed],
            fn,
            {key: VersionedValue(0, None)},
            schedule,
            claim,
        )
