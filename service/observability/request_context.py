"""The request a task serves: its id and who it acts as.

:class:`RequestIds` gives every HTTP request a :class:`RequestContext` held in
:data:`CURRENT_REQUEST` while it is served: its id is the client's ``X-Request-ID`` when
well formed (:data:`REQUEST_ID_PATTERN`), else a new one, and the response carries it in
``X-Request-ID``; every log line written meanwhile names it (:mod:`service.observability.logs`), and so
does an audit record the request makes, with the actor the auth dependency found
(:mod:`service.usecases.audit`).
"""

from __future__ import annotations

import itertools
import os
import re
import uuid
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = "X-Request-ID"
# what an id from a client may be: 1 to 128 characters of letters, digits and ._:+/=@-
REQUEST_ID_PATTERN = re.compile(rb"[A-Za-z0-9._:+/=@-]{1,128}")
_HEADER_KEY = REQUEST_ID_HEADER.lower().encode()


@dataclass
class RequestContext:
    """The request being served: its id, and who it acts as once its API key was
    checked (None before; ``service.api.auth`` sets it)."""

    request_id: str
    actor: str | None = None


CURRENT_REQUEST: ContextVar[RequestContext | None] = ContextVar("bandit_request", default=None)


class _IdSource:
    """New request ids: 32 hex digits, a random prefix of the process and a counter (a
    tenth of the cost of a uuid4 per request); a forked child draws its own prefix."""

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self.prefix = uuid.uuid4().hex[:20]
        self.counter = itertools.count(1).__next__

    def new(self) -> str:
        return f"{self.prefix}{self.counter() % 16**12:012x}"


_ids = _IdSource()


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's id: its well-formed ``X-Request-ID``, else a new one."""
    for name, value in headers:
        if name == _HEADER_KEY and REQUEST_ID_PATTERN.fullmatch(value):
            return value.decode()
    return _ids.new()


def current_request_id() -> str | None:
    """The id of the request being served (None outside a request)."""
    request = CURRENT_REQUEST.get()
    return None if request is None else request.request_id


class RequestIds:
    """Pure ASGI middleware: :data:`CURRENT_REQUEST` set while a request is served, and
    its id echoed in the response's ``X-Request-ID``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = request_id_of(scope["headers"])
        header = (_HEADER_KEY, request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        token = CURRENT_REQUEST.set(RequestContext(request_id))
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            CURRENT_REQUEST.reset(token)
