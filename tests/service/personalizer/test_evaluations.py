"""Offline evaluations through Personalizer's routes on simulated storefront traffic
(bandit_core/storefront.py) logged with epsilon-greedy exploration: the online setting's
estimate matches the realised reward, a setting the simulation needs (interactions) is
estimated higher and applying it raises the live click rate; runs survive a restart;
bad input is a 400 naming the field."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import numpy as np
import pytest

from bandit_core.storefront import Storefront, StorefrontRound
from service.storage.base import LoggedDecision
from service.storage.evaluations import SqlEvaluationStore
from service.storage.schema import create_log_engine
from service.usecases.evaluations import load_decisions
from tests.service.conftest import running, wait_for
from tests.service.personalizer.test_learning import personalizer_body
from tests.service.personalizer.test_multislot import immediate_updates

pytestmark = pytest.mark.anyio

PLAIN = "--cb_explore_adf --epsilon 0.3"
INTERACTIONS = "--cb_explore_adf --epsilon 0.3 -q ::"
WHOLE_LOG = {"startTime": "2020-01-01T00:00:00Z", "endTime": "2100-01-01T00:00:00Z"}


async def serve(
    http: Any, rounds: list[StorefrontRound], draws: np.ndarray
) -> tuple[list[float], list[float]]:
    """The clicks and the expected click rates of the served items, round by round."""
    clicks, rates = [], []
    for r, draw in zip(rounds, draws, strict=True):
        ranked = (await http.post("/personalizer/v1.0/rank", json=personalizer_body(r))).json()
        k = r.item_ids.index(ranked["rewardActionId"])
        click = float(draw < r.mu[k])
        reward = await http.post(
            f"/personalizer/v1.0/events/{ranked['eventId']}/reward", json={"value": click}
        )
        assert reward.status_code == 204
        clicks.append(click)
        rates.append(float(r.mu[k]))
    return clicks, rates


async def finished(
    http: Any, path: str, pending: tuple[str, ...], timeout: float = 300.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = (await http.get(path)).json()
        if body["status"] not in pending:
            return body
        assert time.monotonic() < deadline, f"still {body['status']} after {timeout} s"
        await asyncio.sleep(0.5)


async def relearned(http: Any, loop: str = "personalizer") -> dict[str, Any]:
    """The model properties of ``loop`` once its relearn from the log has ended (a
    changed learning policy relearns in the background while the old model serves)."""
    path = f"/policies/{loop}/model/properties"
    deadline = time.monotonic() + 120
    while (properties := (await http.get(path)).json())["retrain"]["state"] == "running":
        assert time.monotonic() < deadline, properties
        await asyncio.sleep(0.2)
    return properties


async def logged(app: Any, decisions: int) -> None:
    log = app.state.use_cases.event_log
    await wait_for(lambda: log.count("personalizer") == (decisions, decisions), timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_estimates_match_the_log_and_the_better_setting_raises_the_click_rate(
    make_settings: Any,
) -> None:
    rng = np.random.default_rng(1)
    rounds = list(Storefront().rounds(3000, replace_at=None, rng=rng))
    draws = rng.random(3000)
    async with running(make_settings(personalizer_loop=True)) as (app, http, _):
        # the simulation serves rounds faster than a 1 s fold: it learns from round to round
        await immediate_updates(http)
        policy = {"name": "plain", "arguments": PLAIN}
        assert (
            await http.put("/personalizer/v1.0/configurations/policy", json=policy)
        ).status_code == 200
        clicks, before = await serve(http, rounds[:2000], draws[:2000])
        await logged(app, 2000)
        body = {
            "name": "storefront",
            **WHOLE_LOG,
            "policies": [{"name": "interactions", "arguments": INTERACTIONS}],
        }
        created = await http.post("/personalizer/v1.0/evaluations", json=body)
        assert created.status_code == 201, created.text
        evaluation_id = created.json()["id"]
        assert created.headers["location"] == f"/personalizer/v1.0/evaluations/{evaluation_id}"
        assert created.json()["status"] == "pending"
        result = await finished(http, created.headers["location"], ("pending",))
        assert result["status"] == "completed", result
        by_source = {p["policySource"]: p for p in result["policyResults"]}
        assert set(by_source) == {"Online", "Baseline", "Random", "Custom"}
        online, custom = by_source["Online"]["totalSummary"], by_source["Custom"]["totalSummary"]
        # the online setting replayed on its own log: its estimate is the realised reward
        # per decision, within its interval
        realised = float(np.mean(clicks))
        assert online["ipsEstimatorDenominator"] == 2000
        assert abs(online["averageReward"] - realised) <= online["confidenceInterval"]
        assert custom["averageReward"] > online["averageReward"]
        assert result["optimalPolicy"] == "interactions"
        for p in result["policyResults"]:  # the periods add up to the total
            total = p["totalSummary"]
            assert math.isclose(
                sum(s["ipsEstimatorNumerator"] for s in p["summary"]),
                total["ipsEstimatorNumerator"],
                rel_tol=1e-9,
                abs_tol=1e-9,
            )
            assert (
                sum(s["ipsEstimatorDenominator"] for s in p["summary"])
                == total["ipsEstimatorDenominator"]
            )
            assert math.isclose(
                total["averageReward"], total["ipsEstimatorNumerator"] / 2000, rel_tol=1e-12
            )
        # the 2022-09-01-preview shape of the same evaluation
        preview = (
            await http.get(
                f"/personalizer/evaluations/{evaluation_id}",
                params={"api-version": "2022-09-01-preview"},
            )
        ).json()
        assert preview["status"] == "Succeeded"
        series = {v["policySource"]: v for v in preview["content"]["value"]}
        assert math.isclose(series["Online"]["summary"]["expectedReward"], online["averageReward"])
        low, high = series["Custom"]["summary"]["confidenceInterval"]
        assert low < custom["averageReward"] < high
        # apply the better setting: the live click rate goes up
        applied = await http.post(
            "/personalizer/v1.0/configurations/applyFromEvaluation",
            json={"evaluationId": evaluation_id, "policyName": "interactions"},
        )
        assert applied.status_code == 204, applied.text
        now = (await http.get("/personalizer/v1.0/configurations/policy")).json()
        assert now == {"name": "interactions", "arguments": INTERACTIONS}
        status = (await http.get(f"/personalizer/v1.0/evaluations/{evaluation_id}")).json()[
            "status"
        ]
        assert status == "optimalPolicyApplied"
        assert (await relearned(http))["retrain"]["state"] == "done"
        _, after = await serve(http, rounds[2000:], draws[2000:])
        assert np.mean(after) > np.mean(before[-1000:]) + 0.03, (
            np.mean(after),
            np.mean(before[-1000:]),
        )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_an_evaluation_whose_process_died_runs_again_after_a_restart(
    make_settings: Any,
) -> None:
    settings = make_settings(
        personalizer_loop=True, evaluation_heartbeat_seconds=0.2, evaluation_stale_seconds=1.0
    )
    rng = np.random.default_rng(2)
    rounds = list(Storefront().rounds(50, replace_at=None, rng=rng))
    async with running(settings) as (app, http, _):
        await serve(http, rounds, rng.random(50))
        await logged(app, 50)
        created = await http.put(
            "/personalizer/v1.1-preview.3/evaluations/first", json={"name": "first", **WHOLE_LOG}
        )
        assert created.status_code == 201, created.text
        first = await finished(http, "/personalizer/v1.1-preview.3/evaluations/first", ("pending",))
    # a record left running by a process that died (as a restart leaves it)
    engine = create_log_engine(settings.log_url)
    store = SqlEvaluationStore(engine)
    record = store.get("personalizer", "first")
    assert record is not None and record.result is not None
    store.insert(
        record.__class__(
            **{
                **record.__dict__,
                "evaluation_id": "orphan",
                "status": "running",
                "progress": 0.4,
                "heartbeat_at": time.time() - 60,
                "owner": "gone",
                "result": None,
            }
        )
    )
    engine.dispose()
    async with running(settings) as (app, http, _):
        again = await finished(
            http, "/personalizer/v1.1-preview.3/evaluations/orphan", ("pending",), timeout=120
        )
        assert again["status"] == "completed"
        assert again["policyResults"] == first["policyResults"]  # a run depends on the log only
        listed = (await http.get("/personalizer/v1.1-preview.3/evaluations")).json()
        assert {e["id"] for e in listed} == {"first", "orphan"}


def uniform_dr(decisions: list[LoggedDecision], weighted: bool) -> float:
    """The DR estimate of the uniform policy on ``decisions``, worked from its definition
    (docs/offline.md, "Evaluations"): ``q`` of an item is its mean reward so far
    (``weighted``: each reward weighted 1/p, the ``mtr`` model), 0 before it was served."""
    seen: dict[str, list[float]] = {}
    terms = []
    for e in decisions:
        d, r = e.decision, e.reward.value if e.reward is not None else math.nan
        ids = [c["id"] for c in d.candidates]
        q = {a: seen[a][1] / seen[a][0] if a in seen else 0.0 for a in ids}
        terms.append(sum(q.values()) / len(ids) + (r - q[d.arm_id]) / len(ids) / d.propensity)
        weight = 1.0 / d.propensity if weighted else 1.0
        counts = seen.setdefault(d.arm_id, [0.0, 0.0])
        counts[0] += weight
        counts[1] += weight * r
    return float(np.mean(terms))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_loops_cb_type_is_the_estimator_of_its_evaluations(make_settings: Any) -> None:
    """The same log evaluated under ``--cb_type dr``, ``mtr`` and ``ips``: the estimates
    (``averageReward``, the native ``estimate``) are DR with each reward model, then IPS;
    Random's, whose distribution is known, are checked against their definitions."""
    rng = np.random.default_rng(4)
    rounds = list(Storefront().rounds(60, replace_at=None, rng=rng))
    async with running(make_settings(personalizer_loop=True)) as (app, http, _):
        await immediate_updates(http)  # learned round by round: propensities vary
        config = "/personalizer/v1.0/configurations/policy"
        policy = {"name": "plain", "arguments": f"{PLAIN} --cb_type dr"}
        assert (await http.put(config, json=policy)).status_code == 200
        await serve(http, rounds, rng.random(60))
        await logged(app, 60)
        decisions = load_decisions(
            app.state.use_cases.event_log, "personalizer", -math.inf, math.inf
        )
        expected = {"dr": uniform_dr(decisions, False), "mtr": uniform_dr(decisions, True)}
        assert not math.isclose(expected["dr"], expected["mtr"], rel_tol=1e-6)
        for cb_type in ("dr", "mtr", "ips"):
            policy = {"name": "plain", "arguments": f"{PLAIN} --cb_type {cb_type}"}
            put = await http.put(config, json=policy)
            assert (put.status_code, put.json()["arguments"]) == (200, policy["arguments"])
            path = f"/personalizer/v1.1-preview.3/evaluations/{cb_type}"
            created = await http.put(path, json={"name": cb_type, **WHOLE_LOG})
            assert created.status_code == 201, created.text
            result = await finished(http, path, ("pending",))
            assert result["status"] == "completed", result
            by_source = {p["policySource"]: p["totalSummary"] for p in result["policyResults"]}
            random = by_source["Random"]
            ips = random["ipsEstimatorNumerator"] / random["ipsEstimatorDenominator"]
            assert math.isclose(random["averageReward"], expected.get(cb_type, ips), rel_tol=1e-9)
            if cb_type != "ips":
                assert not math.isclose(random["averageReward"], ips, rel_tol=1e-6)
            native = (await http.get(f"/policies/personalizer/evaluations/{cb_type}")).json()
            assert native["estimator"] == cb_type
            for p, v1 in zip(native["results"], result["policyResults"], strict=True):
                assert math.isclose(
                    p["estimate"]["value"], v1["totalSummary"]["averageReward"], rel_tol=1e-12
                )
            same = [
                math.isclose(p["ips"]["value"], p["estimate"]["value"]) for p in native["results"]
            ]
            assert all(same) == (cb_type == "ips")


