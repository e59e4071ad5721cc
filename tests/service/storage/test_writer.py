"""EventLogWriter against the real event log: batching, spooling through an outage of
the real PostgreSQL (cut by a TCP proxy), restart survival, and exactly-once flushing."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import pytest

from service.storage.base import AuditRecord, DecisionRecord, RewardRecord
from service.storage.migrate import upgrade_head
from service.storage.sql_log import SqlEventLog
from service.storage.writer import EventLogWriter
from service.usecases.candidates import candidates_json
from tests.databases import database, postgres_schema
from tests.service.storage.tcp_proxy import TcpProxy

CLOSED_PORT_URL = "postgresql://postgres@127.0.0.1:1/test"


def decision(i: int) -> DecisionRecord:
    return DecisionRecord(
        event_id=f"e{i:06d}",
        policy="p",
        created_at=1000.0 + i,
        context=[0.5, -1.0, i / 3],
        candidates=[{"id": "a", "features": [1.0]}, {"id": "b"}],
        arm_id="a",
        propensity=0.75,
        scores=[0.1, 0.2],
        model_version=i,
        guardrail={"safe_arm_served": False} if i % 2 else None,
    )


def reward(i: int, source: str = "explicit") -> RewardRecord:
    return RewardRecord(f"e{i:06d}", "p", "a", 1.0 if i % 2 else 0.0, source, 2000.0 + i)


class BatchRecorder:
    """The real SqlEventLog, recording the size of every batch appended."""

    def __init__(self, inner: SqlEventLog) -> None:
        self.inner = inner
        self.batches: list[tuple[int, int]] = []

    def append(
        self,
        decisions: Sequence[DecisionRecord],
        rewards: Sequence[RewardRecord],
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        self.inner.append(decisions, rewards, audit)
        self.batches.append((len(decisions), len(rewards)))


@pytest.fixture
def sqlite_log(tmp_path: Path) -> Iterator[SqlEventLog]:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_head(url)
    event_log = SqlEventLog(url)
    yield event_log
    event_log.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def submit(writer: EventLogWriter, ids: range, rewarded: Callable[[int], bool]) -> None:
    for i in ids:
        writer.submit_decision(decision(i))
        if rewarded(i):
            writer.submit_reward(reward(i))


def test_batches_by_size_then_interval(sqlite_log: SqlEventLog, tmp_path: Path) -> None:
    recorder = BatchRecorder(sqlite_log)
    writer = EventLogWriter(recorder, tmp_path / "spool", batch_size=100, flush_interval=1.0)
    submit(writer, range(250), lambda i: False)
    wait_until(lambda: writer.pending == 50)
    time.sleep(0.2)
    assert writer.lag_seconds >= 0.2  # the 50 wait for the interval
    wait_until(lambda: writer.pending == 0)
    assert recorder.batches == [(100, 0), (100, 0), (50, 0)]  # the last one after the interval
    assert writer.pending == 0 and writer.lag_seconds == 0.0
    writer.submit_reward(reward(1))
    writer.close()  # close flushes
    assert recorder.batches[-1] == (0, 1)
    assert sqlite_log.count() == (250, 1)
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit_decision(decision(999))


def test_spool_survives_restart_and_flushes_on_start(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    down = SqlEventLog(CLOSED_PORT_URL, connect_timeout=1)
    writer = EventLogWriter(down, spool, batch_size=64, retry_interval=0.05)
    submit(writer, range(300), lambda i: i % 3 == 0)
    assert writer.flush(timeout=20)
    assert (writer.spool_depth, writer.pending) == (400, 0)
    assert writer.lag_seconds > 0
    writer.close()
    # the process restarts with the database still down: the spool is still there
    writer = EventLogWriter(down, spool, retry_interval=0.05)
    assert writer.spool_depth == 400
    submit(writer, range(300, 310), lambda i: True)
    assert writer.flush(timeout=20)
    assert writer.spool_depth == 420
    writer.close()
    down.close()
    # and restarts again with the database back: the spool flushes on start
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        up = SqlEventLog(url)
        writer = EventLogWriter(up, spool, retry_interval=0.05)
        wait_until(lambda: writer.spool_depth == 0)
        assert writer.lag_seconds == 0.0
        writer.close()
        assert up.count("p") == (310, 110)
        assert [e.decision for e in up.iter_events("p")][:3] == [decision(i) for i in range(3)]
        assert list(spool.glob("slot-*/seg-*.jsonl")) == []
        up.close()


def test_spooled_encoded_candidates_reach_the_log_as_written(
    sqlite_log: SqlEventLog, tmp_path: Path
) -> None:
    # the service submits a decision's candidates already encoded (an orjson.Fragment):
    # through the spool they reach the log as the same list
    X = np.array([[0.5, 1.0], [0.5, -0.0]])
    plain = dataclasses.replace(
        decision(1), candidates=[{"id": a, "features": x} for a, x in zip("ab", X.tolist())]
    )
    down = SqlEventLog(CLOSED_PORT_URL, connect_timeout=1)
    writer = EventLogWriter(down, tmp_path / "spool", retry_interval=0.05)
    writer.submit_decision(dataclasses.replace(plain, candidates=candidates_json(["a", "b"], X)))
    assert writer.flush(timeout=20)
    assert writer.spool_depth == 1
    writer.close()
    down.close()
    writer = EventLogWriter(sqlite_log, tmp_path / "spool", retry_interval=0.05)
    wait_until(lambda: writer.spool_depth == 0)
    writer.close()
    assert [e.decision for e in sqlite_log.iter_events("p")] == [plain]


def test_audit_records_spool_while_the_database_is_down(
    sqlite_log: SqlEventLog, tmp_path: Path
) -> None:
    record = AuditRecord(
        "a" * 32, 1000.5, "p", "delete", "system", None, {"epsilon": 0.1}, None, {"rows": 3}
    )
    down = SqlEventLog(CLOSED_PORT_URL, connect_timeout=1)
    writer = EventLogWriter(down, tmp_path / "spool", retry_interval=0.05)
    writer.submit_audit(record)
    writer.submit_decision(decision(1))
    assert writer.flush(timeout=20)
    assert writer.spool_depth == 2
    writer.close()
    down.close()
    writer = EventLogWriter(sqlite_log, tmp_path / "spool", retry_interval=0.05)
    wait_until(lambda: writer.spool_depth == 0)
    writer.close()
    assert sqlite_log.audit_records() == [record]
    assert sqlite_log.count("p") == (1, 0)


def test_outage_and_recovery_of_postgres_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    with postgres_schema() as url:
        upgrade_head(url)
        parts = urlsplit(url)
        proxy = TcpProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
        proxy.start()
        proxied = urlunsplit(parts._replace(netloc=f"postgres@127.0.0.1:{proxy.port}"))
        event_log = SqlEventLog(proxied, connect_timeout=1)
        writer = EventLogWriter(event_log, tmp_path / "spool", batch_size=50, retry_interval=0.1)
        try:
            submit(writer, range(100), lambda i: i % 2 == 0)
            assert writer.flush(timeout=20)
            assert event_log.count() == (100, 50)

            proxy.stop()  # PostgreSQL unreachable
            submit(writer, range(100, 400), lambda i: i % 2 == 0)
            assert writer.flush(timeout=30)
            assert writer.spool_depth == 450

            # the crash window: a segment appended but not yet deleted is re-sent later
            segment = next((tmp_path / "spool").glob("slot-*/seg-*.jsonl"))
            copy = tmp_path / "copy.jsonl"
            shutil.copy(segment, copy)

            proxy.start()  # back: the spool flushes without a restart
            wait_until(lambda: writer.spool_depth == 0)
            assert event_log.count() == (400, 200)
            shutil.copy(copy, segment)
        finally:
            writer.close()
        writer = EventLogWriter(event_log, tmp_path / "spool")
        wait_until(lambda: writer.spool_depth == 0)
        writer.close()
        assert event_log.count() == (400, 200)
        event_log.close()
        proxy.stop()


def test_rejected_records_are_set_aside_not_retried(
    sqlite_log: SqlEventLog, tmp_path: Path
) -> None:
    writer = EventLogWriter(sqlite_log, tmp_path / "spool")
    writer.submit_decision(decision(1))
    writer.submit_reward(reward(1, source="bogus"))  # violates the source check constraint
    writer.submit_reward(reward(3))
    writer.close()
    assert sqlite_log.count() == (1, 1)
    assert writer.dead_letters == 1
    (dead,) = (tmp_path / "spool").glob("slot-*/dead-letter.jsonl")
    assert "bogus" in dead.read_text() and "IntegrityError" in dead.read_text()


def test_concurrent_writers_use_separate_slots_and_adopt_orphans(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    down = SqlEventLog(CLOSED_PORT_URL, connect_timeout=1)
    a = EventLogWriter(down, spool, retry_interval=60)
    b = EventLogWriter(down, spool, retry_interval=60)
    submit(a, range(10), lambda i: False)
    submit(b, range(10, 30), lambda i: False)
    a.flush(timeout=20)
    b.flush(timeout=20)
    assert sorted(p.name for p in spool.glob("slot-*") if any(p.glob("seg-*"))) == [
        "slot-0",
        "slot-1",
    ]
    a.close()
    b.close()
    down.close()
    # one process comes back (slot-0) and takes over slot-1's spool too
    with database("sqlite", tmp_path) as url:
        upgrade_head(url)
        up = SqlEventLog(url)
        writer = EventLogWriter(up, spool)
        assert writer.spool_depth == 30
        wait_until(lambda: writer.spool_depth == 0)
        writer.close()
        assert up.count() == (30, 0)
        up.close()
