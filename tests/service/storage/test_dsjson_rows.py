"""DSJSON lines read straight into the event log's rows (service/storage/dsjson_rows.py):
the rows of every line equal those of its records (``parse_line``), whether its action
set is read or recognised by its JSON; a malformed line raises the records' error and
adds no row; an import of lines with tabs, backslashes and line ends in their strings
stores on SQLite and PostgreSQL the events ``parse_line`` reads."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from service.personalizer.log_commands import import_files
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
from service.policies import new_info
from service.storage.base import DecisionRecord, EventRows, LoggedDecision, RewardRecord
from service.storage.dsjson import DsjsonError, parse_line
from service.storage.dsjson_rows import RowReader
from service.storage.migrate import upgrade_head
from service.storage.schema import decisions, rewards
from service.storage.sql_copy import record_rows
from service.storage.sql_log import SqlEventLog
from tests.databases import database

FIXTURES = Path(__file__).parents[1] / "personalizer" / "dsjson"
LOOP = "shop"
DECISION_FIELDS = [f.name for f in dataclasses.fields(DecisionRecord)]
REWARD_FIELDS = [f.name for f in dataclasses.fields(RewardRecord)]
ACTIONS = [{"_tag": t, "j": [{"item": {"name": t, "price": i}}]} for i, t in enumerate("xyz")]


def _fixture_lines() -> list[bytes]:
    return [
        line
        for name in ("storefront.json", "slots.json")
        for line in (FIXTURES / name).read_bytes().splitlines()
        if line.strip()
    ]


def _line(n: int, **changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "_label_cost": -float(n % 2),
        "_label_probability": 0.8,
        "_labelIndex": n % 3,
        "o": [{"v": 1.0}],
        "Timestamp": f"2026-03-02T10:{n // 60 % 60:02d}:{n % 60:02d}.{n:07d}Z",
        "EventId": f"e{n}",
        "a": [n % 3 + 1, *(j + 1 for j in range(3) if j != n % 3)],
        "c": {"shopper": {"visits": n}, "_multi": ACTIONS},
        "p": [0.8, 0.1, 0.1],
    }
    line.update(changes)
    return line


def _expected(raw: bytes) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows of the records ``parse_line`` reads from ``raw``."""
    event = parse_line(raw, LOOP)
    return (
        [tuple(r) for r in record_rows(event.decisions, DECISION_FIELDS, decisions)],
        [tuple(r) for r in record_rows(event.rewards, REWARD_FIELDS, rewards)],
    )


def _read(reader: RowReader, raw: bytes) -> EventRows:
    rows = EventRows()
    reader.read(raw, rows)
    return rows


def test_every_line_gives_the_rows_of_its_records_read_or_recognised() -> None:
    lines = _fixture_lines() + [orjson.dumps(_line(n)) for n in range(20)]
    reader = RowReader(LOOP)
    for _ in range(2):  # the second time every action set is one the reader knows
        for raw in lines:
            rows = _read(reader, raw)
            assert (rows.decisions, rows.rewards) == _expected(raw)


def test_an_action_set_under_another_key_is_not_taken_for_the_lines() -> None:
    """The action set's JSON after ``"_multi":`` in a context namespace, before the
    line's own ``_multi`` (another set): the line's set is the one read."""
    reader = RowReader(LOOP)
    _read(reader, orjson.dumps(_line(0)))
    other = [{"_tag": "u"}, {"_tag": "v"}, {"_tag": "w"}]
    decoy = _line(1, c={"shopper": {"_multi": ACTIONS}, "_multi": other})
    raw = orjson.dumps(decoy)
    assert raw.index(orjson.dumps(ACTIONS)) < raw.rindex(b'"_multi":')
    rows = _read(reader, raw)
    assert (rows.decisions, rows.rewards) == _expected(raw)
    assert orjson.loads(rows.decisions[0][4])[0]["id"] == "u"


