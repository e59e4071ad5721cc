"""The decision service: recommend, reward, activation, the default-reward sweeper and
policy administration, over a :class:`StateStore` and an event-log writer.

State parts live in the store under the engine's part names (``arm:<id>``, ``shared``,
``user:<id>``); every process keeps a cached engine policy per policy name and loads
only the parts whose version changed (one store round trip per decision).

A pending event (key ``event:<id>``, JSON) moves through the states::

    pending --POST /reward-------------> rewarded   (model updated once)
    pending --sweeper, activated-------> defaulted  (default_reward applied once)
    pending --sweeper, not activated---> expired    (never learned from)

Every transition is one ``transact`` over the event key and the parts the update
touches, so a reward and the sweepers of several replicas race safely: exactly one
transition happens. A finished event stays ``done_event_retention_seconds`` so repeats
are answered, then the sweeper deletes it.

Repeated reward: ``200`` with ``applied: false`` and ``status: "already_rewarded"``
and the originally applied value; the model is not changed again. A reward for an
event finalized by the sweeper (default reward or expiry) is ``409``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import orjson

import bandit_core
from bandit_core import BanditError, BasePolicy, Decision
from service import metrics
from service.errors import Conflict, EngineInputError, InvalidRequest, NotFound
from service.policies import (
    CONFIG_KEY,
    Runtime,
    build_policy,
    decode_info,
    encode_info,
    engine_changed,
    new_info,
    spec_of,
)
from service.schemas import (
    ActivateResponse,
    ArmStatsOut,
    PolicyInfo,
    PolicySpec,
    PolicyStats,
    Readiness,
    RecommendRequest,
    RewardRequest,
    RewardResponse,
    Snapshot,
)
from service.settings import Settings
from service.storage.base import (
    Claim,
    DecisionRecord,
    EventIdTakenError,
    EventLog,
    RewardRecord,
    Schedule,
    StateStore,
    StoreUnavailableError,
    TransactionFn,
    VersionedValue,
)
from service.storage.base import Snapshot as LogSnapshot

log = logging.getLogger("bandit.service")

EVENT_PREFIX = "event:"
PENDING, REWARDED, DEFAULTED, EXPIRED = "pending", "rewarded", "defaulted", "expired"


class LogSink(Protocol):
    """Where decisions and rewards go (the event-log writer): never blocks."""

    def submit_decision(self, record: DecisionRecord) -> None: ...

    def submit_reward(self, record: RewardRecord) -> None: ...

    @property
    def spool_depth(self) -> int: ...

    @property
    def lag_seconds(self) -> float: ...

    @property
    def dead_letters(self) -> int: ...


class _AlreadyFinal(Exception):
    def __init__(self, event: dict[str, Any]) -> None:
        self.event = event


def event_key(event_id: str) -> str:
    return EVENT_PREFIX + event_id


def _dumps(obj: Any) -> bytes:
    # orjson: a K = 50 pending event (with its response) in 43 us against 117 us by json;
    # numpy scalars an engine may hand back are written as the numbers they are
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def candidates_json(ids: Sequence[str], X: np.ndarray) -> orjson.Fragment:
    """The log's ``candidates`` column, ``[{"id": <arm>, "features": <row of X>}, ...]``,
    as the JSON orjson writes for it, built from the text of each distinct row.

    Without arm features of their own every row is the context: its text is written once
    instead of K times (the K x d floats were 55 us of the writer thread's time under the
    GIL at K = 50, d = 32, and the K row lists kept about 100 objects per queued decision
    for the garbage collector to scan); the rows are compared bitwise, so ``-0.0`` and
    ``0.0`` keep their own text.
    """
    option = orjson.OPT_SERIALIZE_NUMPY
    if X.tobytes() == X[0].tobytes() * len(X):
        rows = [orjson.Fragment(orjson.dumps(X[0], option=option))] * len(X)
    else:
        rows = [orjson.Fragment(orjson.dumps(x, option=option)) for x in X]
    return orjson.Fragment(orjson.dumps([{"id": a, "features": r} for a, r in zip(ids, rows)]))


class DecisionService:
    """Everything the routers call; one per process, created in the app's lifespan."""

    def __init__(
        self,
        store: StateStore,
        sink: LogSink,
        event_log: EventLog,
        settings: Settings,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.sink = sink
        self.event_log = event_log
        self.settings = settings
        self.clock = clock
        self._cache: dict[str, Runtime] = {}
        self._dead_letters_exported = 0

    # ---- loading state ----------------------------------------------------------------------
    async def _read(
        self, name: str, keys: Sequence[str], known: Mapping[str, int]
    ) -> dict[str, Any]:
        try:
            return await self.store.read(name, list(keys), known)
        except StoreUnavailableError:
            metrics.STORE_ERRORS.labels("read").inc()
            raise

    async def load(
        self,
        name: str,
        parts_of: Callable[[BasePolicy], list[str]] = lambda p: [],
        extra: Sequence[str] = (),
    ) -> tuple[Runtime, list[str], dict[str, bytes | None]]:
        """Bring the cached policy ``name`` up to date for the parts ``parts_of(policy)``
        in one round trip (two when its config changed); also return the raw values of
        the ``extra`` keys. 404 if the policy does not exist."""
        runtime = self._cache.get(name)
        parts = parts_of(runtime.policy) if runtime else []
        known = {p: runtime.versions[p] for p in parts if runtime and p in runtime.versions}
        if runtime is not None and runtime.config_version:
            known[CONFIG_KEY] = runtime.config_version  # the config comes back only if changed
        values = await self._read(name, [CONFIG_KEY, *extra, *parts], known)
        config = values.get(CONFIG_KEY)
        if config is None and runtime is not None and CONFIG_KEY in known:
            info = runtime.info
        elif config is None or config.data is None:
            self._cache.pop(name, None)
            raise NotFound(f"policy {name!r} does not exist")
        else:
            info = decode_info(config.data)
        if runtime is None or runtime.info.revision != info.revision:
            runtime = Runtime(info=info, policy=build_policy(spec_of(info)))
            self._cache[name] = runtime
            parts = parts_of(runtime.policy)
            values.update(await self._read(name, parts, {}))
        runtime.info = info
        if config is not None:
            runtime.config_version = config.version
        self._absorb(runtime, {p: values[p] for p in parts if p in values})
        return runtime, parts, {k: values[k].data if k in values else None for k in extra}

    @staticmethod
    def _absorb(runtime: Runtime, values: Mapping[str, Any]) -> None:
        if values:
            runtime.policy.import_parts({k: v.data for k, v in values.items()})
            runtime.versions.update({k: v.version for k, v in values.items()})
            runtime.absorbed += 1

    async def _transact(
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
        reloaded next time."""
        mark = -1

        def tracked(values: dict[str, bytes | None]) -> Mapping[str, bytes | None]:
            nonlocal mark
            out = fn(values)
            mark = runtime.absorbed
            return out

        parts = [k for k in keys if not k.startswith(EVENT_PREFIX) and k != CONFIG_KEY]
        try:
            versions = await self.store.transact(name, keys, tracked, assumed, schedule, claim)
        except BaseException as exc:
            if isinstance(exc, StoreUnavailableError):
                metrics.STORE_ERRORS.labels("transact").inc()
            for k in parts:
                runtime.versions.pop(k, None)
            raise
        for k in parts:
            if k in versions and mark == runtime.absorbed:
                runtime.versions[k] = versions[k]
            else:
                runtime.versions.pop(k, None)
        return versions

    # ---- POST /recommend ----------------------------------------------------------------------
    async def recommend(self, req: RecommendRequest) -> bytes:
        """The JSON of the :class:`RecommendResponse` for ``req`` (built and serialized
        once here, and stored as is with the pending event for repeats)."""
        if req.event_id is not None:
            original = await self._original_decision(req.policy, req.event_id)
            if original is not None:
                return original
        runtime, ids, X, features, parts, degraded = await self._load_for_select(req)
        decision = self._select(runtime, ids, X, req, features)
        now = self.clock()
        event_id = req.event_id or secrets.token_hex(16)
        response = self._response(req, runtime, decision, event_id, parts, degraded)
        if not degraded:
            ttl = self.settings.event_ttl_seconds
            args = (req, runtime, ids, X, features, decision, response, parts, now)
            try:
                if req.event_id is not None:  # a client's id may repeat: register it first
                    if not await self.store.register_event(event_id, req.policy, ttl):
                        return await self._wait_original(req.policy, event_id)
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
        self._log_decision(req, runtime, ids, X, decision, response, now)
        return _dumps(response)

    async def _load_for_select(
        self, req: RecommendRequest
    ) -> tuple[Runtime, list[str], np.ndarray, dict[str, float] | None, list[str], bool]:
        """The up-to-date policy and the candidates: one store round trip when the
        policy is cached and unchanged; from the cache, flagged degraded, when the store
        is down."""
        cached = self._cache.get(req.policy)
        runtime = cached or (await self.load(req.policy))[0]
        while True:
            ids, X, features = self._candidates(req, runtime)

            def parts_of(policy: BasePolicy, ids: list[str] = ids) -> list[str]:
                return policy.parts_for_select(ids, req.user_id)

            try:
                fresh, parts, _ = await self.load(req.policy, parts_of)
            except StoreUnavailableError:
                if cached is None:
                    raise
                return (
                    cached,
                    ids,
                    X,
                    features,
                    cached.policy.parts_for_select(ids, req.user_id),
                    True,
                )
            if fresh.info.revision == runtime.info.revision:
                return fresh, ids, X, features, parts, False
            runtime = fresh

    def _candidates(
        self, req: RecommendRequest, runtime: Runtime
    ) -> tuple[list[str], np.ndarray, dict[str, float] | None]:
        """Candidate ids and their feature rows ``X`` (shape ``(K, dimension)``): each row
        is the context followed by the arm's own features."""
        info = runtime.info
        features: dict[str, float] | None = None
        if isinstance(req.context, dict):
            if not info.feature_names:
                raise InvalidRequest(
                    f"policy {info.name!r} declares no feature_names; send context as a list of floats",
                    ["body", "context"],
                )
            missing = [f for f in info.feature_names if f not in req.context]
            unknown = sorted(set(req.context) - set(info.feature_names))
            if missing or unknown:
                raise InvalidRequest(
                    f"context must hold exactly the features {info.feature_names}; missing {missing}, unknown {unknown}",
                    ["body", "context"],
                )
            features = dict(req.context)
            context = [req.context[f] for f in info.feature_names]
        else:
            context = list(req.context)
        if req.arms is None:
            if not info.arms:
                raise InvalidRequest(
                    f"policy {info.name!r} has no registered arms; send arms", ["body", "arms"]
                )
            arms = [(a, None, None) for a in info.arms]
        else:
            if len(req.arms) > self.settings.max_candidates:
                raise InvalidRequest(
                    f"at most {self.settings.max_candidates} candidates, but got {len(req.arms)}",
                    ["body", "arms"],
                )
            arms = [(a.id, a.features, i) for i, a in enumerate(req.arms)]
            seen: set[str] = set()
            registered = set(info.arms or ())
            for arm_id, _, i in arms:
                if arm_id in seen:
                    raise InvalidRequest(
                        f"arm id {arm_id!r} appears more than once", ["body", "arms", i, "id"]
                    )
                seen.add(arm_id)
                if registered and arm_id not in registered:
                    raise InvalidRequest(
                        f"arm {arm_id!r} is not a registered arm of policy {info.name!r}",
                        ["body", "arms", i, "id"],
                    )
        exclude = set(req.exclude or ())
        arms = [a for a in arms if a[0] not in exclude]
        if not arms:
            raise InvalidRequest(
                "no candidate arms left (empty arms, or all excluded)", ["body", "arms"]
            )
        d = info.dimension
        n_ctx = len(context)
        for arm_id, own, i in arms:
            n_own = len(own) if own else 0
            if n_ctx + n_own != d:
                loc = (
                    ["body", "context"]
                    if i is None or own is None
                    else ["body", "arms", i, "features"]
                )
                raise InvalidRequest(
                    f"the feature vector of arm {arm_id!r} (context {n_ctx} + arm features "
                    f"{n_own}) has length {n_ctx + n_own}, but the policy's dimension is {d}",
                    loc,
                )
        # Filled by columns, not built from K Python row lists (the lists cost ~10x more).
        X = np.empty((len(arms), d), dtype=np.float64)
        X[:, :n_ctx] = context
        if n_ctx < d:  # then every arm brought d - n_ctx features of its own
            X[:, n_ctx:] = [own for _, own, _ in arms]
        return [a[0] for a in arms], X, features

    def _select(
        self,
        runtime: Runtime,
        ids: list[str],
        X: np.ndarray,
        req: RecommendRequest,
        features: dict[str, float] | None,
    ) -> Decision:
        try:
            return runtime.policy.select(
                ids, X, user_id=req.user_id, features=features, explore=req.explore
            )
        except BanditError as exc:
            raise EngineInputError(exc, ["body", "arms"]) from exc

    def _response(
        self,
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
        X: np.ndarray,
        features: dict[str, float] | None,
        decision: Decision,
        response: dict[str, Any],
        parts: list[str],
        now: float,
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
                runtime.policy.import_parts({p: values[p] for p in changed})
                again = self._select(runtime, ids, X, req, features)
                result["decision"] = again
                result["response"] = self._response(req, runtime, again, event_id, parts, False)
                out.update(runtime.policy.export_parts(changed))
            chosen = result["decision"]
            row = X[ids.index(chosen.arm_id)]
            out[key] = _dumps(
                {
                    "state": PENDING,
                    "arm_id": chosen.arm_id,
                    "x": row.tolist(),
                    "user_id": req.user_id,
                    "activated": not req.defer_activation,
                    "created_at": now,
                    "reset_at": runtime.info.reset_at,
                    "response": result["response"],
                }
            )
            return out

        def schedule() -> Schedule:
            arm = result["decision"].arm_id
            counters = {"decisions": 1.0, "pending": 1.0, f"pulls:{arm}": 1.0}
            return Schedule(event_id, now + runtime.info.reward_wait_seconds, counters)

        # A new event id has no value yet: assuming so saves the store a read.
        await self._transact(
            runtime,
            req.policy,
            [key, *changed],
            fn,
            {key: VersionedValue(0, None)},
            schedule,
            claim,
        )
        return result["response"], result["decision"]

    async def _original_decision(self, name: str, event_id: str) -> bytes | None:
        owner = await self.store.event_policy(event_id)
        if owner is None:
            return None
        if owner != name:
            raise Conflict(f"event_id {event_id!r} belongs to another policy")
        values = await self._read(name, [event_key(event_id)], {})
        value = values.get(event_key(event_id))
        if value is None or value.data is None:
            return None
        return _dumps(orjson.loads(value.data)["response"])

    async def _wait_original(self, name: str, event_id: str) -> bytes:
        for _ in range(20):
            original = await self._original_decision(name, event_id)
            if original is not None:
                return original
            await asyncio.sleep(0.05)
        raise Conflict(f"event_id {event_id!r} is being used by a concurrent request")

    def _log_decision(
        self,
        req: RecommendRequest,
        runtime: Runtime,
        ids: list[str],
        X: np.ndarray,
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
                candidates=candidates_json(ids, X),
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
        metrics.DECISIONS.labels(req.policy, response["arm_id"]).inc()
        if decision.guardrail is not None:
            delta_g = runtime.policy.policy_stats().get("delta_g")
            if delta_g is not None:
                metrics.DELTA_G.labels(req.policy).set(delta_g)
            for arm in decision.guardrail.blocked:
                metrics.GUARDRAIL_BLOCKS.labels(req.policy, arm).inc()
            if decision.guardrail.argmax_blocked:
                metrics.GUARDRAIL_ARGMAX_BLOCKED.labels(req.policy).inc()

    # ---- POST /reward -------------------------------------------------------------------------
    async def reward(self, req: RewardRequest) -> RewardResponse:
        name = await self.store.event_policy(req.event_id)
        if name is None:
            raise NotFound(f"event_id {req.event_id!r} is unknown or expired")
        runtime, _, raw = await self.load(name, extra=[event_key(req.event_id)])
        event = self._event(req.event_id, raw[event_key(req.event_id)])
        if req.arm_id is not None and req.arm_id != event["arm_id"]:
            raise InvalidRequest(
                f"arm_id must be the served arm {event['arm_id']!r} of this event, but got {req.arm_id!r}",
                ["body", "arm_id"],
            )
        low, high = runtime.info.reward_range
        if not low <= req.reward <= high:
            raise InvalidRequest(
                f"reward must lie in the policy's reward_range [{low}, {high}], but got {req.reward}",
                ["body", "reward"],
            )
        if event["state"] == PENDING and not event["activated"]:
            raise Conflict(
                f"event {req.event_id!r} was deferred and is not activated; activate it first"
            )
        try:
            applied = await self._apply(name, runtime, req.event_id, event, req.reward, REWARDED)
        except _AlreadyFinal as final:
            event = final.event
            if event["state"] == REWARDED:
                self._log_reward(name, req.event_id, event)
                return RewardResponse(
                    event_id=req.event_id,
                    arm_id=event["arm_id"],
                    reward=event["reward"],
                    applied=False,
                    status="already_rewarded",
                )
            raise Conflict(
                f"event {req.event_id!r} is already finalized ({event['state']})"
            ) from None
        await self._after_final(name, req.event_id, applied, "explicit")
        return RewardResponse(
            event_id=req.event_id,
            arm_id=event["arm_id"],
            reward=req.reward,
            applied=True,
            status="applied",
        )

    @staticmethod
    def _event(event_id: str, data: bytes | None) -> dict[str, Any]:
        if data is None:
            raise NotFound(f"event_id {event_id!r} is unknown or expired")
        return json.loads(data)

    async def _apply(
        self,
        name: str,
        runtime: Runtime,
        event_id: str,
        event: dict[str, Any],
        value: float | None,
        state: str,
    ) -> dict[str, Any]:
        """One transaction: move a pending event to ``state`` and, when ``value`` is not
        None, update the served arm's parts with it; returns the finalized event. Raises
        :class:`_AlreadyFinal` if the event is no longer pending (the transition happened
        elsewhere)."""
        key = event_key(event_id)
        arm, user = event["arm_id"], event.get("user_id")
        parts = runtime.policy.parts_for_update(arm, user) if value is not None else []
        result: dict[str, Any] = {}

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            current = values[key]
            if current is None:
                raise NotFound(f"event_id {event_id!r} is unknown or expired")
            ev = json.loads(current)
            if ev["state"] != PENDING:
                raise _AlreadyFinal(ev)
            if ev.get("reset_at") != runtime.info.reset_at and value is not None:
                raise Conflict(
                    f"policy {name!r} was reset or reconfigured after event {event_id!r}"
                )
            out: dict[str, bytes | None] = {}
            if value is not None:
                runtime.policy.import_parts({p: values[p] for p in parts})
                runtime.policy.add_arm(arm)
                runtime.policy.update(arm, np.asarray(ev["x"]), value, user_id=user)
                out.update(runtime.policy.export_parts(parts))
            ev.update(state=state, reward=value, finalized_at=self.clock())
            out[key] = _dumps(ev)
            result["event"] = ev
            return out

        await self._transact(runtime, name, [key, *parts], fn)
        if value is not None:
            alpha = runtime.policy.arm_stats(arm).extras.get("alpha")
            if alpha is not None:
                metrics.LNUCB_TA_ALPHA.labels(name, arm).set(alpha)
        return result["event"]

    async def _after_final(
        self, name: str, event_id: str, event: dict[str, Any], source: str | None
    ) -> None:
        """Once an event left ``pending``: log the applied reward first (the model already
        holds it), then the retention schedule and the counters."""
        now = self.clock()
        counters = {"pending": -1.0}
        if source is None:
            metrics.EXPIRED_EVENTS.labels(name).inc()
        else:
            arm, value = self._log_reward(name, event_id, event)
            metrics.REWARDS.labels(name, arm, source).inc()
            metrics.REWARD_SUM.labels(name, arm, source).inc(value)
            counters["rewards"] = 1.0
            if source == "default":
                metrics.DEFAULT_REWARDS.labels(name).inc()
                counters["default_rewards"] = 1.0
        retention = now + self.settings.done_event_retention_seconds
        await self.store.schedule(name, event_id, retention, counters)

    def _log_reward(self, name: str, event_id: str, event: dict[str, Any]) -> tuple[str, float]:
        """Submit the reward of a finalized event to the log; safe to repeat (the log is
        idempotent on event id), which is how a reward applied by a process that died
        before logging it still reaches the log: on the client's repeat, or at the
        latest when the sweeper deletes the finished event."""
        arm, value = event["arm_id"], float(event["reward"])
        source = "explicit" if event["state"] == REWARDED else "default"
        self.sink.submit_reward(
            RewardRecord(
                event_id=event_id,
                policy=name,
                arm_id=arm,
                value=value,
                source=source,
                created_at=float(event["finalized_at"]),
            )
        )
        return arm, value

    # ---- POST /events/{id}/activate -----------------------------------------------------------
    async def activate(self, event_id: str) -> ActivateResponse:
        name = await self.store.event_policy(event_id)
        if name is None:
            raise NotFound(f"event_id {event_id!r} is unknown or expired")
        runtime, _, raw = await self.load(name, extra=[event_key(event_id)])
        key = event_key(event_id)
        self._event(event_id, raw[key])

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            ev = self._event(event_id, values[key])
            if ev["state"] == REWARDED or (ev["state"] == PENDING and ev["activated"]):
                return {}
            if ev["state"] != PENDING:
                raise Conflict(f"event {event_id!r} is already finalized ({ev['state']})")
            ev["activated"] = True
            return {key: _dumps(ev)}

        written = await self._transact(runtime, name, [key], fn)
        if written:
            await self.store.schedule(
                name, event_id, self.clock() + runtime.info.reward_wait_seconds
            )
        return ActivateResponse(event_id=event_id, activated=True)

    # ---- the sweeper ---------------------------------------------------------------------------
    async def sweep_once(self) -> int:
        """Finalize the due events of every policy; returns how many this call finalized.
        Safe to run in every replica at once (each transition is one transaction)."""
        done = 0
        for name in await self.store.list_policies():
            try:
                done += await self._sweep_policy(name)
            except NotFound:
                continue
        return done

    async def _sweep_policy(self, name: str) -> int:
        due, counters = await asyncio.gather(
            self.store.due_events(name, self.clock(), self.settings.sweeper_batch),
            self.store.counters(name),
        )
        metrics.PENDING_EVENTS.labels(name).set(counters.get("pending", 0.0))
        if not due:
            return 0
        keys = [event_key(e) for e in due]
        runtime, _, raw = await self.load(name, extra=keys)
        finalized = 0
        for event_id in due:
            data = raw[event_key(event_id)]
            if data is None:
                await self.store.unschedule(name, event_id)
                continue
            event = json.loads(data)
            if event["state"] != PENDING:
                await self._delete_done(runtime, name, event_id)
                continue
            default = runtime.info.default_reward
            learn = (
                event["activated"]
                and default is not None
                and event.get("reset_at") == runtime.info.reset_at
            )
            try:
                applied = await self._apply(
                    name,
                    runtime,
                    event_id,
                    event,
                    default if learn else None,
                    DEFAULTED if learn else EXPIRED,
                )
            except (_AlreadyFinal, NotFound, Conflict):
                continue
            await self._after_final(name, event_id, applied, "default" if learn else None)
            finalized += 1
        return finalized

    async def _delete_done(self, runtime: Runtime, name: str, event_id: str) -> None:
        key = event_key(event_id)

        deleted: list[dict[str, Any]] = []
        retained: list[bool] = []
        now = self.clock()

        def fn(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
            retained.clear()
            ev = values[key]
            if ev is None:
                return {}
            event = json.loads(ev)
            # a sweeper that listed the event while it was pending must not delete it
            # once another process finalized it: it is kept for its retention period
            if event["state"] == PENDING or (
                event["finalized_at"] + self.settings.done_event_retention_seconds > now
            ):
                retained.append(True)
                return {}
            deleted[:] = [event]
            return {key: None}

        await self._transact(runtime, name, [key], fn)
        if retained:
            return
        if deleted and deleted[0]["state"] in (REWARDED, DEFAULTED):
            self._log_reward(name, event_id, deleted[0])
        await self.store.unschedule(name, event_id)

    async def run_sweeper(self, stop: asyncio.Event) -> None:
        """Sweep every ``sweeper_interval_seconds`` until ``stop`` is set."""
        await _every(self.settings.sweeper_interval_seconds, stop, self.sweep_once, "sweeper")

    # ---- readiness -----------------------------------------------------------------------------
    async def probe_dependencies(self) -> tuple[bool, bool]:
        """Ping the state store and the event log concurrently; ``(store_ok, log_ok)``,
        also published as ``bandit_dependency_up{dependency="redis"|"database"}``."""

        async def reachable(ping: Awaitable[None]) -> bool:
            try:
                await ping
            except StoreUnavailableError:
                return False
            return True

        store_ok, log_ok = await asyncio.gather(
            reachable(self.store.ping()), reachable(asyncio.to_thread(self.event_log.ping))
        )
        if not store_ok:
            metrics.STORE_ERRORS.labels("ping").inc()
        metrics.DEPENDENCY_UP.labels("redis").set(float(store_ok))
        metrics.DEPENDENCY_UP.labels("database").set(float(log_ok))
        return store_ok, log_ok

    async def readiness(self) -> Readiness:
        """Reachability of the state store and the event log, and the writer's backlog."""
        store_ok, log_ok = await self.probe_dependencies()
        spool, lag = self.sink_backlog()
        return Readiness(
            status="ready" if store_ok and log_ok else "degraded",
            state_store="ok" if store_ok else "unavailable",
            event_log="ok" if log_ok else "unavailable",
            spool_depth=spool,
            log_lag_seconds=lag,
        )

    def sink_backlog(self) -> tuple[int, float]:
        """``(spooled records, seconds the oldest unflushed record waited)``, also
        published as gauges, with the dead letters counted since the last call. Cheap
        (in-memory counters): ``/metrics`` calls it at every scrape."""
        spool, lag = int(self.sink.spool_depth), float(self.sink.lag_seconds)
        metrics.SPOOL_DEPTH.set(spool)
        metrics.LOG_LAG.set(lag)
        dead = int(self.sink.dead_letters)
        metrics.DEAD_LETTERS.inc(dead - self._dead_letters_exported)
        self._dead_letters_exported = dead
        return spool, lag

    async def refresh_gauges(self) -> None:
        """Probe the dependencies, then publish the backlog and every policy's gauges
        (alpha per arm, delta_G and its limit, pending events) as :meth:`stats` does, so
        dashboards and alerts see live values without API calls. A store outage is
        already published by the probe, so the per-policy part is skipped then."""
        store_ok, _ = await self.probe_dependencies()
        self.sink_backlog()
        if not store_ok:
            return
        for name in await self.store.list_policies():
            try:
                await self.stats(name)
            except NotFound:
                continue

    async def run_gauges(self, stop: asyncio.Event) -> None:
        """Refresh the gauges every ``metrics_refresh_seconds`` until ``stop`` is set."""
        await _every(self.settings.metrics_refresh_seconds, stop, self.refresh_gauges, "gauges")

    # ---- administration ---------------------------------------------------------------------------
    async def get_policy(self, name: str) -> PolicyInfo:
        runtime, _, _ = await self.load(name)
        return runtime.info

    async def list_policies(self) -> list[PolicyInfo]:
        out = []
        for name in sorted(await self.store.list_policies()):
            try:
                out.append(await self.get_policy(name))
            except NotFound:
                continue
        return out

    async def put_policy(self, name: str, spec: PolicySpec, log_config: bool = True) -> PolicyInfo:
        """Create or replace a policy; a change the engine sees resets its state."""
        if not self.settings.allow_import_guardrails and any(
            g.get("type") == "import" for g in spec.guardrails or ()
        ):
            raise InvalidRequest(
                "guardrails of type 'import' load server-side code; the server must set "
                "BANDIT_ALLOW_IMPORT_GUARDRAILS=true to accept them",
                ["body", "guardrails"],
            )
        build_policy(spec)
        now = self.clock()
        try:
            old = await self.get_policy(name)
        except NotFound:
            old = None
        reset = old is None or engine_changed(spec_of(old), spec)
        info = new_info(name, spec, now, old, reset=reset)
        if log_config:
            await asyncio.to_thread(
                self.event_log.upsert_policy, name, info.model_dump(mode="json")
            )
        if old is not None and reset:
            await self.store.delete_policy(name)
        await self._write_config(name, info)
        return info

    async def _write_config(
        self, name: str, info: PolicyInfo, extra: Mapping[str, bytes | None] | None = None
    ) -> None:
        await self.store.add_policy(name)
        payload = {CONFIG_KEY: encode_info(info), **(extra or {})}
        await self.store.transact(name, list(payload), lambda _values: payload)
        self._cache.pop(name, None)

    async def delete_policy(self, name: str) -> None:
        await self.get_policy(name)
        await asyncio.to_thread(self.event_log.delete_policy, name)
        await self.store.delete_policy(name)
        self._cache.pop(name, None)

    async def reset(self, name: str) -> PolicyInfo:
        """Forget everything learned (and the pending events); keeps the config."""
        old = await self.get_policy(name)
        info = new_info(name, spec_of(old), self.clock(), old, reset=True)
        await asyncio.to_thread(self.event_log.upsert_policy, name, info.model_dump(mode="json"))
        await self.store.delete_policy(name)
        await self._write_config(name, info)
        return info

    async def change_arms(
        self, name: str, add: Sequence[str] = (), retire: Sequence[str] = ()
    ) -> PolicyInfo:
        """Register arms, or retire them (their learned state is deleted)."""
        old = await self.get_policy(name)
        arms = [a for a in (old.arms or []) if a not in retire] + [
            a for a in dict.fromkeys(add) if a not in (old.arms or [])
        ]
        unknown = [a for a in retire if a not in (old.arms or [])]
        if unknown:
            raise NotFound(f"arms {unknown} are not registered arms of policy {name!r}")
        spec = spec_of(old).model_copy(update={"arms": arms})
        info = new_info(name, spec, self.clock(), old, reset=False)
        await asyncio.to_thread(self.event_log.upsert_policy, name, info.model_dump(mode="json"))
        await self._write_config(name, info, {f"arm:{a}": None for a in retire})
        return info

    async def _known_arms(self, name: str, info: PolicyInfo) -> list[str]:
        counters = await self.store.counters(name)
        arms = list(info.arms or [])
        arms += sorted(
            k[len("pulls:") :] for k in counters if k.startswith("pulls:") and k[6:] not in arms
        )
        return arms

    async def _load_all(self, name: str) -> tuple[Runtime, list[str], dict[str, float]]:
        runtime, _, _ = await self.load(name)
        arms = await self._known_arms(name, runtime.info)
        runtime, _, _ = await self.load(name, lambda p: p.parts_for_select(arms) if arms else [])
        return runtime, arms, await self.store.counters(name)

    async def stats(self, name: str) -> PolicyStats:
        runtime, arms, counters = await self._load_all(name)
        policy = runtime.policy
        out: dict[str, ArmStatsOut] = {}
        for arm in arms:
            if arm in policy.arm_ids:
                s = policy.arm_stats(arm)
                rewarded, total, extras = s.rewarded, s.reward_sum, dict(s.extras)
            else:
                rewarded, total, extras = 0, 0.0, {}
            alpha = extras.get("alpha")
            if alpha is not None:
                metrics.LNUCB_TA_ALPHA.labels(name, arm).set(alpha)
            out[arm] = ArmStatsOut(
                pulls=int(counters.get(f"pulls:{arm}", 0)),
                rewarded=rewarded,
                reward_sum=total,
                mean_reward=total / rewarded if rewarded else 0.0,
                alpha=alpha,
                extras=extras,
            )
        pstats = {k: float(v) for k, v in policy.policy_stats().items()}
        delta_g = pstats.get("delta_g")
        if delta_g is not None:
            metrics.DELTA_G.labels(name).set(delta_g)
            limit = runtime.info.delta_g_limit
            metrics.DELTA_G_LIMIT.labels(name).set(
                self.settings.default_delta_g_limit if limit is None else limit
            )
        metrics.PENDING_EVENTS.labels(name).set(counters.get("pending", 0.0))
        return PolicyStats(
            policy=name,
            algorithm=runtime.info.algorithm,
            decisions=int(counters.get("decisions", 0)),
            rewards=int(counters.get("rewards", 0)),
            default_rewards=int(counters.get("default_rewards", 0)),
            arms=out,
            delta_G=delta_g,
            policy_stats=pstats,
        )

    async def export_snapshot(self, name: str) -> Snapshot:
        """The whole model of ``name`` (state of every known arm and the shared part;
        per-user parts are not enumerable from the store and are left out)."""
        runtime, arms, _ = await self._load_all(name)
        parts = runtime.policy.parts_for_select(arms) if arms else []
        # A fresh policy holding exactly the loaded parts (the cache may hold user parts).
        model = build_policy(runtime.spec)
        model.import_parts(runtime.policy.export_parts(parts))
        return Snapshot(
            policy=name,
            algorithm=runtime.info.algorithm,
            created_at=self.clock(),
            model_version=runtime.model_version(parts),
            data=base64.b64encode(model.to_bytes()).decode(),
        )

    async def import_snapshot(self, name: str, data: str) -> Snapshot:
        runtime, _, _ = await self.load(name)
        try:
            blob = base64.b64decode(data, validate=True)
            policy = bandit_core.policy_from_bytes(blob)
        except (ValueError, BanditError) as exc:
            raise InvalidRequest(
                f"data is not an exported snapshot: {exc}", ["body", "data"]
            ) from exc
        if policy.name != runtime.info.algorithm or policy.config.d != runtime.info.dimension:
            raise InvalidRequest(
                f"snapshot is {policy.name} with dimension {policy.config.d}, but policy {name!r} is "
                f"{runtime.info.algorithm} with dimension {runtime.info.dimension}",
                ["body", "data"],
            )
        parts = policy.export_parts(policy.part_names())
        await self.store.transact(name, list(parts), lambda _values: parts)
        self._cache.pop(name, None)
        return await self.export_snapshot(name)

    async def snapshot_all(self) -> int:
        """Save a snapshot of every policy into the event log; returns how many."""
        saved = 0
        for name in await self.store.list_policies():
            try:
                snap = await self.export_snapshot(name)
            except NotFound:
                continue
            record = LogSnapshot(
                policy=name,
                created_at=snap.created_at,
                model_version=snap.model_version,
                data=base64.b64decode(snap.data),
                meta={"algorithm": snap.algorithm},
            )
            await asyncio.to_thread(self.event_log.save_snapshot, record)
            saved += 1
        return saved

    async def run_snapshots(self, stop: asyncio.Event) -> None:
        if self.settings.snapshot_interval_seconds > 0:
            await _every(
                self.settings.snapshot_interval_seconds, stop, self.snapshot_all, "snapshots"
            )


async def _every(
    seconds: float, stop: asyncio.Event, job: Callable[[], Awaitable[Any]], what: str
) -> None:
    """Run ``job`` every ``seconds`` until ``stop``; a failure is logged and retried."""
    while not stop.is_set():
        try:
            await job()
        except StoreUnavailableError as exc:
            metrics.STORE_ERRORS.labels(what).inc()
            log.warning("%s: state store unavailable: %s", what, exc)
        except Exception:  # a background loop must survive one bad round
            log.exception("%s failed; retrying in %.1fs", what, seconds)
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except TimeoutError:
            pass
