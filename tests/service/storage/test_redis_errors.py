"""``store_unavailable``: every failure of Redis reaches the use cases as
:class:`StoreUnavailableError` (a 503 with ``Retry-After``, never a 500), including the
``AttributeError`` redis-py 8 raises when a connection is disconnected between its
connected check and its write (redis/redis-py#4287), which a cluster failover under
traffic produced (tests/reliability/test_cluster_faults.py). Errors of other code pass
through unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from service.storage.base import StoreUnavailableError
from service.storage.redis_store import store_unavailable, torn_connection_error

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def connection(redis_url: str) -> AsyncIterator[aioredis.Connection]:
    """One connected redis-py connection to the session's own Redis, with a socket
    timeout (the write then runs in a task of its own, as the store's connections do)."""
    client = aioredis.Redis.from_url(redis_url, socket_timeout=1.0, single_connection_client=True)
    await client.ping()
    try:
        yield client.connection
    finally:
        await client.aclose()


async def write_while_disconnected(connection: aioredis.Connection) -> None:
    """Start a PING and disconnect the connection before its write runs: the race a
    cluster client's failover handling runs into."""
    await asyncio.gather(
        connection.send_packed_command(connection.pack_command("PING")),
        connection.disconnect(nowait=True),
    )


async def test_the_race_raises_attribute_error_from_redis_py(
    connection: aioredis.Connection,
) -> None:
    with pytest.raises(AttributeError) as caught:
        await write_while_disconnected(connection)
    assert torn_connection_error(caught.value)


async def test_a_connection_torn_under_a_write_is_store_unavailable(
    connection: aioredis.Connection,
) -> None:
    with pytest.raises(StoreUnavailableError, match="connection closed under a write") as caught:
        await store_unavailable(write_while_disconnected(connection))
    assert isinstance(caught.value.__cause__, AttributeError)
    await connection.send_command("PING")  # the next command reconnects by itself
    assert await connection.read_response() == b"PONG"


async def test_other_attribute_and_type_errors_pass_through() -> None:
    async def own_bug() -> None:
        None.writelines([])  # type: ignore[attr-defined]

    async def own_type_error() -> int:
        return len(5)  # type: ignore[arg-type]

    with pytest.raises(AttributeError):
        await store_unavailable(own_bug())
    with pytest.raises(TypeError):
        await store_unavailable(own_type_error())
