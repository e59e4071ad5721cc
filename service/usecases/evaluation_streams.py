"""Where an evaluation's candidates are replayed (docs/offline.md "Evaluations",
docs/operations.md "Offline work on a Ray cluster"): here, over the decisions read
once, or on Ray, the candidates and grid settings dealt into one :class:`CandidateStream`
per CPU of the cluster, each an actor reading the evaluation's day partitions itself in
time order, once for all its candidates
(:meth:`~service.usecases.offline_engine.OfflineEngine.stream`). The periods of
:data:`~service.usecases.evaluations.PERIOD_SECONDS` divide a day, so the per-period
sums of the partitions, put one after the other, are those of the whole range, bit for
bit, and so is the result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bandit_core.evaluation import RewardModels
from bandit_core.policy import BasePolicy
from service.policies import build_policy
from service.schemas import PolicySpec
from service.storage.base import LoggedDecision
from service.storage.partitions import day_ranges
from service.usecases.evaluations import (
    Candidate,
    LogArrays,
    candidate_periods,
    evaluate,
    evaluation_result,
    grid_candidates_of,
    load_decisions,
)
from service.usecases.offline_engine import OfflineEngine


@dataclass(frozen=True)
class DecisionQuery:
    """The decisions an evaluation covers, as a query a worker runs itself: the
    rewarded, non-degraded decisions of ``policy`` in ``[start, end)`` of the event log
    at ``log_url`` (:func:`~service.usecases.evaluations.load_decisions`)."""

    log_url: str
    policy: str
    start: float
    end: float

    def load(self) -> list[LoggedDecision]:
        """The decisions, read from the log."""
        from service.storage.sql_log import SqlEventLog

        event_log = SqlEventLog(self.log_url)
        try:
            return load_decisions(event_log, self.policy, self.start, self.end)
        finally:
            event_log.close()

    def days(self) -> list[DecisionQuery]:
        """The query cut at the UTC midnights between the policy's first and last
        decision in range (one query per day partition, in time order)."""
        from service.storage.sql_log import SqlEventLog

        event_log = SqlEventLog(self.log_url)
        try:
            span = event_log.time_range(self.policy)
        finally:
            event_log.close()
        if span is None:
            return [self]
        ranges = day_ranges(_bound(self.start), _bound(self.end), *span)
        return [
            replace(self, start=-math.inf if a is None else a, end=math.inf if b is None else b)
            for a, b in ranges
        ]


def _bound(value: float) -> float | None:
    return None if math.isinf(value) else value


def decisions_in(query: DecisionQuery) -> int:
    """How many decisions ``query`` covers (a task: read where it runs, not kept)."""
    return len(query.load())


@dataclass
class CandidateState:
    """A candidate's replay between partitions: its policy (None: Baseline or Random)
    and the per-period sums so far."""

    policy: BasePolicy | None
    periods: list[list[float]] = field(default_factory=list)


@dataclass
class GroupState:
    """A :class:`CandidateStream`'s state between partitions: each candidate's, the
    decisions read and the DR reward models fit on them."""

    candidates: list[CandidateState]
    events: int = 0
    models: RewardModels = field(default_factory=RewardModels)


@dataclass(frozen=True)
class CandidateStream:
    """Candidates (each as :meth:`Candidate.to_json`) replayed over the day partitions
    ``parts`` in time order (a :class:`~service.usecases.offline_engine.PartitionStream`):
    each partition is read and decoded once, then replayed by every candidate in turn.
    Its events are those replayed: the decisions read times the learning candidates
    (Baseline and Random replay nothing), as the local engine counts them."""

    parts: tuple[DecisionQuery, ...]
    candidates: tuple[dict[str, Any], ...]

    @property
    def partitions(self) -> int:
        return len(self.parts)

    def begin(self) -> GroupState:
        specs = [Candidate.from_json(c).spec for c in self.candidates]
        return GroupState([CandidateState(None if s is None else build_policy(s)) for s in specs])

    def advance(self, state: GroupState, partition: int) -> int:
        decisions = self.parts[partition].load()
        if not decisions:
            return 0
        arrays = LogArrays(decisions, state.models)
        for data, candidate_state in zip(self.candidates, state.candidates, strict=True):
            candidate = Candidate.from_json(data)
            candidate_state.periods += candidate_periods(
                decisions, arrays, candidate, policy=candidate_state.policy
            )
        state.events += len(decisions)
        return len(decisions) * sum(s.policy is not None for s in state.candidates)

    def finished(self, state: GroupState) -> bool:
        return False

    def result(self, state: GroupState) -> tuple[int, list[list[list[float]]]]:
        """The decisions read and each candidate's per-period sums."""
        return state.events, [s.periods for s in state.candidates]


def candidate_streams(
    parts: Sequence[DecisionQuery], candidates: Sequence[Candidate], groups: int
) -> list[CandidateStream]:
    """``candidates`` dealt round-robin into at most ``groups`` streams (candidate ``i``
    to stream ``i % groups``), so that each stream's share of learning candidates is
    within one of the others'; :func:`ungrouped` puts their results back in order."""
    count = max(1, min(groups, len(candidates)))
    return [
        CandidateStream(tuple(parts), tuple(c.to_json() for c in candidates[g::count]))
        for g in range(count)
    ]


def ungrouped(results: Sequence[tuple[int, list[Any]]]) -> list[Any]:
    """The per-candidate results of :func:`candidate_streams`' streams, in the order of
    the candidates."""
    count = len(results)
    total = sum(len(r) for _, r in results)
    return [results[i % count][1][i // count] for i in range(total)]


def evaluate_on(
    engine: OfflineEngine,
    query: DecisionQuery,
    candidates: Sequence[Candidate],
    grid: Sequence[PolicySpec],
    progress: Callable[[int, int], None] | None = None,
    check: Callable[[], None] | None = None,
    *,
    describe: Callable[[PolicySpec], str],
    estimator: str = "ips",
) -> dict[str, Any]:
    """:func:`~service.usecases.evaluations.evaluate` over the decisions of ``query``:
    local, here; on Ray, the candidates and grid settings dealt into as many
    :class:`CandidateStream` as the cluster has CPUs (:func:`candidate_streams`), each
    reading the day partitions itself. Equal results either way. ``progress`` gets the
    events replayed since its last call and the events to do, the decisions times the
    learning candidates (on Ray, the partitions' decisions are first counted where they
    lie); ``estimator`` ranks the settings; ``check`` runs while Ray's work is pending (its exception stops it and
    kills the actors)."""
    if engine.kind == "local":
        decisions = query.load()
        work = max(1, sum(c.spec is not None for c in candidates) + len(grid)) * len(decisions)
        step = (lambda k: progress(k, work)) if progress is not None else None
        return evaluate(decisions, candidates, grid, step, describe=describe, estimator=estimator)
    parts = tuple(query.days())
    everyone = [*candidates, *grid_candidates_of(grid)]
    decided = sum(engine.map(decisions_in, [(p,) for p in parts], check=check))
    to_do = max(1, decided * sum(c.spec is not None for c in everyone))

    def done(_: int, events: int) -> None:
        if progress is not None:
            progress(events, to_do)

    streams = candidate_streams(parts, everyone, engine.cpus())
    results = engine.stream(streams, done, check)
    events = results[0][0] if results else 0
    return evaluation_result(candidates, grid, ungrouped(results), events, describe, estimator)
