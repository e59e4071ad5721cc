"""The console's session (docs/console.md, "Sign-in"): the cookie's attributes, a forged,
expired or foreign cookie refused, a removed key signed out, the CSRF token and the
read-only role checked before anything changes, the loopback rule without keys, and
``BANDIT_CONSOLE=false``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from itsdangerous import TimestampSigner

from service.console.session import COOKIE
from tests.service.conftest import API_KEY, POLICY, running
from tests.service.console_client import console_client, csrf_of, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]
READONLY_KEY = "read-only-key-0123"


async def test_signing_in_sets_a_strict_http_only_cookie_with_an_expiry(
    make_settings: Any,
) -> None:
    settings = make_settings(console_session_seconds=600)
    async with running(settings) as (app, _, _), console_client(app) as browser:
        answer = await sign_in(browser)
        assert answer.status_code == 303 and answer.headers["location"] == "/console/"
        cookie = answer.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=")
        for attribute in ("HttpOnly", "SameSite=strict", "Max-Age=600", "Path=/console"):
            assert attribute.lower() in cookie.lower(), cookie
        assert API_KEY not in cookie
        assert (await browser.get("/console/")).status_code == 200


async def test_a_forged_an_expired_or_a_revoked_session_is_sent_tosign_in(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(console_session_seconds=600)
    async with running(settings) as (app, _, _):
        async with console_client(app) as browser:
            await sign_in(browser)
            value = browser.cookies[COOKIE]
            browser.cookies.set(COOKIE, value[:-2] + ("AA" if value[-2:] != "AA" else "BB"))
            answer = await browser.get("/console/")
            assert answer.status_code == 303 and "/console/signin" in answer.headers["location"]

        async with console_client(app) as browser:
            signed = TimestampSigner.get_timestamp
            monkeypatch.setattr(
                TimestampSigner, "get_timestamp", lambda self: int(time.time()) - 601
            )
            await sign_in(browser)
            monkeypatch.setattr(TimestampSigner, "get_timestamp", signed)
            answer = await browser.get("/console/")
            assert answer.status_code == 303, "a cookie older than the session is refused"

        async with console_client(app) as browser:
            await sign_in(browser)
            assert (await browser.get("/console/")).status_code == 200
            secret = "fixed-secret"
            app.state.settings = settings.model_copy(update={"console_secret": secret})
            await sign_in(browser)
            assert (await browser.get("/console/")).status_code == 200
            app.state.settings = settings.model_copy(
                update={"console_secret": secret, "api_keys": ["another-key"]}
            )
            answer = await browser.get("/console/")
            assert answer.status_code == 303, "a key no longer configured is signed out"


async def test_a_read_only_key_sees_pages_and_changes_nothing(make_settings: Any) -> None:
    settings = make_settings(console_readonly_keys=[READONLY_KEY])
    async with running(settings) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        async with console_client(app) as browser:
            assert (await sign_in(browser, READONLY_KEY)).status_code == 303
            page = await browser.get("/console/policies/p/settings")
            assert page.status_code == 200 and "Roll back" not in page.text
            changed = {**POLICY, "epsilon": 0.5}
            answer = await browser.post(
                "/console/policies/p/settings",
                data={"csrf_token": csrf_of(page.text), "settings": json.dumps(changed)},
            )
            assert answer.status_code == 403 and "read-only" in answer.text
        assert (await http.get("/policies/p")).json()["epsilon"] == 0.05
        # a read-only key is no API key
        headers = {"Authorization": f"Bearer {READONLY_KEY}"}
        assert (await http.get("/policies", headers=headers)).status_code == 401


async def test_a_post_with_another_sessions_token_is_refused(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        async with console_client(app) as attacker, console_client(app) as victim:
            await sign_in(attacker)
            token = csrf_of((await attacker.get("/console/policies/p/arms")).text)
            await sign_in(victim)
            answer = await victim.post(
                "/console/policies/p/arms/retire", data={"csrf_token": token, "arm": "a"}
            )
            assert answer.status_code == 403 and "CSRF" in answer.text
        assert (await http.get("/policies/p")).json()["arms"] == ["a", "b", "c"]


async def test_without_keys_only_loopback_clients_get_the_console(make_settings: Any) -> None:
    async with running(make_settings(api_keys=[])) as (app, _, _):
        async with console_client(app) as local:
            answer = await local.get("/console/")
            assert answer.status_code == 200 and "loopback" in answer.text
        async with console_client(app, host="203.0.113.9") as remote:
            answer = await remote.get("/console/")
            assert answer.status_code == 401 and "loopback" in answer.text
            assert answer.headers["content-type"].startswith("text/html")


async def test_console_false_serves_no_console(make_settings: Any) -> None:
    async with running(make_settings(console=False)) as (app, _, _), console_client(app) as browser:
        assert (await browser.get("/console/")).status_code == 404
        assert (await browser.get("/console/signin")).status_code == 404
