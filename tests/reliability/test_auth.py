"""Auth against a real uvicorn over Redis and PostgreSQL: every route the OpenAPI
document marks as protected (read from the document, so a new route is covered the day
it is added) refuses a missing, wrong, truncated or mis-schemed key with 401 and changes
nothing -- every Redis key's value and the event log are byte-for-byte the same
afterwards. Keys are compared in constant time and never appear in the logs, even at
debug level with access logs on."""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

import service.api.auth
from service.api.auth import key_matches
from service.settings import Settings
from tests.reliability.traffic import HEADERS, logged, spec, wait_until
from tests.servers import API_KEY, ROOT, AppProcess, RedisServer, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120), pytest.mark.slow]
WRONG = "wrong-key-that-must-not-be-logged-5f1c"
BAD_HEADERS = [
    {},
    {"Authorization": f"Bearer {WRONG}"},
    {"Authorization": f"Bearer {API_KEY[:-1]}"},  # a prefix of the real key
    {"Authorization": f"Bearer {API_KEY}0"},  # the real key plus one character
    {"Authorization": f"Basic {API_KEY}"},  # right secret, wrong scheme
    {"Authorization": f"bearer{API_KEY}"},
    {"Authorization": "Bearer  x"},
    {"Authorization": f"Bearer {API_KEY.upper()}"},
]


def _protected_routes() -> list[tuple[str, str]]:
    doc = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    return [
        (method.upper(), path)
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        if op.get("security") and path != "/recommend"  # /recommend: open unless configured
    ]


def _fingerprint(redis_server: RedisServer, db_url: str) -> tuple[dict, object]:
    r = redis_server.client()
    keys = {k: r.dump(k) for k in r.scan_iter(match="*")}
    return keys, logged(db_url, "p")


def test_every_protected_route_is_in_the_document() -> None:
    routes = _protected_routes()
    assert ("POST", "/reward") in routes and ("PUT", "/policies/{name}") in routes
    assert len(routes) >= 12, routes


def test_keys_are_compared_in_constant_time() -> None:
    tree = ast.parse(inspect.getsource(service.api.auth))
    calls = {
        f"{n.func.value.id}.{n.func.attr}"
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
    }
    assert calls & {"hmac.compare_digest", "secrets.compare_digest"}, calls
    source = inspect.getsource(key_matches)
    assert "==" not in source and "return True" not in source  # no early exit on a match
    assert key_matches(API_KEY, ["other", API_KEY]) and not key_matches(API_KEY[:-1], [API_KEY])
    assert not key_matches("", [API_KEY]) and not key_matches("é" + API_KEY, [API_KEY])


async def test_protected_routes_refuse_and_change_nothing(
    tmp_path: Path, private_redis: RedisServer, make_settings: Callable[..., Settings]
) -> None:
    output = tmp_path / "app.log"
    settings = make_settings()
    db_url = settings.database_url
    env = settings_env(settings)
    app = AppProcess(env, log_level="debug", output=output).start()
    try:
        async with httpx.AsyncClient(base_url=app.url, timeout=10.0) as client:
            assert (
                await client.put("/policies/p", json=spec(), headers=HEADERS)
            ).status_code == 200
            dec = (
                await client.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
            ).json()
            r = await client.post(
                "/reward", json={"event_id": dec["event_id"], "reward": 1}, headers=HEADERS
            )
            assert r.status_code == 200
            dec = (
                await client.post(
                    "/recommend",
                    json={"policy": "p", "context": [0, 1, 0], "defer_activation": True},
                )
            ).json()
            snapshot = (await client.get("/policies/p/snapshot", headers=HEADERS)).json()
            bodies = {
                "/reward": {"event_id": dec["event_id"], "reward": 1.0},
                "/policies/{name}": spec(dimension=4),
                "/policies/{name}/arms": {"arms": ["z"]},
                "/policies/{name}/arms/retire": {"arms": ["a"]},
                "/policies/{name}/snapshot": {"data": snapshot["data"]},
            }
            await wait_until(lambda: logged(db_url, "p")[2] == (2, 1), 10, "log caught up")
            before = _fingerprint(private_redis, db_url)
            refused = 0
            for method, path in _protected_routes():
                url = path.replace("{name}", "p").replace("{event_id}", dec["event_id"])
                for headers in BAD_HEADERS:
                    r = await client.request(method, url, json=bodies.get(path), headers=headers)
                    assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
                    # Personalizer's routes name the header their SDKs send the key in
                    scheme = "Ocp-Apim-Subscription-Key" if "/personalizer" in path else "Bearer"
                    assert r.headers.get("www-authenticate") == scheme
                    refused += 1
            assert refused == len(_protected_routes()) * len(BAD_HEADERS)
            assert _fingerprint(private_redis, db_url) == before
            # the right key still works afterwards (the refusals did not lock anything)
            r = await client.post(f"/events/{dec['event_id']}/activate", headers=HEADERS)
            assert r.status_code == 200, r.text
    finally:
        app.stop()
    text = output.read_text(errors="replace")
    assert "GET /policies" in text or "POST /reward" in text, "access log expected at debug level"
    assert API_KEY not in text and WRONG not in text
    assert not re.search(re.escape(API_KEY[:12]), text)