MALFORMED: list[Callable[[dict[str, Any]], object]] = [
    lambda d: d.update(a=[True, 2, 3]),  # JSON true is no action number, though == 1
    lambda d: d.update(a=[1.0, 2, 3]),
    lambda d: d.update(p=[0.8, 0.1]),
    lambda d: d.update(_labelIndex=2),
    lambda d: d.update(_label_probability=0.5),
    lambda d: d.update(_label_cost="high"),
    lambda d: d.update(o=[{"v": True}]),
    lambda d: d.update(Timestamp="2026-02-30T10:00:00Z"),
    lambda d: d.update(pdrop=1.0),
    lambda d: d["c"].update(_multi=[]),
    lambda d: d["c"].update(_multi=[{"_tag": "x"}, {"_tag": "x"}]),
    lambda d: d.pop("EventId"),
]


@pytest.mark.parametrize("change", MALFORMED)
def test_a_malformed_line_raises_the_records_error_and_adds_nothing(
    change: Callable[[dict[str, Any]], object],
) -> None:
    reader = RowReader(LOOP)
    _read(reader, orjson.dumps(_line(0)))  # its action set and ranking known
    bad = _line(0)
    change(bad)
    raw = orjson.dumps(bad)
    with pytest.raises(DsjsonError) as expected:
        parse_line(raw, LOOP)
    rows = EventRows()
    with pytest.raises(DsjsonError, match=re.escape(str(expected.value))):
        reader.read(raw, rows)
    assert (rows.decisions, rows.rewards) == ([], [])


def test_a_line_broken_after_a_known_action_set_is_reported_as_it_is() -> None:
    reader = RowReader(LOOP)
    _read(reader, orjson.dumps(_line(0)))
    raw = orjson.dumps(_line(1))[:-10]
    with pytest.raises(DsjsonError) as expected:
        parse_line(raw, LOOP)
    assert str(expected.value).startswith("not JSON")
    with pytest.raises(DsjsonError, match=re.escape(str(expected.value))):
        _read(reader, raw)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_an_import_stores_the_events_parse_line_reads(backend: str, tmp_path: Path) -> None:
    """Strings with tabs, line ends, backslashes and quotes (escaped in COPY's text, kept
    as text on SQLite), a skipped line and a multi-slot line; a second import adds
    nothing."""
    odd = 'a\tb\\n\nc\r"d" é'
    lines = [
        _line(0, EventId=odd, c={"shopper": {"note": odd}, "_multi": ACTIONS}),
        _line(
            1,
            c={
                "shopper": {"note": "\\N"},
                "_multi": [{"_tag": odd}, {"_tag": "\\"}, {"_tag": "z"}],
            },
        ),
        _line(2, _skipLearn=True),
        _line(3, _label_cost=0.0),  # a reward of 0.0, not -0.0
        *(_line(n) for n in range(4, 30)),
    ]
    path = tmp_path / "log.json"
    slots = (FIXTURES / "slots.json").read_bytes()
    path.write_bytes(b"\n".join(map(orjson.dumps, lines)) + b"\n\n" + slots)
    records = [parse_line(raw, LOOP) for raw in path.read_bytes().splitlines() if raw.strip()]
    rewarded = {r.event_id: r for event in records for r in event.rewards}
    expected = sorted(
        (LoggedDecision(d, rewarded.get(d.event_id)) for e in records for d in e.decisions),
        key=lambda e: (e.decision.created_at, e.decision.event_id),
    )
    with database(backend, tmp_path) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        try:
            log.upsert_policy(
                LOOP, new_info(LOOP, DEFAULT_LOOP_SPEC, time.time()).model_dump(mode="json")
            )
            counts = import_files(log, LOOP, [path])
            assert (counts.lines, counts.decisions, counts.rewards) == (31, 32, 31)
            events = list(log.iter_events(LOOP))
            assert events == expected
            zero = next(e.reward for e in events if e.decision.event_id == "e3")
            assert zero is not None and math.copysign(1.0, zero.value) == 1.0
            import_files(log, LOOP, [path])
            assert log.count(LOOP) == (32, 31)
            assert list(log.iter_events(LOOP)) == expected
        finally:
            log.close()
