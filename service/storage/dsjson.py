"""The Decision Service JSON-lines format (DSJSON) of Azure AI Personalizer's logs and of
Vowpal Wabbit's ``--dsjson``, read into the event log's records and written from them
(``bandit import-log`` / ``bandit export-log``; docs/personalizer.md, "Importing and
exporting logs").

One line is one event. A single-slot line is a decision and its reward:

==========================  =============================================================
field                       becomes
==========================  =============================================================
``EventId``                 the decision's ``event_id``
``Timestamp``               its ``created_at`` (ISO 8601, UTC unless it names an offset)
``c``                       the context: every key but ``_multi``/``_slots``
                            (:func:`context_of`)
``c._multi``                the candidates, in order: id ``_tag`` (else ``i.id``, else
                            the 1-based position), features ``j`` (else the object less
                            ``_tag``) (:func:`action_of`)
``a``, ``p``                the ranking (1-based action numbers) and its probabilities:
                            ``a[0]`` is the served action, ``p[0]`` its propensity; the
                            probabilities in candidate order are the decision's ``scores``
``_label_probability``      the served action's propensity when given (else ``p[0]``)
``_labelIndex``             checked: the 0-based index of ``a[0]``
``_label_cost``             the reward, ``-_label_cost`` (no ``_label_cost``: no reward)
``o``                       the outcomes: with at least one numeric ``v`` the reward is
                            ``explicit``; with none (only activations, or empty) it is
                            the loop's ``default`` reward; no ``o`` at all: ``explicit``
``_skipLearn``              ``true``: a deferred event never activated: the decision is
                            logged without a reward (never learned from)
``pdrop``                   checked to lie in [0, 1), kept as the decisions'
                            ``drop_probability``; the events kept are imported as they
                            are (drops at random leave the means unbiased)
==========================  =============================================================

A multi-slot line (``c._slots`` and ``_outcomes``) is one decision per slot, ``E:slot<i>``
as a multi-slot rank logs it (:mod:`service.personalizer.multislot`): slot ``i``'s
context is ``c``'s namespaces and the slot's (``_slots[i]`` less ``_id``; the slot's
namespace wins over a context namespace of the same name), its
candidates the actions of its ``_a`` (0-based), ``_p[0]`` the served one's propensity,
its reward ``-_label_cost``, its outcomes ``_o`` read as ``o`` above.

A reward is logged at its decision's time (the format has no time of the reward), with
the importance weights of the baseline and of uniform random that a served decision's
reward carries (:func:`service.storage.base.ips_weights`; docs/console.md, "Baseline
and random"): the baseline is the decision's first candidate (``_multi[0]`` of a
single-slot line; a slot's candidates are its ``_a``, the served one first, as the format
names no slot baseline) and ``K`` the number of its candidates.
This module reads lines; :func:`service.personalizer.dsjson_export.export_line` writes
an event back as a single-slot line (a multi-slot rank's slot events each as their own
line): importing what was exported gives the same records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from service import timeparse
from service.storage.base import SLOT_EVENT_SEPARATOR, DecisionRecord, RewardRecord, ips_weights
from service.storage.dsjson_actions import DsjsonError, candidates_of, context_of, fail

EXPLICIT = "explicit"
DEFAULT = "default"
# how far _label_probability may differ from p[0] (Personalizer writes it as float32)
PROBABILITY_TOLERANCE = 1e-6
# keys of c that are not context namespaces
ACTIONS_KEY = "_multi"
SLOTS_KEY = "_slots"


@dataclass(frozen=True)
class ImportedEvent:
    """What one line holds: its decisions (one, or one per slot) and their rewards."""

    decisions: list[DecisionRecord]
    rewards: list[RewardRecord]


def _number(line: Mapping[str, Any], key: str, field: str) -> float | None:
    value = line.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(field, "a finite number", value)
    return float(value)


_NUMBERS = {int, float}
_INT = {int}
_OBJECT = {dict}


def _probabilities(value: Any, size: int, field: str) -> list[float]:
    # type() rather than isinstance: JSON true is no probability (nor action number)
    if (
        type(value) is not list
        or len(value) != size
        or not set(map(type, value)) <= _NUMBERS
        or min(value) < 0.0
        or max(value) > 1.0
    ):
        raise fail(field, f"{size} probabilities in [0, 1] (one per ranked action)", value)
    return list(map(float, value))


def _ranking(value: Any, count: int, base: int, field: str) -> list[int]:
    """0-based candidate indices of a ranking of ``base``-based action numbers."""
    if (
        type(value) is not list
        or not value
        or set(map(type, value)) != _INT
        or min(value) < base
        or max(value) >= count + base
        or len(set(value)) != len(value)
    ):
        raise fail(field, f"distinct action numbers from {base} to {count + base - 1}", value)
    return [a - base for a in value] if base else value


def _reward_source(outcomes: Any, prefix: str) -> str:
    """The source of a reward with the outcomes ``outcomes`` (field ``<prefix>o``)."""
    if outcomes is None:
        return EXPLICIT
    # type() as the values are JSON's: a list of objects, each value a number
    if type(outcomes) is not list or not set(map(type, outcomes)) <= _OBJECT:
        raise fail(f"{prefix}o", "a list of outcome objects", outcomes)
    numeric = [o["v"] for o in outcomes if "v" in o]
    if not set(map(type, numeric)) <= _NUMBERS:
        bad = next(v for v in numeric if type(v) not in _NUMBERS)
        raise fail(f"{prefix}o[].v", "a number", bad)
    return EXPLICIT if numeric else DEFAULT


class Choice(NamedTuple):
    """One decision of a line: candidates, ranking, probabilities, cost and outcomes (a
    named tuple: built once per decision, 0.3 us against 1.4 us as a frozen dataclass)."""

    event_id: str
    context: list[dict[str, Any]]
    candidates: list[dict[str, Any]]
    ranking: list[int]
    probabilities: list[float]
    # the probabilities in candidate order (the decision's scores)
    scores: list[float]
    propensity: float
    cost: float | None
    outcomes: Any
    field: str


class Served(NamedTuple):
    """What a choice served: the served action's id, whether it explored, and its reward
    (None: not rewarded) with the reward's source and importance weights (baseline,
    uniform)."""

    arm_id: str
    explored: bool
    reward: float | None
    source: str
    weights: list[float]


def served_of(choice: Choice, learn: bool) -> Served:
    """The :class:`Served` of ``choice`` (``learn``: the line is learned from)."""
    if not 0.0 < choice.propensity <= 1.0:
        raise fail(f"{choice.field}probability", "a probability in (0, 1]", choice.propensity)
    served = choice.candidates[choice.ranking[0]]["id"]
    explored = choice.propensity < max(choice.probabilities)
    source = _reward_source(choice.outcomes, choice.field)
    if choice.cost is None or not learn:
        return Served(served, explored, None, source, [])
    ids = [a["id"] for a in choice.candidates]
    weights = ips_weights(served, ids, choice.propensity)
    return Served(served, explored, -choice.cost + 0.0, source, weights)


def _records(
    choice: Choice, loop: str, event: LineEvent
) -> tuple[DecisionRecord, RewardRecord | None]:
    served = served_of(choice, event.learn)
    decision = DecisionRecord(
        event_id=choice.event_id,
        policy=loop,
        created_at=event.created_at,
        context=choice.context,
        candidates=choice.candidates,
        arm_id=served.arm_id,
        propensity=choice.propensity,
        scores=choice.scores,
        model_version=0,
        explored=served.explored,
        drop_probability=event.pdrop,
    )
    if served.reward is None:
        return decision, None
    reward = RewardRecord(
        choice.event_id,
        loop,
        served.arm_id,
        served.reward,
        served.source,
        event.created_at,
        *served.weights,
    )
    return decision, reward


def _candidates_of(items: Any, known: ActionSets | None) -> list[dict[str, Any]]:
    if known is None:
        return candidates_of(items)
    key = orjson.dumps(items)
    if key in known.sets:
        return known.sets[key]
    candidates = candidates_of(items)
    if len(known.sets) >= known.capacity:
        known.sets.clear()
    known.sets[key] = candidates
    return candidates


@dataclass
class ActionSets:
    """The candidates of the ``_multi`` lists seen, by their JSON (a log repeats its
    action set line after line): read once, shared by the decisions that have them.
    Bounded: emptied when ``capacity`` sets are held."""

    capacity: int = 1024
    sets: dict[bytes, list[dict[str, Any]]] = field(default_factory=dict)


class LineEvent(NamedTuple):
    """A line read (:func:`read_event`): its choices (one, or one per slot), their time,
    whether they are learned from (no ``_skipLearn``) and the drop probability."""

    choices: list[Choice]
    created_at: float
    learn: bool
    pdrop: float | None


def loads(raw: bytes | str) -> Any:
    """The JSON value of a line; a :class:`DsjsonError` when it is no JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise DsjsonError(f"not JSON: {exc}") from None


