"""Personalizer's learning modes (docs/personalizer.md, "Learning modes"; docs/algorithms.md
on baselines): what a rank serves and what is learned from its reward.

- ``Online``: the model's choice (with exploration) is served and learned from.
- ``Apprentice``: the *baseline* (the first non-excluded action; each slot's
  ``baselineAction``) is served with probability 1, and the model learns from the
  baseline's rewards (a deterministic logging policy: the logged propensity 1 keeps the
  log off-policy correct). Each event records whether the model's own greedy choice was
  the baseline; the loop's :class:`ApprenticeMetrics` (reported as
  ``latestApprenticeModeMetrics``) count those imitations and the rewards of both.
- ``LoggingOnly``: the baseline is served and the event and its reward are logged;
  nothing is learned (the pending event has ``learn`` False, and ``bandit rebuild``
  skips the decisions made while the loop was in this mode: :func:`mode_at`).

:func:`served_decision` is the one place that turns the model's decision into what is
served under a mode; the single-slot rank and each slot of a multi-slot rank call it.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import orjson

from bandit_core import Decision
from bandit_core.selection import FixedRanking
from service.personalizer.settings import (
    APPRENTICE,
    LOGGING_ONLY,
    ONLINE,
    LearningMode,
    LoopSettings,
)
from service.schemas import PolicyInfo
from service.timeparse import parse_duration
from service.usecases.events import PendingEvent
from service.usecases.policy_cache import METRICS_PREFIX

MODE_HISTORY_LENGTH = 100
# the state key of a loop's apprentice metrics (beside its model parts)
APPRENTICE_METRICS_KEY = METRICS_PREFIX + "apprentice"


@dataclass(frozen=True)
class BaselineServing:
    """A rank under ``mode`` (Apprentice or LoggingOnly) serves ``baseline``: the serving
    mode (``service.usecases.recommendation.ServingMode``) the core recommend use case
    is given."""

    mode: LearningMode
    baseline: str

    @property
    def learn(self) -> bool:
        """Whether the served event's reward is learned from (not in LoggingOnly)."""
        return self.mode != LOGGING_ONLY

    def serve(self, greedy: Decision) -> tuple[Decision, bool | None]:
        """:func:`served_decision` of the model's greedy choice."""
        return served_decision(self.mode, greedy, self.baseline)


def baseline_serving(mode: LearningMode, baseline: str) -> BaselineServing | None:
    """How a rank under ``mode`` serves ``baseline``: None for Online (the model serves)."""
    return None if mode == ONLINE else BaselineServing(mode=mode, baseline=baseline)


def serving_of(baseline: str) -> Callable[[PolicyInfo], BaselineServing | None]:
    """The serving mode of a rank whose baseline is ``baseline`` under a loop's
    configuration at the time of the decision (None in Online: the model serves)."""

    def serving(info: PolicyInfo) -> BaselineServing | None:
        return baseline_serving(LoopSettings.of(info).learning_mode, baseline)

    return serving


def served_decision(
    mode: LearningMode, decision: Decision, baseline_id: str
) -> tuple[Decision, bool | None]:
    """The decision served under ``mode`` and whether the model imitated the baseline.

    Online: ``decision`` as is, and None. Apprentice and LoggingOnly: the baseline served
    with probability 1 (the ranking lists it first, every other candidate after it in the
    model's order with probability 0, so the probabilities still sum to 1), and for
    Apprentice whether ``decision`` (the model's greedy choice: select it with
    ``explore=False`` under these modes) is the baseline (LoggingOnly: None). The
    caller stores the second value as the pending event's ``imitated`` and
    ``learn = mode != "LoggingOnly"``.
    """
    if mode == ONLINE:
        return decision, None
    order = [decision.ranking.index(baseline_id)] + [
        i for i, a in enumerate(decision.ranking) if a != baseline_id
    ]
    propensities = np.zeros(len(order))
    propensities[0] = 1.0
    served = Decision(
        arm_id=baseline_id,
        explored=False,
        plan=FixedRanking(
            ids=tuple(decision.ranking[i] for i in order),
            scores=np.asarray(decision.scores)[order],
            widths=None if decision.widths is None else np.asarray(decision.widths)[order],
            propensities=propensities,
        ),
        guardrail=decision.guardrail,
        state_changed=decision.state_changed,
        extras=decision.extras,
    )
    return served, (decision.arm_id == baseline_id) if mode == APPRENTICE else None


def with_mode(settings: LoopSettings, mode: LearningMode, now: float) -> LoopSettings:
    """``settings`` switched to ``mode`` at ``now`` (the change goes on the mode history,
    the last :data:`MODE_HISTORY_LENGTH` changes)."""
    if settings.learning_mode == mode:
        return settings
    history = [*settings.learning_mode_history, (now, mode)][-MODE_HISTORY_LENGTH:]
    return settings.updated({"learningMode": mode, "learningModeHistory": history})


