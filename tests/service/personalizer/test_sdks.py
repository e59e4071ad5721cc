"""The official Personalizer SDKs (``azure-ai-personalizer`` 1.0.0b1 and
``azure-cognitiveservices-personalizer`` 0.1.1), and raw httpx for the v1.1-preview
paths, against a real ``bandit serve`` (uvicorn) on the embedded default and on Redis +
PostgreSQL; the endpoint and the key are their only settings."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from azure.ai.personalizer import PersonalizerAdministrationClient, PersonalizerClient
from azure.cognitiveservices.personalizer import PersonalizerClient as LegacyClient
from azure.cognitiveservices.personalizer.models import (
    ErrorResponseException,
    RankableAction,
    RankRequest,
)
from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
)
from msrest.authentication import CognitiveServicesCredentials

from tests.databases import postgres_schema
from tests.servers import API_KEY, ROOT, AppProcess, RedisServer

# One worker runs every test of this module, so its module-scoped servers start once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(__name__)]

ACTIONS = [
    {"id": "news", "features": [{"item": {"topic": "news", "length": 3}}]},
    {"id": "sports", "features": [{"item": {"topic": "sports"}}]},
    {"id": "music", "features": [{"item": {"topic": "music", "tags": ["live"]}}]},
]
CONTEXT = [{"user": {"tier": "gold"}}, {"device": {"mobile": True}}]
HEADERS = {"Ocp-Apim-Subscription-Key": API_KEY}


@pytest.fixture(scope="module", params=["embedded", "redis_postgres"])
def endpoint(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Base URL of a fresh service (the default loop exists, nothing else)."""
    data = tmp_path_factory.mktemp("data")
    env = {
        "BANDIT_API_KEYS": API_KEY,
        "BANDIT_DATA_DIR": str(data),
        "BANDIT_DEMO_POLICY": "false",
        "BANDIT_SNAPSHOT_INTERVAL_SECONDS": "0",
    }
    if request.param == "embedded":
        app = AppProcess(env).start()
        try:
            yield app.url
        finally:
            app.stop()
        return
    redis_server = RedisServer(tmp_path_factory.mktemp("redis"), persist=False)
    redis_server.start()
    try:
        with postgres_schema() as database_url:
            app = AppProcess(
                {**env, "BANDIT_REDIS_URL": redis_server.url, "BANDIT_DATABASE_URL": database_url}
            ).start()
            try:
                yield app.url
            finally:
                app.stop()
    finally:
        redis_server.stop()


def client(endpoint: str, key: str = API_KEY) -> PersonalizerClient:
    return PersonalizerClient(endpoint, AzureKeyCredential(key))


def admin(endpoint: str, key: str = API_KEY) -> PersonalizerAdministrationClient:
    return PersonalizerAdministrationClient(endpoint, AzureKeyCredential(key))


def check_400s(cases: list[tuple[Callable[[], object], str, str]]) -> None:
    """Each call is a 400 with the error code given, its message naming the field."""
    for call, code, field in cases:
        with pytest.raises(HttpResponseError) as caught:
            call()
        assert caught.value.status_code == 400
        assert caught.value.error.code == code
        assert field in caught.value.error.message


def check_ranking(response: dict, excluded: set[str]) -> None:
    probabilities = {r["id"]: r["probability"] for r in response["ranking"]}
    assert set(probabilities) == {a["id"] for a in ACTIONS}
    assert math.isclose(sum(probabilities.values()), 1.0, abs_tol=1e-9)
    assert all(probabilities[a] == 0.0 for a in excluded)
    assert response["rewardActionId"] not in excluded
    assert probabilities[response["rewardActionId"]] > 0


def test_rank_reward_activate_with_the_2022_sdk(endpoint: str) -> None:
    sdk = client(endpoint)
    event_id = uuid.uuid4().hex
    body = {
        "contextFeatures": CONTEXT,
        "actions": ACTIONS,
        "excludedActions": ["sports"],
        "eventId": event_id,
    }
    first = sdk.rank(body)
    assert first["eventId"] == event_id
    check_ranking(first, {"sports"})
    assert sdk.rank(body) == first  # eventId is idempotent
    sdk.reward(event_id, {"value": 1.0})
    sdk.reward(event_id, {"value": -1.0})  # earliest kept; accepted
    stats = httpx.get(
        f"{endpoint}/policies/personalizer/stats", headers={"Authorization": f"Bearer {API_KEY}"}
    ).json()
    assert stats["rewards"] >= 1
    deferred = sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS, "deferActivation": True})
    sdk.activate(deferred["eventId"])
    sdk.reward(deferred["eventId"], {"value": 0.5})
    sdk.reward("never-ranked", {"value": 0.5})  # accepted, like Personalizer


