"""Request ids and the service's log format (``BANDIT_LOG_FORMAT``).

:class:`RequestIds` gives every HTTP request an id: the client's ``X-Request-ID`` when it
is well formed (:data:`REQUEST_ID_PATTERN`), else a new one; the response carries it in
``X-Request-ID`` and :data:`REQUEST_ID` holds it while the request is served, so every log
line written meanwhile names it, and so does an audit record the request makes
(:mod:`service.usecases.audit`). ``text`` (the default) keeps uvicorn's readable lines;
``json`` writes one JSON object per line (:class:`JsonFormatter`) for a log collector.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.storage.schema import json_dumps

LogFormat = Literal["text", "json"]
REQUEST_ID_HEADER = "X-Request-ID"
# what an id from a client may be: 1 to 128 characters of letters, digits and ._:+/=@-
REQUEST_ID_PATTERN = re.compile(rb"[A-Za-z0-9._:+/=@-]{1,128}")
REQUEST_ID: ContextVar[str | None] = ContextVar("bandit_request_id", default=None)
_HEADER_KEY = REQUEST_ID_HEADER.lower().encode()


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's id: its well-formed ``X-Request-ID``, else a new random one."""
    for name, value in headers:
        if name == _HEADER_KEY and REQUEST_ID_PATTERN.fullmatch(value):
            return value.decode()
    return uuid.uuid4().hex


class RequestIds:
    """Pure ASGI middleware: :data:`REQUEST_ID` set while a request is served, and
    echoed in the response's ``X-Request-ID``."""

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

        token = REQUEST_ID.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUEST_ID.reset(token)


class RequestIdFilter(logging.Filter):
    """Puts :data:`REQUEST_ID` on every record as ``request_id`` (None outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, ``request_id`` and, with an exception, ``exception`` (its traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json_dumps(line)


def json_log_config(level: str) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` (uvicorn's ``log_config``) writing every
    logger's records at ``level`` and above to stderr as :class:`JsonFormatter` lines:
    the service's, uvicorn's (its access log included) and the libraries'."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "filters": ["request_id"]}
    numeric = level.upper()  # uvicorn names its "trace" level TRACE
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"json": {**handler, "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["json"], "level": numeric},
        "loggers": {
            name: {"handlers": [], "level": numeric, "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }
