"""The console's evaluations page (docs/console.md, "Evaluations") in process: the form
offers the log's range, a bad value shows the API's error beside its field and creates
nothing, a created evaluation's page shows the API's estimates, the effective sample size
of the random candidate equals its closed form, Apply says what it changes and changes
it; a read-only key and a POST without the token change nothing; a missing evaluation
is the 404 page."""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from typing import Any

import numpy as np
import pytest

from tests.service.conftest import POLICY, running, wait_for
from tests.service.console_client import console_client, csrf_of, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]
READONLY_KEY = "read-only-key-0123"
ROUNDS = 30


async def _traffic(http: Any, log: Any) -> None:
    rng = np.random.default_rng(3)
    assert (await http.put("/policies/p", json={**POLICY, "epsilon": 0.3})).status_code == 200
    for _ in range(ROUNDS):
        x = rng.dirichlet(np.ones(3)).tolist()
        decision = (await http.post("/recommend", json={"policy": "p", "context": x})).json()
        reward = float(decision["arm_id"] == "a")
        await http.post("/reward", json={"event_id": decision["event_id"], "reward": reward})
    await wait_for(lambda: log.count("p") == (ROUNDS, ROUNDS), timeout=30)


def _values(page: str, candidate: str) -> dict[str, float]:
    """The chart's estimates of ``candidate``: estimator -> value."""
    found = re.findall(
        rf'data-candidate="{re.escape(candidate)}" data-estimator="(\w+)" data-value="([-\d.]+)"',
        page,
    )
    return {estimator: float(value) for estimator, value in found}


async def test_create_watch_and_apply_an_evaluation(make_settings: Any) -> None:
    settings = make_settings(console_readonly_keys=[READONLY_KEY])
    async with running(settings) as (app, http, _), console_client(app) as browser:
        log = app.state.use_cases.event_log
        await _traffic(http, log)
        await sign_in(browser)
        listing = await browser.get("/console/policies/p/evaluations")
        assert listing.status_code == 200
        first, last = log.time_range("p")
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(first)))
        end = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(last) + 1))
        assert f'value="{start}"' in listing.text and f'value="{end}"' in listing.text
        token = csrf_of(listing.text)
        greedy = {**POLICY, "epsilon": 0.05}
        form = {
            "csrf_token": token,
            "name": "console",
            "start_time": start,
            "end_time": end,
            "policies.0.name": "greedy",
            "policies.0.arguments": json.dumps(greedy),
        }

        backwards = await browser.post(
            "/console/policies/p/evaluations", data={**form, "end_time": "2020-01-01T00:00:00Z"}
        )
        assert backwards.status_code == 422
        assert 'id="end_time-error">end_time must be after start_time' in backwards.text
        not_a_time = await browser.post(
            "/console/policies/p/evaluations", data={**form, "start_time": "yesterday"}
        )
        assert not_a_time.status_code == 422 and 'id="start_time-error"' in not_a_time.text
        bad_spec = await browser.post(
            "/console/policies/p/evaluations",
            data={**form, "policies.0.arguments": json.dumps({**POLICY, "epsilon": 2})},
        )
        assert bad_spec.status_code == 422 and 'id="candidate-0-arguments-error"' in bad_spec.text
        assert await app.state.use_cases.evaluations.list_evaluations("p") == []

        readonly = console_client(app)
        async with readonly:
            await sign_in(readonly, READONLY_KEY)
            page = await readonly.get("/console/policies/p/evaluations")
            assert 'id="evaluation-form"' not in page.text
            refused = await readonly.post(
                "/console/policies/p/evaluations", data={**form, "csrf_token": csrf_of(page.text)}
            )
            assert refused.status_code == 403
        no_token = {k: v for k, v in form.items() if k != "csrf_token"}
        assert (
            await browser.post("/console/policies/p/evaluations", data=no_token)
        ).status_code == 403
        assert await app.state.use_cases.evaluations.list_evaluations("p") == []

        created = await browser.post("/console/policies/p/evaluations", data=form)
        assert created.status_code == 303
        target = created.headers["location"]
        evaluation_id = target.rsplit("/", 1)[1]
        deadline = time.monotonic() + 180
        while 'id="status">succeeded<' not in (page := (await browser.get(target)).text):
            assert 'http-equiv="refresh"' in page, page  # running: it reloads itself
            assert time.monotonic() < deadline, "the evaluation did not finish"
            await asyncio.sleep(0.2)
        assert 'http-equiv="refresh"' not in page
        view = (await http.get(f"/policies/p/evaluations/{evaluation_id}")).json()
        for result in view["results"]:
            shown = _values(page, result["name"])
            assert shown == pytest.approx(
                {"IPS": result["ips"]["value"], "SNIPS": result["snips"]["value"]}, abs=1e-6
            )
        # Random's weights are (1/K) / p of each logged decision: ESS = (sum w)^2 / sum w^2
        weights = np.array([1 / 3 / d.propensity for d in log.recent_decisions("p", ROUNDS)])
        row = re.search(
            r'<tr data-candidate="Random">.*?class="num ess">([\d.]+)<', page, re.DOTALL
        )
        assert row and len(weights) == ROUNDS
        assert float(row.group(1)) == pytest.approx(
            weights.sum() ** 2 / (weights**2).sum(), abs=0.06
        )
        greedy_row = re.search(r'<tr data-candidate="greedy">(.*?)</tr>', page, re.DOTALL)
        assert greedy_row and 'data-setting="epsilon"' in greedy_row.group(1)
        assert "learned state is kept" in greedy_row.group(1)

        applied = await browser.post(
            f"{target}/apply", data={"csrf_token": token, "policy_name": "greedy"}
        )
        assert applied.status_code == 303
        assert (await http.get("/policies/p")).json()["epsilon"] == 0.05
        shown = await browser.get(applied.headers["location"])
        assert 'id="applied"' in shown.text and 'id="status">optimal_policy_applied<' in shown.text
        wrong = await browser.post(
            f"{target}/apply", data={"csrf_token": token, "policy_name": "Random"}
        )
        assert wrong.status_code == 422
        assert "is the Random policy, not a learning setting" in html.unescape(wrong.text)
        missing = await browser.get("/console/policies/p/evaluations/no-such-evaluation")
        assert missing.status_code == 404 and "404" in missing.text
        assert (await browser.get("/console/policies/nope/evaluations")).status_code == 404