SIGNED_REWARDS = [-1.0, -0.37, 0.0, 0.5, 1.0]


def test_rewards_of_any_sign_with_the_2022_sdk(endpoint: str) -> None:
    """Rewards in the default loop's range [-1, 1], negative ones included: 204 each, and
    the loop's counters, reward sum and model take every one."""
    sdk = client(endpoint)
    bearer = {"Authorization": f"Bearer {API_KEY}"}
    stats_url = f"{endpoint}/policies/personalizer/stats"
    model_url = f"{endpoint}/policies/personalizer/snapshot"
    before = httpx.get(stats_url, headers=bearer).json()
    models = [httpx.get(model_url, headers=bearer).json()["data"]]
    for value in SIGNED_REWARDS:
        ranked = sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS})
        status = sdk.reward(
            ranked["eventId"],
            {"value": value},
            cls=lambda response, _body, _headers: response.http_response.status_code,
        )
        assert status == 204, value
        models.append(httpx.get(model_url, headers=bearer).json()["data"])
    after = httpx.get(stats_url, headers=bearer).json()
    assert after["rewards"] - before["rewards"] == len(SIGNED_REWARDS)
    learned = after["policy_stats"]["reward_sum"] - before["policy_stats"].get("reward_sum", 0.0)
    assert learned == pytest.approx(sum(SIGNED_REWARDS), abs=1e-9)
    assert len(set(models)) == len(models)  # each reward, 0 included, changed the model
    with pytest.raises(HttpResponseError) as below:
        sdk.reward(
            sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS})["eventId"], {"value": -1.01}
        )
    assert below.value.status_code == 400 and "value" in below.value.error.message


SLOTS = [
    {
        "id": "Main Article",
        "features": [{"slot": {"size": "large", "position": "top"}}],
        "excludedActions": ["sports"],
        "baselineAction": "news",
    },
    {"id": "Side Bar", "features": [{"slot": {"size": "small"}}], "baselineAction": "sports"},
]


def check_slots(response: dict, slots: list[dict]) -> None:
    """Every slot answered in order, distinct actions, none excluded for its slot."""
    assert [s["id"] for s in response["slots"]] == [s["id"] for s in slots]
    chosen = [s["rewardActionId"] for s in response["slots"]]
    assert len(set(chosen)) == len(chosen)
    assert all(a not in s.get("excludedActions", []) for a, s in zip(chosen, slots, strict=True))


def test_multi_slot_with_the_2022_sdk(endpoint: str) -> None:
    sdk = client(endpoint)
    stats_url = f"{endpoint}/policies/personalizer/stats"
    bearer = {"Authorization": f"Bearer {API_KEY}"}
    before = httpx.get(stats_url, headers=bearer).json()
    event_id = uuid.uuid4().hex
    body = {"contextFeatures": CONTEXT, "actions": ACTIONS, "slots": SLOTS, "eventId": event_id}
    ranked = sdk.rank_multi_slot(body)
    assert ranked["eventId"] == event_id
    check_slots(ranked, SLOTS)
    assert sdk.rank_multi_slot(body) == ranked  # eventId is idempotent
    sdk.reward_multi_slot(event_id, {"reward": [{"slotId": "Main Article", "value": 1.0}]})
    sdk.reward_multi_slot(
        event_id,
        {
            "reward": [
                {"slotId": "Main Article", "value": 0.0},
                {"slotId": "Side Bar", "value": 0.5},
            ]
        },
    )  # the main article's earliest reward is kept
    deferred = sdk.rank_multi_slot(
        {"contextFeatures": CONTEXT, "actions": ACTIONS, "slots": SLOTS, "deferActivation": True}
    )
    check_slots(deferred, SLOTS)
    sdk.activate_multi_slot(deferred["eventId"])
    sdk.reward_multi_slot(deferred["eventId"], {"reward": [{"slotId": "Side Bar", "value": 1.0}]})
    after = httpx.get(stats_url, headers=bearer).json()
    assert after["decisions"] - before["decisions"] == 4  # one decision per slot
    assert after["rewards"] - before["rewards"] == 3  # one reward per rewarded slot, once
    assert after["policy_stats"]["reward_sum"] - before["policy_stats"].get("reward_sum", 0) == 2.5
    cases = [
        (
            lambda: sdk.rank_multi_slot(
                {"actions": ACTIONS, "slots": [{**SLOTS[0], "baselineAction": "missing"}]}
            ),
            "InvalidRankRequest",
            "slots[0].baselineAction",
        ),
        (
            lambda: sdk.rank_multi_slot(
                {"actions": ACTIONS[:1], "slots": [SLOTS[1], {**SLOTS[1], "id": "x"}]}
            ),
            "InvalidRankRequest",
            "slots",
        ),
        (
            lambda: sdk.reward_multi_slot(event_id, {"reward": [{"slotId": "Footer", "value": 1}]}),
            "InvalidRewardRequest",
            "reward[0].slotId",
        ),
    ]
    check_400s(cases)


