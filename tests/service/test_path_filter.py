"""``PathFilteredRouter`` routes every request exactly as FastAPI's own ``APIRouter``:
the same route, status, path parameters and ``Allow`` header, for paths of several
routers in order (a later router reached past an earlier one), wrong methods (405),
unknown paths (404), path parameters spanning ``/``, trailing-slash redirects, a
``root_path``, and routes added after the router first matched a request."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from service.routers.path_filter import PathFilteredRouter

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def app_with(router_class: type[APIRouter]) -> FastAPI:
    first = router_class(prefix="/items")
    second = router_class(prefix="/loops/{loop}/items")
    third = router_class()

    @first.get("/{item}")
    async def get_item(item: str) -> dict[str, str]:
        return {"route": "get_item", "item": item}

    @first.post("/rank")
    async def rank() -> dict[str, str]:
        return {"route": "rank"}

    @second.post("/events/{event:path}/reward")
    async def reward(loop: str, event: str) -> dict[str, str]:
        return {"route": "reward", "loop": loop, "event": event}

    @third.get("/health/")
    async def health() -> dict[str, str]:
        return {"route": "health"}

    app = FastAPI()
    for router in (first, second, third):
        app.include_router(router)

    @third.put("/late")  # added after inclusion: the filter must still let it through
    async def late() -> dict[str, str]:
        return {"route": "late"}

    return app


REQUESTS = [
    ("GET", "/items/abc"),
    ("POST", "/items/rank"),
    ("GET", "/items/rank"),  # the GET route takes it as an item
    ("DELETE", "/items/abc"),  # 405 with Allow
    ("POST", "/loops/one/items/events/a/b%2Fc/reward"),
    ("GET", "/loops/one/items/events/x/reward"),  # 405
    ("GET", "/health/"),
    ("GET", "/health"),  # redirected to /health/
    ("PUT", "/late"),
    ("GET", "/late"),  # 405
    ("GET", "/nowhere"),
    ("POST", "/loops/one/items/rank"),
]


async def answers(app: FastAPI, prefix: str = "") -> list[tuple[int, str, str | None]]:
    transport = httpx.ASGITransport(app=app, root_path=prefix)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        out = []
        for method, path in REQUESTS:
            response = await client.request(method, prefix + path, follow_redirects=False)
            out.append((response.status_code, response.text, response.headers.get("allow")))
        return out


async def test_same_answers_as_fastapi_router() -> None:
    plain = await answers(app_with(APIRouter))
    filtered = await answers(app_with(PathFilteredRouter))
    assert filtered == plain
    statuses = [status for status, _, _ in filtered]
    assert 200 in statuses and 404 in statuses and 405 in statuses and 307 in statuses


async def test_same_answers_under_a_root_path() -> None:
    plain = await answers(app_with(APIRouter), "/api")
    filtered = await answers(app_with(PathFilteredRouter), "/api")
    assert filtered == plain
    assert filtered[0][0] == 200


async def test_a_path_none_of_the_routes_match_is_passed_over() -> None:
    router = PathFilteredRouter(prefix="/items")

    @router.get("/{item}")
    async def get_item(item: str) -> str:
        return item

    scope = {"type": "http", "method": "GET", "path": "/other/abc", "root_path": ""}
    match, child_scope = router.matches(scope)
    assert match.name == "NONE" and child_scope == {}
