"""Hostile JSON features on the app over a private Redis and PostgreSQL: deep nesting,
huge arrays, enormous strings, NaN and Infinity, numbers no float holds, arrays of
arrays, and generated JSON anywhere in context and candidates. Every refusal is a 422
whose ``loc`` is the path of the offending value in the request, nothing is written,
and nothing is ever a 5xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability.test_hostile_input import json_values, private_app

pytestmark = [pytest.mark.timeout(180), pytest.mark.anyio, pytest.mark.xdist_group(__name__)]
LIMIT = 2_000_000
SPECS = {
    "shared": {"algorithm": "hybrid_linucb", "features": {"bits": 6}, "default_reward": None},
    "per_arm": {"algorithm": "linucb", "features": {"bits": 5}, "default_reward": None},
}
ITEM = {"item": {"category": "food", "price": 25, "tags": ["vegan"]}}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def app_client(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """One app for the module (``private_app``): each test compares the log's counts
    after its request with those it read before."""
    tmp_path = tmp_path_factory.mktemp("hostile_json")
    async with private_app(tmp_path, SPECS, LIMIT) as (client, app, _):
        yield client, app


async def _settled(app: Any) -> tuple[int, int]:
    use_cases = app.state.use_cases
    await asyncio.to_thread(use_cases.sink.flush, 10.0)
    assert use_cases.sink.dead_letters == 0
    return await asyncio.to_thread(use_cases.event_log.count)


def _nested(depth: int) -> dict[str, Any]:
    obj: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        obj = {"a": obj}
    return obj


def _arms(*features: Any) -> list[dict[str, Any]]:
    return [{"id": f"x{k}", "features": f} for k, f in enumerate(features)]


# (request fields as raw JSON text, expected loc prefix, words of the message)
HOSTILE = [
    (
        '"context": ' + json.dumps(_nested(50)),
        ["body", "context", "a", "a", "a", "a", "a", "a", "a"],
        "nesting",
    ),
    ('"context": ' + json.dumps(_nested(900)), ["body", "context", "a", "a"], "nesting"),
    (
        '"context": {"user": {"tags": ' + json.dumps(["t"] * 5000) + "}}",
        ["body", "context", "user", "tags"],
        "at most 1024 elements",
    ),
    (
        '"context": {"user": {"name": "' + "x" * 100_000 + '"}}',
        ["body", "context", "user", "name"],
        "at most 1024 characters",
    ),
    ('"context": {"user": {"age": NaN}}', ["body", "context", "user", "age"], "nan"),
    (
        '"context": [{"user": {"age": 1}}, {"user": {"score": -Infinity}}]',
        ["body", "context", 1, "user", "score"],
        "-inf",
    ),
    ('"context": {"user": {"big": ' + "9" * 400 + "}}", ["body", "context", "user", "big"], "bits"),
    ('"context": {"user": {"m": [[1, 2]]}}', ["body", "context", "user", "m", 0], "array"),
    (
        '"context": {"u": {"a": 1}}, "arms": '
        + json.dumps(_arms(ITEM, ITEM, {"item": {"tags": ["a", "b", ["c"]]}})),
        ["body", "arms", 2, "features", "item", "tags", 2],
        "array",
    ),
    (
        '"context": {"u": {"a": 1}}, "arms": [{"id": "x0", "features": {"item": {"p": 1}}}, {"id": "x1", "features": [{"item": {"p": Infinity}}]}]',
        ["body", "arms", 1, "features", 0, "item", "p"],
        "inf",
    ),
    (
        '"context": {"u": {"a": 1}}, "exclude": ["x0"], "arms": [{"id": "x0", "features": {"item": {"p": NaN}}}, {"id": "x1", "features": {"item": {"p": NaN}}}]',
        ["body", "arms", 1, "features", "item", "p"],
        "nan",
    ),
    (
        '"context": {"u": {"f": ['
        + ", ".join(f'"{i}"' for i in range(1000))
        + ']}}, "arms": '
        + json.dumps(_arms(*[{"item": {f"k{j}": j + 1 for j in range(30)}}] * 10)),
        ["body", "arms"],
        "interactions",
    ),
    ('"context": {"u": {"' + "k" * 5000 + '": 1}}', ["body", "context", "u"], "keys of at most"),
    # under keys the featurizer ignores ("_..."), still nothing the log cannot store
    ('"context": {"u": {"_raw": {"k\\u0000": 1}}}', ["body", "context", "u", "_raw"], "NUL"),
    (
        '"context": {"u": {"a": 1}}, "arms": [{"id": "x0", "features": {"_n": [1, NaN]}}]',
        ["body", "arms", 0, "features", "_n", 1],
        "finite",
    ),
    (
        '"context": {"_deep": ' + json.dumps(_nested(300)) + "}",
        ["body", "context", "_deep"],
        "nest at most",
    ),
    ('"context": {"u": {"_big": ' + "9" * 30 + "}}", ["body", "context", "u", "_big"], "64 bits"),
]


# interactions exist only in a shared model's rows (a per-arm model takes the context alone)
CASES = [
    (p, *case) for case in HOSTILE for p in SPECS if p == "shared" or case[2] != "interactions"
]


@pytest.mark.parametrize(
    ("policy", "fields", "loc", "words"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
async def test_hostile_json_features_are_422s_naming_the_path(
    app_client: Any, policy: str, fields: str, loc: list, words: str
) -> None:
    client, app = app_client
    if '"arms"' not in fields:
        fields += ', "arms": [{"id": "a"}, {"id": "b", "features": {"item": {"c": "x"}}}]'
    before = await _settled(app)
    body = ('{"policy": "' + policy + '", ' + fields + "}").encode()
    r = await client.post("/recommend", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text[:300]
    detail = r.json()["detail"][0]
    assert detail["loc"][: len(loc)] == loc, detail["loc"]
    assert words in detail["msg"], detail["msg"][:300]
    assert await _settled(app) == before


async def test_generated_json_anywhere_never_5xx_and_refusals_write_nothing(
    app_client: Any,
) -> None:
    client, app = app_client
    seen: dict[int, int] = {}
    feature_json = json_values | st.dictionaries(st.text(max_size=6), json_values, max_size=4)

    @given(
        context=feature_json,
        features=st.lists(feature_json, min_size=1, max_size=3),
        policy=st.sampled_from(sorted(SPECS)),
    )
    @settings(
        max_examples=80,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    def run(context: Any, features: list[Any], policy: str) -> None:
        async def one() -> None:
            ids = ["n1", "n2", "n3"]
            body = {
                "policy": policy,
                "context": context,
                "arms": [{"id": i, "features": f} for i, f in zip(ids, features)],
            }
            before = await _settled(app)
            text = json.dumps(body, allow_nan=True).encode()
            r = await client.post(
                "/recommend", content=text, headers={"content-type": "application/json"}
            )
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            assert r.status_code in (200, 422), (body, r.status_code, r.text[:300])
            after = await _settled(app)
            if r.status_code == 422:
                assert after == before and r.json()["detail"][0]["loc"][:1] == ["body"], r.text[
                    :300
                ]
            else:
                assert after[0] == before[0] + 1
                rr = await client.post(
                    "/reward", json={"event_id": r.json()["event_id"], "reward": 1.0}
                )
                assert rr.status_code == 200, rr.text

        asyncio.run_coroutine_threadsafe(one(), loop).result(timeout=60)

    loop = asyncio.get_running_loop()
    await asyncio.to_thread(run)
    assert seen.get(422, 0) > 10 and seen.get(200, 0) > 10, seen