def test_log_properties_and_delete_logs_with_the_2022_sdk(endpoint: str) -> None:
    """``get_log_properties`` spans the loop's logged decisions; ``delete_logs`` empties
    it (the model keeps serving); both on every route family."""
    sdk, administration = client(endpoint), admin(endpoint)
    before = time.time()
    for _ in range(3):
        last = time.time()
        sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS})

    def span() -> tuple[float, float] | None:
        dates = administration.get_log_properties()["dateRange"]
        if dates["from"] is None:
            return None
        return datetime.fromisoformat(dates["from"]).timestamp(), datetime.fromisoformat(
            dates["to"]
        ).timestamp()

    deadline = time.monotonic() + 10
    while (logged := span()) is None or logged[1] < last:  # the writer flushes every 0.2 s
        assert time.monotonic() < deadline, logged
        time.sleep(0.05)
    assert logged[0] <= logged[1] <= time.time() and logged[1] >= before
    administration.delete_logs()
    assert administration.get_log_properties() == {"dateRange": {"from": None, "to": None}}
    assert sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS})["rewardActionId"]
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        for prefix in (
            "/personalizer/v1.0",
            "/personalizer/v1.1-preview.3",
            "/loops/personalizer/personalizer",
            "/loops/personalizer/personalizer/v1.1-preview.1",
        ):
            properties = http.get(f"{prefix}/logs/properties")
            assert properties.status_code == 200 and set(properties.json()["dateRange"]) == {
                "from",
                "to",
            }
            deleted = http.delete(f"{prefix}/logs")
            assert (deleted.status_code, deleted.content) == (204, b"")
        missing = http.delete("/loops/nope/personalizer/logs")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "ResourceNotFound"
        wrong = http.get(
            "/personalizer/logs/properties", headers={"Ocp-Apim-Subscription-Key": "x"}
        )
        assert wrong.status_code == 401


def test_legacy_v1_sdk(endpoint: str) -> None:
    sdk = LegacyClient(endpoint, CognitiveServicesCredentials(API_KEY))
    request = RankRequest(
        actions=[RankableAction(id=a["id"], features=a["features"]) for a in ACTIONS],
        context_features=CONTEXT,
        excluded_actions=["news"],
        defer_activation=True,
    )
    response = sdk.rank(request)
    check_ranking(
        {
            "ranking": [{"id": r.id, "probability": r.probability} for r in response.ranking],
            "rewardActionId": response.reward_action_id,
        },
        {"news"},
    )
    sdk.events.activate(response.event_id)
    sdk.events.reward(response.event_id, 1.0)
    bad = LegacyClient(endpoint, CognitiveServicesCredentials("wrong-key"))
    with pytest.raises(ErrorResponseException) as caught:
        bad.rank(request)
    assert caught.value.response.status_code == 401
    assert caught.value.error.error.code == "401"


