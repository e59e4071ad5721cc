"""``bandit evaluate`` on the storefront log of ``examples/event_log.py --storefront``
(policy ``shop``, uniformly random over 10 offered items): its estimates are the engine's
progressive replay and the closed-form sums, the uniform policy's estimate on a uniform
log is the logged mean reward, and bad input exits 2 naming the option."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from bandit_core.evaluation import WindowSums, importance_weights, progressive_distribution
from service.api.app import LEARNING_SETTINGS
from service.cli import main
from service.policies import build_policy, info_from_record, spec_of
from service.storage.sql_log import SqlEventLog
from service.usecases.evaluations import (
    LogArrays,
    load_decisions,
    logged_events,
    rows_function,
    spec_from_arguments,
)

# One worker runs every test of this module, so its module-scoped servers start once.
pytestmark = pytest.mark.xdist_group(__name__)

EVENTS = 600
INTERACTIONS = "--cb_explore_adf --epsilon 0.2 -q ::"


@pytest.fixture(scope="module")
def storefront_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(__file__).resolve().parents[2] / "examples" / "event_log.py"
    spec = importlib.util.spec_from_file_location("event_log", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    url = f"sqlite:///{tmp_path_factory.mktemp('storefront') / 'events.sqlite3'}"
    assert asyncio.run(example.fill(url, EVENTS, 0, storefront=True)) == EVENTS
    return url


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_estimates_are_the_engines_progressive_replay(
    storefront_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "evaluate",
        "--data",
        storefront_url,
        "--log-policy",
        "shop",
        "--policy",
        f"interactions={INTERACTIONS}",
        "--json",
        str(tmp_path / "e.json"),
        "--plot",
        str(tmp_path / "e.png"),
        "--no-progress",
    ]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert "interactions" in out and "optimal policy" in out
    result = json.loads((tmp_path / "e.json").read_text())
    estimates = {r["name"]: r for r in result["estimates"]}
    assert {r["source"] for r in result["estimates"]} == {"Online", "Baseline", "Random", "Custom"}
    assert (tmp_path / "e.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same numbers from the engine directly
    log = SqlEventLog(storefront_url)
    try:
        decisions = load_decisions(log, "shop", float("-inf"), float("inf"))
        loop = spec_of(info_from_record(log.policies()["shop"]))
    finally:
        log.close()
    assert len(decisions) == EVENTS
    arrays = LogArrays(decisions)
    spec = spec_from_arguments(LEARNING_SETTINGS, loop, INTERACTIONS, ["arguments"])
    dist = progressive_distribution(
        build_policy(spec), logged_events(decisions, rows_function(spec)), 10
    )
    expected = WindowSums.of(arrays.reward, arrays.action, arrays.pscore, dist)
    got = estimates["interactions"]
    assert np.isclose(got["ips"], expected.ips, rtol=1e-12) and np.isclose(
        got["snips"], expected.snips, rtol=1e-12
    )
    assert np.isclose(got["ips_high"] - got["ips"], expected.ips_half_width(), rtol=1e-9)
    # a uniform target on a uniformly random log: every weight is 1, IPS is the mean reward
    assert np.allclose(
        importance_weights(arrays.action, arrays.pscore, np.full((EVENTS, 10), 0.1)), 1.0
    )
    assert np.isclose(estimates["Random"]["ips"], arrays.reward.mean(), rtol=1e-12)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--log-policy", "nope"], "--log-policy 'nope' has no config"),
        (
            ["--log-policy", "shop", "--policy", "x=--cb_explore_adf --bag 5"],
            "--policy: arguments: --bag is not supported",
        ),
        (
            ["--log-policy", "shop", "--policy", "Random=-q ::"],
            "--policy: policies[0].name 'Random' is taken",
        ),
        (["--log-policy", "shop", "--until", "2000-01-01"], "no rewarded decision"),
    ],
)
def test_bad_input_exits_2_naming_the_option(
    storefront_url: str, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(["evaluate", "--data", storefront_url, "--no-progress", *extra], capsys)
    assert code == 2 and message in err, err


def test_a_missing_sqlite_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(
        ["evaluate", "--data", f"sqlite:///{tmp_path}/none.sqlite3", "--log-policy", "x"], capsys
    )
    assert code == 2 and "no such SQLite file" in err