def mode_at(settings: LoopSettings, when: float) -> LearningMode:
    """The learning mode the loop had at unix time ``when`` (from its mode history)."""
    history = settings.learning_mode_history
    i = bisect_right([t for t, _ in history], when)
    return history[i - 1][1] if i else ONLINE


def mode_started(settings: LoopSettings) -> float | None:
    """When the loop entered its current mode (None: Online since it was created)."""
    history = settings.learning_mode_history
    return float(history[-1][0]) if history else None


@dataclass
class ImitationCounts:
    """Apprentice events counted over some period: how many, how many the model imitated
    (its greedy choice was the baseline), the baseline's rewards and those of the
    imitated events."""

    number_of_events: int = 0
    number_of_imitated_events: int = 0
    sum_of_rewards: float = 0.0
    sum_of_imitated_rewards: float = 0.0

    def add(self, reward: float, imitated: bool) -> None:
        self.number_of_events += 1
        self.sum_of_rewards += reward
        if imitated:
            self.number_of_imitated_events += 1
            self.sum_of_imitated_rewards += reward

    def contract(self) -> dict[str, Any]:
        return {
            "numberOfEvents": self.number_of_events,
            "numberOfImitatedEvents": self.number_of_imitated_events,
            "sumOfRewards": self.sum_of_rewards,
            "sumOfImitatedRewards": self.sum_of_imitated_rewards,
        }


@dataclass
class ApprenticeMetrics:
    """A loop's apprentice metrics since ``start_time`` (when Apprentice mode was turned
    on): every apprentice event whose reward (explicit, summed or default) was applied,
    and the latest batch (the events applied since the start of the latest
    ``modelExportFrequency`` period that had one). Kept in the store under
    :data:`APPRENTICE_METRICS_KEY` and updated in the transaction that applies the
    reward, so each event counts exactly once."""

    start_time: float
    last_processed_event_time: float | None = None
    total: ImitationCounts = field(default_factory=ImitationCounts)
    batch_start: float | None = None
    batch: ImitationCounts = field(default_factory=ImitationCounts)

    def add(self, reward: float, imitated: bool, now: float, batch_seconds: float) -> None:
        """Count one event's applied ``reward`` at ``now``."""
        if self.batch_start is None or now >= self.batch_start + batch_seconds:
            self.batch_start, self.batch = now, ImitationCounts()
        self.total.add(reward, imitated)
        self.batch.add(reward, imitated)
        self.last_processed_event_time = now

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> ApprenticeMetrics:
        raw = orjson.loads(data)
        return cls(
            start_time=raw["start_time"],
            last_processed_event_time=raw["last_processed_event_time"],
            total=ImitationCounts(**raw["total"]),
            batch_start=raw["batch_start"],
            batch=ImitationCounts(**raw["batch"]),
        )

    def contract(self) -> dict[str, Any]:
        """Personalizer's ``latestApprenticeModeMetrics`` object."""
        last = self.last_processed_event_time
        return {
            "startTime": _utc(self.start_time),
            "lastProcessedEventTime": _utc(self.start_time if last is None else last),
            **self.total.contract(),
            "lastBatchMetrics": self.batch.contract(),
        }


def count_apprentice_event(
    info: PolicyInfo, stored: bytes | None, event: PendingEvent, reward: float, now: float
) -> dict[str, bytes]:
    """The value of :data:`APPRENTICE_METRICS_KEY` (``stored`` now) after counting the
    Apprentice ``event``'s applied ``reward`` at ``now``; nothing to write when the event
    was served before Apprentice mode was last turned on. Batches last the loop's
    ``modelExportFrequency``."""
    settings = LoopSettings.of(info)
    if stored is None:
        started = mode_started(settings)
        metrics = ApprenticeMetrics(start_time=event.created_at if started is None else started)
    else:
        metrics = ApprenticeMetrics.from_json(stored)
    if event.created_at < metrics.start_time or event.imitated is None:
        return {}
    metrics.add(reward, event.imitated, now, _seconds(settings.model_export_frequency))
    return {APPRENTICE_METRICS_KEY: metrics.to_json()}


class ApprenticeTally:
    """The apprentice metrics as the core counts them when it applies a reward
    (``service.usecases.finalizations.ServedTally``)."""

    key = APPRENTICE_METRICS_KEY

    @staticmethod
    def count(
        info: PolicyInfo, stored: bytes | None, event: PendingEvent, reward: float, now: float
    ) -> dict[str, bytes]:
        """:func:`count_apprentice_event`."""
        return count_apprentice_event(info, stored, event, reward, now)


def _seconds(duration: str) -> float:
    try:
        return parse_duration(duration, "modelExportFrequency")
    except ValueError:  # a policy's personalizer settings are not checked: no period
        return 0.0


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