def test_configuration_round_trips_and_maps_onto_the_policy(endpoint: str) -> None:
    sdk = admin(endpoint)
    config = sdk.get_service_configuration()
    assert config["rewardWaitTime"] == "PT10M"
    assert config["explorationPercentage"] == 0.2
    assert config["defaultReward"] == 0.0
    assert config["rewardAggregation"] == "earliest"
    changed = {
        **config,
        "rewardWaitTime": "PT5M",
        "explorationPercentage": 0.3,
        "logRetentionDays": 30,
        "modelExportFrequency": "PT1H",
    }
    answer = sdk.update_service_configuration(changed)
    assert (
        answer["rewardWaitTime"],
        answer["explorationPercentage"],
        answer["logRetentionDays"],
        answer["modelExportFrequency"],
    ) == ("PT5M", 0.3, 30, "PT1H")
    policy = httpx.get(
        f"{endpoint}/policies/personalizer", headers={"Authorization": f"Bearer {API_KEY}"}
    ).json()
    assert (policy["reward_wait_seconds"], policy["epsilon"]) == (300.0, 0.3)
    sdk.update_service_configuration(config)
    assert sdk.get_policy() == {
        "name": "default",
        "arguments": "--cb_explore_adf --epsilon 0.2 -q ::",
    }
    written = "--cb_explore_adf --epsilon 0.1 -q ui --power_t 0.5 -l 0.5"
    updated = sdk.update_policy({"name": "mine", "arguments": written})
    # read back as written, the options with no effect here included (they are named in
    # the answer's Warning header, tests/service/personalizer/test_vw_arguments.py)
    assert updated == {"name": "mine", "arguments": written}
    assert sdk.get_service_configuration()["explorationPercentage"] == 0.1
    # a forgetting shared model (docs/personalizer.md, "Learning policy"), ranked with
    forgetting = "--cb_explore_adf --epsilon 0.2 -q :: --half_life_seconds 86400"
    assert (
        sdk.update_policy({"name": "forgets", "arguments": forgetting})["arguments"] == forgetting
    )
    # the new engine serves once the loop's relearn from the log switches to it
    deadline = time.monotonic() + 60
    while (
        "half_life_seconds"
        not in (
            policy := httpx.get(
                f"{endpoint}/policies/personalizer", headers={"Authorization": f"Bearer {API_KEY}"}
            ).json()
        )["params"]
    ):
        assert time.monotonic() < deadline, policy
        time.sleep(0.05)
    assert (policy["algorithm"], policy["params"]["half_life_seconds"]) == ("hybrid_linucb", 86400)
    ranked = client(endpoint).rank({"contextFeatures": CONTEXT, "actions": ACTIONS})
    client(endpoint).reward(ranked["eventId"], {"value": 1.0})
    assert sdk.reset_policy() == {
        "name": "default",
        "arguments": "--cb_explore_adf --epsilon 0.2 -q ::",
    }


def test_errors_in_personalizer_shape(endpoint: str) -> None:
    sdk, settings = client(endpoint), admin(endpoint)
    with pytest.raises(ClientAuthenticationError) as auth:
        admin(endpoint, "wrong-key").get_policy()
    assert auth.value.status_code == 401
    cases = [
        (lambda: sdk.rank({"actions": []}), "InvalidRankRequest", "actions"),
        (
            lambda: sdk.rank({"actions": ACTIONS, "excludedActions": [a["id"] for a in ACTIONS]}),
            "InvalidRankRequest",
            "excludedActions",
        ),
        (lambda: sdk.reward("e", {"value": 2}), "InvalidRewardRequest", "value"),
        (
            lambda: settings.update_service_configuration(
                {**settings.get_service_configuration(), "rewardWaitTime": "ten minutes"}
            ),
            "InvalidServiceConfiguration",
            "rewardWaitTime",
        ),
        (
            lambda: settings.update_policy({"name": "x", "arguments": "--cb_explore_adf --bag 5"}),
            "InvalidPolicyConfiguration",
            "--bag",
        ),
    ]
    check_400s(cases)
    # the native API keeps its own shape
    native = httpx.get(f"{endpoint}/policies/nope", headers={"Authorization": f"Bearer {API_KEY}"})
    assert native.status_code == 404 and "detail" in native.json()