def parse_line(raw: bytes | str, loop: str, actions: ActionSets | None = None) -> ImportedEvent:
    """The records of one DSJSON line for the loop ``loop`` (module docstring); a
    :class:`DsjsonError` naming the field when the line is not an event. ``actions``:
    the action sets read so far (their records share the candidate lists; an importer
    passes the same one for every line)."""
    event = read_event(loads(raw), lambda items: _candidates_of(items, actions))
    decisions, rewards = [], []
    for choice in event.choices:
        decision, reward = _records(choice, loop, event)
        decisions.append(decision)
        if reward is not None:
            rewards.append(reward)
    return ImportedEvent(decisions, rewards)


def read_event(
    line: Any,
    candidates_of: Callable[[Any], list[dict[str, Any]]],
    rankings: Rankings | None = None,
) -> LineEvent:
    """The event of the parsed line ``line`` (module docstring), every field checked; a
    :class:`DsjsonError` naming the field when it is not one. ``candidates_of(items)``:
    the candidates of ``c._multi`` (:func:`candidates_of` when they are not known).
    ``rankings``: the single-slot rankings read so far, checked once (their lists are
    shared by the choices that have them)."""
    if not isinstance(line, dict):
        raise fail("line", "a JSON object", line)
    event_id = line.get("EventId")
    if not isinstance(event_id, str) or not event_id:
        raise fail("EventId", "a non-empty string", event_id)
    stamp = line.get("Timestamp")
    if not isinstance(stamp, str):
        raise fail("Timestamp", "an ISO 8601 time", stamp)
    try:
        created_at = timeparse.parse_timestamp(stamp)
    except ValueError:
        raise fail("Timestamp", "an ISO 8601 time", stamp) from None
    c = line.get("c")
    if not isinstance(c, dict):
        raise fail("c", "a JSON object (the context and its _multi actions)", c)
    candidates = candidates_of(c.get(ACTIONS_KEY))
    skip = line.get("_skipLearn", False)
    if not isinstance(skip, bool):
        raise fail("_skipLearn", "true or false", skip)
    pdrop = _number(line, "pdrop", "pdrop")
    if pdrop is not None and not 0.0 <= pdrop < 1.0:
        raise fail("pdrop", "a drop probability in [0, 1)", pdrop)
    namespaces = dict(c)
    namespaces.pop(ACTIONS_KEY, None)
    namespaces.pop(SLOTS_KEY, None)
    if SLOTS_KEY in c or "_outcomes" in line:
        choices = _slot_choices(line, c, namespaces, candidates, event_id)
    else:
        choices = [_single_choice(line, namespaces, candidates, event_id, rankings)]
    return LineEvent(choices, created_at, not skip, pdrop)


