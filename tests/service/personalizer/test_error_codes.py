"""Personalizer's error codes as its specification has them, read by the official SDKs
(``azure-ai-personalizer``, ``azure-cognitiveservices-personalizer``) from a real
``bandit serve``: the 404 codes by what was not found, the ``x-ms-error-code`` header
equal to the body's code on every error, and bad input named by Personalizer's fields."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from azure.ai.personalizer import PersonalizerAdministrationClient, PersonalizerClient
from azure.cognitiveservices.personalizer import PersonalizerClient as LegacyClient
from azure.core.credentials import AzureKeyCredential
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from msrest.authentication import CognitiveServicesCredentials
from msrest.exceptions import HttpOperationError

from tests.servers import API_KEY, AppProcess

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(__name__)]

HEADERS = {"Ocp-Apim-Subscription-Key": API_KEY}
ACTIONS = [
    {"id": "news", "features": [{"item": {"topic": "news"}}]},
    {"id": "music", "features": [{"item": {"topic": "music"}}]},
]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a fresh embedded service (the default loop exists, nothing else)."""
    app = AppProcess(
        {
            "BANDIT_API_KEYS": API_KEY,
            "BANDIT_DATA_DIR": str(tmp_path_factory.mktemp("data")),
            "BANDIT_DEMO_POLICY": "false",
            "BANDIT_SNAPSHOT_INTERVAL_SECONDS": "0",
        }
    ).start()
    try:
        yield app.url
    finally:
        app.stop()


def admin(endpoint: str) -> PersonalizerAdministrationClient:
    return PersonalizerAdministrationClient(endpoint, AzureKeyCredential(API_KEY))


def code_of(error: HttpResponseError) -> str:
    """The error code of the body, checked equal to the ``x-ms-error-code`` header."""
    assert error.response is not None
    code = error.response.json()["error"]["code"]
    assert error.response.headers["x-ms-error-code"] == code
    return str(code)


def test_404s_carry_the_specifications_codes_with_the_2022_sdk(endpoint: str) -> None:
    settings = admin(endpoint)
    now = datetime.now(UTC)
    with pytest.raises(ResourceNotFoundError) as evaluation:
        settings.get_evaluation("absent", start_time=now - timedelta(days=1), end_time=now)
    with pytest.raises(ResourceNotFoundError) as deleted_evaluation:
        settings.delete_evaluation("absent")
    with pytest.raises(ResourceNotFoundError) as importance:
        settings.get_feature_importance("absent")
    with pytest.raises(ResourceNotFoundError) as logs:
        admin(f"{endpoint}/loops/absent").get_log_properties()
    with pytest.raises(ResourceNotFoundError) as loop:
        admin(f"{endpoint}/loops/absent").get_policy()
    assert code_of(evaluation.value) == "EvaluationNotFound"
    assert code_of(deleted_evaluation.value) == "EvaluationNotFound"
    assert code_of(importance.value) == "FeatureImportanceNotFound"
    assert code_of(logs.value) == "LogsPropertiesNotFound"
    assert code_of(loop.value) == "ResourceNotFound"
    # the loop's log exists: its properties are answered, empty
    assert settings.get_log_properties()["dateRange"] is not None


def test_every_error_has_the_x_ms_error_code_header(endpoint: str) -> None:
    sdk = PersonalizerClient(endpoint, AzureKeyCredential(API_KEY))
    with pytest.raises(HttpResponseError) as bad_rank:
        sdk.rank({"actions": []})
    with pytest.raises(HttpResponseError) as unauthorized:
        PersonalizerClient(endpoint, AzureKeyCredential("wrong")).rank({"actions": ACTIONS})
    assert (bad_rank.value.status_code, code_of(bad_rank.value)) == (400, "InvalidRankRequest")
    assert (unauthorized.value.status_code, code_of(unauthorized.value)) == (401, "401")
    with httpx.Client(base_url=endpoint, headers=HEADERS) as http:
        answers = {
            "no route": http.get("/personalizer/v1.0/nowhere"),
            "method": http.put("/personalizer/v1.0/rank", json={}),
            "too large": http.post(
                "/personalizer/v1.0/rank",
                content=b"[" + b"0," * 600_000 + b"0]",
                headers={"content-type": "application/json"},
            ),
        }
    for name, answer in answers.items():
        assert answer.status_code in (404, 405, 413), name
        assert answer.headers["x-ms-error-code"] == answer.json()["error"]["code"], name
    legacy = LegacyClient(endpoint, CognitiveServicesCredentials(API_KEY))
    with pytest.raises(HttpOperationError) as caught:
        legacy.events.reward("absent", 2.0)
    response = caught.value.response
    assert response.status_code == 400
    assert response.headers["x-ms-error-code"] == "InvalidRewardRequest"
    assert response.json()["error"]["code"] == "InvalidRewardRequest"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"contextFeatures": [{"user": {"tags": [[1]]}}], "actions": ACTIONS},
            "contextFeatures[0].user.tags[0]: expected",
        ),
        (
            {"actions": [ACTIONS[0], {"id": "music", "features": [{"item": {"p": [[1]]}}]}]},
            "actions[1].features[0].item.p[0]: expected",
        ),
        (
            {"actions": ACTIONS, "contextFeatures": [{"_raw": ["a\u0000b"]}]},
            "contextFeatures[0]._raw[0]: strings must not contain the NUL character",
        ),
        (
            {"actions": [*ACTIONS, *ACTIONS, {"id": "sports", "features": []}]},
            "actions: duplicate ids ['music', 'news']",
        ),
    ],
)
def test_bad_features_are_named_by_the_rank_requests_fields(
    endpoint: str, body: dict[str, object], message: str
) -> None:
    """The engine's located error rendered with Personalizer's field names, where the
    native API names its own (``context[0]...``, ``arms[1].features[0]...``)."""
    with pytest.raises(HttpResponseError) as caught:
        PersonalizerClient(endpoint, AzureKeyCredential(API_KEY)).rank(body)
    assert code_of(caught.value) == "InvalidRankRequest"
    assert caught.value.response is not None
    assert caught.value.response.json()["error"]["message"].startswith(message)
