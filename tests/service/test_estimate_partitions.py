"""``bandit estimate`` reads an event log a UTC day at a time (each partition a task of
its own, docs/offline.md "Estimates over partitions"): the same decisions spread over
many days give the estimates of one day, IPS and SNIPS to the bit, DR to 1e-12."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.storage.partitions import DAY_SECONDS as DAY
from tests.servers import ROOT

EVENTS = 400
MIDNIGHT = 1_600_041_600.0  # 2020-09-14T00:00:00Z


def respaced_copy(source: Path, target: Path, seconds: float) -> str:
    """A copy of the SQLite event log ``source`` whose decisions, in their order, are
    ``seconds`` apart from ``MIDNIGHT`` on; its URL."""
    shutil.copy(source, target)
    with sqlite3.connect(target) as db:
        ids = [
            row[0]
            for row in db.execute("SELECT event_id FROM decisions ORDER BY created_at, event_id")
        ]
        db.executemany(
            "UPDATE decisions SET created_at = ? WHERE event_id = ?",
            [(MIDNIGHT + i * seconds, event_id) for i, event_id in enumerate(ids)],
        )
    return f"sqlite:///{target}"


def storefront_log(directory: Path, events: int) -> Path:
    """A SQLite log of ``examples/event_log.py --storefront`` (policy ``shop``, seed 0)."""
    spec = importlib.util.spec_from_file_location("event_log", ROOT / "examples" / "event_log.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    path = directory / "events.sqlite3"
    assert asyncio.run(example.fill(f"sqlite:///{path}", events, 0, storefront=True)) == events
    return path


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return storefront_log(tmp_path_factory.mktemp("storefront"), EVENTS)


def _estimate(url: str, out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    argv = ["estimate", "--format", "eventlog", "--data", url, "--log-policy", "shop"]
    argv += ["--policy", "linucb", "--alpha", "0", "--train-fraction", "0.3", "--folds", "3"]
    argv += ["--bootstrap", "60", "--seed", "4", "--json", str(out)]
    code = main(argv)
    assert code == 0, capsys.readouterr().err
    return json.loads(out.read_text())


def test_a_log_over_many_days_gives_the_estimates_of_one_day(
    logged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hours = 2 * 3600.0
    one_day = _estimate(respaced_copy(logged, tmp_path / "a.db", 60.0), tmp_path / "a.json", capsys)
    many = _estimate(respaced_copy(logged, tmp_path / "b.db", hours), tmp_path / "b.json", capsys)
    assert one_day["partitions"] == 1
    assert many["partitions"] == int((EVENTS - 1) * hours // DAY) + 1
    assert (many["train_events"], many["evaluated_events"]) == (120, 280)
    assert many["logged_mean_reward"] == one_day["logged_mean_reward"]
    assert many["support"] == one_day["support"]
    for name in ("ips", "snips"):
        assert many["estimates"][name] == one_day["estimates"][name]
    dr, single = many["estimates"]["dr"], one_day["estimates"]["dr"]
    for field in ("value", "ci_low", "ci_high"):
        assert dr[field] == pytest.approx(single[field], rel=1e-12, abs=0), field
    assert dr["ci_low"] < dr["value"] < dr["ci_high"]


def test_a_time_range_cuts_the_first_and_last_day(
    logged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = respaced_copy(logged, tmp_path / "c.db", 3600.0)
    out = tmp_path / "c.json"
    since, until = MIDNIGHT + 5.5 * 3600, MIDNIGHT + 2 * DAY + 3600
    argv = ["estimate", "--format", "eventlog", "--data", url, "--log-policy", "shop"]
    argv += ["--since", str(since), "--until", str(until), "--policy", "linucb"]
    argv += ["--bootstrap", "20", "--json", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    # hours 6 .. 48 of the log: 43 decisions over three days
    assert result["partitions"] == 3
    assert result["train_events"] + result["evaluated_events"] == 43
