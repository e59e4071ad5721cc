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
  the loop's own (:data:`GRID`: exploration, interactions on or off, ridge regularization;
  and :data:`GRID_HALF_LIVES`, forgetting, over a range long enough).

Learning settings are replayed with progressive validation and every estimate is kept
as per-period sums (:mod:`bandit_core.evaluation.progressive`, periods of
:data:`PERIOD_SECONDS`), from which the IPS, SNIPS and DR estimates and their Gaussian
intervals of any window follow. An evaluation reports and ranks its settings by one
estimator (:data:`~bandit_core.evaluation.ESTIMATORS`), the policy's as its API family
reads it (:meth:`LearningSettings.estimator`), kept in the result as ``estimator``.

The runs, their records and their queue: :mod:`service.usecases.evaluation_jobs`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import ValidationError

from bandit_core.datasets import LoggedEvent
from bandit_core.evaluation import (
    RewardModels,
    WindowSums,
    baseline_distribution,
    importance_weights,
    period_sums,
    progressive_distribution,
    uniform_distribution,
)
from bandit_core.evaluation.estimators import estimator_terms
from bandit_core.evaluation.progressive import SUM_FIELDS
from bandit_core.features import SparseRows
from bandit_core.featurized import featurized_rows
from bandit_core.policy import BasePolicy
from service.errors import InvalidRequest
from service.policies import build_policy, spec_of
from service.schemas import PolicyInfo, PolicySpec
from service.schemas.evaluations import PolicyArguments
from service.storage.base import DecisionRecord, EventLog, LoggedDecision
from service.usecases.json_features import CachedFeaturizer
from service.usecases.learning_settings import LearningSettings

PERIOD_SECONDS = 300.0
"""Length of the periods the estimates are summed over (Personalizer's 5 minutes)."""
GRID: dict[str, tuple[Any, ...]] = {
    "epsilon": (0.05, 0.2),
    "interactions": ((), (("*", "*"),)),
    "ridge_lambda": (0.3, 3.0),
}
"""The learning settings offline experimentation tries around the loop's own."""
GRID_HALF_LIVES = (86400.0, 604800.0)
"""Half-lives (a day, a week) offline experimentation also tries, each as the loop's own
setting with ``half_life_seconds``, when the log the evaluated range can hold
(:func:`logged_span`) spans :data:`HALF_LIVES_IN_RANGE` of them (a shorter log could not
tell forgetting apart)."""
HALF_LIVES_IN_RANGE = 4.0
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


def spec_from_arguments(
    learning: LearningSettings, loop: PolicySpec, arguments: str, field_loc: list[str | int]
) -> PolicySpec:
    """The policy spec ``arguments`` describe for a loop with spec ``loop``, as
    ``learning`` reads them; a 400 names ``field_loc``."""
    try:
        spec = learning.spec_from_arguments(loop, arguments)
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


def grid_candidates(
    learning: LearningSettings, loop: PolicySpec, span_seconds: float | None = None
) -> list[PolicySpec]:
    """The specs offline experimentation tries (:data:`GRID`, then the loop's own setting
    with each of :data:`GRID_HALF_LIVES` that ``span_seconds`` of log holds
    :data:`HALF_LIVES_IN_RANGE` times; None: no half-life); none when the grid's
    settings do not map onto the loop's (:meth:`LearningSettings.explorable`)."""
    if not learning.explorable(loop) or loop.features is None:
        return []
    specs = [
        loop.model_copy(update={"params": {**loop.params, "half_life_seconds": half_life}})
        for half_life in GRID_HALF_LIVES
        if span_seconds is not None and span_seconds >= HALF_LIVES_IN_RANGE * half_life
    ]
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


def logged_span(info: PolicyInfo, start: float, end: float, now: float) -> float:
    """Seconds of ``[start, end)`` in which the policy ``info`` can have logged decisions:
    after its creation and before ``now`` (0 when none)."""
    return max(0.0, min(end, now) - max(start, info.created_at))


