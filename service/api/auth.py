"""Bearer API keys for ``/reward``, ``/events/*`` and the policy administration routes.

``Authorization: Bearer <key>`` is compared in constant time with every configured key
(``BANDIT_API_KEYS``); a missing or wrong key is 401 and nothing runs. Keys are never
logged. With no keys configured the protected routes accept only loopback clients
(127.0.0.1, ::1) and answer 401 to everyone else; the server warns about it at start.
``/recommend`` needs a key only when ``BANDIT_RECOMMEND_REQUIRES_KEY`` is set.
A request let in acts as its key (a hash of it) or as ``loopback`` in the audit trail
(:mod:`service.usecases.audit`).
"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.errors import Unauthorized
from service.settings import Settings
from service.usecases import audit

log = logging.getLogger("bandit.auth")

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
_bearer = HTTPBearer(auto_error=False, description="an API key from BANDIT_API_KEYS")


def key_matches(presented: str, keys: list[str]) -> bool:
    """Constant-time comparison against every key (no early exit on a match)."""
    given = presented.encode()
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key.encode())
    return found


def check(request: Request, credentials: HTTPAuthorizationCredentials | None) -> None:
    """Raise :class:`Unauthorized` unless the request may use a protected route."""
    if credentials is not None and credentials.scheme.lower() != "bearer":
        credentials = None
    check_key(
        request, credentials.credentials if credentials else None, "Authorization: Bearer <api key>"
    )


def check_key(request: Request, presented: str | None, header: str) -> None:
    """Raise :class:`Unauthorized` unless ``presented`` (the key a request carries in
    ``header``, None: no key) is a configured key, or no keys are configured and the
    client is on loopback; the request then acts as that key, or as ``loopback``."""
    settings: Settings = request.app.state.settings
    if not settings.api_keys:
        host = request.client.host if request.client else ""
        if host in LOOPBACK:
            audit.act_as(audit.LOOPBACK)
            return
        raise Unauthorized(
            "no API keys are configured: protected routes accept only loopback clients"
        )
    if presented is None:
        raise Unauthorized(f"missing {header}")
    if not key_matches(presented, settings.api_keys):
        raise Unauthorized("invalid API key")
    audit.act_as(audit.key_actor(presented))


async def require_key(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    """Dependency of the protected routes."""
    check(request, credentials)


async def recommend_key(request: Request) -> None:
    """Dependency of ``/recommend``: open unless ``recommend_requires_key``. The bearer
    credentials are read only then, not declared as a sub-dependency that FastAPI would
    solve on every request (the route names the scheme in its OpenAPI security)."""
    if request.app.state.settings.recommend_requires_key:
        check(request, await _bearer(request))


def warn_if_open(settings: Settings) -> None:
    """Say loudly at start that admin and reward routes are loopback-only."""
    if not settings.api_keys:
        log.warning(
            "BANDIT_API_KEYS is not set: /reward and the admin routes accept ONLY loopback "
            "clients (127.0.0.1, ::1). Set BANDIT_API_KEYS before exposing this port."
        )
