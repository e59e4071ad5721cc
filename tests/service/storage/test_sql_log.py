"""SqlEventLog on the real PostgreSQL (a throwaway schema) and on a SQLite file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from bandit_core.errors import ConfigError
from service.storage.base import (
    AuditRecord,
    DecisionRecord,
    LoggedDecision,
    RewardRecord,
    Snapshot,
    StoreUnavailableError,
    applied_order,
)
from service.storage.migrate import upgrade_head
from service.storage.schema import database_url, json_loads
from service.storage.sql_log import SqlEventLog
from service.usecases.candidates import candidates_json
from tests.databases import database


def decision(i: int, policy: str = "p", t: float | None = None, **kw: object) -> DecisionRecord:
    return DecisionRecord(
        **{
            "event_id": f"e{i:05d}",
            "policy": policy,
            "created_at": 1_700_000_000.123456789 + i if t is None else t,
            "context": {"age": 0.1 * i, "tags": [1.5, -2.25e-7]} if i % 2 else [0.1 * i, 1 / 3],
            "candidates": [{"id": "a", "features": [1.0, 0.1 + i]}, {"id": "b", "features": None}],
            "arm_id": "a",
            "propensity": 0.9 + 1e-12,
            "scores": [0.5, 1 / 7],
            "model_version": 2**40 + i,
            **kw,
        }
    )


def reward(i: int, policy: str = "p", value: float = 1.0, source: str = "explicit") -> RewardRecord:
    return RewardRecord(
        event_id=f"e{i:05d}",
        policy=policy,
        arm_id="a",
        value=value,
        source=source,
        created_at=1_700_000_100.987654321 + i,
    )


def test_append_round_trips_records_exactly(log: SqlEventLog) -> None:
    d = decision(
        1, user_id="u-1", explored=True, guardrail={"blocked": {"b": "risk"}}, degraded=True
    )
    plain = decision(2)
    r = reward(1, value=-0.125, source="default")
    log.append([d, plain], [r])
    assert list(log.iter_events("p")) == [LoggedDecision(d, r), LoggedDecision(plain, None)]


def test_json_columns_read_back_what_the_stdlib_reads(log: SqlEventLog) -> None:
    # orjson reads the columns, but an integer past 64 bits stays an exact int, and
    # every double is the one the stdlib reads
    context = {"big": 2**70, "low": -(2**63) - 1, "id": 9 * 10**18, "x": [0.1, 1 / 3, 5e-324]}
    d = decision(1, context=context)
    log.append([d], [])
    (event,) = list(log.iter_events("p"))
    assert event.decision.context == context
    assert type(event.decision.context["big"]) is int
    for text in ["[0.1000000000000000055511151231257827, 1e400]", '{"a": 1, "a": 2}', "12" * 15]:
        assert json_loads(text) == json.loads(text)


def test_append_takes_candidates_already_encoded(log: SqlEventLog) -> None:
    # the service submits the candidates as JSON (an orjson.Fragment): logged and read
    # back exactly as the same list given as Python objects
    X = np.array([[0.1, -0.0, 1 / 3], [0.1, 0.0, 2.5e-9]])
    plain = decision(1, candidates=[{"id": a, "features": x} for a, x in zip("ab", X.tolist())])
    encoded = dataclasses.replace(plain, candidates=candidates_json(["a", "b"], X))
    log.append([encoded], [])
    (event,) = list(log.iter_events("p"))
    assert event.decision == plain


def test_copy_on_postgresql_writes_the_rows_sqlite_inserts(tmp_path: Path) -> None:
    """PostgreSQL takes the batch by COPY, SQLite by INSERT: the same records, with text
    COPY must escape (tabs, newlines, backslashes, a literal \\N, quotes, non-ASCII) and
    non-finite scores, read back the same from both, duplicates skipped alike."""
    odd = "tab\there\nnew line \\N back\\slash 'q' \"dq\" é ☃"
    records = [
        decision(1, user_id=odd, context={odd: odd, "n": [1.5, -2]}, guardrail={"x": odd}),
        decision(2, arm_id=odd, candidates=[{"id": odd, "features": [1.0]}], degraded=True),
        decision(3, scores=[float("nan"), float("inf"), 0.1], explored=True),
    ]
    rewards_ = [reward(1, value=-0.5), reward(2, source="default")]
    logged = []
    for dialect in ("postgresql", "sqlite"):
        with database(dialect, tmp_path / dialect) as url:
            upgrade_head(url)
            event_log = SqlEventLog(url)
            event_log.append(records[:2], rewards_[:1])
            event_log.append(records, rewards_)  # the first two again: skipped
            logged.append((list(event_log.iter_events("p")), event_log.count("p")))
            event_log.close()
    assert logged[0] == logged[1]
    events, counts = logged[0]
    assert counts == (3, 2)
    assert [e.decision for e in events[:2]] == records[:2]
    assert events[2].decision.scores == [None, None, 0.1]  # JSON has no NaN or infinity


def test_event_ids_of_any_characters_are_logged_exactly(log: SqlEventLog) -> None:
    """Azure's event ids (any 1 to 256 characters): quotes, SQL, COPY's escapes, braces,
    percent signs and non-ASCII letters round trip, each its own row."""
    ids = [
        "x" * 256,
        "a'); DROP TABLE decisions; --",
        "tab\tnl\n\\N",
        "a{b}",
        "a%7Bb%7D",
        "ü日本 /?#&+",
    ]
    records = [
        dataclasses.replace(decision(i), event_id=e, created_at=1_700_000_000.0 + i)
        for i, e in enumerate(ids)
    ]
    log.append(records, [dataclasses.replace(reward(i), event_id=e) for i, e in enumerate(ids)])
    events = list(log.iter_events("p"))
    assert [e.decision.event_id for e in events] == ids
    assert all(e.reward is not None and e.reward.event_id == e.decision.event_id for e in events)


def test_append_is_idempotent_on_event_id(log: SqlEventLog) -> None:
    log.append([decision(1), decision(2)], [reward(1)])
    # a re-sent batch, a changed duplicate and a second reward for the same event
    log.append(
        [decision(1), decision(2, arm_id="b"), decision(3)], [reward(1, value=0.0), reward(2)]
    )
    log.append([], [reward(2, value=5.0)])
    assert log.count("p") == (3, 2)
    events = list(log.iter_events("p"))
    assert [e.decision.arm_id for e in events] == ["a", "a", "a"]
    assert [e.reward.value if e.reward else None for e in events] == [1.0, 1.0, None]


def test_iter_events_orders_by_time_then_id_and_filters_by_range(log: SqlEventLog) -> None:
    records = [decision(i, t=1000.0 + (i * 7919) % 50) for i in range(200)]
    records += [decision(i, t=1010.0) for i in range(300, 305)]  # ties broken by event id
    records.append(decision(999, policy="other", t=1020.0))
    log.append(records[:120], [])
    log.append(records[120:], [reward(i) for i in range(0, 200, 3)])
    mine = sorted((r for r in records if r.policy == "p"), key=lambda r: (r.created_at, r.event_id))
    got = list(log.iter_events("p", batch_size=7))
    assert [e.decision for e in got] == mine
    assert sum(e.reward is not None for e in got) == len(range(0, 200, 3))
    window = [e.decision for e in log.iter_events("p", since=1010.0, until=1020.0, batch_size=3)]
    assert window == [r for r in mine if 1010.0 <= r.created_at < 1020.0]
    assert window[:6][0].created_at == 1010.0 and len(window) > 5
    assert list(log.iter_events("nobody")) == []


def test_rewards_of_one_time_sort_in_the_order_the_log_received_them(log: SqlEventLog) -> None:
    """:func:`applied_order`: by the reward's time, then by the log's order of the
    rewards (not the decisions' order, which a frozen or coarse clock does not tell)."""
    log.append([decision(i) for i in range(6)], [])
    tied = [dataclasses.replace(reward(i), created_at=2e9) for i in (4, 1, 5, 2)]
    log.append([], [reward(3), *tied[:2]])
    log.append([], tied[2:])
    got = sorted((e for e in log.iter_events("p") if e.reward is not None), key=applied_order)
    assert [e.decision.event_id for e in got] == ["e00003", "e00004", "e00001", "e00005", "e00002"]


def test_count_per_policy_and_total(log: SqlEventLog) -> None:
    assert log.count() == (0, 0)
    log.append(
        [decision(i) for i in range(5)] + [decision(9, policy="q")], [reward(0), reward(9, "q")]
    )
    assert log.count("p") == (5, 1)
    assert log.count("q") == (1, 1)
    assert log.count() == (6, 2)


def test_last_reward_at_per_policy(log: SqlEventLog) -> None:
    assert log.last_reward_at("p") is None
    log.append([decision(i) for i in range(3)], [reward(2), reward(0)])
    assert log.last_reward_at("p") == reward(2).created_at
    assert log.last_reward_at("q") is None


def test_rewards_source_is_constrained(log: SqlEventLog) -> None:
    with pytest.raises(sa.exc.IntegrityError, match="(?i)check"):
        log.append([], [reward(1, source="made-up")])
    assert log.count() == (0, 0)


def test_snapshots_latest_by_time(log: SqlEventLog) -> None:
    assert log.latest_snapshot("p") is None
    old = Snapshot("p", 10.0, 3, b"\x00old\xff", {"algorithm": "linucb"})
    new = Snapshot("p", 20.0, 7, bytes(range(256)) * 100, {"algorithm": "linucb", "d": 5})
    log.save_snapshot(new)
    log.save_snapshot(old)
    log.save_snapshot(Snapshot("q", 30.0, 1, b"q"))
    assert log.latest_snapshot("p") == new
    assert log.latest_snapshot("q") == Snapshot("q", 30.0, 1, b"q", {})


def test_prune_snapshots_keeps_the_newest_by_count_and_age(log: SqlEventLog) -> None:
    def times(policy: str) -> list[float]:
        with log.engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT created_at FROM model_snapshots WHERE policy = :p ORDER BY id"),
                {"p": policy},
            )
            return [t for (t,) in rows]

    for t in (10.0, 20.0, 30.0, 40.0, 50.0):  # saved out of order: age, not insertion, decides
        log.save_snapshot(Snapshot("p", t, 1, b"p"))
    log.save_snapshot(Snapshot("p", 5.0, 1, b"late"))
    log.save_snapshot(Snapshot("q", 1.0, 1, b"q"))
    log.save_snapshot(Snapshot("p#imported", 1.0, 1, b"i"))
    assert log.prune_snapshots("p", 0, None) == 0
    assert log.prune_snapshots("p", 4, None) == 2
    assert sorted(times("p")) == [20.0, 30.0, 40.0, 50.0]
    assert log.prune_snapshots("p", 0, 35.0) == 2
    assert sorted(times("p")) == [40.0, 50.0]
    assert log.prune_snapshots("p", 1, None) == 1
    # the newest stays whatever its age; other policies are untouched
    assert log.prune_snapshots("p", 5, 1e9) == 0
    assert times("p") == [50.0] and times("q") == [1.0] and times("p#imported") == [1.0]
    assert log.latest_snapshot("p") == Snapshot("p", 50.0, 1, b"p", {})


