"""``bandit replay``, ``bandit simulate`` and ``bandit compare`` end to end."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from bandit_core.datasets import news_dataset_path
from service.cli import build_parser, main

NEWS = news_dataset_path()
PNG = b"\x89PNG\r\n\x1a\n"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_replay_reports_567_for_linucb_at_alpha_0_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    js, png = tmp_path / "r.json", tmp_path / "r.png"
    code, out, _ = _run(
        [
            "replay",
            "--format",
            "news",
            "--policy",
            "linucb",
            "--alpha",
            "0.1",  # no --data: the packaged set
            "--rounds",
            "800",
            "--seeds",
            "1",
            "--json",
            str(js),
            "--plot",
            str(png),
        ],
        capsys,
    )
    assert code == 0 and "cumulative reward 567" in out
    result = json.loads(js.read_text())
    for key in (
        "policy",
        "cumulative_reward",
        "mean_reward",
        "matched",
        "events_seen",
        "seconds",
        "per_seed",
    ):
        assert key in result
    assert result["policy"] == "linucb" and result["cumulative_reward"] == 567
    assert result["matched"] == 800 and result["events_seen"] == 7761
    assert result["per_seed"] == [
        {**result["per_seed"][0], "seed": 0, "cumulative_reward": 567.0, "matched": 800}
    ]
    assert len(result["curve"]) == 800 and result["curve"][-1] == 567
    assert png.read_bytes().startswith(PNG)


def test_replay_passes_policy_params_through(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    js = tmp_path / "r.json"
    code, _, _ = _run(
        [
            "replay",
            "--data",
            str(NEWS),
            "--policy",
            "linucb",
            "--alpha",
            "1",
            "--param",
            "ridge_lambda=2",
            "--rounds",
            "50",
            "--seeds",
            "2",
            "--seed-start",
            "3",
            "--no-progress",
            "--json",
            str(js),
        ],
        capsys,
    )
    result = json.loads(js.read_text())
    assert code == 0 and result["params"] == {"ridge_lambda": 2, "alpha": 1.0}
    assert [s["seed"] for s in result["per_seed"]] == [3, 4] and result["seeds"] == [3, 4]


def test_jsonl_log_replays_like_the_news_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bandit_core.datasets import load_news

    log = load_news(NEWS)
    path = tmp_path / "log.jsonl"
    with path.open("w") as fh:
        for e in list(log)[:3000]:
            cands = [{"id": a, "features": x.tolist()} for a, x in zip(e.arm_ids, e.X, strict=True)]
            fh.write(
                json.dumps(
                    {"candidates": cands, "arm_id": e.chosen, "reward": e.reward, "propensity": 0.1}
                )
                + "\n"
            )
    results = []
    for data, fmt, extra in (
        (NEWS, "news", []),
        (path, "jsonl", []),
        (path, "jsonl", ["--rejection"]),
    ):
        js = tmp_path / f"{fmt}{len(extra)}.json"
        code, _, _ = _run(
            [
                "replay",
                "--data",
                str(data),
                "--format",
                fmt,
                "--policy",
                "linucb",
                "--alpha",
                "0.1",
                "--rounds",
                "200",
                "--no-progress",
                "--json",
                str(js),
                *extra,
            ],
            capsys,
        )
        assert code == 0
        results.append(json.loads(js.read_text()))
    assert results[0]["matched"] == 200
    assert {(r["cumulative_reward"], r["events_seen"]) for r in results} == {
        (results[0]["cumulative_reward"], results[0]["events_seen"])
    }
    assert results[2]["protocol"].startswith("rejection-sampling")


def test_simulate_on_a_classification_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "d.csv"
    csv.write_text(
        "x1,x2,label\n" + "".join(f"{i % 3},{(i + 1) % 2},{'ab'[i % 2]}\n" for i in range(40))
    )
    js, png = tmp_path / "s.json", tmp_path / "s.png"
    code, out, _ = _run(
        [
            "simulate",
            "--csv",
            str(csv),
            "--label-column",
            "label",
            "--policy",
            "linucb",
            "--rounds",
            "200",
            "--seeds",
            "2",
            "--no-progress",
            "--json",
            str(js),
            "--plot",
            str(png),
        ],
        capsys,
    )
    result = json.loads(js.read_text())
    assert code == 0 and "cumulative regret" in out
    for key in ("policy", "cumulative_regret", "cumulative_reward", "per_seed"):
        assert key in result
    assert result["environment"]["arms"] == ["a", "b"] and len(result["per_seed"]) == 2
    assert result["cumulative_regret"] + result["cumulative_reward"] == pytest.approx(200)
    assert png.read_bytes().startswith(PNG)


def test_simulate_synthetic_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js = tmp_path / "s.json"
    code, _, _ = _run(
        [
            "simulate",
            "--env",
            "nonlinear",
            "--arms",
            "3",
            "--dim",
            "4",
            "--policy",
            "random",
            "--rounds",
            "100",
            "--no-progress",
            "--json",
            str(js),
        ],
        capsys,
    )
    result = json.loads(js.read_text())
    assert (
        code == 0
        and result["environment"]["env"] == "nonlinear"
        and len(result["regret_curve"]) == 100
    )


def test_compare_runs_a_grid_in_parallel_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    js, png = tmp_path / "c.json", tmp_path / "c.png"
    code, out, _ = _run(
        [
            "compare",
            "--data",
            str(NEWS),
            "--policy",
            "linucb",
            "--policy",
            "rnd=random",
            "--alpha",
            "0.1",
            "10",
            "--rounds",
            "800",
            "--seeds",
            "2",
            "--jobs",
            "2",
            "--no-progress",
            "--json",
            str(js),
            "--plot",
            str(png),
        ],
        capsys,
    )
    result = json.loads(js.read_text())
    assert code == 0 and result["jobs"] == 2
    rows = {r["label"]: r for r in result["results"]}
    assert set(rows) == {"linucb alpha=0.1", "linucb alpha=10.0", "rnd alpha=0.1", "rnd alpha=10.0"}
    assert (
        rows["linucb alpha=0.1"]["cumulative_reward"] == 567
    )  # same in a worker process, every seed
    assert rows["linucb alpha=10.0"]["cumulative_reward"] == 98
    assert rows["linucb alpha=0.1"]["cumulative_reward_std"] == 0
    assert [s["seed"] for s in rows["rnd alpha=0.1"]["per_seed"]] == [0, 1]
    for label in rows:
        assert label in out  # the table
    assert png.read_bytes().startswith(PNG)


def test_estimate_refuses_a_log_that_does_not_support_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A logger that always served arm a (propensity 1, as LinUCB logs with epsilon 0): the
    target prefers the arms it never saw, which the log cannot evaluate."""
    rng = np.random.default_rng(0)
    path = tmp_path / "deterministic.jsonl"
    with path.open("w") as fh:
        for _ in range(400):
            cands = [{"id": a, "features": rng.normal(size=2).tolist()} for a in "abc"]
            fh.write(
                json.dumps(
                    {
                        "candidates": cands,
                        "arm_id": "a",
                        "reward": float(rng.random() < 0.2),
                        "propensity": 1.0,
                    }
                )
                + "\n"
            )
    js = tmp_path / "e.json"
    argv = [
        "estimate",
        "--data",
        str(path),
        "--format",
        "jsonl",
        "--policy",
        "linucb",
        "--alpha",
        "0",
        "--bootstrap",
        "50",
        "--json",
        str(js),
    ]
    code, out, err = _run(argv, capsys)
    assert code == 1 and "ips" not in out
    assert "does not support the target policy" in err and "--force" in err
    support = json.loads(js.read_text())["support"]
    assert support["supported"] is False and support["deterministic_events"] == 200
    assert 0 < support["unsupported_mass"] < 1  # the target agrees with the logger sometimes
    code, out, err = _run([*argv, "--force"], capsys)
    assert code == 0 and "ips" in out and "does not support" in err
    assert json.loads(js.read_text())["estimates"]["dr"]["support"] == support


