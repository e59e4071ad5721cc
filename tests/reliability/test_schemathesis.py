"""Schemathesis against ``openapi/openapi.json`` on a real uvicorn over Redis and
PostgreSQL: for every operation a bounded number of generated requests (valid and
invalid), each answered without a 5xx and conforming to the document (status codes,
content types, headers, response schemas, Allow on 405, invalid data rejected, a
required key enforced).

One check is left out: ``positive_data_acceptance`` (a schema-valid body must get 2xx
or 404/409). The API validates beyond what JSON Schema can say -- the context's length
against the policy's dimension, a reward against the policy's ``reward_range``, an
algorithm's ``params`` -- and answers those with 422 naming the field, by design."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from tests.databases import postgres_schema
from tests.reliability.traffic import HEADERS, spec
from tests.servers import (
    API_KEY,
    ROOT,
    AppProcess,
    RedisServer,
    reliability_settings,
    settings_env,
)

# One worker runs every test of this module, so its module-scoped servers start once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(__name__)]


def _config() -> SchemathesisConfig:
    """Schemathesis's defaults, with 413 among the answers that reject invalid data: a
    generated body over the service's limit (1 MiB; hypothesis makes one now and then)
    is refused before it is read, as every route with a body documents."""
    rejected = SchemathesisConfig.from_dict({}).projects.default.checks
    statuses = [*rejected.negative_data_rejection.expected_statuses, "413"]
    return SchemathesisConfig.from_dict(
        {"checks": {"negative_data_rejection": {"expected-statuses": statuses}}}
    )


schema = schemathesis.openapi.from_path(ROOT / "openapi" / "openapi.json", config=_config())
EXAMPLES = 25


@pytest.fixture(scope="module")
def app_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("schemathesis")
    redis_server = RedisServer(tmp / "redis")
    redis_server.start()
    try:
        with postgres_schema() as db_url:
            settings = reliability_settings(
                data_dir=tmp / "data", redis_url=redis_server.url, database_url=db_url
            )
            app = AppProcess(settings_env(settings)).start()
            try:
                with httpx.Client(base_url=app.url, headers=HEADERS) as client:
                    for name in ("p", "demo"):
                        assert client.put(f"/policies/{name}", json=spec()).status_code == 200
                yield app.url
            finally:
                app.stop()
    finally:
        redis_server.stop()


@pytest.mark.timeout(120)
@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
    derandomize=True,
)
def test_api_conforms_and_never_5xx(case: schemathesis.Case, app_url: str) -> None:
    response = case.call_and_validate(
        base_url=app_url,
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=10,
        excluded_checks=[schemathesis.checks.positive_data_acceptance],
    )
    assert response.status_code < 500, response.text
