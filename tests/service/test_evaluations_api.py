"""The native evaluation routes (``/policies/{name}/evaluations``) on a policy of float
vectors, on the embedded default and on Redis + PostgreSQL: IPS and SNIPS with their
intervals in total and per period, apply, list, delete, and 4xx naming the field."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import pytest

from tests.service.conftest import POLICY, running, wait_for

pytestmark = pytest.mark.anyio

WHOLE_LOG = {"start_time": "2020-01-01T00:00:00Z", "end_time": "2100-01-01T00:00:00Z"}


async def test_native_evaluations(make_settings: Any) -> None:
    rng = np.random.default_rng(5)
    theta = {
        "a": np.array([1.0, 0.0, 0.0]),
        "b": np.array([0.0, 1.0, 0.0]),
        "c": np.array([0.0, 0.0, 1.0]),
    }
    rounds = 100  # the assertions count events and check intervals, no effect size
    async with running(make_settings()) as (app, http, _):
        assert (
            await http.put("/policies/home", json={**POLICY, "epsilon": 0.3})
        ).status_code == 200
        for _ in range(rounds):
            x = rng.dirichlet(np.ones(3))
            decision = (
                await http.post("/recommend", json={"policy": "home", "context": x.tolist()})
            ).json()
            mu = 0.2 + 0.6 * float(theta[decision["arm_id"]] @ x)
            await http.post(
                "/reward",
                json={"event_id": decision["event_id"], "reward": float(rng.random() < mu)},
            )
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("home") == (rounds, rounds), timeout=30)
        greedy = {**POLICY, "params": {"alpha": 0.0}, "epsilon": 0.1}
        body = {
            "name": "n",
            **WHOLE_LOG,
            "policies": [{"name": "greedy", "arguments": json.dumps(greedy)}],
        }
        created = await http.post("/policies/home/evaluations", json=body)
        assert created.status_code == 202, created.text
        evaluation_id = created.json()["evaluation_id"]
        deadline = time.monotonic() + 180
        while (view := (await http.get(f"/policies/home/evaluations/{evaluation_id}")).json())[
            "status"
        ] in ("pending", "running"):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert view["status"] == "succeeded" and view["progress"] == 1.0, view
        results = {r["source"]: r for r in view["results"]}
        assert set(results) == {"Online", "Baseline", "Random", "Custom"}
        for r in results.values():
            assert r["events"] == rounds == sum(p["events"] for p in r["periods"])
            for estimate in (r["ips"], r["snips"]):
                assert estimate["ci_low"] <= estimate["value"] <= estimate["ci_high"]
        listed = (await http.get("/policies/home/evaluations")).json()
        assert [e["evaluation_id"] for e in listed] == [evaluation_id] and listed[0][
            "results"
        ] is None
        applied = await http.post(
            f"/policies/home/evaluations/{evaluation_id}/apply", json={"policy_name": "greedy"}
        )
        assert applied.status_code == 200, applied.text
        policy = (await http.get("/policies/home")).json()
        assert (policy["epsilon"], policy["params"]["alpha"]) == (0.1, 0.0)
        assert (await http.get(f"/policies/home/evaluations/{evaluation_id}")).json()[
            "status"
        ] == "optimal_policy_applied"
        # 4xx naming the field, nothing stored
        bad = await http.post(
            "/policies/home/evaluations",
            json={**body, "policies": [{"name": "x", "arguments": "-q ::"}]},
        )
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == [
            "body",
            "policies",
            0,
            "arguments",
        ]
        backwards = {
            **body,
            "start_time": "2030-01-01T00:00:00Z",
            "end_time": "2020-01-01T00:00:00Z",
        }
        reversed_range = await http.post("/policies/home/evaluations", json=backwards)
        assert reversed_range.status_code == 422
        assert reversed_range.json()["detail"][0]["loc"] == ["body", "end_time"]
        assert (await http.post("/policies/nope/evaluations", json=body)).status_code == 404
        taken = await http.post(
            "/policies/home/evaluations",
            json={**body, "policies": [], "evaluation_id": evaluation_id},
        )
        assert taken.status_code == 409
        assert (await http.delete(f"/policies/home/evaluations/{evaluation_id}")).status_code == 204
        assert (await http.get(f"/policies/home/evaluations/{evaluation_id}")).status_code == 404
        assert (await http.get("/policies/home/evaluations")).json() == []
