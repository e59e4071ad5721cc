"""A browser's side of the console in process: an httpx client on the app's ASGI
transport from a given host, the CSRF token of a page, and sign-in."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.service.conftest import API_KEY


def console_client(app: Any, host: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(host, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://app")


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "no CSRF token on the page"
    return found.group(1)


async def sign_in(browser: httpx.AsyncClient, key: str = API_KEY) -> httpx.Response:
    form = await browser.get("/console/signin")
    return await browser.post(
        "/console/signin", data={"csrf_token": csrf_of(form.text), "key": key}
    )