Rankings = dict[bytes, tuple[list[int], list[float], list[float], float]]
"""Rankings read (:func:`read_event`): ranking, probabilities, scores and propensity by the JSON
of a line's ``a``, ``p``, ``_labelIndex``, ``_label_probability`` and action count
(JSON, so that ``true`` is not read as the ranking of ``1``)."""
RANKINGS_HELD = 4096
"""Rankings held before they are all forgotten."""


def _single_choice(
    line: Mapping[str, Any],
    namespaces: dict[str, Any],
    candidates: list[dict[str, Any]],
    event_id: str,
    rankings: Rankings | None,
) -> Choice:
    fields = ("a", "p", "_labelIndex", "_label_probability")
    key = orjson.dumps([*map(line.get, fields), len(candidates)]) if rankings is not None else b""
    read = rankings.get(key) if rankings is not None else None
    if read is None:
        read = _single_ranking(line, len(candidates))
        if rankings is not None:
            if len(rankings) >= RANKINGS_HELD:
                rankings.clear()
            rankings[key] = read
    ranking, probabilities, scores, propensity = read
    return Choice(
        event_id,
        context_of(namespaces),
        candidates,
        ranking,
        probabilities,
        scores,
        propensity,
        _number(line, "_label_cost", "_label_cost"),
        line.get("o"),
        "",
    )


