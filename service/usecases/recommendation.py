"""What the recommend use case answers: a :class:`Recommendation` (the decision as served),
how it is built from the engine's :class:`~bandit_core.Decision`, and what goes with it
to the store, the log and the metrics (docs/architecture.md, "POST /recommend").

A decision on its way is a :class:`ServedDecision`; how a decision is served and learned
from is the caller's :class:`ServingMode` (none: the model's own decision, learned from).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import numpy as np
import orjson

from bandit_core import Decision
from bandit_core.features import SparseRows
from service.observability import metrics
from service.policies import Runtime
from service.schemas import PolicyInfo, RecommendRequest
from service.storage.base import DecisionRecord, ips_weights
from service.usecases.candidates import candidates_json
from service.usecases.events import EventState, PendingEvent, stored_row
from service.usecases.json_features import logged_candidates


class Candidates(NamedTuple):
    """A request's candidates as the engine takes them."""

    ids: list[str]
    rows: np.ndarray | SparseRows
    """``X``: one row per candidate (sparse for a policy taking sparse rows)."""
    context: Mapping[str, float] | None
    """The named context (guardrails)."""
    logged: list[Any] | None
    """For a policy with ``features``, each candidate's features as sent, to log
    (``JsonCandidates.build``); None for float vectors."""


class RankedChoice(NamedTuple):
    """One entry of a recommendation's ranking (``RankedArm`` of service/schemas.py)."""

    arm_id: str
    score: float
    propensity: float
    width: float | None


@dataclass(frozen=True)
class GuardrailReport:
    """What a guardrail did to a decision (``GuardrailInfo`` of service/schemas.py)."""

    blocked: dict[str, list[str]]
    safe_arm_served: bool
    unconstrained_arm_id: str
    argmax_blocked: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "safe_arm_served": self.safe_arm_served,
            "unconstrained_arm_id": self.unconstrained_arm_id,
            "argmax_blocked": self.argmax_blocked,
        }


@dataclass(frozen=True)
class Recommendation:
    """A decision as served: the fields of ``RecommendResponse`` (service/schemas.py), in
    its order, and ``annotations``, fields an API family adds to the stored response
    (e.g. a multi-slot event's slot ids, service/personalizer/multislot.py)."""

    event_id: str
    arm_id: str
    ranking: tuple[RankedChoice, ...]
    policy: str
    algorithm: str
    model_version: int
    explored: bool
    guardrail: GuardrailReport | None
    degraded: bool
    activated: bool
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def as_response(self) -> dict[str, Any]:
        """The ``RecommendResponse`` as a plain dict (annotations after its fields),
        what a repeat of the event is answered with and the native router serializes:
        validating it into the model and serializing that again cost about a fifth of a
        K = 50 request (``tests/service/test_api.py`` checks the field order)."""
        g = self.guardrail
        return {
            "event_id": self.event_id,
            "arm_id": self.arm_id,
            "ranking": [
                {"arm_id": a, "score": s, "propensity": p, "width": w}
                for a, s, p, w in self.ranking
            ],
            "policy": self.policy,
            "algorithm": self.algorithm,
            "model_version": self.model_version,
            "explored": self.explored,
            "guardrail": None if g is None else g.as_dict(),
            "degraded": self.degraded,
            "activated": self.activated,
            **self.annotations,
        }

    @classmethod
    def from_response(cls, response: Mapping[str, Any]) -> Recommendation:
        """The recommendation :meth:`as_response` gave ``response`` of (a stored one)."""
        fields = dict(response)
        ranking = tuple(
            RankedChoice(r["arm_id"], r["score"], r["propensity"], r["width"])
            for r in fields.pop("ranking")
        )
        g = fields.pop("guardrail")
        guardrail = None if g is None else GuardrailReport(**g)
        names = (
            "event_id",
            "arm_id",
            "policy",
            "algorithm",
            "model_version",
            "explored",
            "degraded",
            "activated",
        )
        own = {name: fields.pop(name) for name in names}
        return cls(**own, ranking=ranking, guardrail=guardrail, annotations=fields)

    def marked_degraded(self) -> Recommendation:
        """The same recommendation flagged ``degraded`` (it could not be stored)."""
        return replace(self, degraded=True)


