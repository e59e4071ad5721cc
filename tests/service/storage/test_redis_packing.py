"""``packed_by_hiredis``: connections that pack commands with hiredis write the bytes
redis-py's own packer writes, refuse what it refuses, and keep the URL's connection kind."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import DataError

from service.storage.redis_store import RedisStateStore, packed_by_hiredis

COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("CONFIG GET", "maxmemory"),
    (b"CONFIG SET", b"maxmemory", 0),
    ("EVALSHA", "f" * 40, 3, "bandit:{p}:versions", "bandit:{p}:k:arm:a", "k:é☃", "-1,0,12"),
    ("SET", "bandit:event:e1", "p", "NX", "PX", 86_400_000),
    ("HINCRBYFLOAT", "c", "pulls:a", 1.0),
    ("ZADD", "d", 1_795_370_522.1234567, "e1"),
    ("X", 0.1 + 0.2, 1e-7, -0.0, 1e22, 2**70, -5, float("inf")),
    ("SET", "k", b"\x00\r\n\xff" * 100, memoryview(b"mv"), bytearray(b"ba")),
    ("SET", "k", b"x" * 100_000),  # larger than redis-py's buffer cutoff
]


@pytest.mark.parametrize("args", COMMANDS)
def test_same_bytes_as_redis_py(args: tuple[Any, ...]) -> None:
    plain = aioredis.Connection()
    packed = packed_by_hiredis(aioredis.Connection)()
    assert b"".join(packed.pack_command(*args)) == b"".join(
        bytes(part) for part in plain.pack_command(*args)
    )


@pytest.mark.parametrize("bad", [None, True, object()])
def test_refuses_what_redis_py_refuses(bad: object) -> None:
    with pytest.raises(DataError):
        aioredis.Connection().pack_command("SET", "k", bad)
    with pytest.raises(DataError):
        packed_by_hiredis(aioredis.Connection)().pack_command("SET", "k", bad)


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("redis://127.0.0.1:6379/3", aioredis.Connection),
        ("rediss://127.0.0.1:6380/0", aioredis.SSLConnection),
        ("unix:///tmp/redis.sock?db=2", aioredis.UnixDomainSocketConnection),
    ],
)
def test_store_keeps_the_url_connection_kind_and_options(url: str, kind: type) -> None:
    pool = RedisStateStore(url, socket_timeout=1.5, max_connections=7).connection_pool
    assert isinstance(pool, aioredis.BlockingConnectionPool)
    assert pool.connection_class.__mro__[1] is kind
    assert (pool.max_connections, pool.timeout) == (7, 1.5)
    from_url = aioredis.BlockingConnectionPool.from_url(  # as the store called it before
        url,
        socket_timeout=1.5,
        socket_connect_timeout=1.5,
        health_check_interval=30,
        max_connections=7,
        timeout=1.5,
    )
    expected = {  # the options, not the per-pool helper objects
        k: v
        for k, v in from_url.connection_kwargs.items()
        if isinstance(v, str | int | float | None)
    }
    assert {"socket_timeout", "socket_connect_timeout", "health_check_interval"} <= set(expected)
    assert {k: pool.connection_kwargs[k] for k in expected} == expected