@pytest.mark.parametrize("version", ["v1.1-preview.1", "v1.1-preview.2", "v1.1-preview.3"])
def test_preview_paths_and_named_loops_over_httpx(endpoint: str, version: str) -> None:
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        ranked = http.post(
            f"/personalizer/{version}/rank", json={"contextFeatures": CONTEXT, "actions": ACTIONS}
        )
        assert ranked.status_code == 201
        check_ranking(ranked.json(), set())
        reward = http.post(
            f"/personalizer/{version}/events/{ranked.json()['eventId']}/reward", json={"value": 1}
        )
        assert (reward.status_code, reward.content) == (204, b"")
        loop = http.get(f"/loops/personalizer/personalizer/{version}/configurations/service")
        assert loop.status_code == 200 and loop.json()["rewardWaitTime"] == "PT10M"
        native = {"algorithm": "linucb", "dimension": 2, "arms": ["a", "b"]}  # rewards in [0, 1]
        assert (
            http.put(
                "/policies/native", json=native, headers={"Authorization": f"Bearer {API_KEY}"}
            ).status_code
            == 200
        )
        event = http.post("/recommend", json={"policy": "native", "context": [1.0, 0.0]}).json()[
            "event_id"
        ]
        below = http.post(
            f"/loops/native/personalizer/{version}/events/{event}/reward", json={"value": -0.5}
        )
        assert below.status_code == 400
        assert below.json()["error"]["message"].startswith("value must lie in")
        missing = http.get(f"/loops/nope/personalizer/{version}/configurations/policy")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "ResourceNotFound"
        wrong = http.get(
            f"/personalizer/{version}/configurations/policy",
            headers={"Ocp-Apim-Subscription-Key": "wrong"},
        )
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "401"
        bearer = httpx.get(
            f"{endpoint}/personalizer/{version}/configurations/policy",
            headers={"Authorization": f"Bearer {API_KEY}"},
        )
        assert bearer.status_code == 200


@pytest.mark.parametrize("version", ["v1.1-preview.1", "v1.1-preview.2", "v1.1-preview.3"])
def test_multi_slot_preview_paths_over_httpx(endpoint: str, version: str) -> None:
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        for loop in ("", "/loops/personalizer"):
            base = f"{loop}/personalizer/{version}/multislot"
            body = {"contextFeatures": CONTEXT, "actions": ACTIONS, "slots": SLOTS}
            ranked = http.post(f"{base}/rank", json={**body, "deferActivation": True})
            assert ranked.status_code == 201, ranked.text
            check_slots(ranked.json(), SLOTS)
            event = ranked.json()["eventId"]
            activated = http.post(f"{base}/events/{event}/activate")
            assert (activated.status_code, activated.content) == (204, b"")
            reward = http.post(
                f"{base}/events/{event}/reward",
                json={"reward": [{"slotId": s["id"], "value": 1} for s in SLOTS]},
            )
            assert (reward.status_code, reward.content) == (204, b"")
        missing = http.post(
            f"/loops/nope/personalizer/{version}/multislot/rank",
            json={"actions": ACTIONS, "slots": SLOTS},
        )
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "ResourceNotFound")
        for route in ("activate", "reward"):
            unknown_loop = http.post(
                f"/loops/nope/personalizer/{version}/multislot/events/e/{route}",
                json={"reward": [{"slotId": "a", "value": 1}]},
            )
            assert unknown_loop.status_code == 404
        no_baseline = http.post(
            f"/personalizer/{version}/multislot/rank",
            json={"actions": ACTIONS, "slots": [{"id": "a"}]},
        )
        assert no_baseline.status_code == 400
        assert no_baseline.json()["error"]["message"].startswith("slots.0.baselineAction")


def test_openapi_documents_every_family_tagged_personalizer() -> None:
    doc = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    prefixes = (
        "/personalizer",
        "/loops/{policy}/personalizer",
        "/personalizer/{version}",
        "/loops/{policy}/personalizer/{version}",
    )
    for prefix in prefixes:
        for path, methods in (
            ("/rank", {"post"}),
            ("/events/{eventId}/reward", {"post"}),
            ("/events/{eventId}/activate", {"post"}),
            ("/configurations/service", {"get", "put"}),
            ("/configurations/policy", {"get", "put", "delete"}),
            ("/multislot/rank", {"post"}),
            ("/multislot/events/{eventId}/reward", {"post"}),
            ("/multislot/events/{eventId}/activate", {"post"}),
        ):
            operations = doc["paths"][prefix + path]
            assert set(operations) == methods
            assert all(op["tags"] == ["personalizer"] for op in operations.values())
    assert "201" in doc["paths"]["/personalizer/rank"]["post"]["responses"]