def test_bandit_help_lists_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--help"], capsys)
    assert code == 0
    for status in ("0  success", "1  failure", "2  usage"):
        assert status in out


@pytest.mark.parametrize("name", ["serve", "rebuild", "openapi", "estimate"])
def test_service_commands_explain_every_option(name: str) -> None:
    for action in _subparser(name)._actions:
        assert action.help and len(action.help) > 10, action.option_strings


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("name", ["replay", "simulate", "compare"])
def test_help_explains_every_option(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _subparser(name)
    for action in parser._actions:
        assert action.help and len(action.help) > 10, action.option_strings
    code, out, _ = _run([name, "--help"], capsys)
    assert code == 0 and "--json" in out and "--plot" in out and "example:" in out


D = str(NEWS)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["replay", "--data", "missing.txt", "--policy", "linucb"],
            "--data missing.txt: no such file",
        ),
        (["replay", "--data", D, "--policy", "nope"], "unknown policy 'nope'"),
        (
            ["replay", "--data", D, "--policy", "linucb", "--param", "foo=1"],
            "unknown parameter 'foo' for linucb",
        ),
        (
            ["replay", "--data", D, "--policy", "linucb", "--param", "alpha"],
            "--param takes KEY=VALUE",
        ),
        (
            ["replay", "--data", D, "--policy", "linucb", "--param", "seed=3"],
            "seed=... is not allowed",
        ),
        (
            ["replay", "--data", D, "--policy", "linucb", "--param", "ridge_lambda=-1"],
            "ridge_lambda must be",
        ),
        (
            ["replay", "--data", D, "--policy", "linucb", "--alpha", "-1"],
            "argument --alpha: the value must be a finite number >= 0, but got -1.0",
        ),
        (
            ["replay", "--data", D, "--policy", "linucb", "--rounds", "0"],
            "argument --rounds: the value must be a positive int, but got 0",
        ),
        (
            ["replay", "--data", D, "--format", "jsonl", "--policy", "linucb"],
            "news_dataset.txt.gz:1: Extra data",
        ),
        (["replay", "--format", "jsonl", "--policy", "linucb"], "--format jsonl needs --data"),
        (
            [
                "replay",
                "--data",
                D,
                "--policy",
                "linucb",
                "--rejection",
                "--rounds",
                "5",
                "--json",
                "/nonexistent/r.json",
            ],
            "--json /nonexistent/r.json",
        ),
        (["simulate", "--policy", "linucb", "--label-column", "y"], "--label-column needs --csv"),
        (
            ["simulate", "--policy", "linucb", "--csv", "missing.csv", "--label-column", "y"],
            "missing.csv",
        ),
        (
            ["compare", "--data", D, "--policy", "linucb", "--grid", "ridge_lambda"],
            "--grid takes KEY=V1,V2",
        ),
        (["compare", "--data", D, "--policy", "x=linucb:d=3"], "d=... is not allowed"),
        (
            ["compare", "--data", D, "--policy", "linucb:refactor_every=0.5"],
            "refactor_every must be a positive int",
        ),
    ],
)
def test_errors_are_one_line_with_exit_status_2(
    argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run([*argv, "--no-progress"], capsys)
    assert code == 2
    assert match in err and "Traceback" not in err
