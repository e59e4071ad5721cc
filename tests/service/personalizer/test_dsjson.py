"""The Decision Service JSON-lines logs (``service.storage.dsjson``) and ``bandit
import-log`` / ``bandit export-log`` on SQLite and PostgreSQL: what each field of a line
becomes, malformed lines named by file and line, one transaction per file, a second
import that adds nothing, an export that imports back to the same events, and a rebuild
that learns from the imported history. The fixtures in ``dsjson/`` are written for these
tests after the format of Vowpal Wabbit's own Decision Service test logs."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from service.api.app import LEARNING_SETTINGS
from service.cli import main
from service.personalizer import log_commands
from service.personalizer.dsjson_export import export_line
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
from service.policies import new_info
from service.settings import get_settings
from service.storage.base import LoggedDecision
from service.storage.dsjson import DsjsonError, parse_line
from service.storage.memory_store import InProcessStateStore
from service.storage.sql_log import SqlEventLog
from service.usecases.rebuild import rebuild_policy
from tests.databases import database
from tests.service.conftest import running
from tests.service.loop_logs import loop_log

FIXTURES = Path(__file__).parent / "dsjson"
LOOP = "shop"


def _lines(name: str) -> list[bytes]:
    return [line for line in (FIXTURES / name).read_bytes().splitlines() if line.strip()]


def test_a_single_slot_line_is_a_decision_and_its_reward() -> None:
    event = parse_line(_lines("storefront.json")[0], LOOP)
    (decision,) = event.decisions
    assert decision.event_id == "order-1"
    assert decision.created_at == 1772442900.125  # 2026-03-02T09:15:00.125Z
    assert [a["id"] for a in decision.candidates] == ["tea", "scarf", "lamp"]
    # a[0] = 2 is the served action, 1-based; p in candidate order becomes the scores
    assert (decision.arm_id, decision.propensity) == ("scarf", 0.7)
    assert decision.scores == [0.15, 0.7, 0.15]
    # Personalizer's id namespace is dropped, the features are j as sent
    assert decision.candidates[1]["features"] == [
        {"item": {"category": "clothes", "price": 25}},
        {"_note": "ignored"},
    ]
    # a namespace holding a list of objects becomes one context object per element
    assert decision.context == [
        {"shopper": {"segment": "returning", "basket": 3}},
        {"page": {"kind": "home"}},
        {"page": {"slot": "top"}},
    ]
    (reward,) = event.rewards
    assert (reward.arm_id, reward.value, reward.source) == ("scarf", 1.0, "explicit")
    assert reward.created_at == decision.created_at


def test_outcomes_skip_learn_and_pdrop() -> None:
    activated, skipped, sampled = (parse_line(line, LOOP) for line in _lines("storefront.json")[1:])
    # an activation and no numeric outcome: the loop's default reward
    assert [(r.value, r.source) for r in activated.rewards] == [(0.0, "default")]
    assert activated.decisions[0].explored  # served with 0.15 while another had 0.7
    # never activated: logged, not learned from
    assert skipped.decisions[0].event_id == "user@x|session|42"
    assert skipped.rewards == []
    # no _tag: the 1-based position is the id; pdrop in [0, 1) is kept with the decision
    assert sampled.decisions[0].arm_id == "2"
    assert sampled.decisions[0].drop_probability == 0.25
    assert activated.decisions[0].drop_probability is None
    assert orjson.loads(export_line(LoggedDecision(sampled.decisions[0], None)))["pdrop"] == 0.25
    assert "pdrop" not in orjson.loads(export_line(LoggedDecision(activated.decisions[0], None)))
    assert sampled.decisions[0].created_at == 1772439480.0  # 09:18 at +01:00
    assert [(r.value, r.source) for r in sampled.rewards] == [(2.0, "explicit")]


def test_a_multi_slot_line_is_one_decision_per_slot() -> None:
    (line,) = _lines("slots.json")
    event = parse_line(line, LOOP)
    hero, sidebar = event.decisions
    assert (hero.event_id, hero.arm_id, hero.propensity) == ("page-9:slot0", "music", 0.8)
    assert (sidebar.event_id, sidebar.arm_id, sidebar.propensity) == ("page-9:slot1", "news", 0.9)
    assert [a["id"] for a in sidebar.candidates] == ["news", "sport"]  # its _a, 0-based
    assert hero.context == [{"visitor": {"device": "phone"}, "placement": {"size": "large"}}]
    assert [(r.event_id, r.value, r.source) for r in event.rewards] == [
        ("page-9:slot0", 1.0, "explicit"),
        ("page-9:slot1", 0.0, "default"),
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("EventId"), "EventId: expected a non-empty string"),
        (lambda d: d.update(Timestamp="yesterday"), "Timestamp: expected an ISO 8601 time"),
        (lambda d: d.update(a=[2, 2, 1]), "a: expected distinct action numbers from 1 to 3"),
        (lambda d: d.update(a=[4, 1, 2]), "a: expected distinct action numbers from 1 to 3"),
        (lambda d: d.update(p=[0.7, 0.3]), "p: expected 3 probabilities"),
        (lambda d: d.update(p=[1.5, 0, 0]), "p: expected 3 probabilities in [0, 1]"),
        (lambda d: d.update(_labelIndex=0), "_labelIndex: expected 1, the index of a[0]"),
        (lambda d: d.update(_label_probability=0.2), "_label_probability: expected p[0] = 0.7"),
        (lambda d: d.update(_label_cost="high"), "_label_cost: expected a finite number"),
        (lambda d: d.update(pdrop=1.0), "pdrop: expected a drop probability in [0, 1)"),
        (lambda d: d.update(_skipLearn="yes"), "_skipLearn: expected true or false"),
        (lambda d: d.update(o={"v": 1}), "o: expected a list of outcome objects"),
        (lambda d: d["c"].update(_multi=[]), "c._multi: expected a non-empty list of actions"),
        (
            lambda d: d["c"]["_multi"][0].update(_tag="lamp"),
            "c._multi: expected actions with distinct ids",
        ),
        (
            lambda d: d["c"]["_multi"][1].update(j=[1]),
            "c._multi[1].j: expected a feature object or a list of them",
        ),
    ],
)
def test_a_malformed_line_names_its_field(change: object, message: str) -> None:

    line = orjson.loads(_lines("storefront.json")[0])
    change(line)  # type: ignore[operator]
    with pytest.raises(DsjsonError, match=re.escape(message)):
        parse_line(orjson.dumps(line), LOOP)


def test_an_exported_line_imports_back_to_the_same_records() -> None:
    for name in ("storefront.json", "slots.json"):
        for line in _lines(name):
            event = parse_line(line, LOOP)
            rewards = {r.event_id: r for r in event.rewards}
            for decision in event.decisions:
                again = parse_line(
                    export_line(LoggedDecision(decision, rewards.get(decision.event_id))), LOOP
                )
                assert again.decisions == [decision]
                expected = rewards.get(decision.event_id)
                assert again.rewards == ([] if expected is None else [expected])


def test_a_candidate_with_one_feature_object_exports_and_imports_back() -> None:
    """The native API takes a candidate's features as one JSON object as well as a list
    of them; the export writes ``j`` as logged, and the import gives it back."""
    event = parse_line(_lines("storefront.json")[0], LOOP)
    decision = event.decisions[0]
    assert isinstance(decision.candidates, list)
    one_object = dataclasses.replace(
        decision,
        candidates=[
            {"id": c["id"], "features": {"price": i + 0.5}}
            for i, c in enumerate(decision.candidates)
        ],
    )
    again = parse_line(export_line(LoggedDecision(one_object, None)), LOOP)
    assert again.decisions == [one_object]


# ---- the commands, on both databases --------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def log_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """An event log (migrated, with the loop ``shop``) that ``bandit``
    commands run in this process use."""
    config = new_info(LOOP, DEFAULT_LOOP_SPEC, time.time()).model_dump(mode="json")
    with (
        database(request.param, tmp_path) as url,
        loop_log(url, tmp_path / "data", monkeypatch, LOOP, config),
    ):
        yield url


def _events(url: str, loop: str) -> list[LoggedDecision]:
    log = SqlEventLog(url)
    try:
        return list(log.iter_events(loop))
    finally:
        log.close()


def _count(url: str, loop: str) -> tuple[int, int]:
    log = SqlEventLog(url)
    try:
        return log.count(loop)
    finally:
        log.close()


def _import(*args: str) -> int:
    return main(["import-log", "--format", "dsjson", "--no-progress", *args])


def test_import_is_idempotent_and_reads_directories_and_gz(log_url: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "2026" / "03"
    logs.mkdir(parents=True)
    shutil.copy(FIXTURES / "storefront.json", logs / "a.json")
    (logs / "b.json.gz").write_bytes(gzip.compress((FIXTURES / "slots.json").read_bytes()))
    (logs / "notes.txt").write_text("not a log")
    assert _import("--loop", LOOP, str(tmp_path / "logs")) == 0
    # 4 lines of storefront (the skipped one without reward), 2 slots of one line
    assert _count(log_url, LOOP) == (6, 5)
    assert _import("--loop", LOOP, str(tmp_path / "logs")) == 0
    assert _count(log_url, LOOP) == (6, 5)
    # the loop's history moved back to the earliest imported event (09:15 UTC + 0.125)
    log = SqlEventLog(log_url)
    assert log.policies()[LOOP]["reset_at"] == 1772439480.0  # 09:18+01:00 is 08:18 UTC
    log.close()


def test_a_malformed_line_stops_its_file_unless_skipped(
    log_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # one line a batch: good-1 is written before line 2 fails, the rollback takes it back
    monkeypatch.setattr(log_commands, "BATCH_EVENTS", 1)
    status = _import(
        "--loop", LOOP, str(FIXTURES / "storefront.json"), str(FIXTURES / "malformed.json")
    )
    assert status == 1
    err = capsys.readouterr().err
    assert f"{FIXTURES / 'malformed.json'}:2: a: expected distinct action numbers" in err
    # the file before it is in, nothing of the malformed one
    assert [e.decision.event_id for e in _events(log_url, LOOP)].count("good-1") == 0
    assert _count(log_url, LOOP) == (4, 3)
    assert _import("--loop", LOOP, "--skip-bad", str(FIXTURES / "malformed.json")) == 0
    err = capsys.readouterr().err
    assert "malformed.json:2:" in err and "malformed.json:4: not JSON" in err
    assert _count(log_url, LOOP) == (6, 4)  # good-1 rewarded, good-3 not


def test_unknown_loop_and_missing_path_are_usage_errors(log_url: str, tmp_path: Path) -> None:
    assert _import("--loop", "nope", str(FIXTURES / "slots.json")) == 2
    assert _import("--loop", LOOP, str(tmp_path / "missing.json")) == 2
    assert main(["export-log", "--format", "dsjson", "--loop", "nope"]) == 2


def test_export_then_import_changes_nothing_evaluates_and_rebuilds(
    log_url: str, tmp_path: Path
) -> None:
    # a log as the service writes it: served decisions with JSON features, rewarded
    rng = np.random.default_rng(5)
    lines = []
    for i in range(300):
        segment = str(rng.choice(["new", "returning", "vip"]))
        served = int(rng.integers(3))
        line = {
            "_label_cost": -float(served == ["new", "returning", "vip"].index(segment)),
            "_label_probability": 0.8 if served == 0 else 0.1,
            "Timestamp": f"2026-03-01T{i // 60:02d}:{i % 60:02d}:00.{i:07d}Z",
            "EventId": f"e{i}",
            "a": [served + 1, *[j + 1 for j in range(3) if j != served]],
            "c": {
                "shopper": {"segment": segment},
                "_multi": [{"_tag": t, "j": [{"item": {"name": t}}]} for t in ("x", "y", "z")],
            },
            "p": [0.8 if served == 0 else 0.1, *([0.1, 0.1] if served == 0 else [0.8, 0.1])],
        }
        if i % 7 == 0:  # a log sampled before it was written: its drop probability
            line["pdrop"] = 0.125 * (i % 3)
        lines.append(line)

    source = tmp_path / "source.json"
    source.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    assert _import("--loop", LOOP, str(source)) == 0
    exported = tmp_path / "export.json.gz"
    assert (
        main(["export-log", "--format", "dsjson", "--loop", LOOP, "--output", str(exported)]) == 0
    )
    original = _events(log_url, LOOP)
    assert len(original) == 300
    pdrop = {line["EventId"]: line.get("pdrop") for line in lines}
    assert {e.decision.event_id: e.decision.drop_probability for e in original} == pdrop
    with gzip.open(exported) as written:
        assert {(w := orjson.loads(x))["EventId"]: w.get("pdrop") for x in written} == pdrop
    # an evaluation runs on the imported events, with their logged propensities: the
    # uniform policy's IPS estimate is sum r (1/3) / p over n
    report = tmp_path / "evaluation.json"
    status = main(
        [
            "evaluate",
            "--data",
            log_url,
            "--log-policy",
            LOOP,
            "--json",
            str(report),
            "--no-progress",
        ]
    )
    assert status == 0
    ips = {e["name"]: e["ips"] for e in orjson.loads(report.read_bytes())["estimates"]}
    rewards = [(-line["_label_cost"], line["p"][0], line["a"][0]) for line in lines]
    assert ips["Random"] == pytest.approx(sum(r / 3 / p for r, p, _ in rewards) / 300)
    assert ips["Baseline"] == pytest.approx(sum(r / p for r, p, a in rewards if a == 1) / 300)
    # importing the export into the loop it came from adds nothing
    assert _import("--loop", LOOP, str(exported)) == 0
    assert _count(log_url, LOOP) == (300, 300)

    async def rebuilt() -> bytes:
        log = SqlEventLog(log_url)
        store = InProcessStateStore()
        try:
            report = await rebuild_policy(log, store, LOOP, learning=LEARNING_SETTINGS)
            assert (report.decisions, report.rewards) == (300, 300)
            parts = await store.read(LOOP, await store.keys(LOOP, [""]), {})
            return b"".join(parts[k].data or b"" for k in sorted(parts) if k != "config")
        finally:
            log.close()

    model = asyncio.run(rebuilt())
    # the loop's events deleted and imported back from the export: the same records,
    # the same rebuilt model
    log = SqlEventLog(log_url)
    assert log.delete_events(LOOP, time.time(), 1000) == 600
    log.close()
    assert _count(log_url, LOOP) == (0, 0)
    assert _import("--loop", LOOP, str(exported)) == 0
    assert _events(log_url, LOOP) == original
    assert asyncio.run(rebuilt()) == model


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_served_log_evaluates_the_same_after_export_and_import(
    make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decisions served by the Personalizer routes, exported and imported into another
    database: an evaluation of both logs gives the same estimates."""
    settings = make_settings()
    base = f"/loops/{LOOP}/personalizer/v1.0"
    rng = np.random.default_rng(11)
    async with running(settings) as (app, http, _):
        put = await http.put(f"/policies/{LOOP}", json=DEFAULT_LOOP_SPEC.model_dump())
        assert put.status_code == 200, put.text
        for _ in range(120):
            segment = str(rng.choice(["new", "returning", "vip"]))
            rank = await http.post(
                f"{base}/rank",
                json={
                    "contextFeatures": [
                        {"shopper": {"segment": segment}},
                        {"page": {"kind": "home"}},
                    ],
                    "actions": [
                        {"id": t, "features": [{"item": {"name": t}}]} for t in ("x", "y", "z")
                    ],
                },
            )
            assert rank.status_code == 201, rank.text
            served = rank.json()["rewardActionId"]
            value = float(
                ("x", "y", "z").index(served) == ["new", "returning", "vip"].index(segment)
            )
            reward = await http.post(
                f"{base}/events/{rank.json()['eventId']}/reward", json={"value": value}
            )
            assert reward.status_code == 204, reward.text
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10.0)
        config = app.state.use_cases.event_log.policies()[LOOP]

    served_url = settings.log_url
    imported_dir = tmp_path / "imported"
    monkeypatch.setenv("BANDIT_RUN_MIGRATIONS", "true")
    exported = tmp_path / "served.json"
    for name, value in (("DATABASE_URL", served_url), ("DATA_DIR", str(settings.data_dir))):
        monkeypatch.setenv(f"BANDIT_{name}", value)
    get_settings.cache_clear()
    assert (
        main(["export-log", "--format", "dsjson", "--loop", LOOP, "--output", str(exported)]) == 0
    )
    imported_url = f"sqlite:///{imported_dir / 'events.sqlite3'}"
    monkeypatch.setenv("BANDIT_DATABASE_URL", imported_url)
    monkeypatch.setenv("BANDIT_DATA_DIR", str(imported_dir))
    get_settings.cache_clear()
    assert main(["partitions"]) == 0  # migrates
    log = SqlEventLog(imported_url)
    log.upsert_policy(LOOP, config)
    log.close()
    assert _import("--loop", LOOP, str(exported)) == 0
    get_settings.cache_clear()

    def estimates(url: str) -> list[dict[str, Any]]:
        report = tmp_path / "report.json"
        args = ["evaluate", "--data", url, "--log-policy", LOOP, "--json", str(report)]
        assert main([*args, "--no-progress"]) == 0
        return list(orjson.loads(report.read_bytes())["estimates"])

    served, imported = estimates(served_url), estimates(imported_url)
    assert [e["events"] for e in served] == [120, 120, 120]
    assert imported == served
