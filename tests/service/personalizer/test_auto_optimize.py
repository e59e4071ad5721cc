"""Auto-Optimize (service/usecases/auto_optimize.py, docs/personalizer.md "Auto-Optimize"):
the schedule of isAutoOptimizationEnabled / autoOptimizationFrequency /
autoOptimizationStartDate on a fake clock and the decision rule in closed form."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from bandit_core.evaluation import WindowSums
from service.usecases.auto_optimize import decide, due_run
from tests.service.conftest import running

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


def periods(
    rewards: list[float], weights: list[float], dr: list[float] | None = None
) -> list[list[float]]:
    """One period's sums; ``dr`` the DR terms of both reward models (None: ``w r``)."""
    terms = None if dr is None else np.asarray(dr)
    sums = WindowSums.from_terms(np.asarray(weights), np.asarray(rewards), terms, terms)
    return [[0.0, *sums.to_list()]]


def test_due_runs_follow_the_start_and_the_period() -> None:
    assert due_run(100.0, 10.0, 99.9) is None
    assert [due_run(100.0, 10.0, t) for t in (100.0, 109.9, 110.0, 135.0)] == [0, 0, 1, 3]


ONES = [1.0] * 400
"""Importance weights of 1 for the 400 events of the decision tests below."""
ONLINE = {"name": "Online", "source": "Online", "arguments": "a"}
GRID = {"name": "grid", "source": "OfflineExperimentation", "arguments": "b"}


def test_the_best_setting_is_applied_only_above_the_online_mean_and_lower_bound() -> None:
    # online 0.25 with every weight 1; the candidate 0.5, weights 2 on half of the events
    result = {
        "events": 400,
        "policies": [
            {**ONLINE, "periods": periods([1.0, 0, 0, 0] * 100, ONES)},
            {**GRID, "periods": periods([1.0, 0] * 200, [1.0, 1.0] * 200)},
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
    wide = {**GRID, "periods": periods([1.0] + [0.0] * 399, [120.0] + [1.0] * 399)}
    decision = decide({**result, "policies": [result["policies"][0], wide]})
    assert decision["applied"] is False
    assert "lower 95% bound" in decision["reason"]
    # a lower mean: not applied
    worse = {**GRID, "periods": periods([0.0] * 400, ONES)}
    decision = decide({**result, "policies": [result["policies"][0], worse]})
    assert decision["applied"] is False and "is not above the online" in decision["reason"]


@pytest.mark.parametrize("estimator", ["dr", "mtr"])
def test_a_dr_evaluation_is_decided_by_its_dr_estimates(estimator: str) -> None:
    """The same sums decided by IPS and by DR (the result's estimator): IPS favours the
    candidate, its DR terms do not."""
    result = {
        "events": 400,
        "policies": [
            {**ONLINE, "periods": periods([1.0, 0, 0, 0] * 100, ONES, [0.3] * 400)},
            {**GRID, "periods": periods([1.0, 0] * 200, ONES, [0.2] * 400)},
        ],
    }
    assert decide(result)["applied"] is True  # stored before results named an estimator: IPS
    decision = decide({**result, "estimator": estimator})
    assert decision["applied"] is False and "is not above the online" in decision["reason"]
    by_name = {e["name"]: e for e in decision["estimates"]}
    assert by_name["Online"]["mean"] == pytest.approx(0.3)
    assert by_name["grid"]["mean"] == pytest.approx(0.2)
    assert by_name["grid"]["low"] == pytest.approx(0.2)  # every term 0.2: no spread


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
