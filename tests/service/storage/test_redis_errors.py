"""``store_unavailable``: every failure of Redis reaches the use cases as
:class:`StoreUnavailableError` (a 503 with ``Retry-After``, never a 500), including what
redis-py 8 raises when a connection is disconnected between its connected check and its
write (redis/redis-py#4287), which a cluster failover under traffic produced
(tests/reliability/test_cluster_faults.py): ``AttributeError`` on asyncio's loop once
the writer is gone, ``RuntimeError`` on uvloop's (the server's) while the transport
closes. Errors of other code pass through unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis

from service.storage.base import StoreUnavailableError
from service.storage.redis_errors import store_unavailable, torn_connection_error

pytestmark = pytest.mark.anyio


async def write_as_the_writer_goes(connection: aioredis.Connection) -> None:
    """Start a PING and disconnect the connection (without waiting for the close)
    before its write runs: the write finds no writer."""
    await asyncio.gather(
        connection.send_packed_command(connection.pack_command("PING")),
        connection.disconnect(nowait=True),
    )


async def write_while_the_transport_closes(connection: aioredis.Connection) -> None:
    """Start a disconnect, let it close the transport and wait for the close, then
    write: the writer is still there, its transport is not."""
    disconnecting = asyncio.create_task(connection.disconnect())
    await asyncio.sleep(0)
    try:
        await connection.send_packed_command(connection.pack_command("PING"))
    finally:
        await disconnecting


Race = Callable[[aioredis.Connection], Awaitable[None]]

# Each event loop with the race that tears a write there and what redis-py lets out:
# asyncio's transport takes writes while it closes (they fail as ConnectionError), so
# its race is the writer gone; uvloop's (the server's loop) refuses them.
RACES: dict[str, tuple[tuple[str, dict[str, bool]], Race, type[Exception]]] = {
    "asyncio": (("asyncio", {"use_uvloop": False}), write_as_the_writer_goes, AttributeError),
    "uvloop": (("asyncio", {"use_uvloop": True}), write_while_the_transport_closes, RuntimeError),
}


@pytest.fixture(params=list(RACES))
def loop(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def anyio_backend(loop: str) -> tuple[str, dict[str, bool]]:
    return RACES[loop][0]


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


async def test_the_race_raises_a_non_redis_error_from_redis_py(
    connection: aioredis.Connection, loop: str
) -> None:
    _, race, raised = RACES[loop]
    with pytest.raises(raised) as caught:
        await race(connection)
    assert torn_connection_error(caught.value)


async def test_a_connection_torn_under_a_write_is_store_unavailable(
    connection: aioredis.Connection, loop: str
) -> None:
    _, race, raised = RACES[loop]
    with pytest.raises(StoreUnavailableError, match="connection closed under a write") as caught:
        await store_unavailable(race(connection))
    assert isinstance(caught.value.__cause__, raised)
    await connection.send_command("PING")  # the next command reconnects by itself
    assert await connection.read_response() == b"PONG"


async def test_other_attribute_type_and_runtime_errors_pass_through() -> None:
    async def own_bug() -> None:
        raise AttributeError("'NoneType' object has no attribute 'writelines'")

    async def own_type_error() -> int:
        raise TypeError("object of type 'int' has no len()")

    async def own_runtime_error() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("the handler is closed")

    with pytest.raises(AttributeError):
        await store_unavailable(own_bug())
    with pytest.raises(TypeError):
        await store_unavailable(own_type_error())
    with pytest.raises(RuntimeError):
        await store_unavailable(own_runtime_error())