def test_policies_upsert_and_delete(log: SqlEventLog) -> None:
    log.upsert_policy("p", {"algorithm": "linucb", "dimension": 3})
    log.upsert_policy("q", {"algorithm": "hare"})
    log.upsert_policy("p", {"algorithm": "linucb", "dimension": 4})
    assert log.policies() == {
        "p": {"algorithm": "linucb", "dimension": 4},
        "q": {"algorithm": "hare"},
    }
    log.append([decision(1), decision(2, policy="q")], [reward(1)])
    log.save_snapshot(Snapshot("p", 1.0, 1, b"s"))
    log.delete_policy("p")
    assert log.policies() == {"q": {"algorithm": "hare"}}
    assert log.count("p") == (0, 0) and log.latest_snapshot("p") is None
    assert log.count("q") == (1, 0)


def audit(i: int, policy: str = "p", t: float | None = None) -> AuditRecord:
    return AuditRecord(
        record_id=f"{i:032x}",
        created_at=1_700_000_000.5 + i if t is None else t,
        policy=policy,
        action="update",
        actor="key:0123456789ab",
        request_id=f"req-{i}",
        before={"epsilon": 0.05, "arms": ["a", "b"]},
        after={"epsilon": 0.1 + i, "arms": None},
        detail={"deleted_rows": i} if i % 2 else None,
    )