def recommendation_of(
    req: RecommendRequest,
    runtime: Runtime,
    decision: Decision,
    event_id: str,
    model_version: int,
    degraded: bool,
) -> Recommendation:
    """The recommendation of ``decision`` for ``req``: its ranking cut to ``top_k``."""
    n = len(decision.ranking) if req.top_k is None else min(req.top_k, len(decision.ranking))
    widths = (
        [None] * n
        if decision.widths is None
        else np.asarray(decision.widths[:n], dtype=np.float64).tolist()
    )
    ranking = tuple(
        map(
            RankedChoice,
            decision.ranking[:n],
            np.asarray(decision.scores[:n], dtype=np.float64).tolist(),
            np.asarray(decision.propensities[:n], dtype=np.float64).tolist(),
            widths,
        )
    )
    g = decision.guardrail
    guardrail = None
    if g is not None:
        guardrail = GuardrailReport(
            blocked={a: list(r) for a, r in g.blocked.items()},
            safe_arm_served=bool(g.safe_arm_served),
            unconstrained_arm_id=g.unconstrained_arm_id,
            argmax_blocked=bool(g.argmax_blocked),
        )
    return Recommendation(
        event_id=event_id,
        arm_id=decision.arm_id,
        ranking=ranking,
        policy=req.policy,
        algorithm=runtime.info.algorithm,
        model_version=model_version,
        explored=bool(decision.explored),
        guardrail=guardrail,
        degraded=degraded,
        activated=not req.defer_activation,
    )


class ServingMode(Protocol):
    """How a request is served instead of the model's own decision: the engine selects
    greedily (no exploration) and :meth:`serve` turns that into the decision served and
    whether the model's choice was the one served (stored as the pending event's
    ``imitated``); ``learn`` says whether the event's reward is learned from. An API
    family defines its modes (service/personalizer/learning_modes.py)."""

    @property
    def learn(self) -> bool: ...

    def serve(self, greedy: Decision) -> tuple[Decision, bool | None]: ...


ServingModeOf = Callable[[PolicyInfo], ServingMode | None]
"""The serving mode of a request under a policy's current configuration (None: the model
serves its own decision, with exploration, and learns)."""


@dataclass(eq=False)
class ServedDecision:
    """A decision on its way to the store and the log."""

    req: RecommendRequest
    candidates: Candidates
    decision: Decision
    recommendation: Recommendation
    digest: str | None = None
    """The request's digest under a client's event id (a repeat must match it)."""
    learn: bool = True
    imitated: bool | None = None
    received: float = field(default_factory=time.perf_counter)
    """When the request was received (``time.perf_counter``): its logged latency runs
    from here to :meth:`record`."""

    @property
    def event_id(self) -> str:
        return self.recommendation.event_id

    def pending_event(self, runtime: Runtime, now: float) -> bytes:
        """The stored pending event; the response only under a client's event id (the
        one a repeat is answered with)."""
        ids, X = self.candidates.ids, self.candidates.rows
        req, arm = self.req, self.decision.arm_id
        return PendingEvent(
            state=EventState.PENDING,
            arm_id=arm,
            x=stored_row(X, ids.index(arm)),
            user_id=req.user_id,
            activated=not req.defer_activation,
            created_at=now,
            reset_at=runtime.info.reset_at,
            response=None if req.event_id is None else self.recommendation.as_response(),
            request_digest=self.digest,
            learn=self.learn,
            imitated=self.imitated,
            deadline=now + runtime.info.reward_wait_seconds,
            ips_weights=ips_weights(arm, ids, float(self.decision.propensity)),
        ).to_json()

    def _candidates_json(self) -> orjson.Fragment:
        """The log's ``candidates`` column: float vectors as sent, or the JSON features."""
        ids, X, _, logged = self.candidates
        if logged is not None:
            return logged_candidates(ids, logged)
        assert isinstance(X, np.ndarray)  # float vectors as sent: sparse rows are JSON's
        return candidates_json(ids, X)

    def record(self, now: float) -> DecisionRecord:
        """The event-log record of the decision, its latency measured to now."""
        rec = self.recommendation
        return DecisionRecord(
            event_id=rec.event_id,
            policy=self.req.policy,
            created_at=now,
            context=self.req.context,
            candidates=self._candidates_json(),
            arm_id=rec.arm_id,
            propensity=float(self.decision.propensity),
            scores=np.asarray(self.decision.scores, dtype=np.float64).tolist(),
            model_version=rec.model_version,
            user_id=self.req.user_id,
            explored=self.decision.explored,
            guardrail=None if rec.guardrail is None else rec.guardrail.as_dict(),
            degraded=rec.degraded,
            latency_us=round((time.perf_counter() - self.received) * 1e6),
        )

    def count(self, runtime: Runtime) -> None:
        """Count the decision (and what its guardrail blocked) on /metrics."""
        policy, decision = self.req.policy, self.decision
        labelled = runtime.labelled_arms
        metrics.DECISIONS.labels(
            policy, metrics.arm_label(self.recommendation.arm_id, labelled)
        ).inc()
        if decision.guardrail is not None:
            delta_g = runtime.policy.policy_stats().get("delta_g")
            if delta_g is not None:
                metrics.DELTA_G.labels(policy).set(delta_g)
            for arm in decision.guardrail.blocked:
                metrics.GUARDRAIL_BLOCKS.labels(policy, metrics.arm_label(arm, labelled)).inc()
            if decision.guardrail.argmax_blocked:
                metrics.GUARDRAIL_ARGMAX_BLOCKED.labels(policy).inc()