def test_bad_input_names_personalizer_fields_and_unknown_routes_are_404(endpoint: str) -> None:
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        nested = http.post(
            "/personalizer/v1.0/rank", json={"contextFeatures": [{"u": [[1]]}], "actions": ACTIONS}
        )
        assert nested.status_code == 400
        assert nested.json()["error"]["message"].startswith("contextFeatures[0].u[0]")
        not_json = http.post(
            "/personalizer/v1.0/rank", content=b"{", headers={"content-type": "application/json"}
        )
        assert (not_json.status_code, not_json.json()["error"]["code"]) == (
            400,
            "InvalidRankRequest",
        )
        for path in (
            "/personalizer/v1.1-preview.3/multislot/unknown",
            "/personalizer/v2.0/rank",
            "/loops/personalizer/personalizer/v1.0/nothing-here",
        ):
            missing = http.post(path, json={})
            assert (missing.status_code, missing.json()["error"]["code"]) == (
                404,
                "ResourceNotFound",
            )
        wrong_method = http.get("/personalizer/v1.0/rank")
        assert (wrong_method.status_code, wrong_method.json()["error"]["code"]) == (
            405,
            "BadRequest",  # Personalizer's ErrorCode enum has no MethodNotAllowed
        )
        # nothing was served for the refused requests
        stats = http.get(
            "/policies/personalizer/stats", headers={"Authorization": f"Bearer {API_KEY}"}
        ).json()
        before = stats["decisions"]
        http.post(
            "/personalizer/v1.0/rank",
            json={"actions": ACTIONS, "excludedActions": [a["id"] for a in ACTIONS]},
        )
        assert (
            http.get(
                "/policies/personalizer/stats", headers={"Authorization": f"Bearer {API_KEY}"}
            ).json()["decisions"]
            == before
        )


def test_learning_modes_and_aggregation_with_the_sdks(endpoint: str) -> None:
    """docs/personalizer.md, "Learning modes": Apprentice serves the baseline and reports
    its metrics, LoggingOnly serves the baseline; ``sum`` is a setting the SDK reads back;
    Personalizer's rule against changing the reward settings with the mode."""
    sdk, settings = client(endpoint), admin(endpoint)
    config = settings.get_service_configuration()
    assert config["learningMode"] == "Online" and "latestApprenticeModeMetrics" not in config
    with pytest.raises(HttpResponseError) as caught:
        settings.update_service_configuration(
            {**config, "learningMode": "Apprentice", "rewardWaitTime": "PT1H"}
        )
    assert caught.value.status_code == 400
    assert caught.value.error.code == "InvalidLearningModeServiceConfiguration"
    assert caught.value.error.target == "learningMode"
    assert "rewardWaitTime" in caught.value.error.message
    apprentice = settings.update_service_configuration({**config, "learningMode": "Apprentice"})
    metrics = apprentice["latestApprenticeModeMetrics"]
    assert (metrics["numberOfEvents"], metrics["sumOfRewards"]) == (0, 0.0)
    body = {"contextFeatures": CONTEXT, "actions": ACTIONS, "excludedActions": ["news"]}
    ranked = sdk.rank(body)
    assert ranked["rewardActionId"] == "sports"  # the first action not excluded
    assert {r["id"]: r["probability"] for r in ranked["ranking"]}["sports"] == 1.0
    sdk.reward(ranked["eventId"], {"value": 0.75})
    # the legacy SDK's configuration has no learningMode: a PUT without it keeps the mode
    legacy = LegacyClient(endpoint, CognitiveServicesCredentials(API_KEY))
    legacy_ranked = legacy.rank(
        RankRequest(actions=[RankableAction(id=a["id"], features=a["features"]) for a in ACTIONS])
    )
    assert legacy_ranked.reward_action_id == "news"
    kept = httpx.put(
        f"{endpoint}/personalizer/v1.0/configurations/service",
        json={k: v for k, v in config.items() if k != "learningMode"},
        headers=HEADERS,
    ).json()
    assert kept["learningMode"] == "Apprentice"
    metrics = kept["latestApprenticeModeMetrics"]
    assert (metrics["numberOfEvents"], metrics["sumOfRewards"]) == (1, 0.75)
    assert metrics["numberOfImitatedEvents"] in (0, 1)
    logging_only = settings.update_service_configuration(
        {**config, "learningMode": "LoggingOnly", "rewardAggregation": "sum"}
    )
    assert (logging_only["learningMode"], logging_only["rewardAggregation"]) == (
        "LoggingOnly",
        "sum",
    )
    assert sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS})["rewardActionId"] == "news"
    restored = settings.update_service_configuration(config)
    assert (restored["learningMode"], restored["rewardAggregation"]) == ("Online", "earliest")
    # the apprentice metrics stay readable as the latest ones
    assert restored["latestApprenticeModeMetrics"]["numberOfEvents"] == 1


