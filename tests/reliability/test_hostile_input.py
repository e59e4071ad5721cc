"""Hostile input on the app over a private Redis and PostgreSQL: property tests of the
request models, bodies at and over the size limit (declared and streamed), deeply
nested JSON, huge and tiny numbers, unicode and NUL in ids. Every answer is a 2xx or a
4xx naming the problem -- never a 5xx -- a refused request writes nothing, and an
accepted one is logged (no record is set aside as undeliverable)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from service.api.app import create_app
from service.schemas import MAX_ABS_FEATURE, RecommendRequest, RewardRequest
from service.settings import Settings
from tests.databases import postgres_schema
from tests.reliability.traffic import HEADERS, spec
from tests.servers import RedisServer, reliability_settings

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group(__name__)]
LIMIT = 8192

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
fields = {
    "policy": st.sampled_from(["p", "q", "", "../x", "p" * 200]) | st.text(max_size=10),
    "context": st.lists(st.floats(), max_size=5)
    | st.dictionaries(st.text(max_size=5), st.floats(), max_size=3)
    | json_values,
    "arms": st.lists(
        st.fixed_dictionaries(
            {"id": st.text(max_size=10)}, optional={"features": st.lists(st.floats(), max_size=3)}
        ),
        max_size=4,
    )
    | json_values,
    "user_id": st.text(max_size=10) | json_values,
    "event_id": st.text(max_size=10) | json_values,
    "top_k": st.integers() | json_values,
    "explore": st.booleans() | json_values,
    "reward": st.floats() | st.integers() | json_values,
}
bodies = st.dictionaries(st.sampled_from(sorted(fields)), st.just(None), max_size=6).flatmap(
    lambda keys: st.fixed_dictionaries({k: fields[k] for k in keys})
)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()  # NaN/Infinity tokens on purpose


@given(bodies)
@settings(max_examples=300, deadline=None, derandomize=True)
def test_request_models_accept_only_finite_bounded_storable_values(body: dict) -> None:
    for model in (RecommendRequest, RewardRequest):
        try:
            parsed = model.model_validate_json(_json(body))
        except ValidationError:
            continue
        dumped = parsed.model_dump(mode="json")
        assert model.model_validate_json(json.dumps(dumped)) == parsed  # round trip
        numbers = _floats(dumped)
        assert all(math.isfinite(x) and not isinstance(x, bool) for x in numbers)
        if model is RecommendRequest:
            assert all(abs(x) <= MAX_ABS_FEATURE for x in _floats(dumped["context"]))
        assert "\x00" not in json.dumps(dumped, ensure_ascii=False)


def _floats(obj: Any) -> list[float]:
    if isinstance(obj, bool):
        return []
    if isinstance(obj, (int, float)):
        return [obj]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _floats(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _floats(v)]
    return []


@asynccontextmanager
async def serving(
    settings: Settings, policies: dict[str, dict]
) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The app with its lifespan running and ``policies`` (name -> spec) created; yields
    ``(client, app)``. Unhandled errors reach the client as the 500 it would see."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(
            app=app, client=("127.0.0.1", 50000), raise_app_exceptions=False
        )
        async with httpx.AsyncClient(
            transport=transport, base_url="http://app", headers=HEADERS
        ) as client:
            for name, body in policies.items():
                r = await client.put(f"/policies/{name}", json=body)
                assert r.status_code == 200, r.text
            yield client, app


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def private_app(
    tmp_path: Path, policies: dict[str, dict], max_body_bytes: int
) -> AsyncIterator[tuple[httpx.AsyncClient, Any, str]]:
    """:func:`serving` over a private Redis and a PostgreSQL schema (starting them costs
    seconds: a module shares one app, and each test asserts relative to the log's counts
    it reads first); yields ``(client, app, database URL)``."""
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    try:
        with postgres_schema() as database_url:
            settings = reliability_settings(
                data_dir=tmp_path / "data",
                redis_url=redis_server.url,
                database_url=database_url,
                log_flush_seconds=0.02,
                max_body_bytes=max_body_bytes,
            )
            async with serving(settings, policies) as (client, app):
                yield client, app, database_url
    finally:
        redis_server.stop()


@pytest.fixture(scope="module")
async def app_client(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, Any, str]]:
    """One app for the module (:func:`private_app`)."""
    policies = {"p": spec(dimension=2, arms=None), "q": spec()}
    async with private_app(tmp_path_factory.mktemp("hostile"), policies, LIMIT) as served:
        yield served


async def _settled(app: Any, db_url: str) -> tuple[int, int]:
    """(decisions, rewards) in the log once everything submitted is written; no record
    may have been set aside as undeliverable."""
    use_cases = app.state.use_cases
    await asyncio.to_thread(use_cases.sink.flush, 10.0)
    assert use_cases.sink.dead_letters == 0
    return await asyncio.to_thread(use_cases.event_log.count)


@pytest.mark.slow
@pytest.mark.anyio
async def test_generated_bodies_never_5xx_and_refusals_write_nothing(app_client: Any) -> None:
    client, app, db_url = app_client
    seen: dict[int, int] = {}

    @given(bodies)
    @settings(
        max_examples=100,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    def run(body: dict) -> None:
        async def one() -> None:
            for path in ("/recommend", "/reward"):
                before = await _settled(app, db_url)
                r = await client.post(
                    path, content=_json(body), headers={"content-type": "application/json"}
                )
                seen[r.status_code] = seen.get(r.status_code, 0) + 1
                assert r.status_code in (200, 404, 409, 422), (path, body, r.status_code, r.text)
                after = await _settled(app, db_url)
                if r.status_code != 200:
                    assert after == before, (path, body, r.text)
                if r.status_code == 422:
                    assert r.json()["detail"][0]["loc"], r.text

        asyncio.run_coroutine_threadsafe(one(), loop).result(timeout=60)

    loop = asyncio.get_running_loop()
    await asyncio.to_thread(run)
    assert seen.get(422, 0) > 50, seen


def _padded(target: int) -> bytes:
    """A valid /recommend body of exactly ``target`` bytes (JSON whitespace after it)."""
    body = _json({"policy": "q", "context": [0.5, 0.25, 1.0]})
    return body + b" " * (target - len(body))


@pytest.mark.slow
@pytest.mark.anyio
async def test_bodies_at_and_over_the_limit(app_client: Any) -> None:
    client, app, db_url = app_client
    ct = {"content-type": "application/json"}
    before = await _settled(app, db_url)
    at = await client.post("/recommend", content=_padded(LIMIT), headers=ct)
    assert at.status_code == 200, at.text
    over = await client.post("/recommend", content=_padded(LIMIT + 1), headers=ct)
    assert over.status_code == 413 and str(LIMIT) in over.json()["detail"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: streamed, counted as read
        for _ in range(LIMIT // 512 + 2):
            yield b" " * 512

    streamed = await client.post("/recommend", content=chunks(), headers=ct)
    assert streamed.status_code == 413
    huge = b'{"policy": "q", "context": [' + b"0.5, " * 1_000_000 + b"0.5]}"  # 5 MB
    r = await client.post("/recommend", content=huge, headers=ct)
    assert r.status_code == 413
    many = {
        "policy": "p",
        "context": [1.0],
        "arms": [{"id": f"{i}", "features": [0.0]} for i in range(200)],
    }
    assert len(_json(many)) < LIMIT
    r = await client.post("/recommend", content=_json(many), headers=ct)
    assert r.status_code == 200 and len(r.json()["ranking"]) == 200, r.text
    assert await _settled(app, db_url) == (before[0] + 2, before[1])


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("depth", [50, 1000, 4000])
async def test_deeply_nested_json(app_client: Any, depth: int) -> None:
    client, app, db_url = app_client
    before = await _settled(app, db_url)
    for path in ("/recommend", "/reward", "/policies/p"):
        body = b'{"policy": "q", "context": ' + b"[" * depth + b"]" * depth + b"}"
        assert len(body) <= LIMIT  # nesting, not size, is under test
        method = "PUT" if path.startswith("/policies") else "POST"
        r = await client.request(
            method, path, content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422, (path, depth, r.status_code, r.text[:200])
    assert await _settled(app, db_url) == before


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("context", "ok"),
    [
        ([1e6, -1e6, 1e6], True),
        ([5e-324, -5e-324, 2.2e-308], True),
        ([1e308, 0, 0], False),
        ([1e6 * (1 + 1e-15), 0, 0], False),
        ("[1e309, 0, 0]", False),  # parses as inf
        ("[" + "9" * 400 + ", 0, 0]", False),  # an integer no float can hold
        ("[-" + "9" * 5000 + ", 0, 0]", False),  # more digits than int() parses by default
        ("[NaN, 0, 0]", False),
        ("[Infinity, 0, 0]", False),
        ("[true, false, 0]", False),
        ('["1", 0, 0]', False),
    ],
)
async def test_huge_and_tiny_numbers(app_client: Any, context: Any, ok: bool) -> None:
    client, app, db_url = app_client
    before = await _settled(app, db_url)
    raw = context if isinstance(context, str) else json.dumps(context)
    body = ('{"policy": "q", "context": ' + raw + "}").encode()
    r = await client.post("/recommend", content=body, headers={"content-type": "application/json"})
    if not ok:
        assert r.status_code == 422, r.text
        assert await _settled(app, db_url) == before
        return
    assert r.status_code == 200, r.text
    assert all(math.isfinite(a["score"]) for a in r.json()["ranking"])
    # rewarding it keeps the model finite: the next decision still has finite scores
    rr = await client.post("/reward", json={"event_id": r.json()["event_id"], "reward": 1.0})
    assert rr.status_code == 200, rr.text
    nxt = await client.post("/recommend", json={"policy": "q", "context": [1, 1, 1]})
    assert all(math.isfinite(a["score"]) for a in nxt.json()["ranking"]), nxt.text
    for reward in (1e308, -1e308, 1.0000001):
        rr = await client.post("/reward", json={"event_id": r.json()["event_id"], "reward": reward})
        assert rr.status_code in (200, 422), rr.text  # out of reward_range, or a repeat
    assert await _settled(app, db_url) == (before[0] + 2, before[1] + 1)


UNICODE_IDS = [
    "😀",
    "\u202eevil",
    "x\u200b",
    "ß" * 256,
    "混合-ID",
    "\ufeffbom",
    "a b\tc\n",
    "'; DROP TABLE decisions; --",
]


@pytest.mark.slow
@pytest.mark.anyio
async def test_unicode_ids_round_trip_through_model_and_log(app_client: Any) -> None:
    client, app, db_url = app_client
    before = await _settled(app, db_url)
    served = {}
    for arm in UNICODE_IDS:
        r = await client.post(
            "/recommend",
            json={
                "policy": "p",
                "context": [1.0],
                "arms": [{"id": arm, "features": [0.5]}],
                "user_id": arm,
            },
        )
        assert r.status_code == 200, (arm, r.text)
        assert r.json()["arm_id"] == arm
        served[r.json()["event_id"]] = arm
        rr = await client.post(
            "/reward", json={"event_id": r.json()["event_id"], "reward": 0.5, "arm_id": arm}
        )
        assert rr.status_code == 200, rr.text
    stats = (await client.get("/policies/p/stats")).json()["arms"]
    assert all(stats[a]["rewarded"] == 1 for a in UNICODE_IDS)
    assert await _settled(app, db_url) == (
        before[0] + len(UNICODE_IDS),
        before[1] + len(UNICODE_IDS),
    )
    from service.storage.sql_log import SqlEventLog

    log = SqlEventLog(db_url)
    try:
        logged_arms = {e.decision.event_id: e.decision.arm_id for e in log.iter_events("p")}
    finally:
        log.close()
    assert {e: logged_arms[e] for e in served} == served
    for bad in ["a\x00b", "\x00", "ß" * 257, ""]:
        r = await client.post(
            "/recommend",
            json={"policy": "p", "context": [1.0], "arms": [{"id": bad, "features": [0.5]}]},
        )
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "arms", 0], (
            r.text
        )
        r = await client.post(
            "/recommend", json={"policy": "p", "context": [1.0, 0.5], "user_id": bad or "\x00"}
        )
        assert r.status_code == 422, r.text
    assert await _settled(app, db_url) == (
        before[0] + len(UNICODE_IDS),
        before[1] + len(UNICODE_IDS),
    )
