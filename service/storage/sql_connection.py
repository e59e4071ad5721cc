"""Connections to the event-log database: the errors that mean it cannot be reached,
and the lock SQLite's writers take turns on (``service.storage.sql_log``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import exc as sa_exc

from service.storage.base import EventLogUnavailableError

UNAVAILABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError)
"""SQLAlchemy's errors for a database that does not answer."""


class TurnLock:
    """A lock granted in the order it was asked for (a ticket lock), unlike
    :class:`threading.Lock`, which a thread releasing and re-acquiring at once may keep."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    def __enter__(self) -> None:
        with self._changed:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._changed.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc_info: object) -> None:
        with self._changed:
            self._serving += 1
            self._changed.notify_all()


@contextmanager
def database_reachable() -> Iterator[None]:
    """Raise :class:`EventLogUnavailableError` for a database that cannot be reached."""
    try:
        yield
    except UNAVAILABLE as exc:
        raise EventLogUnavailableError(
            f"event log database: {getattr(exc, 'orig', None) or exc}"
        ) from exc
