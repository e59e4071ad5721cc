"""The service watches each policy's applied rewards for a change (docs/operations.md,
"Drift detection"): a click rate that falls is detected, counted on /metrics, recorded
in the audit trail and marked on the console's reward chart; a policy whose rewards
keep their rate has none."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import running
from tests.service.console_client import console_client, sign_in

pytestmark = pytest.mark.anyio


def _drift_samples(text: str, policy: str) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("bandit_drift_detections_total", "bandit_drift_excursion")
        and s.labels["policy"] == policy
    }


async def test_a_fall_of_the_reward_rate_is_counted_and_a_steady_rate_is_not(
    make_settings: Any,
) -> None:
    spec = {
        "algorithm": "discounted_linucb",
        "dimension": 2,
        "arms": ["a"],
        "params": {"gamma": 0.95},
    }
    # metrics are per process: names of their own keep other tests' series apart
    changing_name, steady_name = (
        f"{kind}-{uuid.uuid4().hex[:8]}" for kind in ("changing", "steady")
    )
    async with running(make_settings()) as (_app, http, client):
        for name in (changing_name, steady_name):
            assert (await http.put(f"/policies/{name}", json=spec)).status_code == 200
        # every reward of the changing policy is 1 for 100 decisions, then 0; the steady one's alternate 1, 0
        for i in range(400):
            for name, reward in ((changing_name, float(i < 100)), (steady_name, float(i % 2))):
                decision = await client.recommend(name, [1.0, 0.0])
                assert (await client.reward(decision.event_id, reward)).applied
        text = (await http.get("/metrics")).text
    changing, steady = _drift_samples(text, changing_name), _drift_samples(text, steady_name)
    # the detector (delta 0.005, threshold 50) sees the running mean fall from 1 toward
    # 0: the excursion passes 50 within the 300 zeros, once
    assert changing["bandit_drift_detections_total"] == 1.0
    assert steady["bandit_drift_detections_total"] == 0.0
    assert 0.0 <= steady["bandit_drift_excursion"] < 50.0


async def test_each_policy_watches_with_its_own_detector_settings(make_settings: Any) -> None:
    """The same fall (100 rewards of 1, then 40 of 0) is detected by a policy whose
    detector has ``threshold = 5`` (the fall excursion passes 5 within a few zeros) and
    not by one with the default 50 (it needs more zeros than 40)."""
    spec = {"algorithm": "linucb", "dimension": 2, "arms": ["a"]}
    names = {threshold: f"threshold{threshold}-{uuid.uuid4().hex[:8]}" for threshold in (5.0, 50.0)}
    async with running(make_settings()) as (_app, http, client):
        for threshold, name in names.items():
            body = {**spec, "drift_detection": {"threshold": threshold}}
            r = await http.put(f"/policies/{name}", json=body)
            assert r.status_code == 200, r.text
            assert (await http.get(f"/policies/{name}")).json()["drift_detection"] == {
                "delta": 0.005,
                "threshold": threshold,
                "min_samples": 30,
            }
        for i in range(140):
            for name in names.values():
                decision = await client.recommend(name, [1.0, 0.0])
                assert (await client.reward(decision.event_id, float(i < 100))).applied
        text = (await http.get("/metrics")).text
        for bad in ({"threshold": -1.0}, {"treshold": 5.0}):
            r = await http.put("/policies/bad", json={**spec, "drift_detection": bad})
            assert r.status_code == 422 and "drift_detection" in r.text, r.text
    assert _drift_samples(text, names[5.0])["bandit_drift_detections_total"] >= 1.0
    assert _drift_samples(text, names[50.0])["bandit_drift_detections_total"] == 0.0


async def test_a_detection_is_an_audit_record_marked_on_the_console_reward_chart(
    make_settings: Any,
) -> None:
    """A detection is recorded as the system's ``drift`` action with the reward that
    set it off, and the policy page's reward chart draws one rule at its time; the
    policy whose rewards keep their rate has neither."""
    spec = {"algorithm": "linucb", "dimension": 2, "arms": ["a"]}
    body = {**spec, "drift_detection": {"threshold": 5.0}}
    async with running(make_settings()) as (app, http, client):
        for name in ("falls", "steady"):
            assert (await http.put(f"/policies/{name}", json=body)).status_code == 200
        for i in range(140):
            for name, reward in (("falls", float(i < 100)), ("steady", 1.0)):
                decision = await client.recommend(name, [1.0, 0.0])
                assert (await client.reward(decision.event_id, reward)).applied
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10)
        history = {
            name: (await http.get(f"/policies/{name}/history")).json()["records"]
            for name in ("falls", "steady")
        }
        drifts = [r for r in history["falls"] if r["action"] == "drift"]
        assert len(drifts) == 1
        assert drifts[0]["actor"] == "system"
        assert drifts[0]["detail"] == {"reward": 0.0, "threshold": 5.0}
        assert not [r for r in history["steady"] if r["action"] == "drift"]
        async with console_client(app) as browser:
            assert (await sign_in(browser)).status_code == 303
            pages = {n: (await browser.get(f"/console/policies/{n}")).text for n in history}
    rules = re.findall(r'<line class="drift"[^>]* data-at="([0-9.]+)"', pages["falls"])
    assert [float(at) for at in rules] == [pytest.approx(drifts[0]["created_at"], abs=1e-3)]
    assert 'class="drift"' not in pages["steady"]
