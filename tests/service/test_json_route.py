"""``JsonRoute`` parses bodies with orjson and answers exactly as FastAPI's own route
(standard-library ``json``) does: the same values reach validation and the same errors
come back, for bodies orjson takes and for those it refuses (NaN and Infinity literals,
integers beyond 64 bits, lone surrogates, UTF-16, malformed JSON)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict

from service.routers.json_route import JsonRoute

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")
    value: Any = None
    number: float | None = None


def app_with(route_class: type[APIRoute]) -> FastAPI:
    router = APIRouter(route_class=route_class)

    @router.post("/echo")
    async def echo(body: Body) -> dict[str, Any]:
        return {"value": repr(body.value), "number": repr(body.number)}

    app = FastAPI()
    app.include_router(router)
    return app


BODIES: list[bytes] = [
    b'{"value": {"user": {"interest": "tech", "tenureYears": 2}, "tags": ["a", "b"]}}',
    b'{"value": 1, "value": 2}',  # duplicate keys: the last wins in both
    b'{"value": 0.1, "number": 1e-7}',
    b'{"value": 123456789012345678901234567890}',  # beyond 64 bits: orjson makes a float
    b'{"value": -9223372036854775809, "number": 9223372036854775808}',
    b'{"value": 9223372036854775807, "number": 1.0000000000000000001}',
    b'{"value": [NaN, Infinity, -Infinity]}',  # not JSON: orjson refuses, json takes
    b'{"number": NaN}',
    b'{"value": "\\ud800"}',  # a lone surrogate
    '{"value": "caf\u00e9"}'.encode("utf-16"),
    b'{"value": "caf\xc3\xa9 \xe2\x98\x83"}',
    b'{"value": 1,}',  # malformed
    b'{"value": ',
    b"[1, 2]",
    b'{"unknown": 1}',
    b"",
]


@pytest.mark.parametrize("body", BODIES)
async def test_answers_as_fastapis_own_route(body: bytes) -> None:
    answers = []
    for route_class in (APIRoute, JsonRoute):
        transport = httpx.ASGITransport(app=app_with(route_class))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            r = await client.post(
                "/echo", content=body, headers={"content-type": "application/json"}
            )
        answers.append((r.status_code, r.json()))
    assert answers[0] == answers[1]


async def test_a_body_orjson_takes_never_reaches_the_standard_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("json.loads called")

    transport = httpx.ASGITransport(app=app_with(JsonRoute))
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        with monkeypatch.context() as patched:
            patched.setattr(json, "loads", refuse)
            r = await client.post(
                "/echo", content=BODIES[0], headers={"content-type": "application/json"}
            )
    assert r.status_code == 200
    assert r.json()["value"].startswith("{'user': {'interest': 'tech'")