@pytest.mark.parametrize("backend", ["embedded"])
async def test_bad_evaluations_are_400s_naming_the_field(make_settings: Any) -> None:
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        cases = [
            (
                {
                    "name": "x",
                    **WHOLE_LOG,
                    "policies": [{"name": "a", "arguments": "--cb_explore_adf --bag 5"}],
                },
                "--bag",
            ),
            (
                {
                    "name": "x",
                    "startTime": "2030-01-01T00:00:00Z",
                    "endTime": "2020-01-01T00:00:00Z",
                },
                "endTime",
            ),
            (
                {"name": "x", **WHOLE_LOG, "policies": [{"name": "a", "arguments": "-q ::"}] * 2},
                "policies[1].name",
            ),
            (
                {
                    "name": "x",
                    **WHOLE_LOG,
                    "policies": [{"name": "a", "arguments": '{"algorithm": "linucb"}'}],
                },
                "arguments",
            ),
            (
                {"name": "x", "startTime": "yesterday", "endTime": "2020-01-01T00:00:00Z"},
                "startTime",
            ),
        ]
        for body, field in cases:
            answer = await http.post("/personalizer/v1.0/evaluations", json=body)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["code"] == "InvalidEvaluationContract"
            assert field in answer.json()["error"]["message"]
        assert (await http.get("/personalizer/v1.0/evaluations")).json() == []  # nothing stored
        missing = await http.get(
            "/personalizer/evaluations/nope", params={"api-version": "2022-09-01-preview"}
        )
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "EvaluationNotFound")
        put = await http.put(
            "/personalizer/evaluations/e1",
            params={"api-version": "x"},
            json={"name": "e", **WHOLE_LOG},
        )
        assert put.status_code == 200 and put.json()["status"] in (
            "NotSubmitted",
            "Running",
            "Succeeded",
        )
        again = await http.put(
            "/personalizer/evaluations/e1",
            params={"api-version": "x"},
            json={"name": "e", **WHOLE_LOG},
        )
        assert (again.status_code, again.json()["error"]["code"]) == (
            409,
            "EvaluationAlreadyExists",  # Personalizer's ErrorCode for it
        )
        done = await finished(
            http, "/personalizer/evaluations/e1?api-version=x", ("NotSubmitted", "Running")
        )
        assert done["status"] == "Succeeded" and done["description"].startswith(
            "no rewarded decision"
        )
        for name, status in (("Baseline", 400), ("nope", 404)):
            answer = await http.post(
                "/personalizer/configurations/applyFromEvaluation",
                params={"api-version": "x"},
                json={"evaluationId": "e1", "policyName": name},
            )
            assert answer.status_code == status, answer.text
        bad_interval = await http.get(
            "/personalizer/evaluations/e1", params={"intervalInMinutes": 7}
        )
        assert (
            bad_interval.status_code == 400
            and "intervalInMinutes" in bad_interval.json()["error"]["message"]
        )
        assert (await http.delete("/personalizer/evaluations/e1")).status_code == 204
        assert (await http.get("/personalizer/evaluations/e1")).status_code == 404


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_preview_list_pages_by_next_link_and_filters(make_settings: Any) -> None:
    """Five evaluations, listed newest first: ``maxpagesize`` pages them and each
    ``nextLink`` reads the next page (``top`` bounds the total); ``filter`` keeps those
    its conditions hold for; a condition this service cannot read is a 400."""
    preview = {"api-version": "2022-09-01-preview"}
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        for i in range(5):
            put = await http.put(
                f"/personalizer/evaluations/e{i}",
                params=preview,
                json={"name": "odd" if i % 2 else "even", **WHOLE_LOG},
            )
            assert put.status_code == 200, put.text
        whole = (await http.get("/personalizer/evaluations", params=preview)).json()
        assert "nextLink" not in whole
        newest_first = [e["id"] for e in whole["value"]]
        assert sorted(newest_first) == [f"e{i}" for i in range(5)]

        async def pages(params: dict[str, Any]) -> list[list[str]]:
            answer = (await http.get("/personalizer/evaluations", params=params)).json()
            seen = [[e["id"] for e in answer["value"]]]
            while "nextLink" in answer:
                answer = (await http.get(answer["nextLink"])).json()
                seen.append([e["id"] for e in answer["value"]])
            return seen

        paged = newest_first
        assert await pages({**preview, "maxpagesize": 2}) == [paged[:2], paged[2:4], paged[4:]]
        assert await pages({**preview, "maxpagesize": 2, "top": 3}) == [paged[:2], paged[2:3]]
        assert await pages({**preview, "maxpagesize": 2, "skip": 3}) == [paged[3:]]
        odd = await pages({**preview, "filter": "name eq 'odd'"})
        assert odd == [[e for e in paged if int(e[1]) % 2]]
        both = "metadata=evaluationType eq 'Manual' and id eq 'e2'"
        assert await pages({**preview, "filter": both}) == [["e2"]]
        for bad in ("name ne 'odd'", "color eq 'red'", "name eq odd"):
            answer = await http.get("/personalizer/evaluations", params={**preview, "filter": bad})
            assert answer.status_code == 400, bad
            assert answer.json()["error"]["message"].startswith("filter:"), bad


