"""How many distinct values each JSON feature takes over a range of a policy's log
(docs/console.md, "Features"): a feature that takes a new value for nearly everything it
describes is an id or a timestamp, which a model cannot generalise from.

A feature is a key of a namespace, as the feature-importance jobs name it
(:mod:`bandit_core.evaluation.lofo`): an object value opens a namespace, a top-level
scalar belongs to ``""``, keys starting with ``_`` are ignored. A context feature
describes a decision, an action feature an action (its candidate id). A feature is
flagged when it describes at least :data:`MIN_DESCRIBED` decisions or actions and takes
at least :data:`ID_SHARE` as many distinct values as it describes things. The first
:data:`MAX_DECISIONS` decisions of the range are read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from service.storage.base import DecisionRecord, EventLog

MIN_DESCRIBED = 20
ID_SHARE = 0.5
MAX_DECISIONS = 10_000
Feature = tuple[str, str]
"""``(namespace, key)``."""


def feature_values(objects: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[Feature, str]]:
    """Each feature of a JSON feature object (or list of them) with its value as JSON."""
    if isinstance(objects, list):
        for item in objects:
            yield from feature_values(item, path)
        return
    if not isinstance(objects, dict):
        return
    for key, value in objects.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict):
            yield from feature_values(value, (*path, key))
        else:
            yield (".".join(path), key), json.dumps(value, sort_keys=True)


@dataclass
class FeatureCardinality:
    """A feature's ``distinct`` values over the ``described`` decisions (context) or
    actions (action feature) that carry it."""

    side: str
    values: set[str] = field(default_factory=set)
    carriers: set[str] = field(default_factory=set)

    @property
    def distinct(self) -> int:
        return len(self.values)

    @property
    def described(self) -> int:
        return len(self.carriers)

    @property
    def looks_like_id(self) -> bool:
        """Whether its cardinality suggests an id or a timestamp (module docstring)."""
        return self.described >= MIN_DESCRIBED and self.distinct >= ID_SHARE * self.described


def cardinalities(decisions: Iterable[DecisionRecord]) -> dict[Feature, FeatureCardinality]:
    """Every JSON feature of ``decisions``' contexts and candidates with its cardinality."""
    found: dict[Feature, FeatureCardinality] = {}

    def count(feature: Feature, value: str, side: str, carrier: str) -> None:
        entry = found.setdefault(feature, FeatureCardinality(side))
        entry.values.add(value)
        entry.carriers.add(carrier)

    for decision in decisions:
        for feature, value in feature_values(decision.context):
            count(feature, value, "context", decision.event_id)
        candidates = decision.candidates if isinstance(decision.candidates, list) else []
        for candidate in candidates:
            for feature, value in feature_values(candidate.get("features")):
                count(feature, value, "action", str(candidate.get("id")))
    return found


@dataclass
class FeatureCardinalities:
    """The cardinality use case; one per process."""

    event_log: EventLog

    async def over(
        self, policy: str, since: float, until: float
    ) -> dict[Feature, FeatureCardinality]:
        """The features of ``policy``'s decisions in ``[since, until)`` with their
        cardinalities (read off the event loop)."""

        def read() -> dict[Feature, FeatureCardinality]:
            events = self.event_log.iter_events(policy, since, until)
            try:
                return cardinalities(e.decision for e in islice(events, MAX_DECISIONS))
            finally:  # a generator holding the log's cursor: closed now, not when collected
                close = getattr(events, "close", None)
                if close is not None:
                    close()

        return await asyncio.to_thread(read)
