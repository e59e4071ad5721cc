"""``POST /recommend``: choose an arm for a context, store the pending event, log it.

The path of one request (:meth:`Recommender.recommend`): a repeated client event id
answers the stored response (409 when the body differs from the original's); otherwise
the cached policy is brought up to date for the candidates' parts
(:meth:`PolicyCache.load`, one store round trip), the engine selects,
and one transaction writes the pending event, schedules its default-reward deadline and
counts the decision. When the store is down the decision comes from the cached policy,
flagged ``degraded`` (nothing stored: it cannot be rewarded). Every decision goes to the
event-log writer.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bandit_core import BanditError, BasePolicy, Decision, ModelError
from bandit_core.features import SparseRows
from service import metrics
from service.errors import Conflict, EngineInputError, with_policy
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
from service.usecases.policy_cache import PULLS_PREFIX, PolicyCache, arms_of, import_stored

Candidates = tuple[list[str], np.ndarray | SparseRows, dict[str, float] | None, list[Any] | None]
"""Candidate ids, their rows ``X`` (sparse for a policy taking sparse rows), the named
context (guardrails) and, for a policy with ``features``, each candidate's features as
sent (logged raw; None for float vectors)."""


@dataclass
class Recommender:
    """The recommend use case; one per process."""

    cache: PolicyCache
    sink: LogSink
    settings: Settings
    clock: Callable[[], float] = time.time
    json_candidates: JsonCandidates = field(default_factory=JsonCandidates)

    async def recommend(self, req: RecommendRequest) -> bytes:
        """The JSON of the :class:`RecommendResponse` for ``req`` (built and serialized
        once here, and stored as is with the pending event for repeats)."""
        store = self.cache.store
        digest = None if req.event_id is None else request_digest(req)
        if req.event_id is not None:
            original = await self._original_decision(req.policy, req.event_id, digest)
            if original is not None:
                return original
        runtime, (ids, X, features, raw), parts, degraded = await self._load_for_select(req)
        decision = self._select(runtime, ids, X, req, features)
        now = self.clock()
        event_id = req.event_id or secrets.token_hex(16)
        response = self._response(req, runtime, decision, event_id, parts, degraded)
        if not degraded:
            ttl = self.settings.event_ttl_seconds
            args = (req, runtime, ids, X, features, decision, response, parts, now, digest)
            try:
                if req.event_id is not None:  # a client's id may repeat: register it first
                    if not await store.register_event(event_id, req.policy, ttl):
                        return await self._wait_original(req.policy, event_id, digest)
                    response, decision = await self._store_event(*args)
                else:  # 128 random bits never collide: claimed with the write
                    response, decision = await self._store_event(*args, Claim(event_id, ttl))
            except EventIdTakenError:
                raise Conflict(f"generated event_id {event_id!r} collided; retry") from None
            except StoreUnavailableError:
                metrics.STORE_ERRORS.labels("decision").inc()
                degraded = True
                response["degraded"] = True
        if degraded:
            metrics.DEGRADED_DECISIONS.labels(req.policy).inc()
        self._log_decision(req, runtime, ids, X, raw, decision, response, now)
        return dumps(response)

    def _candidates(self, req: RecommendRequest, runtime: Runtime) -> Candidates:
        """Ids, rows, named context and (JSON features only) the features as sent."""
        if runtime.info.features is not None:
            return self.json_candidates.build(
                req, runtime.info, runtime.policy, self.settings.max_candidates
            )
        return (*build_candidates(req, runtime.info, self.settings.max_candidates), None)

    async def _load_for_select(
        self, req: RecommendRequest
    ) -> tuple[Runtime, Candidates, list[str], bool]:
        """The up-to-date policy and the candidates: one store round trip when the
        policy is cached and unchanged; from the cache, flagged degraded, when the store
        is down."""
        cached = self.cache.cached(req.policy)
        runtime = cached or (await self.cache.load(req.policy))[0]
        while True:
            candidates = self._candidates(req, runtime)
            ids = candidates[0]

            def parts_of(policy: BasePolicy, ids: list[str] = ids) -> list[str]:
                return policy.parts_for_select(ids, req.user_id)

            try:
                fresh, parts, _ = await self.cache.load(req.policy, parts_of)
            except StoreUnavailableError:
                if cached is None:
                    raise
                return cached, candidates, cached.policy.parts_for_select(ids, req.user_id), True
            if fresh.info.revision == runtime.info.revision:
                return fresh, candidates, parts, False
            runtime = fresh

    @staticmethod
    def _select(
        runtime: Runtime,
        ids: list[str],
        X: np.ndarray | SparseRows,
        req: RecommendRequest,
        features: dict[str, float] | None,
    ) -> Decision:
        try:
            return runtime.policy.select(
                ids, X, user_id=req.user_id, features=features, explore=req.explore
            )
        except ModelError as exc:
            raise with_policy(exc, runtime.info.name)  # the model's fault: a 500, not a 422
        except BanditError as exc:
            raise EngineInputError(exc, ["body", "arms"]) from exc

    @staticmethod
    def _response(
        req: RecommendRequest,
        runtime: Runtime,
        decision: Decision,
        event_id: str,
        parts: list[str],
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
            "model_version": runtime.model_version(parts),
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
        features: dict[str, float] | None,
        decision: Decision,
        response: dict[str, Any],
        parts: list[str],
        now: float,
        digest: str | None,
        claim: Claim | None = None,
    ) -> tuple[dict[str, Any], Decision]:
        """Write the pending event, put it on the deadline index and count the decision,
        in one transaction; a selection that changed state (guardrail counters) is redone
        inside it over fresh values of those parts."""
        event_id = response["event_id"]
        key = event_key(event_id)
        changed = list(decision.state_changed)
        result = {"decision": decision, "response": response}

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            if values[key] is not None:
                raise Conflict(f"event_id {event_id!r} is already in use")
            out: dict[str, bytes | None] = {}
            if changed:
                import_stored(runtime, {p: values[p] for p in changed})
                again = self._select(runtime, ids, X, req, features)
                result["decision"] = again
                result["response"] = self._response(req, runtime, again, event_id, parts, False)
                out.update(runtime.policy.export_parts(changed))
            chosen = result["decision"]
            out[key] = PendingEvent(
                state=EventState.PENDING,
                arm_id=chosen.arm_id,
                x=stored_row(X, ids.index(chosen.arm_id)),
                user_id=req.user_id,
                activated=not req.defer_activation,
                created_at=now,
                reset_at=runtime.info.reset_at,
                response=result["response"],
                request_digest=digest,
            ).to_json()
            return out

        def schedule() -> Schedule:
            arm = result["decision"].arm_id
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
        return result["response"], result["decision"]

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

    def _log_decision(
        self,
        req: RecommendRequest,
        runtime: Runtime,
        ids: list[str],
        X: np.ndarray | SparseRows,
        raw: list[Any] | None,
        decision: Decision,
        response: dict[str, Any],
        now: float,
    ) -> None:
        self.sink.submit_decision(
            DecisionRecord(
                event_id=response["event_id"],
                policy=req.policy,
                created_at=now,
                context=req.context,
                candidates=candidates_json(ids, X) if raw is None else logged_candidates(ids, raw),
                arm_id=response["arm_id"],
                propensity=float(decision.propensity),
                scores=np.asarray(decision.scores, dtype=np.float64).tolist(),
                model_version=response["model_version"],
                user_id=req.user_id,
                explored=decision.explored,
                guardrail=response["guardrail"],
                degraded=response["degraded"],
            )
        )
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
