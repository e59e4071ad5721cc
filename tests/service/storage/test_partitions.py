"""The time-partitioned event log (docs/operations.md, "Event-log partitions"): the
migration keeps every logged row, the upkeep creates the days ahead and empties the
default partition, a replay over a range scans only its days, and the retention drops
whole days on PostgreSQL and deletes in batches everywhere."""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from service.cli import main
from service.settings import get_settings
from service.storage.base import DecisionRecord, RewardRecord
from service.storage.migrate import alembic_config, downgrade, upgrade_head
from service.storage.partitions import DAY_SECONDS, day_partition, list_partitions
from service.storage.schema import create_log_engine, decisions, rewards
from service.storage.sql_log import SqlEventLog
from tests.databases import database

FIRST_REVISION = "7c3e5a1d9b20"
DAY0 = 20_000  # 2024-10-04 (unix days)
NOW = (DAY0 + 2) * DAY_SECONDS + 3600.0  # one hour into the third day
# columns of decisions and rewards added after the first revision (null in the rows
# logged before)
LATER_COLUMNS = {"latency_us", "baseline_weight", "random_weight", "drop_probability"}
FIRST_COLUMNS = {
    table.name: [c for c in table.c if c.name not in LATER_COLUMNS]
    for table in (decisions, rewards)
}


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database(request.param, tmp_path) as u:
        yield u


def decision(i: int, t: float, policy: str = "p") -> DecisionRecord:
    return DecisionRecord(
        event_id=f"e{i:05d}",
        policy=policy,
        created_at=t,
        context={"x": i / 7},
        candidates=[{"id": "a", "features": [1.0, i]}, {"id": "b", "features": None}],
        arm_id="a" if i % 2 else "b",
        propensity=0.5 + 1e-12,
        scores=[0.25, 1 / 3],
        model_version=2**40 + i,
        user_id=None if i % 3 else f"u{i}",
        guardrail={"delta_g": 0.1} if i % 5 == 0 else None,
    )


def reward(i: int, t: float, policy: str = "p") -> RewardRecord:
    return RewardRecord(f"e{i:05d}", policy, "a", i / 10, "explicit", t + 30.0)


def three_days(
    policy: str = "p", per_day: int = 20
) -> tuple[list[DecisionRecord], list[RewardRecord]]:
    """Decisions spread over the days DAY0 .. DAY0 + 2, every other one rewarded."""
    made = [
        decision(i + 1000 * day, (DAY0 + day) * DAY_SECONDS + i * 3000.0 + 0.123456789, policy)
        for day in range(3)
        for i in range(per_day)
    ]
    return made, [reward(int(d.event_id[1:]), d.created_at, policy) for d in made[::2]]


def contents(url: str) -> dict[str, list[tuple]]:
    engine = create_log_engine(url)
    try:
        with engine.connect() as conn:
            return {
                "decisions": conn.execute(
                    sa.select(*FIRST_COLUMNS["decisions"]).order_by(decisions.c.event_id)
                ).all(),
                "rewards": conn.execute(
                    sa.select(*FIRST_COLUMNS["rewards"]).order_by(rewards.c.id)
                ).all(),
            }
    finally:
        engine.dispose()


