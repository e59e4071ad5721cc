"""Offline evaluations of a loop's log (Personalizer's ``evaluations`` routes, the native
``/policies/{name}/evaluations`` and ``bandit evaluate``; docs/personalizer.md "Offline
evaluations", docs/offline.md "Evaluations").

An evaluation covers the decisions of one policy made in ``[start_time, end_time)``
that have a logged reward, and estimates, per decision, the reward of:

* ``Online``: the loop's learning settings when the evaluation was submitted;
* ``Baseline``: always the first candidate (the first action sent and not excluded);
* ``Random``: a uniform choice among the candidates;
* ``Custom``: each learning setting of the request (VW arguments, parsed as
  ``configurations/policy`` parses them, or a JSON policy spec);
* ``OfflineExperimentation`` (when asked): the best of a small grid of settings around
  the loop's own (:data:`GRID`: exploration, interactions on or off, ridge regularization).

Learning settings are replayed with progressive validation and every estimate is kept
as per-period sums (:mod:`bandit_core.evaluation.progressive`, periods of
:data:`PERIOD_SECONDS`), from which the IPS and SNIPS estimates and their Gaussian
intervals of any window follow.

Runs never happen on the request path: :class:`Evaluations` queues them on a bounded
:class:`~service.usecases.worker_pool.WorkerPool` (``evaluation_workers`` spawned
processes; a run is CPU-bound numpy and Python, which a thread would run under the
server's GIL). The record lives in the
event-log database (:mod:`service.storage.evaluations`); the worker writes its progress
and result there, so any replica answers, and one whose run's process died
(restart, crash) sees its heartbeat age and runs it again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import ValidationError

from bandit_core.datasets import LoggedEvent
from bandit_core.evaluation import (
    WindowSums,
    baseline_distribution,
    importance_weights,
    period_sums,
    progressive_distribution,
    uniform_distribution,
)
from bandit_core.evaluation.progressive import SUM_FIELDS
from bandit_core.features import SparseRows
from bandit_core.featurized import featurized_rows
from service.errors import Conflict, InvalidRequest, NotFound
from service.evaluation_schemas import EvaluationPolicy
from service.personalizer_schemas import PersonalizerPolicy
from service.policies import build_policy, spec_of
from service.schemas import PolicyInfo, PolicySpec
from service.settings import Settings
from service.storage.base import DecisionRecord, EventLog, LoggedDecision
from service.storage.evaluations import (
    FINAL,
    EvaluationExistsError,
    EvaluationRecord,
    EvaluationStore,
    SqlEvaluationStore,
)
from service.storage.schema import create_log_engine
from service.usecases.json_features import CachedFeaturizer
from service.usecases.loops import (
    DEFAULT_LOOP_SPEC,
    DEFAULT_POLICY_NAME,
    ENGINE_OF_VW,
    POLICY_NAME_KEY,
    Loops,
    parse_vw_arguments,
    vw_arguments,
)
from service.usecases.worker_pool import WorkerPool

log = logging.getLogger("bandit.service")

PERIOD_SECONDS = 300.0
"""Length of the periods the estimates are summed over (Personalizer's 5 minutes)."""
GRID: dict[str, tuple[Any, ...]] = {
    "epsilon": (0.05, 0.2),
    "interactions": ((), (("*", "*"),)),
    "ridge_lambda": (0.3, 3.0),
}
"""The learning settings offline experimentation tries around the loop's own."""
BASELINE, RANDOM, ONLINE = "Baseline", "Random", "Online"
PROGRESS_EVERY_SECONDS = 1.0


@dataclass(frozen=True)
class Candidate:
    """A learning setting to evaluate: its name, arguments as shown, source and spec."""

    name: str
    arguments: str
    source: str
    spec: PolicySpec | None  # None: Baseline or Random

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "source": self.source,
            "spec": None if self.spec is None else self.spec.model_dump(mode="json"),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Candidate:
        spec = None if data["spec"] is None else PolicySpec.model_validate(data["spec"])
        return cls(data["name"], data["arguments"], data["source"], spec)


def spec_from_arguments(loop: PolicySpec, arguments: str, field_loc: list[str | int]) -> PolicySpec:
    """The policy spec ``arguments`` describe for a loop with spec ``loop``: a JSON policy
    spec as is, or VW arguments over the default shared model with the loop's other
    settings (as ``PUT configurations/policy`` applies them). A 400 names ``field_loc``."""
    try:
        if arguments.lstrip().startswith("{"):
            spec = PolicySpec.model_validate_json(arguments)
        else:
            changes, _ = parse_vw_arguments(arguments)
            engine = {f: getattr(DEFAULT_LOOP_SPEC, f) for f in ENGINE_OF_VW}
            spec = PolicySpec.model_validate({**loop.model_dump(), **engine, **changes})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise InvalidRequest(f"arguments: {where}: {error['msg']}", field_loc) from None
    except InvalidRequest as exc:
        raise InvalidRequest(exc.message, field_loc) from None
    if (spec.features is None) != (loop.features is None):
        raise InvalidRequest(
            "arguments: the loop logged "
            + ("float vectors" if loop.features is None else "JSON features")
            + ", so the evaluated policy must take the same kind of input",
            field_loc,
        )
    if spec.features is None and spec.dimension != loop.dimension:
        raise InvalidRequest(
            f"arguments: dimension must be the loop's {loop.dimension}, but got {spec.dimension}",
            field_loc,
        )
    build_policy(spec)  # an invalid combination of parameters is refused now, not in the run
    return spec


def arguments_of(name: str, spec: PolicySpec) -> str:
    """How a spec is shown: VW arguments for the default engine, else its JSON."""
    info = PolicyInfo(
        name=name, revision="", created_at=0.0, updated_at=0.0, reset_at=0.0, **spec.model_dump()
    )
    return vw_arguments(info)


def grid_candidates(loop: PolicySpec) -> list[PolicySpec]:
    """The specs offline experimentation tries (:data:`GRID`); none when the loop's
    engine is not the default shared model (the grid's settings would not map)."""
    if loop.algorithm != DEFAULT_LOOP_SPEC.algorithm or loop.features is None:
        return []
    specs = []
    for epsilon in GRID["epsilon"]:
        for interactions in GRID["interactions"]:
            for ridge in GRID["ridge_lambda"]:
                features = {**loop.features, "interactions": [list(p) for p in interactions]}
                params = {**loop.params, "ridge_lambda": ridge}
                specs.append(
                    PolicySpec.model_validate(
                        {
                            **loop.model_dump(),
                            "epsilon": epsilon,
                            "features": features,
                            "params": params,
                            "dimension": None,
                        }
                    )
                )
    return specs


def plan(
    info: PolicyInfo,
    policies: Sequence[EvaluationPolicy | PersonalizerPolicy],
    offline_experimentation: bool,
) -> tuple[list[Candidate], list[PolicySpec]]:
    """What an evaluation of the policy ``info`` replays: the online setting, Baseline,
    Random and ``policies`` (a 400 names a bad one), and the grid when asked."""
    loop_spec = spec_of(info)
    online = (info.personalizer or {}).get(POLICY_NAME_KEY, DEFAULT_POLICY_NAME)
    reserved = {online, BASELINE, RANDOM}
    names = [p.name for p in policies]
    for i, p in enumerate(policies):
        if p.name in names[:i] or p.name in reserved:
            raise InvalidRequest(
                f"policies[{i}].name {p.name!r} is taken (names are unique and none of {sorted(reserved)})",
                ["body", "policies", i, "name"],
            )
    candidates = [
        Candidate(online, vw_arguments(info), ONLINE, loop_spec),
        Candidate(BASELINE, "first action", BASELINE, None),
        Candidate(RANDOM, "uniform", RANDOM, None),
    ]
    for i, p in enumerate(policies):
        spec = spec_from_arguments(loop_spec, p.arguments, ["body", "policies", i, "arguments"])
        candidates.append(Candidate(p.name, p.arguments, "Custom", spec))
    return candidates, grid_candidates(loop_spec) if offline_experimentation else []


# ---- the computation (runs in a worker process, or in bandit evaluate) -------------------
def rows_function(spec: PolicySpec) -> Callable[[DecisionRecord], np.ndarray]:
    """The feature rows ``X`` (K, d) the policy of ``spec`` scores for a logged decision:
    its logged JSON featurized by ``spec``'s featurizer, or the logged float rows."""
    config = spec.featurizer_config
    if config is None:
        return lambda d: np.asarray([c["features"] for c in d.candidates], dtype=np.float64)
    cached = CachedFeaturizer(config)
    shape = build_policy(spec)  # featurized_rows reads its layout and d only

    def rows(d: DecisionRecord) -> np.ndarray:
        index = list(range(len(d.candidates)))
        hashed = [
            cached.hashed_action(c["features"], k, index)[0] for k, c in enumerate(d.candidates)
        ]
        ctx = cached.featurizer.hash_features(d.context, ("context",))
        X = featurized_rows(cached.featurizer, shape, ctx, hashed)
        return X.to_dense() if isinstance(X, SparseRows) else X

    return rows


def logged_events(
    decisions: Sequence[LoggedDecision], rows: Callable[[DecisionRecord], np.ndarray]
) -> Iterator[LoggedEvent]:
    for logged in decisions:
        d = logged.decision
        ids = [c["id"] for c in d.candidates]
        assert logged.reward is not None
        yield LoggedEvent(
            tuple(ids), rows(d), ids.index(d.arm_id), logged.reward.value, d.propensity, d.user_id
        )


@dataclass
class LogArrays:
    """What every estimate needs from the evaluated decisions: time period, served
    position, propensity, reward and candidate count of each (n,)."""

    decisions: list[LoggedDecision]
    period: np.ndarray = field(init=False)
    action: np.ndarray = field(init=False)
    pscore: np.ndarray = field(init=False)
    reward: np.ndarray = field(init=False)
    sizes: list[int] = field(init=False)

    def __post_init__(self) -> None:
        ds = [e.decision for e in self.decisions]
        self.period = np.array(
            [math.floor(d.created_at / PERIOD_SECONDS) for d in ds], dtype=np.int64
        )
        self.action = np.array(
            [[c["id"] for c in d.candidates].index(d.arm_id) for d in ds], dtype=np.intp
        )
        self.pscore = np.array([d.propensity for d in ds], dtype=np.float64)
        self.reward = np.array(
            [e.reward.value for e in self.decisions if e.reward is not None], dtype=np.float64
        )
        self.sizes = [len(d.candidates) for d in ds]

    def periods(self, action_dist: np.ndarray) -> list[list[float]]:
        """``[[period start, *sums], ...]`` of a target ``action_dist`` (n, K)."""
        w = importance_weights(self.action, self.pscore, action_dist)
        sums = period_sums(self.period, w, self.reward)
        return [[float(p * PERIOD_SECONDS), *sums[p].to_list()] for p in sorted(sums)]


def evaluate(
    decisions: list[LoggedDecision],
    candidates: Sequence[Candidate],
    grid: Sequence[PolicySpec],
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """The result of an evaluation: per candidate (and the best of ``grid`` as
    ``OfflineExperimentation``) its per-period sums, and the optimal policy (highest IPS
    estimate among the learning settings). ``progress`` gets 1 per event replayed."""
    arrays = LogArrays(decisions)
    k_max = max(arrays.sizes, default=0)
    results: list[dict[str, Any]] = []

    def replay(spec: PolicySpec) -> list[list[float]]:
        policy = build_policy(spec)
        dist = progressive_distribution(
            policy, logged_events(decisions, rows_function(spec)), k_max, progress
        )
        return arrays.periods(dist)

    for c in candidates:
        if c.source == BASELINE:
            periods = arrays.periods(baseline_distribution(arrays.sizes))
        elif c.source == RANDOM:
            periods = arrays.periods(uniform_distribution(arrays.sizes))
        else:
            assert c.spec is not None
            periods = replay(c.spec)
        results.append(
            {"name": c.name, "arguments": c.arguments, "source": c.source, "periods": periods}
        )
    if grid:
        tried = [(spec, replay(spec)) for spec in grid]
        best, periods = max(tried, key=lambda t: total(t[1]).ips)
        results.append(
            {
                "name": "Offline experimentation",
                "arguments": arguments_of("offline", best),
                "source": "OfflineExperimentation",
                "spec": best.model_dump(mode="json"),
                "periods": periods,
            }
        )
    learning = [r for r in results if r["source"] not in (BASELINE, RANDOM)]
    optimal = (
        max(learning, key=lambda r: total(r["periods"]).ips)["name"]
        if learning and decisions
        else None
    )
    return {
        "period_seconds": PERIOD_SECONDS,
        "events": len(decisions),
        "sum_fields": list(SUM_FIELDS),
        "policies": results,
        "optimal_policy": optimal,
    }


def total(
    periods: Sequence[Sequence[float]], start: float = -math.inf, end: float = math.inf
) -> WindowSums:
    """The sums of the stored periods starting in ``[start, end)``."""
    out = WindowSums()
    for row in periods:
        if start <= row[0] < end:
            out = out + WindowSums(*row[1:])
    return out


def evaluation_work(record: EvaluationRecord) -> int:
    """Events x replayed settings, the unit of progress (an estimate of the run's cost)."""
    request = record.request
    replayed = sum(1 for c in request["candidates"] if c["spec"] is not None)
    return replayed + len(request.get("grid", []))


def load_decisions(
    event_log: EventLog, policy: str, start: float, end: float
) -> list[LoggedDecision]:
    """The rewarded, non-degraded decisions of ``policy`` in ``[start, end)``, in time order."""
    return [
        e
        for e in event_log.iter_events(policy, start, end)
        if e.reward is not None and not e.decision.degraded
    ]


class EvaluationDeleted(Exception):
    """The record went away while its run was going (DELETE): the run stops."""


def run_evaluation(log_url: str, policy: str, evaluation_id: str, timeout_seconds: float) -> str:
    """Worker entry point (a spawned process): run the evaluation stored as ``(policy,
    evaluation_id)`` and store its result; returns the final status."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    store = SqlEvaluationStore(event_log.engine)
    started = time.monotonic()
    try:
        record = store.get(policy, evaluation_id)
        if record is None or record.status in FINAL:
            return "gone" if record is None else record.status
        if not store.update(
            policy, evaluation_id, status="running", progress=0.0, heartbeat_at=time.time()
        ):
            return "gone"
        decisions = load_decisions(event_log, policy, record.start_time, record.end_time)
        work = max(1, evaluation_work(record) * len(decisions))
        done = [0, time.monotonic()]

        def progress(k: int) -> None:
            done[0] += k
            now = time.monotonic()
            if now - done[1] < PROGRESS_EVERY_SECONDS:
                return
            done[1] = now
            if now - started > timeout_seconds:
                raise TimeoutError
            if not store.update(
                policy, evaluation_id, progress=min(done[0] / work, 0.99), heartbeat_at=time.time()
            ):
                raise EvaluationDeleted

        candidates = [Candidate.from_json(c) for c in record.request["candidates"]]
        grid = [PolicySpec.model_validate(g) for g in record.request.get("grid", [])]
        try:
            result = evaluate(decisions, candidates, grid, progress)
        except TimeoutError:
            store.update(
                policy,
                evaluation_id,
                status="timeout",
                progress=done[0] / work,
                message=f"stopped after {timeout_seconds:g} s (evaluation_timeout_seconds)",
            )
            return "timeout"
        status = "succeeded"
        message = None if decisions else "no rewarded decision in [startTime, endTime)"
        store.update(
            policy,
            evaluation_id,
            status=status,
            progress=1.0,
            result=result,
            message=message,
            heartbeat_at=time.time(),
        )
        return status
    except EvaluationDeleted:
        return "gone"
    except Exception as exc:  # reported on the record: the API answers it as Failed
        log.exception("evaluation %s of %s failed", evaluation_id, policy)
        store.update(policy, evaluation_id, status="failed", message=f"{type(exc).__name__}: {exc}")
        return "failed"
    finally:
        event_log.close()


# ---- the use case ----------------------------------------------------------------------------
def _timestamp(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


@dataclass
class Evaluations:
    """Submit, read, delete and apply evaluations (module docstring); one per process."""

    loops: Loops
    settings: Settings
    clock: Callable[[], float] = time.time
    owner: str = field(default_factory=lambda: secrets.token_hex(8))
    store: EvaluationStore = field(init=False)
    _workers: WorkerPool = field(init=False)

    def __post_init__(self) -> None:
        self._workers = WorkerPool(self.settings.evaluation_workers)
        self._engine = create_log_engine(self.settings.log_url)
        self.store = SqlEvaluationStore(self._engine)

    # ---- submission ----------------------------------------------------------------------
    async def create(
        self,
        loop: str,
        name: str,
        start: datetime,
        end: datetime,
        policies: Sequence[EvaluationPolicy | PersonalizerPolicy],
        offline_experimentation: bool,
        evaluation_id: str | None = None,
        time_fields: tuple[str, str] = ("startTime", "endTime"),
    ) -> EvaluationRecord:
        """Store a new evaluation of ``loop`` and queue its run; a 400 names a bad field
        (the range's by ``time_fields``, the API's names), 409 when ``evaluation_id`` is
        taken."""
        info = await self.loops.admin.get_policy(loop)
        start_time, end_time = _timestamp(start), _timestamp(end)
        if end_time <= start_time:
            start_field, end_field = time_fields
            raise InvalidRequest(f"{end_field} must be after {start_field}", ["body", end_field])
        candidates, grid = plan(info, policies, offline_experimentation)
        now = self.clock()
        record = EvaluationRecord(
            policy=loop,
            evaluation_id=evaluation_id or str(uuid.uuid4()),
            name=name,
            status="pending",
            created_at=now,
            heartbeat_at=now,
            start_time=start_time,
            end_time=end_time,
            progress=0.0,
            owner=self.owner,
            request={
                "candidates": [c.to_json() for c in candidates],
                "grid": [g.model_dump(mode="json") for g in grid],
                "offline_experimentation": offline_experimentation,
            },
        )
        try:
            await asyncio.to_thread(self.store.insert, record)
        except EvaluationExistsError:
            raise Conflict(
                f"evaluation {record.evaluation_id!r} of {loop!r} exists already",
                code="EvaluationAlreadyExists",
            ) from None
        self._submit(loop, record.evaluation_id)
        return record

    def _submit(self, loop: str, evaluation_id: str) -> None:
        """Queue the run on the worker processes."""
        future = self._workers.submit(
            run_evaluation,
            self.settings.log_url,
            loop,
            evaluation_id,
            self.settings.evaluation_timeout_seconds,
        )
        future.add_done_callback(_log_failure)

    # ---- reading -------------------------------------------------------------------------
    async def get(self, loop: str, evaluation_id: str) -> EvaluationRecord:
        await self.loops.admin.get_policy(loop)
        record = await asyncio.to_thread(self.store.get, loop, evaluation_id)
        if record is None:
            raise NotFound(
                f"evaluation {evaluation_id!r} of {loop!r} not found", reason="evaluation"
            )
        return record

    async def list_evaluations(self, loop: str) -> list[EvaluationRecord]:
        await self.loops.admin.get_policy(loop)
        return await asyncio.to_thread(self.store.list_for, loop)

    async def delete(self, loop: str, evaluation_id: str) -> None:
        """Delete (a running evaluation stops at its next progress update)."""
        await self.get(loop, evaluation_id)
        await asyncio.to_thread(self.store.delete, loop, evaluation_id)

    # ---- applying --------------------------------------------------------------------------
    async def apply(self, loop: str, evaluation_id: str, policy_name: str) -> PersonalizerPolicy:
        """Make the learning setting ``policy_name`` of a succeeded evaluation the loop's
        (``PUT configurations/policy`` with its arguments: what was learned starts over
        when the engine changes); the evaluation's status becomes
        ``optimal_policy_applied``, or ``online_policy_retained`` for the online setting."""
        record = await self.get(loop, evaluation_id)
        if record.result is None:
            raise InvalidRequest(
                f"evaluation {evaluation_id!r} has no result (status {record.status})",
                ["body", "evaluationId"],
            )
        found = [p for p in record.result["policies"] if p["name"] == policy_name]
        if not found:
            known = [p["name"] for p in record.result["policies"]]
            raise NotFound(
                f"policyName {policy_name!r} is not in evaluation {evaluation_id!r}; it has {known}",
                reason="evaluation",
            )
        chosen = found[0]
        if chosen["source"] in (BASELINE, RANDOM):
            raise InvalidRequest(
                f"policyName {policy_name!r} is the {chosen['source']} policy, not a learning setting",
                ["body", "policyName"],
            )
        arguments = chosen["arguments"]
        if chosen["source"] == "OfflineExperimentation":
            arguments = PolicySpec.model_validate(chosen["spec"]).model_dump_json(
                exclude={"personalizer"}
            )
        applied, _ = await self.loops.update_policy_configuration(
            loop, PersonalizerPolicy(name=policy_name, arguments=arguments)
        )
        status = (
            "online_policy_retained" if chosen["source"] == ONLINE else "optimal_policy_applied"
        )
        await asyncio.to_thread(self.store.update, loop, evaluation_id, status=status)
        return applied

    # ---- background --------------------------------------------------------------------------
    async def adopt_once(self) -> list[tuple[str, str]]:
        """Refresh this process's heartbeats and run the evaluations whose process is gone."""
        now = self.clock()
        await asyncio.to_thread(self.store.heartbeat, self.owner, now)
        stale_before = now - self.settings.evaluation_stale_seconds
        claimed = await asyncio.to_thread(self.store.claim_stale, self.owner, now, stale_before)
        for loop, evaluation_id in claimed:
            log.info("evaluation %s of %s lost its process: running it again", evaluation_id, loop)
            self._submit(loop, evaluation_id)
        return claimed

    async def run(self, stop: asyncio.Event) -> None:
        from service.usecases.periodic import every

        await every(
            self.settings.evaluation_heartbeat_seconds, stop, self.adopt_once, "evaluations"
        )

    def close(self) -> None:
        self._workers.shutdown()
        self._engine.dispose()


def _log_failure(future: Future[str]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("evaluation worker failed: %s", future.exception())
