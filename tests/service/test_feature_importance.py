"""``GET /policies/{name}/features`` and ``bandit features`` through the real app: a
policy trained on simulated traffic where one feature decides the reward and another
is noise ranks the first above the second, by name."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.cli import main
from service.settings import Settings
from tests.servers import AppProcess, settings_env
from tests.service.conftest import API_KEY, running, wait_for

pytestmark = pytest.mark.anyio

# The reward of arm "a" is the "matters" feature (0 or 1), of arm "b" its complement;
# "ignored" is noise the reward never reads; "bias" is always 1.
NAMED = {
    "algorithm": "linucb",
    "dimension": 3,
    "params": {"alpha": 0.2, "epsilon": 0.3},
    "arms": ["a", "b"],
    "feature_names": ["matters", "ignored", "bias"],
    "reward_wait_seconds": 600,
}


def _context(rng: np.random.Generator) -> dict[str, float]:
    return {"matters": float(rng.integers(2)), "ignored": float(rng.random()), "bias": 1.0}


async def _train(http: Any, rounds: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        context = _context(rng)
        dec = (await http.post("/recommend", json={"policy": "p", "context": context})).json()
        paying = context["matters"] if dec["arm_id"] == "a" else 1.0 - context["matters"]
        r = await http.post("/reward", json={"event_id": dec["event_id"], "reward": paying})
        assert r.status_code == 200, r.text


@pytest.mark.slow
async def test_a_trained_policy_ranks_the_feature_that_decides_the_reward_first(
    make_settings: Any,
) -> None:
    settings: Settings = make_settings()
    async with running(settings) as (app, http, typed):
        assert (await http.put("/policies/p", json=NAMED)).status_code == 200
        empty = await typed.features("p")  # nothing learned, nothing logged
        assert empty.decisions == 0 and all(f.importance == 0 for f in empty.features)
        await _train(http, 300, seed=0)
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("p")[0] == 300)
        report = await typed.features("p", top=3)
        assert report.decisions == 300 and report.rows == 600 and report.algorithm == "linucb"
        assert [f.names for f in report.features] == [["matters"], ["ignored"], ["bias"]]
        matters, ignored, bias = report.features
        assert matters.importance > 5 * ignored.importance
        assert bias.importance == 0.0 and bias.deviation == 0.0  # a constant moves no score
        # the closed form over the logged rows: |w| averaged over arms by rewards x deviation
        assert matters.deviation == pytest.approx(2 * matters.mean * (1 - matters.mean))
        assert matters.importance == pytest.approx(
            report.features[0].deviation * _mean_abs_weight(app, "p", 0), rel=1e-9
        )
        top1 = (await http.get("/policies/p/features", params={"top": 1})).json()
        assert [f["names"] for f in top1["features"]] == [["matters"]]
        assert "SHAP" in top1["method"]


def _mean_abs_weight(app: Any, name: str, column: int) -> float:
    policy = app.state.use_cases.cache.cached(name).policy
    stats = [policy.arm_stats(a).rewarded for a in policy.arm_ids]
    thetas = [abs(policy.arm_state(a).theta[column]) for a in policy.arm_ids]
    return float(np.dot(stats, thetas) / sum(stats))


async def test_errors_name_what_is_wrong(make_settings: Any) -> None:
    async with running(make_settings()) as (_, http, _typed):
        assert (
            await http.put(
                "/policies/r", json={"algorithm": "random", "dimension": 2, "arms": ["a"]}
            )
        ).status_code == 200
        r = await http.get("/policies/r/features")
        assert r.status_code == 422 and "not linear" in r.text
        assert (await http.get("/policies/nope/features")).status_code == 404
        assert (await http.put("/policies/p", json=NAMED)).status_code == 200
        for top in (0, 1001, "x"):
            r = await http.get("/policies/p/features", params={"top": top})
            assert r.status_code == 422 and "top" in r.text


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
def test_the_cli_prints_the_ranking_of_a_running_server(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx

    settings = Settings(
        data_dir=tmp_path / "data", api_keys=[API_KEY], demo_policy=False, log_flush_seconds=0.02
    )
    app = AppProcess(settings_env(settings)).start()
    try:
        headers = {"Authorization": f"Bearer {API_KEY}"}
        with httpx.Client(base_url=app.url, headers=headers, timeout=10.0) as http:
            assert http.put("/policies/p", json=NAMED).status_code == 200
            rng = np.random.default_rng(1)
            for _ in range(200):
                context = _context(rng)
                dec = http.post("/recommend", json={"policy": "p", "context": context}).json()
                paying = context["matters"] if dec["arm_id"] == "a" else 1.0 - context["matters"]
                http.post("/reward", json={"event_id": dec["event_id"], "reward": paying})
        argv = ["features", "--policy", "p", "--url", app.url, "--api-key", API_KEY, "--top", "2"]
        assert main([*argv, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert [f["names"] for f in report["features"]] == [["matters"], ["ignored"]]
        assert main(argv) == 0
        table = capsys.readouterr().out.splitlines()
        assert table[-2].split()[0] == "1" and table[-2].endswith("matters")
        assert table[-1].endswith("ignored")
        assert main(["features", "--policy", "nope", "--url", app.url, "--api-key", API_KEY]) == 2
        assert "404" in capsys.readouterr().err
    finally:
        app.stop()
    assert main(["features", "--policy", "p", "--url", app.url]) == 1  # nothing listens now
    assert "cannot reach" in capsys.readouterr().err


FAVOURITE = {"student": "books", "parent": "toys", "foodie": "food"}


@pytest.mark.slow
async def test_json_features_are_ranked_by_name_the_interaction_that_pays_above_the_noise(
    make_settings: Any,
) -> None:
    # A shopper clicks (Bernoulli 0.7) only items of the segment's favourite category
    # (0.1 otherwise); a session flag sent with half the requests changes nothing. Items
    # get new ids on every request: the shared model learns segment x category.
    spec = {
        "algorithm": "hybrid_linucb",
        # bits 7 hashes these names into the same columns as 8 (each checked interaction
        # alone in its column) at a quarter of the shared model's size
        "features": {"bits": 7},
        "params": {"alpha": 0.0, "epsilon": 0.2},
        "reward_wait_seconds": 600,
    }
    rng = np.random.default_rng(0)
    async with running(make_settings()) as (app, http, typed):
        assert (await http.put("/policies/shop", json=spec)).status_code == 200
        rounds = 600
        for t in range(rounds):
            segment = list(FAVOURITE)[rng.integers(3)]
            context = {"user": {"segment": segment}, "session": {"flag": bool(rng.integers(2))}}
            arms = [
                {"id": f"{c}-{t}", "features": {"item": {"category": c}}}
                for c in ("books", "toys", "food")
            ]
            dec = (
                await http.post(
                    "/recommend", json={"policy": "shop", "context": context, "arms": arms}
                )
            ).json()
            pays = dec["arm_id"].startswith(FAVOURITE[segment])
            reward = float(rng.random() < (0.7 if pays else 0.1))
            assert (
                await http.post("/reward", json={"event_id": dec["event_id"], "reward": reward})
            ).status_code == 200
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("shop")[0] == rounds)
        report = await typed.features("shop", top=1000)
    assert report.decisions == rounds and report.rows == 3 * rounds
    rank = {tuple(f.names): i for i, f in enumerate(report.features)}
    matters = [(f"user|segment={s} ^ item|category={c}",) for s, c in FAVOURITE.items()]
    ignored = [n for n in rank if all(name.startswith("session|") for name in n)]
    assert all(m in rank for m in matters) and len(ignored) >= 3  # no collision at bits 7
    assert max(rank[m] for m in matters) < min(rank[n] for n in ignored)
    assert report.features[rank[matters[0]]].weight > 0  # a click-raising feature
    assert all(f.names for f in report.features if f.importance > 0)  # every mover named


async def _finished(http: Any, path: str) -> dict[str, Any]:
    for _ in range(600):
        job = (await http.get(path)).json()
        if job["status"] != "Running":
            return job
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} still running: {job}")


@pytest.mark.slow
async def test_feature_importance_jobs_leave_one_feature_out_over_a_log_range(
    make_settings: Any,
) -> None:
    """``/policies/{name}/feature-importances``: shoppers who like one of two items
    (``user.likes``) and a coin the rewards ignore (``session.coin``); leaving the taste
    out costs the learning policy the most, the coin costs it nothing. A float-vector
    policy's job fails and says why."""
    settings: Settings = make_settings()
    rng = np.random.default_rng(1)
    items = [{"id": i, "features": {"item": {"kind": i}}} for i in ("x", "y")]
    async with running(settings) as (app, http, _typed):
        spec = {"algorithm": "hybrid_linucb", "features": {"bits": 6}, "epsilon": 0.3}
        spec |= {"params": {"alpha": 0.0}, "reward_wait_seconds": 600}
        assert (await http.put("/policies/shop", json=spec)).status_code == 200
        start = time.time()
        for _ in range(300):
            likes = str(rng.choice(["x", "y"]))
            context = {"user": {"likes": likes}, "session": {"coin": int(rng.integers(2))}}
            body = {"policy": "shop", "context": context, "arms": items}
            dec = (await http.post("/recommend", json=body)).json()
            reward = float(dec["arm_id"] == likes)
            await http.post("/reward", json={"event_id": dec["event_id"], "reward": reward})
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("shop")[1] == 300)
        range_ = {"name": "all", "since": start, "until": time.time()}
        created = await http.put("/policies/shop/feature-importances/j1", json=range_)
        assert created.status_code == 200 and created.json()["status"] in ("Running", "Succeeded")
        job = await _finished(http, "/policies/shop/feature-importances/j1")
        assert job["status"] == "Succeeded", job
        scores = {(s["namespace"], s["name"]): s["score"] for s in job["feature_scores"]}
        assert max(scores, key=scores.__getitem__) in (("user", "likes"), ("item", "kind"))
        assert scores[("user", "likes")] > 0.5 and scores[("session", "coin")] < 0.2, scores
        assert "over 300 rewarded decisions" in job["description"]
        assert (
            await http.put("/policies/shop/feature-importances/j1", json=range_)
        ).status_code == 409

        assert (await http.put("/policies/p", json=NAMED)).status_code == 200
        range_ = {"since": 0, "until": time.time()}
        assert (await http.put("/policies/p/feature-importances/f", json=range_)).status_code == 200
        failed = await _finished(http, "/policies/p/feature-importances/f")
        assert failed["status"] == "Failed" and "JSON features" in failed["description"]

        listed = (await http.get("/policies/shop/feature-importances")).json()["jobs"]
        assert [j["id"] for j in listed] == ["j1"]
        assert (await http.delete("/policies/shop/feature-importances/j1")).status_code == 204
        assert (await http.get("/policies/shop/feature-importances/j1")).status_code == 404
        backwards = {"since": 10, "until": 5}
        bad = await http.put("/policies/shop/feature-importances/j2", json=backwards)
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "until"]
