"""Bearer API keys for ``/reward``, ``/events/*`` and the policy administration routes.

``Authorization: Bearer <key>`` is compared in constant time with every configured key
(``BANDIT_API_KEYS``); a missing or wrong key is 401 and nothing runs. Keys are never
logged. With no keys configured the protected routes accept only loopback clients
(127.0.0.1, ::1) and answer 401 to everyone else; the server warns about it at start.
``/recommend`` needs a key only when ``BANDIT_RECOMMEND_REQUIRES_KEY`` is set.
With an OIDC issuer configured (``BANDIT_OIDC_ISSUER``), a credential that is not a key
and has a JWT's shape is verified as the issuer's token (:mod:`service.api.oidc`); the
loopback rule then no longer applies. A request let in acts as its key (a hash of it),
as ``oidc:<sub>`` for a token, or as ``loopback`` in the audit trail
(:mod:`service.usecases.audit`).
"""

from __future__ import annotations

import hmac
import logging
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import HTTPConnection

from service.api.oidc import OidcVerifier, looks_like_jwt
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


async def check(request: Request, credentials: HTTPAuthorizationCredentials | None) -> None:
    """Raise :class:`Unauthorized` unless the request may use a protected route."""
    if credentials is not None and credentials.scheme.lower() != "bearer":
        credentials = None
    await check_key(
        request, credentials.credentials if credentials else None, "Authorization: Bearer <api key>"
    )


async def check_key(request: HTTPConnection, presented: str | None, header: str) -> None:
    """Raise :class:`Unauthorized` unless ``presented`` (the key a request carries in
    ``header``, None: no key) is a configured key or a valid token of the OIDC issuer,
    or neither is configured and the client is on loopback; the request then acts as
    that key, the token's subject, or ``loopback``."""
    settings: Settings = request.app.state.settings
    verifier: OidcVerifier | None = request.app.state.oidc
    if (
        verifier is not None
        and presented is not None
        and looks_like_jwt(presented)
        and not key_matches(presented, settings.api_keys)
    ):
        claims = await verifier.claims(presented)
        audit.act_as(f"oidc:{claims.get('sub', '')}")
        return
    if not settings.api_keys and verifier is None:
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
    await check(request, credentials)


async def recommend_key(request: Request) -> None:
    """Dependency of ``/recommend``: open unless ``recommend_requires_key``. The bearer
    credentials are read only then, not declared as a sub-dependency that FastAPI would
    solve on every request (the route names the scheme in its OpenAPI security)."""
    if request.app.state.settings.recommend_requires_key:
        await check(request, await _bearer(request))


def warn_if_open(settings: Settings) -> None:
    """Say loudly at start that admin and reward routes are loopback-only."""
    if not settings.api_keys and settings.oidc_issuer is None:
        log.warning(
            "BANDIT_API_KEYS is not set: /reward and the admin routes accept ONLY loopback "
            "clients (127.0.0.1, ::1). Set BANDIT_API_KEYS before exposing this port."
        )
