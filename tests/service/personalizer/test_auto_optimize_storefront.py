"""Auto-Optimize on simulated storefront traffic (bandit_core/storefront.py, docs/personalizer.md
"Auto-Optimize"): a loop serving a setting without the interactions the storefront needs gets
the better one applied and relearned from its log; a loop whose greedy log no grid setting can
be estimated above keeps its setting, and the run says why. Both are checked against the
decision rule with the run's recorded numbers."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from bandit_core.storefront import Storefront
from service.usecases.evaluations import load_decisions
from tests.service.conftest import running
from tests.service.personalizer.test_auto_optimize import POLICY, enable
from tests.service.personalizer.test_evaluations import logged, relearned, serve
from tests.service.personalizer.test_multislot import immediate_updates

pytestmark = pytest.mark.anyio

LOOP = "personalizer"
ROUNDS = 2000


async def one_decided_run(app: Any, http: Any, timeout: float = 120.0) -> dict[str, Any]:
    """Drive the periodic check (as its timer would) until the due run is decided."""
    optimizer = app.state.use_cases.auto_optimizer
    assert await optimizer.run_once() == [f"{LOOP}/auto-0"]
    deadline = time.monotonic() + timeout
    while True:
        await optimizer.run_once()
        runs = (await http.get(f"/policies/{LOOP}/auto-optimizations")).json()
        assert [r["evaluation_id"] for r in runs] == ["auto-0"]
        if runs[0]["decided_at"] is not None:
            return dict(runs[0])
        assert time.monotonic() < deadline, runs
        await asyncio.sleep(0.5)


def check_rule(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The online and best estimates of ``run``, after checking its decision follows the
    rule (mean higher and lower 95% bound above the online's)."""
    by_name = {e["name"]: e for e in run["estimates"]}
    online, best = by_name[run["online"]], by_name[run["best"]]
    assert online["source"] == "Online" and best["source"] == "OfflineExperimentation"
    for e in run["estimates"]:
        assert e["low"] < e["mean"] < e["high"]
    assert best["mean"] == max(e["mean"] for e in run["estimates"] if e["source"] != "Online")
    rule = best["mean"] > online["mean"] and best["low"] > online["low"]
    assert run["applied"] is rule
    return online, best


async def served_loop(
    http: Any, app: Any, arguments: str, seed: int, rounds: int = ROUNDS
) -> list[float]:
    """The clicks of ``rounds`` storefront rounds served under ``arguments``, logged, then
    Auto-Optimize enabled from a minute ago."""
    policy = {"name": "current", "arguments": arguments}
    assert (await http.put(POLICY, json=policy)).status_code == 200
    rng = np.random.default_rng(seed)
    served = list(Storefront().rounds(rounds, replace_at=None, rng=rng))
    clicks, _ = await serve(http, served, rng.random(rounds))
    await logged(app, rounds)
    await enable(http, start=datetime.fromtimestamp(time.time() - 60, UTC), frequency="P7D")
    return clicks


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_loop_without_the_interactions_it_needs_gets_the_better_setting(
    make_settings: Any,
) -> None:
    async with running(make_settings(personalizer_loop=True)) as (app, http, _):
        await served_loop(http, app, "--cb_explore_adf --epsilon 0.3", seed=3)
        run = await one_decided_run(app, http)
        online, best = check_rule(run)
        assert run["applied"] is True, run["reason"]
        assert run["reason"] == (
            f"{best['name']}: mean {best['mean']:.4f} above the online {online['mean']:.4f} and "
            f"lower 95% bound {best['low']:.4f} above the online {online['low']:.4f}"
        )
        current = (await http.get(POLICY)).json()
        assert current["arguments"] == best["arguments"] != online["arguments"]
        status = (await http.get(f"/personalizer/v1.0/evaluations/{run['evaluation_id']}")).json()
        assert status["status"] == "optimalPolicyApplied"
        # the new interactions need a new model: relearned from the loop's rewarded log
        properties = await relearned(http, LOOP)
        assert properties["retrain"]["state"] == "done", properties
        assert properties["retrain"]["events"] == ROUNDS


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_loop_no_grid_setting_can_be_estimated_above_keeps_its_setting(
    make_settings: Any,
) -> None:
    """Why the outcome is fixed: the loop serves greedily (``--epsilon 0``) and learns each
    reward at once (``modelUpdateFrequency`` PT0S), so once it has learned a click every
    logged propensity is 1 (before, every setting is at its prior and ranks all actions
    alike: weight 1), and a grid setting's weight ``pi(a) / p`` is at most 1 on every
    clicked decision. Its IPS estimate, ``sum w r / n`` with rewards 0 or 1, is then at
    most the realised click rate, which is the online setting's (replayed on its own log:
    every weight 1), and the rule's first half fails whatever the draws. The test checks
    both premises on the log and the run before the decision."""
    arguments = "--cb_explore_adf --epsilon 0 -q :: --random_seed 11"
    async with running(make_settings(personalizer_loop=True)) as (app, http, _):
        await immediate_updates(http)
        # the premises hold for any length of log: a short one keeps the test short
        clicks = await served_loop(http, app, arguments, seed=4, rounds=400)
        decisions = load_decisions(app.state.use_cases.event_log, LOOP, -math.inf, math.inf)
        first_click = clicks.index(1.0)
        assert all(d.decision.propensity == 1.0 for d in decisions[first_click + 1 :])
        run = await one_decided_run(app, http)
        online, best = check_rule(run)
        assert online["mean"] == pytest.approx(np.mean(clicks), rel=1e-12)
        assert all(e["mean"] <= online["mean"] for e in run["estimates"])
        assert run["applied"] is False
        assert run["reason"] == (
            f"{best['name']}'s mean {best['mean']:.4f} is not above the online {online['mean']:.4f}"
        )
        assert (await http.get(POLICY)).json() == {"name": "current", "arguments": arguments}
        properties = (await http.get(f"/policies/{LOOP}/model/properties")).json()
        assert properties.get("retrain") is None, properties
