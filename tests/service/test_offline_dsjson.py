"""DSJSON files as the offline commands' log (``--format dsjson``, docs/offline.md): a
log split over three files (one gzipped, in a directory whose name order is not their
time order) is one partition per file in time order, and replays and estimates on it
equal those on the same lines in one file; a learning replay streamed over the files
(as each Ray actor is fed them) equals the whole log's; an estimate on the files equals
the estimate on the event log ``bandit import-log`` writes from them; a malformed line
is named by file and line, as the importer names it."""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from service.cli import main
from service.cli.log_sources import LogSpec, partitions
from service.cli.replay import Run, replay_one, streamed_replays
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
from service.policies import new_info
from service.usecases.offline_engine import OfflineEngine
from tests.databases import database
from tests.servers import ROOT
from tests.service.loop_logs import loop_log
from tests.service.offline_results import untimed


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("log", ROOT / "examples" / "personalizer_log.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


dsjson_lines = _example().dsjson_lines
"""``examples/personalizer_log.py``'s generated Personalizer log (``dsjson_lines(count,
seed)``): a decision a minute, every 9th line ``_skipLearn``, every 10th without cost."""

LINES = 240
FEATURES = json.dumps(DEFAULT_LOOP_SPEC.features)


def split_log(directory: Path, lines: list[bytes]) -> tuple[Path, Path]:
    """``lines`` in three files of ``directory / "parts"`` (the first named last, the
    second gzipped) and all of them in ``directory / "whole.json"``; the two paths."""
    parts = directory / "parts"
    parts.mkdir()
    third = len(lines) // 3
    chunks = [lines[:third], lines[third : 2 * third], lines[2 * third :]]
    for name, chunk in zip(("c.json", "a.json.gz", "b.jsonl"), chunks, strict=True):
        data = b"\n".join(chunk) + b"\n"
        (parts / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    whole = directory / "whole.json"
    whole.write_bytes(b"\n".join(lines) + b"\n")
    return parts, whole


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return split_log(tmp_path_factory.mktemp("dsjson"), dsjson_lines(LINES, 3))


def _run(argv: list[str], out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = main([*argv, "--json", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    return untimed(json.loads(out.read_text()))


REPLAY = ["replay", "--policy", "linucb", "--alpha", "0.5", "--rejection", "--seeds", "2"]
ESTIMATE = ["estimate", "--policy", "linucb", "--alpha", "0", "--bootstrap", "40", "--seed", "1"]


def _dsjson(data: Path) -> list[str]:
    return ["--format", "dsjson", "--data", str(data), "--features", FEATURES]


@pytest.mark.parametrize("command", [REPLAY, ESTIMATE], ids=["replay", "estimate"])
def test_three_files_give_what_one_file_gives(
    logs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    parts, whole = logs
    split = _run([*command, *_dsjson(parts)], tmp_path / "split.json", capsys)
    one = _run([*command, *_dsjson(whole)], tmp_path / "one.json", capsys)
    # the files in the order of their first decisions, not of their names
    assert split.pop("data") == [str(parts / n) for n in ("c.json", "a.json.gz", "b.jsonl")]
    assert one.pop("data") == str(whole)
    if command is ESTIMATE:
        assert (split.pop("partitions"), one.pop("partitions")) == (3, 1)
    assert split == one
    assert split["features"] == DEFAULT_LOOP_SPEC.features


def test_a_replay_streamed_over_the_files_equals_the_whole_log(logs: tuple[Path, Path]) -> None:
    parts, whole = logs
    files = tuple(str(parts / n) for n in ("c.json", "a.json.gz", "b.jsonl"))
    spec = LogSpec(files[0], "dsjson", features=FEATURES, files=files)
    assert partitions(spec) == [LogSpec(f, "dsjson", features=FEATURES) for f in files]
    runs = [Run("linucb", {"alpha": 0.5}, 3), Run("hybrid_linucb", {"alpha": 1.0}, 4)]
    streamed = streamed_replays(OfflineEngine(), spec, runs, None, True, no_progress=True)
    rewarded = LINES - len({i for i in range(LINES) if i % 9 == 4 or i % 10 == 7})
    for run, result in zip(runs, streamed, strict=True):
        one_file = LogSpec(str(whole), "dsjson", features=FEATURES)
        once = replay_one(one_file, run.policy, run.params, run.seed, None, True)
        assert (result.cumulative_reward, result.matched, result.events_seen) == (
            once.cumulative_reward,
            once.matched,
            once.events_seen,
        )
        assert np.array_equal(result.curve, once.curve)
        assert once.events_seen == rewarded and once.matched > 0


@pytest.fixture
def imported(
    logs: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The SQLite event log of the loop ``shop`` (the default loop's settings) after
    ``bandit import-log`` of the three files; its URL."""
    config = new_info("shop", DEFAULT_LOOP_SPEC, time.time()).model_dump(mode="json")
    with (
        database("sqlite", tmp_path) as url,
        loop_log(url, tmp_path / "data", monkeypatch, "shop", config),
    ):
        argv = ["import-log", "--format", "dsjson", "--no-progress", "--loop", "shop"]
        assert main([*argv, str(logs[0])]) == 0
        yield url


def test_an_estimate_on_the_files_equals_the_one_on_their_import(
    logs: tuple[Path, Path], imported: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_files = _run([*ESTIMATE, *_dsjson(logs[0])], tmp_path / "files.json", capsys)
    eventlog = ["--format", "eventlog", "--data", imported, "--log-policy", "shop"]
    on_import = _run([*ESTIMATE, *eventlog], tmp_path / "import.json", capsys)
    for source in ("data", "format", "features", "log_policy", "since", "until", "unrewarded"):
        on_files.pop(source, None), on_import.pop(source, None)
    assert (on_files.pop("partitions"), on_import.pop("partitions")) == (3, 1)  # one UTC day
    assert on_files == on_import
    assert on_files["evaluated_events"] > 0


def test_a_malformed_line_is_named_by_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = dsjson_lines(6, 1)
    broken = tmp_path / "broken.json"
    broken.write_bytes(b"\n".join([*lines[:2], lines[2].replace(b'"a":[', b'"a":[9,'), *lines[3:]]))
    replay = ["replay", "--policy", "linucb", "--no-progress"]
    assert main([*replay, *_dsjson(broken)]) == 1
    err = capsys.readouterr().err
    assert f"{broken}:3: a: expected distinct action numbers from 1 to 3" in err, err
    first = tmp_path / "first.json"
    first.write_bytes(b"{not json\n" + lines[0])  # read to order the files: named as well
    assert main([*replay, *_dsjson(first)]) == 1
    assert f"{first}:1: not JSON" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "--format dsjson needs --features or --features-file"),
        (["--features", FEATURES, "--log-policy", "x"], "apply to --format eventlog only"),
        (["--features", FEATURES, "--data", "missing"], "missing: no such file or directory"),
    ],
)
def test_usage_errors(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "log.json").write_bytes(dsjson_lines(1, 0)[0])
    data = [] if "--data" in argv else ["--data", str(tmp_path / "log.json")]
    code = main(["replay", "--policy", "linucb", "--format", "dsjson", *data, *argv])
    assert code == 2 and message in capsys.readouterr().err