def test_audit_records_round_trip_once_in_time_order(log: SqlEventLog) -> None:
    records = [audit(i, t=1_700_000_000.0 + (i % 3)) for i in range(9)]
    log.append([], [], records[4:])
    log.append([decision(1)], [], records)  # sent again: each record once
    ordered = sorted(records, key=lambda r: (r.created_at, r.record_id))
    assert log.audit_records() == ordered
    assert log.count() == (1, 0)


def test_audit_records_filter_by_policy_and_time_and_page(log: SqlEventLog) -> None:
    records = [audit(i, policy="p" if i % 2 else "q") for i in range(10)]
    log.append([], [], records)
    ps = [r for r in records if r.policy == "p"]
    assert log.audit_records("p") == ps
    assert log.audit_records("p", since=ps[2].created_at) == ps[2:]
    pages, after = [], None
    while page := log.audit_records("p", after=after, limit=2):
        pages.append(page)
        after = (page[-1].created_at, page[-1].record_id)
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [r for p in pages for r in p] == ps
    assert log.audit_records(limit=3) == records[:3]


def test_deleting_a_policy_keeps_its_audit_records(log: SqlEventLog) -> None:
    log.upsert_policy("p", {"algorithm": "linucb"})
    log.append([decision(1)], [], [audit(1)])
    log.delete_policy("p")
    assert log.count("p") == (0, 0)
    assert log.audit_records("p") == [audit(1)]


