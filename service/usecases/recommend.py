"""``POST /recommend``: choose an arm for a context, store the pending event, log it.

The path of one request (:meth:`Recommender.recommend`): a repeated client event id
answers the stored response (409 when the body differs from the original's); otherwise
the cached policy is brought up to date for the candidates' parts
(:meth:`PolicyCache.load`, one store round trip), the engine selects,
and one transaction writes the pending event, schedules its default-reward deadline and
counts the decision. When the store is down the decision comes from the cached policy,
flagged ``degraded`` (nothing stored: it cannot be rewarded). Every decision goes to the
event-log writer.

Coalescing (``Settings.recommend_coalescing``, docs/performance.md "Coalesced
/recommend"): while a batch of a policy's decisions is being served, the requests of
that policy that arrive wait, and when it finishes they become the next batch (a "group
commit": no timer, and a request that finds no batch in flight is served at once, as
without). A batch takes one store read for every candidate part it needs, one
:meth:`~bandit_core.BasePolicy.select_batch` (the decisions of one ``select`` after
another in arrival order, bit for bit), one transaction that writes, schedules and
claims every pending event, and one submission to the log writer. A request's own
failure (bad input found late, an event id in use) fails it alone. A client's
``event_id`` is registered for the batch in one more round trip once its decision is
made; one that is taken already (a repeat, another policy's id, a concurrent request's)
is served again on its own by the plain path, which answers a repeat with the original
decision or a 409. Policies whose selections change state (guardrails, HARE) and
requests with annotations (multi-slot) are served each on its own, concurrently.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bandit_core import BanditError, BasePolicy, Decision, ModelError, SelectRequest
from bandit_core.features import SparseRows
from service import metrics
from service.errors import ApiError, Conflict, EngineInputError, with_policy
from service.policies import Runtime
from service.schemas import RecommendRequest
from service.settings import Settings
from service.storage.base import (
    Claim,
    DecisionRecord,
    EventIdTakenError,
    LogSink,
    Schedule,
    StoreUnavailableError,
    VersionedValue,
)
from service.usecases.candidates import build_candidates, candidates_json
from service.usecases.events import (
    EventState,
    PendingEvent,
    dumps,
    event_key,
    request_digest,
    stored_row,
)
from service.usecases.json_features import JsonCandidates, logged_candidates
from service.usecases.learning_modes import (
    ONLINE,
    BaselineServing,
    baseline_serving,
    learning_mode,
    served_decision,
)
from service.usecases.policy_cache import (
    PULLS_PREFIX,
    PolicyCache,
    PolicyRebuilding,
    arms_of,
    import_stored,
)

Candidates = tuple[list[str], np.ndarray | SparseRows, Mapping[str, float] | None, list[Any] | None]
"""Candidate ids, their rows ``X`` (sparse for a policy taking sparse rows), the named
context (guardrails) and, for a policy with ``features``, each candidate's features to
log (``JsonCandidates.build``; None for float vectors)."""


@dataclass(eq=False)
class _Served:
    """A decision of a coalesced batch on its way to the store and the log."""

    index: int
    req: RecommendRequest
    candidates: Candidates
    decision: Decision
    response: dict[str, Any]
    learn: bool = True
    imitated: bool | None = None
    digest: str | None = None  # the request's digest under a client's event id


@dataclass
class _Selected:
    """The decision a pending-event transaction serves (redone inside it when the
    selection changed stored state), its response and whether it imitated a baseline."""

    decision: Decision
    response: dict[str, Any]
    imitated: bool | None


@dataclass
class Recommender:
    """The recommend use case; one per process."""

    cache: PolicyCache
    sink: LogSink
    settings: Settings
    clock: Callable[[], float] = time.time
    json_candidates: JsonCandidates = field(default_factory=JsonCandidates)
    # policy name -> the requests waiting for the batch in flight to finish (present
    # while a batch of that policy is being served)
    _waiting: dict[str, list[tuple[RecommendRequest, asyncio.Future[bytes]]]] = field(
        default_factory=dict, init=False
    )
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)  # see _spawn

    async def recommend(
        self,
        req: RecommendRequest,
        annotations: Mapping[str, Any] | None = None,
        baseline: str | None = None,
    ) -> bytes:
        """The JSON of the :class:`RecommendResponse` for ``req`` (built and serialized
        once here, and stored as is with the pending event for repeats); coalesced with
        the policy's other requests under load (see the module docstring). ``annotations``
        are fields added to that response, e.g. the slot ids a multi-slot event keeps on
        its first slot (service/usecases/multislot.py). ``baseline``: the candidate the
        application would show without the service, served instead of the model's choice
        when the policy is in Personalizer's Apprentice or LoggingOnly learning mode
        (:mod:`service.usecases.learning_modes`). A request with annotations, or a
        baseline for a policy not known to be in the Online mode (where the baseline
        changes nothing), is served on its own."""
        if (
            not self.settings.recommend_coalescing
            or annotations
            or (baseline is not None and self._may_serve_baseline(req.policy))
        ):
            return await self._recommend_one(req, annotations, baseline)
        waiting = self._waiting.get(req.policy)
        if waiting is not None:  # a batch is in flight: join the next one
            future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
            waiting.append((req, future))
            return await future
        self._waiting[req.policy] = []
        try:
            return await self._recommend_one(req)
        finally:
            self._start_next_batch(req.policy)

    def _may_serve_baseline(self, name: str) -> bool:
        """Whether a baseline may be served instead of the model's choice: the policy's
        cached configuration is not in the Online learning mode, or not cached yet."""
        cached = self.cache.cached(name)
        return cached is None or learning_mode(cached.info.personalizer) != ONLINE

    def _start_next_batch(self, name: str) -> None:
        """The batch of ``name`` in flight finished: serve the requests that waited."""
        batch = self._waiting.pop(name)
        if batch:
            self._waiting[name] = []
            self._spawn(self._serve_batch(name, batch))

    def _spawn(self, work: Awaitable[None]) -> None:
        """Run ``work`` as a task of its own, referenced until it is done."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve_batch(
        self, name: str, batch: list[tuple[RecommendRequest, asyncio.Future[bytes]]]
    ) -> None:
        try:
            results = await self._recommend_batch([req for req, _ in batch])
        except Exception as exc:  # noqa: BLE001 -- the batch failed (no such policy...): each request did
            results = [exc] * len(batch)
        except BaseException:  # cancelled: so are the requests that waited for it
            for _, future in batch:
                future.cancel()
            raise
        finally:
            self._start_next_batch(name)
        for (req, future), result in zip(batch, results):
            if result is None:  # served on its own, not holding up the next batch
                self._spawn(_settle(future, self._recommend_one(req)))
            else:
                _resolve(future, result)

    async def _recommend_one(
        self,
        req: RecommendRequest,
        annotations: Mapping[str, Any] | None = None,
        baseline: str | None = None,
    ) -> bytes:
        """``req`` served on its own: the plain path."""
        store = self.cache.store
        digest = None if req.event_id is None else request_digest(req)
        if req.event_id is not None:
            original = await self._original_decision(req.policy, req.event_id, digest)
            if original is not None:
                return original
        runtime, [candidates], degraded = await self._load_for_select([req])
        if isinstance(candidates, Exception):
            raise candidates
        ids, X, features, raw = candidates
        parts = runtime.policy.parts_for_select(ids, req.user_id)
        mode = learning_mode(runtime.info.personalizer)
        serving = None if baseline is None else baseline_serving(mode, baseline)
        decision, imitated = self._select(runtime, ids, X, req, features, serving)
        now = self.clock()
        event_id = req.event_id or secrets.token_hex(16)
        version = runtime.model_version(parts)
        response = self._response(req, runtime, decision, event_id, version, degraded)
        response.update(annotations or {})
        if not degraded:
            ttl = self.settings.event_ttl_seconds
            args = (req, runtime, ids, X, features, decision, response, parts, now, digest)
            served = (serving, imitated)
            try:
                if req.event_id is not None:  # a client's id may repeat: register it first
                    if not await store.register_event(event_id, req.policy, ttl):
                        return await self._wait_original(req.policy, event_id, digest)
                    response, decision = await self._store_event(*args, served)
                else:  # 128 random bits never collide: claimed with the write
                    claim = Claim(event_id, ttl)
                    response, decision = await self._store_event(*args, served, claim)
            except EventIdTakenError:
                raise Conflict(f"generated event_id {event_id!r} collided; retry") from None
            except StoreUnavailableError:
                metrics.STORE_ERRORS.labels("decision").inc()
                degraded = True
                response["degraded"] = True
        if degraded:
            metrics.DEGRADED_DECISIONS.labels(req.policy).inc()
        self.sink.submit_decision(self._decision_record(req, ids, X, raw, decision, response, now))
        self._count_decision(req, runtime, decision, response)
        return dumps(response)

    async def _recommend_batch(
        self, reqs: list[RecommendRequest]
    ) -> list[bytes | BaseException | None]:
        """The responses of a coalesced batch of one policy's requests, the exception
        each failed with, or None for one to serve on its own (a client's event id the
        batch could not register; see the module docstring)."""
        cached = self.cache.cached(reqs[0].policy)
        if len(reqs) == 1 or cached is None or not cached.policy.batches_selections:
            return await asyncio.gather(*map(self._recommend_one, reqs), return_exceptions=True)
        runtime, candidates, degraded = await self._load_for_select(reqs)
        policy = runtime.policy
        if any(
            not isinstance(c, Exception) and policy.cold_start_changes_state(c[0])
            for c in candidates
        ):
            # rare (arms new to LNUCB-TA): served one after another in order, each
            # selection redone inside its own transaction as on the plain path
            return [await _outcome(self._recommend_one(req)) for req in reqs]
        results: list[bytes | BaseException | None] = [
            c if isinstance(c, Exception) else b"" for c in candidates
        ]
        chosen = [(i, c) for i, c in enumerate(candidates) if not isinstance(c, Exception)]
        selections = [
            SelectRequest(c[0], c[1], reqs[i].user_id, c[2], reqs[i].explore) for i, c in chosen
        ]
        now = self.clock()
        served: list[_Served] = []
        versions: dict[tuple[Any, ...], int] = {}  # model_version by candidates and user
        for (i, c), decision in zip(chosen, policy.select_batch(selections)):
            if isinstance(decision, BanditError):
                results[i] = _engine_error(runtime, decision)
                continue
            key = (*c[0], reqs[i].user_id)
            if key not in versions:
                versions[key] = runtime.model_version(policy.parts_for_select(c[0], key[-1]))
            event_id = reqs[i].event_id or secrets.token_hex(16)
            response = self._response(reqs[i], runtime, decision, event_id, versions[key], degraded)
            digest = None if reqs[i].event_id is None else request_digest(reqs[i])
            served.append(_Served(i, reqs[i], c, decision, response, digest=digest))
        for s in await self._unregistered(served, degraded):
            results[s.index] = None
            served.remove(s)
        if served and not degraded:
            try:
                await self._store_batch(runtime, served, results, now)
            except StoreUnavailableError:
                metrics.STORE_ERRORS.labels("decision").inc()
                for s in served:
                    s.response["degraded"] = True
            except EventIdTakenError:
                for s in served:
                    results[s.index] = Conflict("a generated event_id collided; retry")
        logged = [s for s in served if isinstance(results[s.index], bytes)]
        self.sink.submit_decisions(
            [
                self._decision_record(
                    s.req,
                    s.candidates[0],
                    s.candidates[1],
                    s.candidates[3],
                    s.decision,
                    s.response,
                    now,
                )
                for s in logged
            ]
        )
        for s in logged:
            if s.response["degraded"]:
                metrics.DEGRADED_DECISIONS.labels(s.req.policy).inc()
            self._count_decision(s.req, runtime, s.decision, s.response)
            results[s.index] = dumps(s.response)
        return results

    async def _unregistered(self, served: list[_Served], degraded: bool) -> list[_Served]:
        """Register the client event ids of ``served`` (one round trip); the decisions
        whose id is taken already, or could not be registered (the store is down), which
        the plain path serves again."""
        own = [s for s in served if s.req.event_id is not None]
        if not own or degraded:
            return own
        try:
            registered = await self.cache.store.register_events(
                [s.response["event_id"] for s in own],
                own[0].req.policy,
                self.settings.event_ttl_seconds,
            )
        except StoreUnavailableError:
            return own
        return [s for s, ok in zip(own, registered) if not ok]

    async def _store_batch(
        self,
        runtime: Runtime,
        served: list[_Served],
        results: list[bytes | BaseException | None],
        now: float,
    ) -> None:
        """Write every pending event of ``served``, schedule their deadlines, count
        them and claim their ids, in one transaction; an event whose id turns out to be
        in use fails alone (a 409 in ``results``)."""
        name = served[0].req.policy
        keys = [event_key(s.response["event_id"]) for s in served]
        written: list[_Served] = []

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            written.clear()
            out: dict[str, bytes | None] = {}
            for key, s in zip(keys, served):
                if values[key] is None:
                    out[key] = _pending_event(s, runtime, now)
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
            first, *more = [s.response["event_id"] for s in written]
            return Schedule(first, deadline, counters, seen, dict.fromkeys(more, deadline))

        # the generated ids; a client's id was registered already (_unregistered)
        event_ids = [s.response["event_id"] for s in served if s.req.event_id is None]
        claim = (
            Claim(event_ids[0], self.settings.event_ttl_seconds, tuple(event_ids[1:]))
            if event_ids
            else None
        )
        assumed = dict.fromkeys(keys, VersionedValue(0, None))
        await self.cache.transact(runtime, name, keys, fn, assumed, schedule, claim)
        for s in served:
            if s not in written:
                results[s.index] = Conflict(
                    f"event_id {s.response['event_id']!r} is already in use"
                )

    def _candidates(self, req: RecommendRequest, runtime: Runtime) -> Candidates:
        """Ids, rows, named context and (JSON features only) the features as sent."""
        if runtime.info.features is not None:
            return self.json_candidates.build(
                req, runtime.info, runtime.policy, self.settings.max_candidates
            )
        return (*build_candidates(req, runtime.info, self.settings.max_candidates), None)

    def _candidates_or_error(
        self, req: RecommendRequest, runtime: Runtime
    ) -> Candidates | Exception:
        try:
            return self._candidates(req, runtime)
        except (ApiError, BanditError) as exc:  # the request's own fault: it fails alone
            return exc

    async def _load_for_select(
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
                    (*c[0], req.user_id): c[0]
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

    @staticmethod
    def _select(
        runtime: Runtime,
        ids: list[str],
        X: np.ndarray | SparseRows,
        req: RecommendRequest,
        features: Mapping[str, float] | None,
        serving: BaselineServing | None,
    ) -> tuple[Decision, bool | None]:
        """The decision to serve and, serving an Apprentice baseline, whether the model's
        greedy choice imitated it (else None)."""
        try:
            if serving is None:
                decision = runtime.policy.select(
                    ids, X, user_id=req.user_id, features=features, explore=req.explore
                )
                return decision, None
            greedy = runtime.policy.select(
                ids, X, user_id=req.user_id, features=features, explore=False
            )
            return served_decision(serving.mode, greedy, serving.baseline)
        except BanditError as exc:
            error = _engine_error(runtime, exc)
            if error is exc:  # the model's fault
                raise
            raise error from exc

    @staticmethod
    def _response(
        req: RecommendRequest,
        runtime: Runtime,
        decision: Decision,
        event_id: str,
        model_version: int,
        degraded: bool,
    ) -> dict[str, Any]:
        """The :class:`RecommendResponse` as a plain dict, its fields in the model's order
        (``tests/service/test_api.py`` checks it against the model): validating it into
        the model and serializing that again cost about a fifth of a K = 50 request."""
        n = len(decision.ranking) if req.top_k is None else min(req.top_k, len(decision.ranking))
        widths = (
            [None] * n
            if decision.widths is None
            else np.asarray(decision.widths[:n], dtype=np.float64).tolist()
        )
        ranking = [
            {"arm_id": a, "score": s, "propensity": p, "width": w}
            for a, s, p, w in zip(
                decision.ranking[:n],
                np.asarray(decision.scores[:n], dtype=np.float64).tolist(),
                np.asarray(decision.propensities[:n], dtype=np.float64).tolist(),
                widths,
            )
        ]
        g = decision.guardrail
        guardrail = None
        if g is not None:
            guardrail = {
                "blocked": {a: list(r) for a, r in g.blocked.items()},
                "safe_arm_served": bool(g.safe_arm_served),
                "unconstrained_arm_id": g.unconstrained_arm_id,
                "argmax_blocked": bool(g.argmax_blocked),
            }
        return {
            "event_id": event_id,
            "arm_id": decision.arm_id,
            "ranking": ranking,
            "policy": req.policy,
            "algorithm": runtime.info.algorithm,
            "model_version": model_version,
            "explored": bool(decision.explored),
            "guardrail": guardrail,
            "degraded": degraded,
            "activated": not req.defer_activation,
        }

    async def _store_event(
        self,
        req: RecommendRequest,
        runtime: Runtime,
        ids: list[str],
        X: np.ndarray | SparseRows,
        features: Mapping[str, float] | None,
        decision: Decision,
        response: dict[str, Any],
        parts: list[str],
        now: float,
        digest: str | None,
        served: tuple[BaselineServing | None, bool | None],
        claim: Claim | None = None,
    ) -> tuple[dict[str, Any], Decision]:
        """Write the pending event, put it on the deadline index and count the decision,
        in one transaction; a selection that changed state (guardrail counters) is redone
        inside it over fresh values of those parts."""
        event_id = response["event_id"]
        key = event_key(event_id)
        changed = list(decision.state_changed)
        serving, imitated = served
        result = _Selected(decision, response, imitated)

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if values[key] is not None:
                raise Conflict(f"event_id {event_id!r} is already in use")
            out: dict[str, bytes | None] = {}
            if changed:
                import_stored(runtime, {p: values[p] for p in changed})
                again, result.imitated = self._select(runtime, ids, X, req, features, serving)
                result.decision = again
                version = runtime.model_version(parts)
                redone = self._response(req, runtime, again, event_id, version, False)
                result.response = {**response, **redone}  # annotations kept
                out.update(runtime.policy.export_parts(changed))
            event = _Served(
                0,
                req,
                (ids, X, features, None),
                result.decision,
                result.response,
                learn=serving is None or serving.learn,
                imitated=result.imitated,
                digest=digest,
            )
            out[key] = _pending_event(event, runtime, now)
            return out

        def schedule() -> Schedule:
            arm = result.decision.arm_id
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
        return result.response, result.decision

    async def _original_decision(
        self, name: str, event_id: str, digest: str | None
    ) -> bytes | None:
        """The stored response of the client's ``event_id`` (None when it is new); 409
        when the id belongs to another policy or came with another request body."""
        owner = await self.cache.store.event_policy(event_id)
        if owner is None:
            return None
        if owner != name:
            raise Conflict(f"event_id {event_id!r} belongs to another policy")
        values = await self.cache.read(name, [event_key(event_id)], {})
        value = values.get(event_key(event_id))
        if value is None or value.data is None:
            return None
        event = PendingEvent.from_json(value.data)
        if event.response is None:
            raise Conflict(f"event_id {event_id!r} was generated for another decision")
        if event.request_digest is not None and event.request_digest != digest:
            raise Conflict(
                f"event_id {event_id!r} was already used with a different request body; "
                "send a new event_id, or repeat the original body to get the original decision"
            )
        return dumps(event.response)

    async def _wait_original(self, name: str, event_id: str, digest: str | None) -> bytes:
        for _ in range(20):
            original = await self._original_decision(name, event_id, digest)
            if original is not None:
                return original
            await asyncio.sleep(0.05)
        raise Conflict(f"event_id {event_id!r} is being used by a concurrent request")

    @staticmethod
    def _decision_record(
        req: RecommendRequest,
        ids: list[str],
        X: np.ndarray | SparseRows,
        raw: list[Any] | None,
        decision: Decision,
        response: dict[str, Any],
        now: float,
    ) -> DecisionRecord:
        if raw is None:
            assert isinstance(X, np.ndarray)  # float vectors as sent: sparse rows are JSON's
            candidates = candidates_json(ids, X)
        else:
            candidates = logged_candidates(ids, raw)
        return DecisionRecord(
            event_id=response["event_id"],
            policy=req.policy,
            created_at=now,
            context=req.context,
            candidates=candidates,
            arm_id=response["arm_id"],
            propensity=float(decision.propensity),
            scores=np.asarray(decision.scores, dtype=np.float64).tolist(),
            model_version=response["model_version"],
            user_id=req.user_id,
            explored=decision.explored,
            guardrail=response["guardrail"],
            degraded=response["degraded"],
        )

    @staticmethod
    def _count_decision(
        req: RecommendRequest, runtime: Runtime, decision: Decision, response: dict[str, Any]
    ) -> None:
        labelled = runtime.labelled_arms
        served = metrics.arm_label(response["arm_id"], labelled)
        metrics.DECISIONS.labels(req.policy, served).inc()
        if decision.guardrail is not None:
            delta_g = runtime.policy.policy_stats().get("delta_g")
            if delta_g is not None:
                metrics.DELTA_G.labels(req.policy).set(delta_g)
            for arm in decision.guardrail.blocked:
                blocked = metrics.arm_label(arm, labelled)
                metrics.GUARDRAIL_BLOCKS.labels(req.policy, blocked).inc()
            if decision.guardrail.argmax_blocked:
                metrics.GUARDRAIL_ARGMAX_BLOCKED.labels(req.policy).inc()


def _engine_error(runtime: Runtime, exc: BanditError) -> Exception:
    """The service error for a selection's ``exc``: the model's fault (a 500 naming the
    policy) or the request's (a 422 on its arms)."""
    if isinstance(exc, ModelError):
        return with_policy(exc, runtime.info.name)
    return EngineInputError(exc, ["body", "arms"])


def _pending_event(served: _Served, runtime: Runtime, now: float) -> bytes:
    """The stored pending event of a decision; the response only under a client's event
    id (the one a repeat is answered with)."""
    ids, X, _, _ = served.candidates
    req, arm = served.req, served.decision.arm_id
    return PendingEvent(
        state=EventState.PENDING,
        arm_id=arm,
        x=stored_row(X, ids.index(arm)),
        user_id=req.user_id,
        activated=not req.defer_activation,
        created_at=now,
        reset_at=runtime.info.reset_at,
        response=None if req.event_id is None else served.response,
        request_digest=served.digest,
        learn=served.learn,
        imitated=served.imitated,
        deadline=now + runtime.info.reward_wait_seconds,
    ).to_json()


def _resolve(future: asyncio.Future[bytes], result: bytes | BaseException) -> None:
    """Answer a waiting request with its response or error (unless its client went away)."""
    if future.done():
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


async def _settle(future: asyncio.Future[bytes], request: Awaitable[bytes]) -> None:
    """Resolve ``future`` with what ``request`` answers or fails with."""
    _resolve(future, await _outcome(request))


async def _outcome(request: Awaitable[bytes]) -> bytes | BaseException:
    """The response ``request`` gives, or the error it fails with."""
    try:
        return await request
    except Exception as exc:  # noqa: BLE001 -- handed to the request's own handler
        return exc
