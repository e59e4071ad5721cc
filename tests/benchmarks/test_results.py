"""benchmarks/results: one file per benchmark, each run under its label."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import _harness as h


def test_runs_of_other_labels_are_kept_and_a_label_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h, "RESULTS", tmp_path)
    h.write_json("engine", {"rate": 1}, "before")
    h.write_json("engine", {"rate": 2}, "after")
    path = h.write_json("engine", {"rate": 3}, "after")
    assert path == tmp_path / "engine.json" and [p.name for p in tmp_path.iterdir()] == [
        "engine.json"
    ]
    body = json.loads(path.read_text())
    assert body["benchmark"] == "engine" and list(body["runs"]) == ["before", "after"]
    assert (
        h.read_run("engine", "before")["rate"] == 1 and h.read_run("engine", "after")["rate"] == 3
    )
    assert {"command", "machine"} <= set(h.read_run("engine", "after"))


def test_the_committed_results_are_one_file_per_benchmark() -> None:
    for path in sorted(h.RESULTS.glob("*.json")):
        body = json.loads(path.read_text())
        if path.stem == "replay_speed":  # benchmarks/replay_speed.py writes its own --json
            continue
        assert (
            body["benchmark"] == path.stem and (h.ROOT / "benchmarks" / f"{path.stem}.py").is_file()
        )
        assert h.LATEST in body["runs"], path.name
