"""The service's log format (``BANDIT_LOG_FORMAT``): ``text`` (the default) keeps
uvicorn's readable lines; ``json`` writes one JSON object per line
(:class:`JsonFormatter`) for a log collector, each naming the id of the request being
served when it was written (:mod:`service.observability.request_context`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from service.observability.request_context import current_request_id
from service.storage.schema import json_dumps


class RequestIdFilter(logging.Filter):
    """Puts the id of the request being served on every record as ``request_id`` (None
    outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id()
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