def plan(
    learning: LearningSettings,
    info: PolicyInfo,
    policies: Sequence[PolicyArguments],
    offline_experimentation: bool,
    span_seconds: float | None = None,
) -> tuple[list[Candidate], list[PolicySpec]]:
    """What an evaluation of the policy ``info`` replays: the online setting, Baseline,
    Random and ``policies`` (a 400 names a bad one), and the grid when asked (with the
    half-lives that ``span_seconds`` of log, :func:`logged_span`, holds: :func:`grid_candidates`);
    settings are read and written by ``learning``."""
    loop_spec = spec_of(info)
    online = learning.online_name(info)
    reserved = {online, BASELINE, RANDOM}
    names = [p.name for p in policies]
    for i, p in enumerate(policies):
        if p.name in names[:i] or p.name in reserved:
            raise InvalidRequest(
                f"policies[{i}].name {p.name!r} is taken (names are unique and none of {sorted(reserved)})",
                ["body", "policies", i, "name"],
            )
    candidates = [
        Candidate(online, learning.arguments(loop_spec), ONLINE, loop_spec),
        Candidate(BASELINE, "first action", BASELINE, None),
        Candidate(RANDOM, "uniform", RANDOM, None),
    ]
    for i, p in enumerate(policies):
        loc: list[str | int] = ["body", "policies", i, "arguments"]
        spec = spec_from_arguments(learning, loop_spec, p.arguments, loc)
        candidates.append(Candidate(p.name, p.arguments, "Custom", spec))
    grid = grid_candidates(learning, loop_spec, span_seconds) if offline_experimentation else []
    return candidates, grid


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
            tuple(ids),
            rows(d),
            ids.index(d.arm_id),
            logged.reward.value,
            d.propensity,
            d.user_id,
            d.created_at,  # a policy with a wall clock replays at the decision's time
        )


@dataclass
class LogArrays:
    """What every estimate needs from the evaluated decisions: time period, served
    position, propensity, reward and candidate count of each (n,), and the DR reward
    models' predictions (n, K_max) from ``models`` fit on the decisions before each
    (``models`` learns these decisions: pass the same object to the next slice of a log
    read in parts)."""

    decisions: list[LoggedDecision]
    models: RewardModels = field(default_factory=RewardModels)
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
        self.q_hat = self.models.predictions(
            [[c["id"] for c in d.candidates] for d in ds],
            [d.arm_id for d in ds],
            self.reward,
            self.pscore,
            max(self.sizes, default=0),
        )

    def periods(self, action_dist: np.ndarray) -> list[list[float]]:
        """``[[period start, *sums], ...]`` of a target ``action_dist`` (n, K)."""
        if not self.decisions:
            return []
        w = importance_weights(self.action, self.pscore, action_dist)
        dr, mtr = (
            estimator_terms("dr", self.reward, self.action, self.pscore, action_dist, q)[0]
            for q in self.q_hat
        )
        sums = period_sums(self.period, w, self.reward, dr, mtr)
        return [[float(p * PERIOD_SECONDS), *sums[p].to_list()] for p in sorted(sums)]


def evaluate(
    decisions: list[LoggedDecision],
    candidates: Sequence[Candidate],
    grid: Sequence[PolicySpec],
    progress: Callable[[int], None] | None = None,
    *,
    describe: Callable[[PolicySpec], str],
    estimator: str = "ips",
) -> dict[str, Any]:
    """The result of an evaluation: per candidate (and the best of ``grid`` as
    ``OfflineExperimentation``, its arguments written by ``describe``) its per-period
    sums, and the optimal policy (highest ``estimator`` estimate among the learning
    settings). ``progress`` gets 1 per event replayed."""
    arrays = LogArrays(decisions)
    periods = [
        candidate_periods(decisions, arrays, c, progress)
        for c in [*candidates, *grid_candidates_of(grid)]
    ]
    return evaluation_result(candidates, grid, periods, len(decisions), describe, estimator)