@pytest.mark.parametrize("backend", ["embedded"])
async def test_retrain_days_read_back_and_a_log_mirror_is_refused(make_settings: Any) -> None:
    path = "/personalizer/v1.0/configurations/service"
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        config = (await http.get(path)).json()
        assert config["modelRetrainDays"] == 2  # Azure's default
        put = await http.put(path, json={**config, "modelRetrainDays": 7})
        assert put.status_code == 200 and put.json()["modelRetrainDays"] == 7
        assert (await http.get(path)).json()["modelRetrainDays"] == 7
        negative = await http.put(path, json={**config, "modelRetrainDays": -1})
        assert negative.status_code == 400
        assert "modelRetrainDays" in negative.json()["error"]["message"]
        mirror = {"logMirrorEnabled": True, "logMirrorSasUri": "https://acct.blob.example/c?sig=x"}
        refused = await http.put(path, json={**config, **mirror})
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["target"] == "logMirrorSasUri"
        assert "bandit export-log" in error["message"]
        assert (await http.get(path)).json()["modelRetrainDays"] == 7  # nothing changed
        kept = await http.put(path, json={**config, "logMirrorEnabled": False})
        assert kept.status_code == 200


STOREFRONT_FEATURES = {
    "user.segment",
    "user.tenureYears",
    "device.type",
    "item.category",
    "item.price",
    "item.tags",
}


