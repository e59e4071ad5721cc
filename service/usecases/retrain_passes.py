"""The worker passes of a relearn (service/usecases/retrain.py, docs/personalizer.md
"Relearning from the log"): the model of the new settings learned from the log's window
(:func:`relearn_task`, the replay of :func:`~service.usecases.rebuild.learn_logged`), and
the updates of the rewards logged after a pass (:func:`updates_task`). Both run in a
worker process: they open the event log themselves and return plain data."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bandit_core import clock_at
from service.policies import build_policy, spec_of
from service.schemas import PolicyInfo
from service.storage.base import EventLog, LoggedDecision, applied_order
from service.usecases.learning_settings import LearningSettings
from service.usecases.rebuild import learn_logged, served_rows


@dataclass(frozen=True)
class Relearned:
    """A pass of the worker: the engine bytes of the model (None for a pass of updates),
    the updates to apply (arm, row, reward, decided at, user), the ids of the events
    learned whose reward came after the pass's horizon, and how many it learned."""

    model: bytes | None
    updates: list[tuple[str, Any, float, float, str | None]]
    recent: list[str]
    events: int


def window_rewards(
    event_log: EventLog,
    info: PolicyInfo,
    learning: LearningSettings,
    since: float,
    until: float | None = None,
    after: float = -math.inf,
    skip: Iterable[str] = (),
) -> list[LoggedDecision]:
    """The rewarded decisions of ``info.name`` made in ``[since, until)`` that the policy
    learns from (not degraded, :meth:`LearningSettings.learns_at`), whose reward was
    applied after ``after`` and whose event id is not in ``skip``; in the order their
    rewards were applied."""
    skipped = set(skip)
    out = [
        e
        for e in event_log.iter_events(info.name, since=since, until=until)
        if e.reward is not None
        and not e.decision.degraded
        and e.reward.created_at > after
        and e.decision.event_id not in skipped
        and learning.learns_at(info, e.decision.created_at)
    ]
    out.sort(key=applied_order)
    return out


def _rewarded_at(event: LoggedDecision) -> float:
    assert event.reward is not None  # window_rewards keeps rewarded events only
    return event.reward.created_at


def _recent(events: list[LoggedDecision], horizon: float) -> list[str]:
    return [e.decision.event_id for e in events if _rewarded_at(e) > horizon]


def relearn_task(
    log_url: str, target: dict[str, Any], since: float, horizon: float, learning: LearningSettings
) -> Relearned:
    """Worker entry point: the model of the config ``target`` learned from the window
    ``[since, ...)`` of the log at ``log_url`` (:func:`window_rewards`); ``recent`` the
    events learned whose reward came after ``horizon``."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    try:
        info = PolicyInfo.model_validate(target)
        events = window_rewards(event_log, info, learning, since)
        policy = build_policy(spec_of(info))
        learn_logged(policy, info, events)
        return Relearned(policy.to_bytes(), [], _recent(events, horizon), len(events))
    finally:
        event_log.close()


def updates_task(
    log_url: str,
    target: dict[str, Any],
    since: float,
    until: float | None,
    horizon: float,
    skip: list[str],
    learning: LearningSettings,
    marked: tuple[str, ...] = (),
) -> Relearned:
    """Worker entry point: the updates of the rewarded decisions of ``target``'s policy
    made in ``[since, until)`` or (whenever made since ``since``) with ids in ``marked``,
    rewarded after ``horizon`` and not in ``skip``, their rows featurized for ``target``."""
    from service.storage.sql_log import SqlEventLog

    event_log = SqlEventLog(log_url)
    try:
        info = PolicyInfo.model_validate(target)
        wanted = set(marked)
        events = [
            e
            for e in window_rewards(event_log, info, learning, since, None, horizon, skip)
            if until is None or e.decision.created_at < until or e.decision.event_id in wanted
        ]
        row = served_rows(build_policy(spec_of(info)), info)
        updates = []
        for e in events:
            d, reward = e.decision, e.reward
            assert reward is not None  # window_rewards keeps rewarded events only
            updates.append((d.arm_id, row(d), reward.value, d.created_at, d.user_id))
        return Relearned(None, updates, _recent(events, horizon), len(events))
    finally:
        event_log.close()


def apply_updates(policy: Any, updates: list[tuple[str, Any, float, float, str | None]]) -> None:
    """Learn ``updates`` (:attr:`Relearned.updates`) in order."""
    for arm, x, value, decided_at, user in updates:
        policy.add_arm(arm)
        with clock_at(policy, decided_at):
            policy.update(arm, x, value, user_id=user)
