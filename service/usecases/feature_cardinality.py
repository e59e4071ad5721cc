"""How many distinct values each JSON feature takes over a range of a policy's log
(docs/console.md, "Features"): a feature that takes a new value for nearly everything it
describes is an id or a timestamp, which a model cannot generalise from.

A feature is a key of a namespace, as the feature-importance jobs name it
(:mod:`bandit_core.evaluation.lofo`): an object value opens a namespace, a top-level
scalar belongs to ``""``, keys starting with ``_`` are ignored. A context feature
describes a decision, an action feature an action (its candidate id). A feature is
flagged when it describes at least :data:`MIN_DESCRIBED` decisions or actions and takes
at least :data:`ID_SHARE` as many distinct values as it describes things, and its values
are categories (strings and booleans, and the elements of a list: each distinct one a
column of its own) or
numbers that read as unix times (seconds or milliseconds from 2001 to 2286, every one
of them): a number otherwise is one column scaled by its value, so a price that differs
per item is no id. The first :data:`MAX_DECISIONS` decisions of the range are read.
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
UNIX_TIMES = ((1e9, 1e10), (1e12, 1e13))  # seconds, then milliseconds
Feature = tuple[str, str]
"""``(namespace, key)``."""


def feature_values(objects: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[Feature, Any]]:
    """Each feature of a JSON feature object (or list of them) with its value."""
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
            yield (".".join(path), key), value


@dataclass
class FeatureCardinality:
    """A feature's ``distinct`` values over the ``described`` decisions (context) or
    actions (action feature) that carry it."""

    side: str
    values: set[str] = field(default_factory=set)
    carriers: set[str] = field(default_factory=set)
    numeric: bool = True
    times: bool = True

    def add(self, value: Any, carrier: str) -> None:
        """Count ``value`` of the decision or action ``carrier`` (a list: each of its
        elements, a column each)."""
        for item in value if isinstance(value, list) else [value]:
            is_number = isinstance(item, int | float) and not isinstance(item, bool)
            self.numeric = self.numeric and is_number
            self.times = self.times and is_number and any(lo <= item < hi for lo, hi in UNIX_TIMES)
            self.values.add(json.dumps(item, sort_keys=True))
        self.carriers.add(carrier)

    @property
    def distinct(self) -> int:
        return len(self.values)

    @property
    def described(self) -> int:
        return len(self.carriers)

    @property
    def looks_like_id(self) -> bool:
        """Whether its cardinality suggests an id or a timestamp (module docstring)."""
        many = self.described >= MIN_DESCRIBED and self.distinct >= ID_SHARE * self.described
        return many and (self.times or not self.numeric)


def cardinalities(decisions: Iterable[DecisionRecord]) -> dict[Feature, FeatureCardinality]:
    """Every JSON feature of ``decisions``' contexts and candidates with its cardinality."""
    found: dict[Feature, FeatureCardinality] = {}

    def count(feature: Feature, value: Any, side: str, carrier: str) -> None:
        found.setdefault(feature, FeatureCardinality(side)).add(value, carrier)

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
