"""OIDC bearer tokens beside the API keys (service/api/oidc.py): an issuer served by the
test itself on loopback (discovery document and JWKS over HTTP), tokens signed with its
RSA keys. A valid token reaches the native and the Personalizer routes and acts as its
subject; an expired token, another audience, another issuer, an unknown key and
``alg: none`` are 401 and change nothing; the API key keeps working; a rotated key is
fetched again."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from jwt.algorithms import RSAAlgorithm

from service.api.oidc import OidcVerifier
from service.errors import Unauthorized
from service.settings import Settings
from tests.service.conftest import API_KEY, POLICY, running

pytestmark = pytest.mark.anyio
AUDIENCE = "api://bandit-test"


class Issuer:
    """An OIDC issuer on a loopback port: its discovery document and a JWKS of the keys
    in ``published`` (a test rotates them); counts the JWKS fetches."""

    def __init__(self) -> None:
        self.keys = {kid: new_key() for kid in ("k1", "k2", "unpublished")}
        self.published = ["k1"]
        self.jwks_fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": issuer.url, "jwks_uri": issuer.url + "/keys"}
                elif self.path == "/keys":
                    issuer.jwks_fetches += 1
                    body = {"keys": [issuer.jwk(kid) for kid in issuer.published]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def jwk(self, kid: str) -> dict[str, Any]:
        public: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
        return {**public, "kid": kid, "use": "sig", "alg": "RS256"}

    def token(self, kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.url, "aud": AUDIENCE, "sub": "user-1", "iat": now, "exp": now + 600}
        body.update(claims)
        return jwt.encode(
            {k: v for k, v in body.items() if v is not None},
            self.keys[kid],
            algorithm="RS256",
            headers={"kid": kid},
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def new_key() -> RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def unsigned(claims: dict[str, Any]) -> str:
    """An ``alg: none`` token of ``claims`` (no signature)."""
    return jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    served = Issuer()
    yield served
    served.close()


def settings(issuer: Issuer, tmp_path: Any, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "api_keys": [API_KEY],
        "demo_policy": False,
        "snapshot_interval_seconds": 0,
        "oidc_issuer": issuer.url,
        "oidc_audience": AUDIENCE,
        **overrides,
    }
    return Settings(**fields)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("api_keys", [[API_KEY], []])
async def test_tokens_are_verified_and_api_keys_keep_working(
    issuer: Issuer, tmp_path: Any, api_keys: list[str]
) -> None:
    now = int(time.time())
    refused = {
        "expired": issuer.token(iat=now - 7200, exp=now - 3600),
        "no expiry": issuer.token(exp=None),
        "wrong audience": issuer.token(aud="api://someone-else"),
        "wrong issuer": issuer.token(iss="https://login.example/other/v2.0"),
        "unknown key": issuer.token(kid="unpublished"),
        "alg none": unsigned({"iss": issuer.url, "aud": AUDIENCE, "sub": "x", "exp": now + 600}),
        "tampered": issuer.token()[:-4] + "AAAA",
    }
    async with running(settings(issuer, tmp_path, api_keys=api_keys)) as (app, http, _):
        http.headers.pop("Authorization")
        created = await http.put("/policies/p", json=POLICY, headers=bearer(issuer.token()))
        assert created.status_code == 200, created.text
        deadline = time.monotonic() + 30  # the audit record reaches the log asynchronously
        while not (
            records := (
                await http.get("/policies/p/history", headers=bearer(issuer.token()))
            ).json()["records"]
        ):
            assert time.monotonic() < deadline, "no audit record"
            await asyncio.sleep(0.05)
        assert records[0]["actor"] == "oidc:user-1"
        for what, token in refused.items():
            answer = await http.put(
                "/policies/p", json={**POLICY, "epsilon": 0.5}, headers=bearer(token)
            )
            assert answer.status_code == 401, what
            ranked = await http.get(
                "/personalizer/v1.0/configurations/policy",
                headers={"Ocp-Apim-Subscription-Key": token},
            )
            assert ranked.status_code == 401, what
        messages = {
            what: (await http.get("/policies/p", headers=bearer(token))).json()["detail"]
            for what, token in refused.items()
        }
        assert "expired" in messages["expired"]
        assert "exp" in messages["no expiry"]
        assert AUDIENCE in messages["wrong audience"]
        assert issuer.url in messages["wrong issuer"]
        assert "unpublished" in messages["unknown key"]
        assert "'none'" in messages["alg none"]
        policy = (await http.get("/policies/p", headers=bearer(issuer.token()))).json()
        assert policy.get("epsilon") != 0.5  # no refused request changed anything
        for headers in (bearer(issuer.token()), {"Ocp-Apim-Subscription-Key": issuer.token()}):
            answer = await http.get("/personalizer/v1.0/configurations/policy", headers=headers)
            assert answer.status_code == 200, answer.text
        by_key = await http.get("/policies/p", headers=bearer(API_KEY))
        assert by_key.status_code == (200 if api_keys else 401)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, client=("127.0.0.1", 50000)),
            base_url="http://app",
        ) as anonymous:  # loopback without a credential: only when nothing is configured
            assert (await anonymous.get("/policies/p")).status_code == 401


async def test_a_rotated_key_is_fetched_again_at_most_once_per_refresh_period(
    issuer: Issuer,
) -> None:
    issuer.published = ["k1"]
    clock = [1000.0]
    verifier = OidcVerifier(issuer.url, AUDIENCE, refresh_seconds=30, clock=lambda: clock[0])
    assert (await verifier.claims(issuer.token("k1")))["sub"] == "user-1"
    fetches = issuer.jwks_fetches
    issuer.published = ["k1", "k2"]
    clock[0] += 10  # within the refresh period: the unknown key is not fetched yet
    with pytest.raises(Unauthorized, match="unknown key 'k2'"):
        await verifier.claims(issuer.token("k2"))
    assert issuer.jwks_fetches == fetches
    clock[0] += 30
    assert (await verifier.claims(issuer.token("k2")))["sub"] == "user-1"
    assert issuer.jwks_fetches == fetches + 1
    await verifier.claims(issuer.token("k1"))  # cached: no fetch
    assert issuer.jwks_fetches == fetches + 1


async def test_an_unreachable_issuer_is_a_401_saying_so() -> None:
    verifier = OidcVerifier("http://127.0.0.1:9", AUDIENCE)
    token = jwt.encode({"sub": "x"}, new_key(), algorithm="RS256", headers={"kid": "k1"})
    with pytest.raises(Unauthorized, match="keys of issuer .* are unavailable"):
        await verifier.claims(token)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"oidc_issuer": "https://login.example/t/v2.0"}, "BANDIT_OIDC_AUDIENCE"),
        ({"oidc_audience": AUDIENCE}, "BANDIT_OIDC_ISSUER"),
        ({"oidc_issuer": "login.example", "oidc_audience": AUDIENCE}, "http(s) URL"),
    ],
)
def test_oidc_settings_go_together(fields: dict[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        Settings(**fields)
