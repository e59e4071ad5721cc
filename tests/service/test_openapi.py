"""The committed ``openapi/openapi.json`` is what the app serves."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from service.cli import main
from service.cli.server import OPENAPI_PATH, render_openapi
from tests.service.conftest import running

pytestmark = pytest.mark.anyio


def test_committed_document_equals_the_export() -> None:
    assert OPENAPI_PATH.read_text() == render_openapi(), (
        "run `bandit openapi --output openapi/openapi.json` and commit the result"
    )


@pytest.mark.parametrize("backend", ["embedded"])
async def test_served_document_equals_the_committed_one(make_settings: Any) -> None:
    async with running(make_settings()) as (_, http, _):
        served = (await http.get("/openapi.json")).json()
    assert served == json.loads(OPENAPI_PATH.read_text())


def test_every_operation_with_a_body_documents_the_body_limits_413() -> None:
    """The body limit (``BANDIT_MAX_BODY_BYTES``) answers 413 on any route before it
    reads the body; every operation taking one says so, in its family's error shape."""
    doc = json.loads(OPENAPI_PATH.read_text())
    operations = {
        (method, path): op
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if "requestBody" in op
    }
    assert len(operations) > 50
    shapes = {
        key: op["responses"]["413"]["content"]["application/json"]["schema"]["$ref"]
        for key, op in operations.items()
        if "413" in op["responses"]
    }
    assert sorted(shapes) == sorted(operations)
    assert {ref for (_, path), ref in shapes.items() if "personalizer" in path} == {
        "#/components/schemas/PersonalizerErrorResponse"
    }
    assert {ref for (_, path), ref in shapes.items() if "personalizer" not in path} == {
        "#/components/schemas/ErrorDetail"
    }


def test_every_path_parameter_is_declared_by_its_operations() -> None:
    """A route's path parameters are validated only when a parameter or dependency
    declares them (a Personalizer route's ``{version}`` and ``{policy}`` by its family's
    loop dependency): each ``{name}`` of every path is a path parameter of each of its
    operations, and nothing else is."""
    doc = json.loads(OPENAPI_PATH.read_text())
    undeclared = [
        (method, path)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if set(re.findall(r"\{([^}:]+)", path))
        != {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
    ]
    assert undeclared == []


def test_document_carries_the_contract_field_names() -> None:
    doc = json.loads(OPENAPI_PATH.read_text())
    schemas = doc["components"]["schemas"]
    assert set(schemas["RecommendRequest"]["properties"]) >= {
        "policy",
        "context",
        "arms",
        "exclude",
        "user_id",
        "event_id",
        "top_k",
        "explore",
        "defer_activation",
    }
    assert set(schemas["RecommendResponse"]["properties"]) >= {
        "event_id",
        "arm_id",
        "ranking",
        "policy",
        "algorithm",
        "model_version",
        "guardrail",
    }
    assert set(schemas["RewardRequest"]["properties"]) == {"event_id", "reward", "arm_id"}
    assert set(schemas["ArmStatsOut"]["properties"]) >= {
        "pulls",
        "rewarded",
        "reward_sum",
        "mean_reward",
    }
    for path in (
        "/recommend",
        "/reward",
        "/events/{event_id}/activate",
        "/policies/{name}",
        "/policies/{name}/stats",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in doc["paths"]


def test_openapi_writes_only_where_it_is_told(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    committed = OPENAPI_PATH.stat().st_mtime_ns
    monkeypatch.chdir(tmp_path)
    assert main(["openapi"]) == 0
    assert capsys.readouterr().out == render_openapi()  # stdout, no file anywhere
    assert list(tmp_path.iterdir()) == [] and OPENAPI_PATH.stat().st_mtime_ns == committed
    out = tmp_path / "doc.json"
    assert main(["openapi", "--output", str(out)]) == 0
    assert out.read_text() == render_openapi()
    assert main(["openapi", "--output", str(tmp_path / "missing" / "doc.json")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["export-openapi"])  # one command, not two
    assert exc.value.code == 2
