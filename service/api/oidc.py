"""OpenID Connect bearer tokens (Microsoft Entra ID and other issuers) beside the API keys
(docs/personalizer.md, "Entra ID and other OIDC tokens").

With ``BANDIT_OIDC_ISSUER`` and ``BANDIT_OIDC_AUDIENCE`` set, a JWT in ``Authorization:
Bearer`` (or ``Ocp-Apim-Subscription-Key``) is accepted when it is signed by one of the
issuer's keys, its ``iss`` is the issuer, its ``aud`` the audience and ``exp`` (required)
and ``nbf`` (when present) hold, with :data:`LEEWAY_SECONDS` for clock skew (RFC 7519
section 4.1). The keys are the issuer's JWKS (RFC 7517), found through its discovery
document (``<issuer>/.well-known/openid-configuration``, OpenID Connect Discovery 1.0
section 4, whose ``issuer`` must equal the configured one), cached for
:data:`KEYS_MAX_AGE_SECONDS` and fetched again when a token names a key id the cache lacks
(a rotated key), at most once per ``refresh_seconds``. Only the asymmetric algorithms of
:data:`ALGORITHMS` are accepted: ``alg: none`` and HMAC (which would take the public key
as a shared secret) are refused.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

from service.errors import Unauthorized

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
"""The signature algorithms a token may use (Entra ID signs with RS256)."""
LEEWAY_SECONDS = 60.0
"""Clock skew allowed on ``exp`` and ``nbf``."""
KEYS_MAX_AGE_SECONDS = 3600.0
"""How long fetched keys are used before the JWKS is fetched again."""
FETCH_TIMEOUT_SECONDS = 5.0


def looks_like_jwt(credential: str) -> bool:
    """Whether ``credential`` has a JWS compact serialization's shape (three dot-separated
    parts, RFC 7515 section 7.1); an API key is checked as a key before this is asked."""
    return credential.count(".") == 2


@dataclass
class OidcVerifier:
    """The tokens of one issuer for one audience; one per process."""

    issuer: str
    audience: str
    refresh_seconds: float = 30.0
    clock: Callable[[], float] = time.time
    _keys: dict[str, Any] = field(default_factory=dict, init=False)
    _fetched_at: float | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)

    async def claims(self, token: str) -> dict[str, Any]:
        """The claims of ``token`` once verified (module docstring); otherwise
        :class:`Unauthorized` saying what failed."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"invalid bearer token: {exc}") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise Unauthorized(
                f"bearer token algorithm {algorithm!r} is not accepted (accepted: "
                f"{', '.join(ALGORITHMS)})"
            )
        key = await self._key(header.get("kid"))
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[algorithm],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("bearer token expired") from None
        except jwt.InvalidAudienceError:
            raise Unauthorized(f"bearer token is not for audience {self.audience!r}") from None
        except jwt.InvalidIssuerError:
            raise Unauthorized(f"bearer token was not issued by {self.issuer!r}") from None
        except jwt.InvalidTokenError as exc:
            raise Unauthorized(f"invalid bearer token: {exc}") from None
        return claims

    async def _key(self, kid: object) -> Any:
        """The public key with id ``kid``, fetching the JWKS when the cache is stale, or
        lacks ``kid`` and was not fetched within ``refresh_seconds``."""
        if not isinstance(kid, str):
            raise Unauthorized("bearer token names no signing key (kid)")
        async with self._lock:
            age = None if self._fetched_at is None else self.clock() - self._fetched_at
            if (
                age is None
                or age >= KEYS_MAX_AGE_SECONDS
                or (kid not in self._keys and age >= self.refresh_seconds)
            ):
                await self._fetch()
        if kid not in self._keys:
            raise Unauthorized(f"bearer token signed by unknown key {kid!r}")
        return self._keys[kid]

    async def _fetch(self) -> None:
        """Read the discovery document, then its ``jwks_uri``; the keys that PyJWT can
        use replace the cache (an issuer unreachable is a 401 saying so)."""
        discovery_url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_SECONDS) as http:
                discovery = (await http.get(discovery_url)).raise_for_status().json()
                if discovery.get("issuer") != self.issuer:
                    raise ValueError(
                        f"its discovery document names issuer {discovery.get('issuer')!r}"
                    )
                jwks = (await http.get(discovery["jwks_uri"])).raise_for_status().json()
            keys = jwt.PyJWKSet.from_dict(jwks).keys
        except (httpx.HTTPError, ValueError, KeyError, jwt.PyJWKSetError) as exc:
            raise Unauthorized(
                f"cannot verify bearer tokens: the keys of issuer {self.issuer!r} are "
                f"unavailable ({type(exc).__name__}: {exc})"
            ) from None
        self._keys = {k.key_id: k.key for k in keys if k.key_id is not None}
        self._fetched_at = self.clock()