def grid_candidates_of(grid: Sequence[PolicySpec]) -> list[Candidate]:
    """The grid's settings as candidates (replayed as any learning setting)."""
    return [Candidate("", "", "OfflineExperimentation", spec) for spec in grid]


def candidate_periods(
    decisions: list[LoggedDecision],
    arrays: LogArrays,
    candidate: Candidate,
    progress: Callable[[int], None] | None = None,
    policy: BasePolicy | None = None,
) -> list[list[float]]:
    """The per-period sums of one candidate over ``decisions`` (``arrays`` their
    columns): Baseline, Random, or a learning setting replayed with progressive
    validation (``progress`` gets 1 per event replayed), from its untrained policy or
    from ``policy``, trained in place (a replay going on from earlier decisions)."""
    if candidate.source == BASELINE:
        return arrays.periods(baseline_distribution(arrays.sizes))
    if candidate.source == RANDOM:
        return arrays.periods(uniform_distribution(arrays.sizes))
    assert candidate.spec is not None
    policy = build_policy(candidate.spec) if policy is None else policy
    events = logged_events(decisions, rows_function(candidate.spec))
    return arrays.periods(
        progressive_distribution(policy, events, max(arrays.sizes, default=0), progress)
    )


def evaluation_result(
    candidates: Sequence[Candidate],
    grid: Sequence[PolicySpec],
    periods: Sequence[list[list[float]]],
    events: int,
    describe: Callable[[PolicySpec], str],
    estimator: str = "ips",
) -> dict[str, Any]:
    """The stored result of an evaluation from the per-period sums ``periods`` of each
    candidate, then of each grid setting (in that order) over ``events`` decisions; the
    best grid setting (by ``estimator``) with its arguments as ``describe`` writes them."""
    results: list[dict[str, Any]] = [
        {"name": c.name, "arguments": c.arguments, "source": c.source, "periods": p}
        for c, p in zip(candidates, periods, strict=False)
    ]
    if grid:
        tried = list(zip(grid, periods[len(candidates) :], strict=True))
        best, best_periods = max(tried, key=lambda t: total(t[1]).estimate(estimator))
        results.append(
            {
                "name": "Offline experimentation",
                "arguments": describe(best),
                "source": "OfflineExperimentation",
                "spec": best.model_dump(mode="json"),
                "periods": best_periods,
            }
        )
    learning = [r for r in results if r["source"] not in (BASELINE, RANDOM)]
    optimal = (
        max(learning, key=lambda r: total(r["periods"]).estimate(estimator))["name"]
        if learning and events
        else None
    )
    return {
        "period_seconds": PERIOD_SECONDS,
        "events": events,
        "estimator": estimator,
        "sum_fields": list(SUM_FIELDS),
        "policies": results,
        "optimal_policy": optimal,
    }


def total(
    periods: Sequence[Sequence[float]], start: float = -math.inf, end: float = math.inf
) -> WindowSums:
    """The sums of the stored periods starting in ``[start, end)`` (periods stored
    before the DR sums existed read with those 0)."""
    out = WindowSums()
    for row in periods:
        if start <= row[0] < end:
            out = out + WindowSums(*row[1:])
    return out


def result_estimator(result: dict[str, Any]) -> str:
    """The estimator a stored evaluation ``result`` reports by (``ips`` for one stored
    before results named theirs)."""
    return str(result.get("estimator", "ips"))


def load_decisions(
    event_log: EventLog, policy: str, start: float, end: float
) -> list[LoggedDecision]:
    """The rewarded, non-degraded decisions of ``policy`` in ``[start, end)``, in time order."""
    return [
        e
        for e in event_log.iter_events(policy, start, end)
        if e.reward is not None and not e.decision.degraded
    ]
