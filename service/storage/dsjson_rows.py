"""DSJSON lines read straight into the rows of the event log's tables (``bandit
import-log``, :meth:`service.storage.base.EventLog.append_batches`): the events
:func:`service.storage.dsjson.parse_line` reads, every field checked the same way and a
malformed line the same ``DsjsonError``, without building their records
(docs/personalizer.md, "Importing and exporting logs").

A log repeats its action set line after line, and most of a line's bytes (and of the
time to parse it) are its ``c._multi``. The reader keeps the action sets it has read by
their JSON text (as orjson writes it); when a line holds one of the last few at its
``"_multi":``, that text is replaced by a random string of this reader's before the line
is parsed, and the line is taken to hold that set only when its ``c._multi`` is that
string (a file cannot hold it but by a 2^-128 chance). Any other line is parsed whole.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson

from service.storage.base import EventRows
from service.storage.dsjson import (
    ACTIONS_KEY,
    RANKINGS_HELD,
    Rankings,
    candidates_of,
    loads,
    read_event,
    served_of,
)
from service.storage.schema import json_dumps

_MULTI = b'"' + ACTIONS_KEY.encode() + b'":'


@dataclass(frozen=True)
class _ActionSet:
    """An action set read: its ``c._multi`` as orjson writes it, its candidates and
    their JSON text (the ``candidates`` column)."""

    raw: bytes
    candidates: list[dict[str, Any]]
    text: str


@dataclass
class RowReader:
    """Reads the lines of one file into :class:`EventRows` for the loop ``loop``.
    ``capacity``: the action sets held (all forgotten when full); ``recent``: how many
    of the last used are looked for in a line before it is parsed whole."""

    loop: str
    capacity: int = 1024
    recent: int = 4
    _sets: dict[bytes, _ActionSet] = field(default_factory=dict)
    _recent: list[_ActionSet] = field(default_factory=list)
    _nonce: str = field(default_factory=lambda: secrets.token_hex(16))
    _rankings: Rankings = field(default_factory=dict)
    _scores: dict[int, tuple[list[float], str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._placeholder = orjson.dumps(self._nonce)
        # the action set of the line being read
        self._line_set: _ActionSet | None = None

    def read(self, raw: bytes, rows: EventRows) -> None:
        """Append the rows of the line ``raw`` to ``rows``; a ``DsjsonError`` naming the
        field when it is not an event (nothing appended)."""
        line, self._line_set = self._parse(raw)
        event = read_event(line, self._candidates, self._rankings)
        served = [served_of(choice, event.learn) for choice in event.choices]
        shared = self._line_set
        assert shared is not None  # read_event asked for the candidates
        for choice, outcome in zip(event.choices, served, strict=True):
            rows.decisions.append(
                (
                    choice.event_id,
                    self.loop,
                    event.created_at,
                    json_dumps(choice.context),
                    shared.text
                    if choice.candidates is shared.candidates
                    else json_dumps(choice.candidates),
                    outcome.arm_id,
                    choice.propensity,
                    self._scores_text(choice.scores),
                    0,
                    None,
                    outcome.explored,
                    None,
                    False,
                    None,
                    event.pdrop,
                )
            )
            if outcome.reward is not None:
                rows.rewards.append(
                    (
                        choice.event_id,
                        self.loop,
                        outcome.arm_id,
                        outcome.reward,
                        outcome.source,
                        event.created_at,
                        *outcome.weights,
                    )
                )

    def _scores_text(self, scores: list[float]) -> str:
        """The JSON text of ``scores``, encoded once for the lines that share the list
        (their ranking, :data:`~service.storage.dsjson.Rankings`)."""
        held = self._scores.get(id(scores))
        if held is None or held[0] is not scores:  # not a list gone whose id is reused
            if len(self._scores) >= RANKINGS_HELD:
                self._scores.clear()
            held = self._scores[id(scores)] = (scores, json_dumps(scores))
        return held[1]

    def _candidates(self, items: Any) -> list[dict[str, Any]]:
        """The candidates of the line's ``c._multi`` ``items``: those of its action set
        when :meth:`_parse` found it, else of the set of ``items``."""
        if self._line_set is None:
            self._line_set = self._action_set(items)
        return self._line_set.candidates

    def _parse(self, raw: bytes) -> tuple[Any, _ActionSet | None]:
        """The line's JSON, and its action set when it is one of the recent ones (its
        ``c._multi`` then this reader's string)."""
        at = raw.find(_MULTI)
        if at >= 0:
            start = at + len(_MULTI)
            for known in self._recent:
                if raw.startswith(known.raw, start):
                    swapped = raw[:start] + self._placeholder + raw[start + len(known.raw) :]
                    try:
                        line = orjson.loads(swapped)
                    except orjson.JSONDecodeError:
                        break  # the error is reported as the line has it
                    c = line.get("c") if isinstance(line, dict) else None
                    if isinstance(c, dict) and c.get(ACTIONS_KEY) == self._nonce:
                        if self._recent[0] is not known:
                            self._remember(known)
                        return line, known
                    break
        return loads(raw), None

    def _action_set(self, items: Any) -> _ActionSet:
        """The action set of the ``c._multi`` ``items`` (checked when first seen)."""
        key = orjson.dumps(items)
        known = self._sets.get(key)
        if known is None:
            candidates = candidates_of(items)
            if len(self._sets) >= self.capacity:
                self._sets.clear()
            known = self._sets[key] = _ActionSet(key, candidates, json_dumps(candidates))
        self._remember(known)
        return known

    def _remember(self, known: _ActionSet) -> None:
        self._recent = [known, *(k for k in self._recent if k is not known)][: self.recent]