RANKING_FEATURES = {"user.segment", "item.category", "item.price", "item.tags"}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["embedded"])
async def test_v1_feature_importance_is_filled_when_the_evaluation_asks_for_it(
    make_settings: Any,
) -> None:
    """With ``enableOfflineExperimentation`` the v1 evaluation names the storefront's
    features in importance groups, the first holding only features that change which
    item is best (segment x category, tags, price; tenure and device shift every item's
    click rate alike); without it ``featureImportance`` stays empty."""
    rng = np.random.default_rng(4)
    rounds = list(Storefront().rounds(800, replace_at=None, rng=rng))
    draws = rng.random(800)
    async with running(make_settings(personalizer_loop=True)) as (app, http, _):
        await immediate_updates(http)  # a log learned from round to round, as served
        await serve(http, rounds, draws)
        await logged(app, 800)
        results = {}
        for asked in (True, False):
            body = {"name": "fi", **WHOLE_LOG, "enableOfflineExperimentation": asked}
            created = await http.post("/personalizer/v1.0/evaluations", json=body)
            assert created.status_code == 201, created.text
            done = await finished(http, created.headers["location"], ("pending",))
            assert done["status"] == "completed", done
            results[asked] = done["featureImportance"]
    groups = results[True]
    named = [name for group in groups for name in group]
    assert len(named) == len(set(named)) and set(named) <= STOREFRONT_FEATURES
    assert groups[0] and set(groups[0]) <= RANKING_FEATURES
    assert results[False] == []