def _single_ranking(
    line: Mapping[str, Any], count: int
) -> tuple[list[int], list[float], list[float], float]:
    ranking = _ranking(line.get("a"), count, 1, "a")
    probabilities = _probabilities(line.get("p"), len(ranking), "p")
    index = line.get("_labelIndex")
    if index is not None and index != ranking[0]:
        raise fail("_labelIndex", f"{ranking[0]}, the index of a[0]", index)
    propensity = _number(line, "_label_probability", "_label_probability")
    if propensity is not None and abs(propensity - probabilities[0]) > PROBABILITY_TOLERANCE:
        raise fail("_label_probability", f"p[0] = {probabilities[0]}", propensity)
    scores = [0.0] * count
    for index, probability in zip(ranking, probabilities, strict=True):
        scores[index] = probability
    return ranking, probabilities, scores, probabilities[0]


def _slot_choices(
    line: Mapping[str, Any],
    c: Mapping[str, Any],
    namespaces: dict[str, Any],
    candidates: list[dict[str, Any]],
    event_id: str,
) -> list[Choice]:
    slots = c.get(SLOTS_KEY)
    outcomes = line.get("_outcomes")
    if not isinstance(slots, list) or not slots or not all(isinstance(s, dict) for s in slots):
        raise fail("c._slots", "a non-empty list of slot objects", slots)
    if not isinstance(outcomes, list) or len(outcomes) != len(slots):
        raise fail("_outcomes", f"{len(slots)} slot outcomes (one per c._slots)", outcomes)
    choices = []
    for i, (slot, outcome) in enumerate(zip(slots, outcomes, strict=True)):
        field = f"_outcomes[{i}]."
        if not isinstance(outcome, dict):
            raise fail(f"_outcomes[{i}]", "a slot outcome object", outcome)
        if "_id" in outcome and outcome["_id"] != slot.get("_id"):
            raise fail(
                f"{field}_id", f"the id of c._slots[{i}], {slot.get('_id')!r}", outcome["_id"]
            )
        ranked = _ranking(outcome.get("_a"), len(candidates), 0, f"{field}_a")
        probabilities = _probabilities(outcome.get("_p"), len(ranked), f"{field}_p")
        slot_features = {k: v for k, v in slot.items() if k != "_id"}
        choices.append(
            Choice(
                f"{event_id}{SLOT_EVENT_SEPARATOR}{i}",
                context_of({**namespaces, **slot_features}),
                [candidates[j] for j in ranked],
                list(range(len(ranked))),
                probabilities,
                probabilities,  # the candidates are the ranked ones, in order
                probabilities[0],
                _number(outcome, "_label_cost", f"{field}_label_cost"),
                outcome.get("_o"),
                field,
            )
        )
    return choices
