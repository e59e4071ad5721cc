"""The service's own event log as a :class:`bandit_core.datasets.LogSource` (docs/algorithms.md
section 6: offline evaluation "with logged propensities (the service's own logs)").

:class:`EventLogSource` streams ``EventLog.iter_events(policy, since, until)`` (decisions in
time order, each joined with its reward) and yields one
:class:`bandit_core.datasets.LoggedEvent` per decision:

* ``arm_ids`` -- the candidates in the order the service scored them;
* ``X`` (K, d) -- the feature rows the policy scored, as logged: the service builds each
  row ``x_a = concat(context, arm features)`` once, in ``service.usecases.candidates.build_candidates``
  (named features put in ``feature_names`` order), and the recommender logs exactly
  those rows as the candidates' ``features``. They are read back, never rebuilt, so the
  offline ``X`` is the online ``X`` bit for bit;
* ``action`` -- the index of the served arm, ``pscore`` -- the logged propensity
  ``Decision.propensity`` (the logging policy's probability of serving that arm, epsilon
  floor and tie-breaking included), ``user_id`` -- the request's user;
* ``reward`` -- the logged reward: the explicit ``POST /reward`` value or the default reward
  the sweeper applied after ``reward_wait_seconds`` (both are what the live model learned).

:func:`dsjson_events` reads a DSJSON file (Azure AI Personalizer's logs) into the same
events, as an import into the event log and :class:`EventLogSource` would.

A decision without a logged reward (still pending, expired without activation, or served
degraded while the state store was down) has no observed outcome: with ``unrewarded=None``
(the default) it is skipped; with a number it counts as that reward (e.g. the policy's
``default_reward``, see :func:`default_reward`). Skipping is unbiased only when whether a
reward arrives does not depend on the served arm.

``bandit_core`` never imports the service: this adapter is the only bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bandit_core.datasets import LoggedEvent
from bandit_core.errors import InvalidInputError
from service.schemas import is_json_features
from service.storage import base
from service.storage.dsjson_files import file_events

Featurize = Callable[[Any, list[Any]], np.ndarray]
"""``(logged context, logged candidate features) -> X``: re-featurizes a decision logged
with JSON features, e.g. ``lambda c, a: featurized_rows(featurizer, policy, c, a)``
(``bandit_core.featurized``) under any featurizer config and policy layout."""
DSJSON_LOOP = "dsjson"
"""The loop name the decisions of a DSJSON file read offline carry (they go to no event log)."""


def to_logged_event(
    logged: base.LoggedDecision, unrewarded: float | None = None, featurize: Featurize | None = None
) -> LoggedEvent | None:
    """One logged decision (and its reward) as an offline event; ``None`` when it has no
    reward and ``unrewarded`` is None (module docstring). A decision of a policy with
    ``features`` logged its JSON as sent: ``featurize`` turns it into rows (without it
    such a decision is an :class:`InvalidInputError`)."""
    d = logged.decision
    reward = unrewarded if logged.reward is None else logged.reward.value
    if reward is None:
        return None
    features = [c["features"] for c in d.candidates]
    if featurize is not None:
        features = list(featurize(d.context, features))
    elif any(is_json_features(f) for f in features) or is_json_features(d.context):
        raise InvalidInputError(
            f"decision {d.event_id!r} logged JSON features; replay it with a featurizer "
            "(EventLogSource(featurize=...); bandit replay/estimate/compare --features)"
        )
    return LoggedEvent.build(
        [c["id"] for c in d.candidates],
        d.arm_id,
        reward,
        arm_features=features,
        pscore=d.propensity,
        user_id=d.user_id,
        time=d.created_at,
    )


@dataclass(frozen=True)
class EventLogSource:
    """The decisions of ``policy`` with ``since <= created_at < until`` (unix seconds, None:
    unbounded) in ``event_log``, as :class:`~bandit_core.datasets.LoggedEvent` objects in
    time order. Each iteration queries the log again (streamed in batches), so the source
    can be read more than once, as ``rejection_replay`` does."""

    event_log: base.EventLog
    policy: str
    since: float | None = None
    until: float | None = None
    unrewarded: float | None = None
    featurize: Featurize | None = None

    def __iter__(self) -> Iterator[LoggedEvent]:
        for logged in self.event_log.iter_events(self.policy, self.since, self.until):
            event = to_logged_event(logged, self.unrewarded, self.featurize)
            if event is not None:
                yield event


def dsjson_events(path: Path, featurize: Featurize) -> Iterator[LoggedEvent]:
    """The decisions of the DSJSON file ``path`` (:mod:`service.storage.dsjson`, as
    ``bandit import-log`` reads them) in file order, each joined with its reward as the
    event log joins them, as offline events (:func:`to_logged_event`): a decision without
    a reward (``_skipLearn``, no ``_label_cost``) is skipped; ``featurize`` turns the
    line's JSON context and actions into rows. A malformed line is a
    :class:`service.storage.dsjson_files.BadLine` naming its file and line."""
    for line in file_events(path, DSJSON_LOOP):
        rewards = {r.event_id: r for r in line.rewards}
        for decision in line.decisions:
            logged = base.LoggedDecision(decision, rewards.get(decision.event_id))
            event = to_logged_event(logged, None, featurize)
            if event is not None:
                yield event


def check_logged(event_log: base.EventLog, policy: str) -> None:
    """Raise :class:`InvalidInputError` naming the known policies when the log holds no
    decision of ``policy``. A policy deleted while some of its decisions were still on their
    way to the log has decisions but no config there: those are replayed like any other."""
    if event_log.count(policy)[0] == 0:
        configs = event_log.policies()
        raise InvalidInputError(
            f"log policy {policy!r} has no decisions in the event log; policies with a "
            f"config there: {sorted(configs)}"
        )


def default_reward(event_log: base.EventLog, policy: str) -> float:
    """The ``default_reward`` of ``policy``'s config as recorded in the log; raises
    :class:`InvalidInputError` when the config is not there (a deleted policy)."""
    configs = event_log.policies()
    if policy not in configs:
        raise InvalidInputError(
            f"log policy {policy!r} has no config in the event log (it was deleted), so its "
            "default_reward is unknown; replay its rewarded decisions with --unrewarded skip"
        )
    value = configs[policy]["default_reward"]
    if value is None:
        raise InvalidInputError(
            f"log policy {policy!r} has no default_reward; use --unrewarded skip"
        )
    return float(value)