def test_upgrade_keeps_every_logged_row(url: str) -> None:
    """A database at the first revision holding events is upgraded: the same rows, to
    the last bit, before and after the migration and after the upkeep splits them into
    days; new rewards continue the id sequence."""
    config = alembic_config(url)
    command.upgrade(config, FIRST_REVISION)
    made, rewarded = three_days()
    engine = create_log_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(decisions),
            [
                {k: v for k, v in dataclasses.asdict(d).items() if k not in LATER_COLUMNS}
                for d in made
            ],
        )
        conn.execute(
            sa.insert(rewards),
            [
                {k: v for k, v in dataclasses.asdict(r).items() if k not in LATER_COLUMNS}
                for r in rewarded
            ],
        )
    engine.dispose()
    before = contents(url)
    assert (len(before["decisions"]), len(before["rewards"])) == (60, 30)

    upgrade_head(url)
    assert contents(url) == before
    log = SqlEventLog(url)
    try:
        created = log.prepare_partitions(NOW, days_ahead=2)
        assert contents(url) == before
        events = list(log.iter_events("p"))
        assert [e.decision for e in events] == sorted(made, key=lambda d: d.created_at)
        assert [e.reward for e in events if e.reward] == rewarded
        if log.partitioned:
            days = [
                day_partition(t, DAY0 + k).name for t in ("decisions", "rewards") for k in range(5)
            ]
            assert sorted(created) == sorted(days)
            with log.engine.connect() as conn:
                for table in ("decisions", "rewards"):
                    assert (
                        conn.execute(sa.text(f"SELECT count(*) FROM {table}_default")).scalar() == 0
                    )
                    per_day = [
                        conn.execute(
                            sa.text(f"SELECT count(*) FROM {day_partition(table, DAY0 + k).name}")
                        ).scalar()
                        for k in range(3)
                    ]
                    assert per_day == ([20, 20, 20] if table == "decisions" else [10, 10, 10])
            assert log.prepare_partitions(NOW, days_ahead=2) == []  # idempotent
        else:
            assert created == []
        log.append([], [reward(7, NOW)])
        last = contents(url)["rewards"][-1]
        assert last.event_id == "e00007" and last.id > max(r.id for r in before["rewards"])
    finally:
        log.close()
    # and back: the downgrade keeps every row too (partitions and all)
    downgrade(url, FIRST_REVISION)
    assert contents(url) == {
        "decisions": before["decisions"],
        "rewards": [*before["rewards"], last],
    }


def test_insert_beyond_the_prepared_days_lands_in_the_default_partition(tmp_path: Path) -> None:
    """No insert fails when the upkeep is late: the row waits in the default partition,
    and the next upkeep moves it to its own day."""
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        try:
            log.prepare_partitions(NOW, days_ahead=1)
            far = (DAY0 + 30) * DAY_SECONDS + 5.0
            log.append([decision(1, far), decision(2, NOW)], [reward(1, far)])
            with log.engine.connect() as conn:
                assert conn.execute(sa.text("SELECT count(*) FROM decisions_default")).scalar() == 1
            created = log.prepare_partitions(NOW, days_ahead=1)
            assert created == [
                day_partition("decisions", DAY0 + 30).name,
                day_partition("rewards", DAY0 + 30).name,
            ]
            with log.engine.connect() as conn:
                assert conn.execute(sa.text("SELECT count(*) FROM decisions_default")).scalar() == 0
                names = [p.name for p in list_partitions(conn, "decisions")]
            assert names[0] == "decisions_default" and names[-1] == created[0]
            assert log.count("p") == (2, 1)
        finally:
            log.close()


def test_a_replay_over_a_range_scans_only_the_partitions_of_the_range(tmp_path: Path) -> None:
    """EXPLAIN of the replay query over one day names that day's decisions partition and
    no other (nor the default partition), and only rewards partitions from that day on."""
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        try:
            made, rewarded = three_days()
            log.append(made, rewarded)
            log.prepare_partitions(NOW, days_ahead=2)  # days DAY0 .. DAY0 + 4
            since, until = (DAY0 + 1) * DAY_SECONDS, (DAY0 + 2) * DAY_SECONDS
            plan = log.explain_events("p", since, until)
            scanned = {name for name in _partition_names(log) if name in plan}
            # decisions: the day of the range only (not even the default partition)
            assert {n for n in scanned if n.startswith("decisions")} == {
                day_partition("decisions", DAY0 + 1).name
            }
            # rewards: from an hour before the range (clock skew) on, open-ended above
            assert {n for n in scanned if n.startswith("rewards")} == {
                *(day_partition("rewards", DAY0 + k).name for k in range(5)),
                "rewards_default",
            }
            events = list(log.iter_events("p", since, until))
            assert [e.decision for e in events] == [
                d for d in made if since <= d.created_at < until
            ]
            assert sum(e.reward is not None for e in events) == 10
        finally:
            log.close()