def test_error_bodies_carry_target_details_and_inner_error(endpoint: str) -> None:
    """Personalizer's error object: the field as ``target``, each problem in ``details``,
    this service's error type as ``innerError.code`` (read by both SDKs' models)."""
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        two_problems = http.post(
            "/personalizer/v1.1-preview.3/rank",
            json={"actions": [{"id": "a"}, {"features": []}]},
        ).json()["error"]
        too_large = http.post(
            "/personalizer/v1.1-preview.3/rank",
            content=b"[" + b"0," * 600_000 + b"0]",
            headers={"content-type": "application/json"},
        )
        event = {"actions": ACTIONS, "eventId": uuid.uuid4().hex}
        assert http.post("/personalizer/v1.1-preview.3/rank", json=event).status_code == 201
        reused = http.post(
            "/personalizer/v1.1-preview.3/rank", json={**event, "excludedActions": ["news"]}
        )
    assert (reused.status_code, reused.json()["error"]["code"]) == (409, "InvalidRankRequest")
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "PayloadSizeExceeded"
    assert two_problems["code"] == "InvalidRankRequest"
    assert [d["target"] for d in two_problems["details"]] == ["actions.0.features", "actions.1.id"]
    assert two_problems["target"] == "actions.0.features"
    assert two_problems["innerError"] == {"code": "missing"}
    legacy = LegacyClient(endpoint, CognitiveServicesCredentials(API_KEY))
    request = RankRequest(
        actions=[RankableAction(id=a["id"], features=a["features"]) for a in ACTIONS],
        excluded_actions=[a["id"] for a in ACTIONS],
    )
    with pytest.raises(ErrorResponseException) as caught:
        legacy.rank(request)
    error = caught.value.error.error
    assert (error.code, error.target) == ("InvalidRankRequest", "excludedActions")
    assert error.inner_error.code == "invalid_input"


def test_offline_evaluations_with_the_2022_sdk(endpoint: str) -> None:
    sdk, settings = client(endpoint), admin(endpoint)
    begin = datetime.now(UTC)  # the decisions of the earlier tests are not evaluated
    for i in range(60):
        ranked = sdk.rank({"contextFeatures": CONTEXT, "actions": ACTIONS})
        sdk.reward(ranked["eventId"], {"value": float(ranked["rewardActionId"] == "music")})
    time.sleep(1.0)  # the event log is written in batches
    end = datetime.now(UTC) + timedelta(minutes=1)
    evaluation_id = uuid.uuid4().hex
    custom = {"name": "no-interactions", "arguments": "--cb_explore_adf --epsilon 0.2"}
    forgetting = {"name": "half-life", "arguments": "--epsilon 0.2 -q :: --half_life_seconds 60"}
    settings.create_evaluation(
        evaluation_id,
        {
            "name": "sdk",
            "startTime": begin,
            "endTime": end,
            "policies": [custom, forgetting],
            "enablePolicyOptimization": True,
        },
    )
    deadline = time.monotonic() + 180
    while True:
        result = settings.get_evaluation(evaluation_id, start_time=begin, end_time=end)
        if result["status"] not in ("NotSubmitted", "Running"):
            break
        assert time.monotonic() < deadline, result
        time.sleep(0.5)
    assert result["status"] == "Succeeded", result
    assert result["evaluationType"] == "Manual" and result["id"] == evaluation_id
    sources = {v["policySource"]: v for v in result["content"]["value"]}
    assert set(sources) == {"Online", "Baseline", "Random", "Custom", "OfflineExperimentation"}
    for value in sources.values():
        low, high = value["summary"]["confidenceInterval"]
        assert low <= value["summary"]["expectedReward"] <= high
        assert value["timeseries"]["data"]
    names = {v["name"]: v for v in result["content"]["value"]}
    assert names["half-life"]["arguments"] == forgetting["arguments"]
    # Baseline serves "news" (the first action), which this traffic never rewards
    assert sources["Baseline"]["summary"]["expectedReward"] == 0.0
    assert evaluation_id in {e["id"] for e in settings.list_evaluations()}
    settings.apply_from_evaluation({"evaluationId": evaluation_id, "policyName": "no-interactions"})
    assert settings.get_policy() == custom
    after = settings.get_evaluation(evaluation_id, start_time=begin, end_time=end)
    assert after["status"] == "OptimalPolicyApplied"
    settings.delete_evaluation(evaluation_id)
    with pytest.raises(ResourceNotFoundError):
        settings.get_evaluation(evaluation_id, start_time=begin, end_time=end)
    settings.reset_policy()


