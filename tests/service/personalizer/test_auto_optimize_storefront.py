"""Auto-Optimize on simulated storefront traffic (bandit_core/storefront.py, docs/personalizer.md
"Auto-Optimize"): a loop serving a setting without the interactions the storefront needs gets
the better one applied and relearned from its log, checked against the decision rule with the
run's recorded numbers."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from bandit_core.storefront import Storefront
from tests.service.conftest import running
from tests.service.personalizer.test_auto_optimize import POLICY, enable
from tests.service.personalizer.test_evaluations import logged, relearned, serve

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


async def served_loop(http: Any, app: Any, arguments: str, seed: int) -> None:
    policy = {"name": "current", "arguments": arguments}
    assert (await http.put(POLICY, json=policy)).status_code == 200
    rng = np.random.default_rng(seed)
    rounds = list(Storefront().rounds(ROUNDS, replace_at=None, rng=rng))
    await serve(http, rounds, rng.random(ROUNDS))
    await logged(app, ROUNDS)
    await enable(http, start=datetime.fromtimestamp(time.time() - 60, UTC), frequency="P7D")


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