def _partition_names(log: SqlEventLog) -> list[str]:
    with log.engine.connect() as conn:
        return [p.name for t in ("decisions", "rewards") for p in list_partitions(conn, t)]


@pytest.fixture
def settings_from_env() -> Iterator[None]:
    """The process's settings (``get_settings``, cached) read again from the environment
    the test sets, and again after it."""
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("settings_from_env")
def test_the_partitions_command_creates_lists_and_explains(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bandit partitions`` migrates, creates the days ahead, lists every partition and
    prints a replay's plan; on SQLite it says there is nothing to do. On PostgreSQL
    ``--explain`` of a policy the log does not know is a usage error (2) in one line,
    before anything is created. (The command's entry point in process: a process of its
    own would only add the interpreter's start and the imports.)"""
    monkeypatch.setenv("BANDIT_DATABASE_URL", url)
    monkeypatch.setenv("BANDIT_DATA_DIR", str(tmp_path / "data"))
    today = datetime.now(UTC).date()
    command_line = ["partitions", "--days-ahead", "1"]
    if url.startswith("postgresql"):
        code = main([*command_line, "--explain", "p"])
        missing = capsys.readouterr()
        assert (code, missing.out) == (2, "")
        assert missing.err == (
            "bandit partitions: error: --explain: policy 'p' is not in the event log\n"
        )
        log = SqlEventLog(url)  # migrated by the command
        try:
            log.upsert_policy("p", {"algorithm": "linucb"})
        finally:
            log.close()
    explain = ["--explain", "p", "--since", today.isoformat(), "--until", f"{today}T12:00"]
    code = main(command_line + explain)
    done = capsys.readouterr()
    assert code == 0, done.err
    if url.startswith("sqlite"):
        assert "nothing to do" in done.out
        return
    day = f"decisions_p{today:%Y%m%d}"
    lines = done.out.splitlines()
    assert f"created {day}" in lines
    assert sum(line.startswith("created ") for line in lines) == 6  # yesterday..tomorrow x 2
    assert any(line.split()[:3] == ["decisions", day, f"[{today},"] for line in lines)
    plan = "\n".join(
        line for line in lines if not line.startswith(("created ", "decisions ", "rewards "))
    )
    assert set(re.findall(r"\bdecisions_(?:default|p\d{8})\b", plan)) == {day}
    code = main(command_line)
    again = capsys.readouterr()
    assert code == 0 and "created" not in again.out


def test_inserts_during_the_upkeep_all_land(tmp_path: Path) -> None:
    """A writer inserting rows of days whose partitions the upkeep is creating meanwhile:
    every insert succeeds (none routed to the default partition as the day is attached
    fails its new constraint) and every row is logged once."""
    with database("postgresql", tmp_path) as url:
        upgrade_head(url)
        log, writer_log = SqlEventLog(url), SqlEventLog(url)
        stop, errors, appended = threading.Event(), [], [0]

        def write() -> None:
            i = 0
            while not stop.is_set():
                batch = [decision(i + k, (DAY0 + (i + k) % 10) * DAY_SECONDS + i) for k in range(5)]
                try:
                    writer_log.append(batch, [])
                except Exception as exc:  # noqa: BLE001 -- collected, asserted below
                    errors.append(exc)
                appended[0] += len(batch)
                i += 5

        thread = threading.Thread(target=write)
        thread.start()
        try:
            created = log.prepare_partitions(DAY0 * DAY_SECONDS, days_ahead=10)
        finally:
            stop.set()
            thread.join()
        try:
            assert errors == []
            assert len(created) == 2 * 12 and appended[0] > 0
            assert log.count("p") == (appended[0], 0)
        finally:
            log.close()
            writer_log.close()
