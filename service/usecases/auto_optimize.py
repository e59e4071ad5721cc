"""Auto-Optimize (docs/personalizer.md, "Auto-Optimize"): on a policy's schedule, an
offline evaluation with optimization discovery over the last :data:`WINDOW_DAYS` of its
log (what the log holds, when less), run as any evaluation (worker processes, the
offline engine seam); the best learning setting found is applied only when its estimate
(the evaluation's estimator: IPS, or DR for a policy that asks for it) is higher than the
online setting's and the lower end of its 95% interval is above the online setting's
lower end; applying it relearns the model from the log
(:mod:`service.usecases.retrain`).

The schedule is the API family's reading of the policy's settings
(:meth:`~service.usecases.learning_settings.LearningSettings.auto_optimization`): runs
are due at ``start + n * period``. Run ``n`` of a policy is the evaluation record
``auto-<n>`` (created once across replicas: the second insert conflicts), and its
decision (the candidates' estimates with intervals, applied or not and why) is kept in
the record's result under ``auto_optimize``; :meth:`AutoOptimizer.runs` reads them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from service.errors import Conflict, NotFound
from service.schemas.evaluations import AutoOptimizeRun
from service.storage.evaluations import EvaluationRecord
from service.usecases.admin import PolicyAdmin
from service.usecases.evaluation_jobs import Evaluations
from service.usecases.evaluations import BASELINE, ONLINE, RANDOM, result_estimator, total
from service.usecases.learning_settings import ApplySetting, LearningSettings

log = logging.getLogger("bandit.service")

WINDOW_DAYS = 14
"""The days of log an Auto-Optimize run evaluates (Azure's two weeks)."""
RUN_PREFIX = "auto-"
RUN_NAME = "Auto-Optimize"
DECISION_KEY = "auto_optimize"


def due_run(start: float, period: float, now: float) -> int | None:
    """The number of the latest run due at ``now`` on the schedule ``start + n *
    period`` (None before ``start``)."""
    if now < start:
        return None
    return math.floor((now - start) / period)


def decide(result: dict[str, Any]) -> dict[str, Any]:
    """Whether to apply the best learning setting of an evaluation's ``result``: each
    setting's estimate (the result's estimator) with its 95% interval, the best one other
    than the online setting, and the decision with its reason (module docstring)."""
    estimator = result_estimator(result)
    estimates = []
    for p in result["policies"]:
        if p["source"] in (BASELINE, RANDOM):
            continue
        sums = total(p["periods"])
        mean, half = sums.estimate(estimator), sums.half_width(estimator)
        estimates.append(
            {
                "name": p["name"],
                "source": p["source"],
                "arguments": p["arguments"],
                "mean": mean,
                "low": mean - half,
                "high": mean + half,
            }
        )
    online = next(e for e in estimates if e["source"] == ONLINE)
    others = [e for e in estimates if e["source"] != ONLINE]
    decision: dict[str, Any] = {"estimates": estimates, "online": online["name"]}
    if not result["events"] or not others:
        return {**decision, "best": None, "applied": False, "reason": "nothing to compare"}
    best = max(others, key=lambda e: e["mean"])
    decision["best"] = best["name"]
    if best["mean"] <= online["mean"]:
        reason = (
            f"{best['name']}'s mean {best['mean']:.4f} is not above the online {online['mean']:.4f}"
        )
    elif best["low"] <= online["low"]:
        reason = (
            f"{best['name']}'s lower 95% bound {best['low']:.4f} is not above the online "
            f"{online['low']:.4f}"
        )
    else:
        reason = (
            f"{best['name']}: mean {best['mean']:.4f} above the online {online['mean']:.4f} and "
            f"lower 95% bound {best['low']:.4f} above the online {online['low']:.4f}"
        )
        return {**decision, "applied": True, "reason": reason}
    return {**decision, "applied": False, "reason": reason}


def run_view(record: EvaluationRecord) -> AutoOptimizeRun:
    """An Auto-Optimize run's record as the API answers it."""
    decision = (record.result or {}).get(DECISION_KEY) or {}
    return AutoOptimizeRun(
        evaluation_id=record.evaluation_id,
        status=record.status,
        created_at=record.created_at,
        start_time=record.start_time,
        end_time=record.end_time,
        decided_at=decision.get("decided_at"),
        applied=decision.get("applied"),
        reason=decision.get("reason"),
        online=decision.get("online"),
        best=decision.get("best"),
        estimates=decision.get("estimates", []),
    )


@dataclass
class AutoOptimizer:
    """Runs Auto-Optimize on schedule (module docstring); one per process. ``apply`` makes
    a setting a policy's (the API family's; None until the lifespan wires it)."""

    admin: PolicyAdmin
    evaluations: Evaluations
    learning: LearningSettings
    clock: Callable[[], float] = time.time
    apply: ApplySetting | None = None

    async def run_once(self) -> list[str]:
        """Start the runs that are due and decide the finished ones; the ids started."""
        started = []
        for info in await self.admin.list_policies():
            schedule = self.learning.auto_optimization(info)
            if schedule is None:
                continue
            period, start = schedule
            n = due_run(start, period, self.clock())
            if n is not None and await self._start(info.name, n):
                started.append(f"{info.name}/{RUN_PREFIX}{n}")
        for info in await self.admin.list_policies():
            for record in await self._undecided(info.name):
                await self._decide(record)
        return started

    async def _start(self, name: str, n: int) -> bool:
        evaluation_id = f"{RUN_PREFIX}{n}"
        if await asyncio.to_thread(self.evaluations.store.get, name, evaluation_id) is not None:
            return False
        now = self.clock()
        try:
            await self.evaluations.create(
                name,
                RUN_NAME,
                datetime.fromtimestamp(now - WINDOW_DAYS * 86_400.0, UTC),
                datetime.fromtimestamp(now, UTC),
                [],
                offline_experimentation=True,
                evaluation_id=evaluation_id,
            )
        except Conflict:  # another replica started it
            return False
        log.info("auto-optimize: started run %s of %s", evaluation_id, name)
        return True

    async def _undecided(self, name: str) -> list[EvaluationRecord]:
        succeeded = [r for r in await self._run_records(name) if r.status == "succeeded"]
        return [r for r in succeeded if r.result is not None and DECISION_KEY not in r.result]

    async def _run_records(self, name: str) -> list[EvaluationRecord]:
        """Policy ``name``'s Auto-Optimize records with their results (the store's
        listing leaves results out)."""
        store = self.evaluations.store
        listed = await asyncio.to_thread(store.list_for, name)
        records = [
            await asyncio.to_thread(store.get, name, r.evaluation_id)
            for r in listed
            if r.evaluation_id.startswith(RUN_PREFIX)
        ]
        return [r for r in records if r is not None]

    async def _decide(self, record: EvaluationRecord) -> None:
        assert record.result is not None
        decision = {**decide(record.result), "decided_at": self.clock()}
        result = {**record.result, DECISION_KEY: decision}
        store = self.evaluations.store
        await asyncio.to_thread(store.update, record.policy, record.evaluation_id, result=result)
        if decision["applied"] and self.apply is not None:
            try:
                await self.evaluations.apply(
                    record.policy, record.evaluation_id, decision["best"], self.apply
                )
            except NotFound:  # the policy or the run was deleted meanwhile
                return
        log.info(
            "auto-optimize %s of %s: %s", record.evaluation_id, record.policy, decision["reason"]
        )

    async def runs(self, name: str) -> list[AutoOptimizeRun]:
        """The Auto-Optimize runs of policy ``name`` (404 unknown policy), as the store
        lists its evaluations."""
        await self.admin.get_policy(name)
        return [run_view(r) for r in await self._run_records(name)]

    async def run(self, stop: asyncio.Event, seconds: float) -> None:
        """:meth:`run_once` every ``seconds`` until ``stop``."""
        from service.usecases.periodic import every

        await every(seconds, stop, self.run_once, "auto-optimize")
