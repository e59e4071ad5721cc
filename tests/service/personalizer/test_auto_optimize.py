"""Auto-Optimize (service/usecases/auto_optimize.py, docs/personalizer.md "Auto-Optimize"):
the schedule of isAutoOptimizationEnabled / autoOptimizationFrequency /
autoOptimizationStartDate on a fake clock, the decision rule in closed form, and on
storefront logs: a better setting is applied (and relearned from the log), the best
current one leaves the loop as it is."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from bandit_core.evaluation import WindowSums
from bandit_core.storefront import Storefront
from service.usecases.auto_optimize import decide, due_run
from tests.service.conftest import running, wait_for
from tests.service.personalizer.test_evaluations import serve

pytestmark = pytest.mark.anyio

CONFIG = "/personalizer/v1.0/configurations/service"
POLICY = "/personalizer/v1.0/configurations/policy"
START = datetime(2026, 3, 2, tzinfo=UTC)
WEEK = 7 * 86_400.0


async def enable(http: Any, start: datetime = START, frequency: str = "P7D") -> None:
    config = (await http.get(CONFIG)).json()
    config.update(
        isAutoOptimizationEnabled=True,
        autoOptimizationFrequency=frequency,
        autoOptimizationStartDate=start.isoformat(),
    )
    answer = await http.put(CONFIG, json=config)
    assert answer.status_code == 200, answer.text


def periods(rewards: list[float], weights: list[float]) -> list[list[float]]:
    sums = WindowSums.from_terms(np.asarray(weights), np.asarray(rewards))
    return [[0.0, *sums.to_list()]]


def test_due_runs_follow_the_start_and_the_period() -> None:
    assert due_run(100.0, 10.0, 99.9) is None
    assert [due_run(100.0, 10.0, t) for t in (100.0, 109.9, 110.0, 135.0)] == [0, 0, 1, 3]


def test_the_best_setting_is_applied_only_above_the_online_mean_and_lower_bound() -> None:
    ones = [1.0] * 400
    online = {"name": "Online", "source": "Online", "arguments": "a"}
    better = {"name": "grid", "source": "OfflineExperimentation", "arguments": "b"}
    # online 0.25 with every weight 1; the candidate 0.5, weights 2 on half of the events
    result = {
        "events": 400,
        "policies": [
            {**online, "periods": periods([1.0, 0, 0, 0] * 100, ones)},
            {**better, "periods": periods([1.0, 0] * 200, [1.0, 1.0] * 200)},
            {"name": "Random", "source": "Random", "arguments": "", "periods": []},
        ],
    }
    decision = decide(result)
    assert decision["applied"] is True and decision["best"] == "grid"
    by_name = {e["name"]: e for e in decision["estimates"]}
    assert set(by_name) == {"Online", "grid"}
    assert by_name["Online"]["mean"] == pytest.approx(0.25)
    assert by_name["grid"]["mean"] == pytest.approx(0.5)
    half = 1.959963984540054 * np.sqrt(0.25 * 0.75 / 400)  # Bernoulli(0.25), n = 400
    assert by_name["Online"]["low"] == pytest.approx(0.25 - half, rel=2e-3)
    # a higher mean with a wide interval: not applied, and the reason says so
    wide = {**better, "periods": periods([1.0] + [0.0] * 399, [120.0] + [1.0] * 399)}
    decision = decide({**result, "policies": [result["policies"][0], wide]})
    assert decision["applied"] is False
    assert "lower 95% bound" in decision["reason"]
    # a lower mean: not applied
    worse = {**better, "periods": periods([0.0] * 400, ones)}
    decision = decide({**result, "policies": [result["policies"][0], worse]})
    assert decision["applied"] is False and "is not above the online" in decision["reason"]


@pytest.mark.parametrize("backend", ["embedded"])
async def test_runs_start_on_the_schedule_of_a_fake_clock(make_settings: Any) -> None:
    async with running(make_settings(personalizer_loop=True, auto_optimize_check_seconds=3600)) as (
        app,
        http,
        _,
    ):
        optimizer = app.state.use_cases.auto_optimizer
        now = [START.timestamp() - 1]
        optimizer.clock = lambda: now[0]
        assert await optimizer.run_once() == []  # not enabled
        await enable(http)
        assert await optimizer.run_once() == []  # before the start date
        now[0] = START.timestamp() + 1
        assert await optimizer.run_once() == ["personalizer/auto-0"]
        now[0] += 3600
        assert await optimizer.run_once() == []  # run 0 exists
        now[0] = START.timestamp() + WEEK + 1
        assert await optimizer.run_once() == ["personalizer/auto-1"]
        runs = (await http.get("/policies/personalizer/auto-optimizations")).json()
        assert sorted(r["evaluation_id"] for r in runs) == ["auto-0", "auto-1"]
        run = next(r for r in runs if r["evaluation_id"] == "auto-1")
        assert run["end_time"] == pytest.approx(now[0])
        assert run["start_time"] == pytest.approx(now[0] - 2 * WEEK)
        listed = await http.get(
            "/personalizer/evaluations",
            params={"api-version": "2022-09-01-preview", "filter": "evaluationType eq 'Auto'"},
        )
        assert sorted(e["id"] for e in listed.json()["value"]) == ["auto-0", "auto-1"]
        config = (await http.get(CONFIG)).json()
        config["isAutoOptimizationEnabled"] = False
        assert (await http.put(CONFIG, json=config)).status_code == 200
        now[0] += 2 * WEEK
        assert await optimizer.run_once() == []  # turned off


async def optimized(app: Any, http: Any, arguments: str, seed: int) -> dict[str, Any]:
    """Serve 2,000 storefront rounds under ``arguments``, run Auto-Optimize once and
    return the run as the native route answers it once decided."""
    rng = np.random.default_rng(seed)
    rounds = list(Storefront().rounds(2000, replace_at=None, rng=rng))
    answer = await http.put(POLICY, json={"name": "served", "arguments": arguments})
    assert answer.status_code == 200, answer.text
    await serve(http, rounds, rng.random(2000))
    log = app.state.use_cases.event_log
    await wait_for(lambda: log.count("personalizer") == (2000, 2000), timeout=60)
    optimizer = app.state.use_cases.auto_optimizer
    start = datetime.fromtimestamp(time.time() - 60, UTC)
    await enable(http, start, "P1D")
    assert await optimizer.run_once() == ["personalizer/auto-0"]
    deadline = time.monotonic() + 600
    while True:
        await optimizer.run_once()
        (run,) = (await http.get("/policies/personalizer/auto-optimizations")).json()
        if run["decided_at"] is not None:
            return run
        assert run["status"] in ("pending", "running", "succeeded"), run  # decided next
        assert time.monotonic() < deadline, run
        await asyncio.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_better_setting_is_applied_and_relearned(make_settings: Any) -> None:
    plain = "--cb_explore_adf --epsilon 0.3 -b 6"
    async with running(make_settings(personalizer_loop=True, auto_optimize_check_seconds=3600)) as (
        app,
        http,
        _,
    ):
        run = await optimized(app, http, plain, seed=1)
        assert run["applied"] is True, run
        estimates = {e["name"]: e for e in run["estimates"]}
        best, online = estimates[run["best"]], estimates[run["online"]]
        assert best["mean"] > online["mean"] and best["low"] > online["low"]
        policy = (await http.get(POLICY)).json()
        assert policy["arguments"] != plain
        status = (await http.get("/personalizer/v1.0/evaluations/auto-0")).json()
        assert status["status"] == "optimalPolicyApplied"
        assert status["evaluationType"] == "Auto"
        retrain = (await http.get("/personalizer/v1.0/model/properties")).json()["retrain"]
        assert retrain["state"] in ("running", "done")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_best_current_setting_is_kept(make_settings: Any) -> None:
    best = "--cb_explore_adf --epsilon 0.05 -q :: -b 6"
    async with running(make_settings(personalizer_loop=True, auto_optimize_check_seconds=3600)) as (
        app,
        http,
        _,
    ):
        run = await optimized(app, http, best, seed=2)
        assert run["applied"] is False, run
        assert run["reason"]
        assert (await http.get(POLICY)).json()["arguments"] == best
        status = (await http.get("/personalizer/v1.0/evaluations/auto-0")).json()
        assert status["status"] == "completed"
        assert (await http.get("/personalizer/v1.0/model/properties")).json()["retrain"] is None
