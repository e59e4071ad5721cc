"""Failures of redis-py calls as the state store reports them: every failure of Redis
(unreachable, timeout, error reply, a connection torn under a write) becomes
:class:`~service.storage.base.StoreUnavailableError`, and a call that timed out counts
toward opening the circuit breaker (``service.storage.breaker``)."""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Awaitable
from typing import TypeVar

from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.storage.base import StoreUnavailableError

T = TypeVar("T")

_REDIS_CONNECTION_MODULE = "/redis/asyncio/connection.py"
_ASYNCIO_DIRECTORY = os.path.dirname(asyncio.__file__) + os.sep


def _event_loop_frame(filename: str) -> bool:
    """Whether a traceback frame is the event loop's own code: the standard library's
    asyncio, or uvloop (its compiled frames are named ``uvloop/handles/...``)."""
    return filename.startswith((_ASYNCIO_DIRECTORY, "uvloop/")) or "/uvloop/" in filename


def torn_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py's asyncio connection writing to a transport closed
    under it (redis/redis-py#4287; seen here when a cluster master dies and the client
    disconnects a connection another command is about to write on). redis-py 8 lets it
    out as whatever the write raised instead of ``ConnectionError``: ``AttributeError``
    or ``TypeError`` once the writer is gone, uvloop's ``RuntimeError`` ("the handler
    is closed") while it is closing. It is one when the innermost frame outside the
    event loop's own code (asyncio, uvloop) is redis-py's connection module."""
    if not isinstance(exc, (AttributeError, TypeError, RuntimeError)):
        return False
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
    frames = [name for name in frames if not _event_loop_frame(name)]
    return bool(frames) and frames[-1].endswith(_REDIS_CONNECTION_MODULE)


async def store_unavailable(awaitable: Awaitable[T]) -> T:
    """Await a redis-py call, raising every failure of Redis (unreachable, timeout,
    error reply, a connection torn under a write) as :class:`StoreUnavailableError`."""
    try:
        return await awaitable
    except (TimeoutError, RedisError, RedisClusterException, OSError) as exc:
        raise StoreUnavailableError(f"Redis: {type(exc).__name__}: {exc}") from exc
    except (AttributeError, TypeError, RuntimeError) as exc:
        if not torn_connection_error(exc):
            raise
        raise StoreUnavailableError(f"Redis: connection closed under a write: {exc}") from exc


def no_answer(exc: Exception) -> bool:
    """Whether a redis-py call timed out (connecting, or waiting for the reply): Redis
    hangs, and each call costs the whole timeout; such calls count toward opening the
    breaker. A refused or lost connection fails at once already, and an error reply is
    an answer."""
    return isinstance(exc, (TimeoutError, RedisTimeoutError))