# Event ids as Azure took them: any 1 to 256 characters; the SDKs percent-encode them in
# the reward and activate paths (``/`` as %2F, which the server decodes before routing).
# "a{b}" and "a%7Bb%7D" are the pair a naive escape of braces would merge.
AZURE_EVENT_IDS = [
    ("user@x|séssion/42 #%?&+日本" * 12)[:256],
    "user@x|session|42",
    "a/b",
    "a/../b",
    "%2F",
    "50% off?q=1&x=2#top",
    "a+b c",
    "naïve façade ünïcode",
    "a{b}",
    "a%7Bb%7D",
    "{}",
]


def rewards_learned(endpoint: str) -> float:
    bearer = {"Authorization": f"Bearer {API_KEY}"}
    return httpx.get(f"{endpoint}/policies/personalizer/stats", headers=bearer).json()["rewards"]


def test_azure_event_ids_with_both_sdks(endpoint: str) -> None:
    """Ids of 256 characters and ids holding ``|/@ #%?&+``, braces and non-ASCII letters:
    ranked with each SDK (repeats answer the first decision), then activated and rewarded
    by those ids; each reward is learned once (an id the routes decoded wrongly would be
    accepted and not learned, as Personalizer does for unknown ids)."""
    sdk = client(endpoint)
    legacy = LegacyClient(endpoint, CognitiveServicesCredentials(API_KEY))
    run = uuid.uuid4().hex[:6]
    before = rewards_learned(endpoint)
    for n, base in enumerate(AZURE_EVENT_IDS):
        event_id = base if n == 0 else f"{base}{run}"  # the first keeps its 256 characters
        body = {"contextFeatures": CONTEXT, "actions": ACTIONS, "eventId": event_id}
        first = sdk.rank({**body, "deferActivation": True})
        assert first["eventId"] == event_id
        assert sdk.rank({**body, "deferActivation": True}) == first
        sdk.activate(event_id)
        sdk.reward(event_id, {"value": 1.0})
        legacy_id = f"v1{event_id}"[:256]
        response = legacy.rank(
            RankRequest(
                actions=[RankableAction(id=a["id"], features=a["features"]) for a in ACTIONS],
                context_features=CONTEXT,
                event_id=legacy_id,
                defer_activation=True,
            )
        )
        assert response.event_id == legacy_id
        legacy.events.activate(legacy_id)
        legacy.events.reward(legacy_id, 0.5)
    assert rewards_learned(endpoint) - before == 2 * len(AZURE_EVENT_IDS)
    slots_before = rewards_learned(endpoint)
    for base in AZURE_EVENT_IDS[:3]:
        event_id = base[: 256 - len(run)] + run
        body = {"contextFeatures": CONTEXT, "actions": ACTIONS, "slots": SLOTS}
        ranked = sdk.rank_multi_slot({**body, "eventId": event_id, "deferActivation": True})
        assert ranked["eventId"] == event_id
        check_slots(ranked, SLOTS)
        sdk.activate_multi_slot(event_id)
        sdk.reward_multi_slot(
            event_id, {"reward": [{"slotId": s["id"], "value": 1} for s in SLOTS]}
        )
    assert rewards_learned(endpoint) - slots_before == 3 * len(SLOTS)
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        too_long = http.post(
            "/personalizer/v1.0/rank",
            json={"contextFeatures": CONTEXT, "actions": ACTIONS, "eventId": "x" * 257},
        )
        assert too_long.status_code == 400 and "eventId" in too_long.json()["error"]["message"]
        nul = http.post(
            "/personalizer/v1.0/rank",
            json={"contextFeatures": CONTEXT, "actions": ACTIONS, "eventId": "a\u0000b"},
        )
        assert nul.status_code == 400 and "eventId" in nul.json()["error"]["message"]
