"""The console's sign-in: a signed session cookie and a CSRF token per session
(docs/console.md, "Sign-in").

The cookie (``bandit_console``) is HttpOnly, SameSite=Strict, limited to ``/console``
and expires after ``console_session_seconds``; its value is signed and timed by
itsdangerous, so it cannot be forged or kept past its age. It names the key signed in
with by its SHA-256, checked against the configured keys on every request: removing a
key signs its sessions out. An API key (``BANDIT_API_KEYS``) may change things, a
read-only key (``BANDIT_CONSOLE_READONLY_KEYS``) only look. With no API keys the console
follows the API's loopback-only rule (:mod:`service.api.auth`): a loopback client is let
in without signing in, any other client is refused.

Every state-changing form carries the session's CSRF token; a POST whose token is not
the session's is refused (403) before anything runs. A visitor not signed in still gets
a session (with a token and no key) so that the sign-in form has one too.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs

from fastapi import Request, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from service.api.auth import LOOPBACK, key_matches
from service.settings import Settings
from service.usecases import audit

COOKIE = "bandit_console"
COOKIE_PATH = "/console"
CSRF_FIELD = "csrf_token"
Role = Literal["admin", "readonly"]


class SignInRequired(Exception):
    """The page needs a signed-in session (answered with the sign-in page)."""


class Refused(Exception):
    """The request may not do this (401 or 403 page); ``message`` says why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Session:
    """One browser's session: its CSRF token and, once signed in, the key's SHA-256 and
    role (``key_hash`` None: not signed in; ``loopback``: let in by the loopback rule;
    ``stored``: the request's cookie holds it already)."""

    csrf: str
    key_hash: str | None = None
    role: Role | None = None
    loopback: bool = False
    stored: bool = True

    @property
    def signed_in(self) -> bool:
        return self.role is not None

    @property
    def can_change(self) -> bool:
        return self.role == "admin"

    @property
    def actor(self) -> str:
        """Who the audit trail names for this session's changes."""
        if self.loopback:
            return audit.LOOPBACK
        return "key:" + (self.key_hash or "")[:12]


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(signing_secret(settings), salt="bandit-console-session")


_PROCESS_SECRET = secrets.token_hex(32)


def signing_secret(settings: Settings) -> str:
    """``console_secret``, else a digest of every configured key (the same in every
    replica and worker; a changed key invalidates the sessions), else a random secret of
    this process (loopback only: a session per process is enough there)."""
    if settings.console_secret:
        return settings.console_secret
    keys = [*settings.api_keys, *settings.console_readonly_keys]
    if keys:
        return _digest("bandit-console\0" + "\0".join(sorted(keys)))
    return _PROCESS_SECRET


def _role_of(settings: Settings, key_hash: str) -> Role | None:
    if any(hmac.compare_digest(key_hash, _digest(k)) for k in settings.api_keys):
        return "admin"
    if any(hmac.compare_digest(key_hash, _digest(k)) for k in settings.console_readonly_keys):
        return "readonly"
    return None


def read_session(request: Request) -> Session | None:
    """The request's session from its cookie, None when it has none, a forged or
    expired one, or one whose key is no longer configured."""
    settings: Settings = request.app.state.settings
    value = request.cookies.get(COOKIE)
    if not value:
        return None
    try:
        data = _serializer(settings).loads(value, max_age=int(settings.console_session_seconds))
    except BadSignature:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("csrf"), str):
        return None
    key_hash = data.get("key")
    if not isinstance(key_hash, str):
        return Session(csrf=data["csrf"])
    role = _role_of(settings, key_hash)
    return Session(csrf=data["csrf"], key_hash=key_hash, role=role) if role else None


def current_session(request: Request) -> Session:
    """The request's session, a new anonymous one if it has none; with no API keys a
    loopback client's session is signed in as ``loopback`` and anyone else is refused."""
    settings: Settings = request.app.state.settings
    session = read_session(request) or Session(csrf=secrets.token_urlsafe(32), stored=False)
    if not settings.api_keys:
        host = request.client.host if request.client else ""
        if host not in LOOPBACK:
            raise Refused(
                401, "no API keys are configured: the console accepts only loopback clients"
            )
        return Session(csrf=session.csrf, role="admin", loopback=True, stored=session.stored)
    return session


def sign_in(request: Request, presented: str) -> Session | None:
    """A new session for ``presented`` if it is an API key or a read-only key (compared
    in constant time with each), else None."""
    settings: Settings = request.app.state.settings
    if key_matches(presented, settings.api_keys):
        role: Role = "admin"
    elif key_matches(presented, settings.console_readonly_keys):
        role = "readonly"
    else:
        return None
    return Session(
        csrf=secrets.token_urlsafe(32), key_hash=_digest(presented), role=role, stored=False
    )


def store_session(request: Request, response: Response, session: Session) -> None:
    """Set the signed cookie of ``session`` on ``response``."""
    settings: Settings = request.app.state.settings
    value = _serializer(settings).dumps({"csrf": session.csrf, "key": session.key_hash})
    response.set_cookie(
        COOKIE,
        value,
        max_age=int(settings.console_session_seconds),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session(response: Response) -> None:
    """Delete the session cookie (sign-out)."""
    response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")


async def checked_form(request: Request, session: Session) -> dict[str, str]:
    """The URL-encoded form of a POST, after its CSRF token is checked against the
    session's (403 otherwise); the first value of each field."""
    body = (await request.body()).decode("utf-8", errors="replace")
    form = {name: values[0] for name, values in parse_qs(body, keep_blank_values=True).items()}
    check_token(session, form.get(CSRF_FIELD, ""))
    return form


def check_token(session: Session, token: str) -> None:
    """Refuse (403) a form whose CSRF ``token`` is not ``session``'s."""
    if not hmac.compare_digest(token.encode(), session.csrf.encode()):
        raise Refused(403, "the form's CSRF token is missing or not this session's")


async def change_form(request: Request) -> tuple[Session, dict[str, str]]:
    """The session and the form of a POST that changes something: its CSRF token
    checked (:func:`checked_form`), then the session's right to change
    (:func:`require_change`)."""
    session = current_session(request)
    form = await checked_form(request, session)
    require_change(session)
    return session, form


async def change_upload(request: Request) -> tuple[Session, dict[str, str], dict[str, bytes]]:
    """The session, the text fields and the files of a ``multipart/form-data`` POST that
    changes something (an uploaded model): its CSRF token and the session's right to
    change checked first, as :func:`change_form` does."""
    session = current_session(request)
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    async with request.form() as form:
        for name, value in form.multi_items():
            if isinstance(value, str):
                fields.setdefault(name, value)
            elif name not in files:
                files[name] = await value.read()
    check_token(session, fields.get(CSRF_FIELD, ""))
    require_change(session)
    return session, fields, files


def require_change(session: Session) -> None:
    """Refuse (403) a change by a session that may only look, or is not signed in."""
    if not session.signed_in:
        raise SignInRequired
    if not session.can_change:
        raise Refused(403, "a read-only key can look at every page but change nothing")
    audit.act_as(session.actor)