def test_ping(log: SqlEventLog) -> None:
    log.ping()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:1/test",
        "sqlite:////proc/no-such-dir/x.db",
    ],
)
def test_unreachable_database_raises_store_unavailable(url: str) -> None:
    log = SqlEventLog(url, connect_timeout=1)
    with pytest.raises(StoreUnavailableError, match="event log database"):
        log.append([decision(1)], [])
    with pytest.raises(StoreUnavailableError, match="event log database"):
        log.ping()
    with pytest.raises(StoreUnavailableError, match="event log database"):
        list(log.iter_events("p"))
    log.close()


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
        ("sqlite:///x.db", "sqlite"),
    ],
)
def test_database_url_picks_the_driver(url: str, driver: str) -> None:
    assert database_url(url).drivername == driver


def test_database_url_rejects_other_databases() -> None:
    with pytest.raises(
        ConfigError, match=r"must be a postgresql:// or sqlite:/// URL, but got 'mysql"
    ):
        database_url("mysql://u@h/db")


def test_postgres_streams_with_a_server_side_cursor(tmp_path: Path) -> None:
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        log.append([decision(i) for i in range(3)], [])
        cursors: list[str] = []
        sa.event.listen(
            log.engine,
            "before_cursor_execute",
            lambda conn, cursor, *a: cursors.append(type(cursor).__name__),
        )
        assert len(list(log.iter_events("p", batch_size=2))) == 3
        log.close()
    assert cursors == ["ServerCursor"]
