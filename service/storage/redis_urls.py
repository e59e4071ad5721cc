"""The Redis client a ``BANDIT_REDIS_URL`` names: one server, a Redis Cluster, or the
master of a Sentinel group, all through redis-py's own asyncio clients.

Accepted URLs (``rediss`` variants use TLS; query options are redis-py's connection
options, as ``redis.asyncio.from_url`` reads them)::

    redis://[user:password@]host:port/db            one server (also unix://path?db=N)
    redis+cluster://[user:password@]host:port[,host:port...]
                                                    Redis Cluster: any reachable nodes
                                                    seed the slot map (db is always 0)
    redis+sentinel://[user:password@]host:port[,host:port...]/master-name[/db]
                                                    the master Sentinel names; the
                                                    host:port pairs are the sentinels

The ``+cluster`` / ``+sentinel`` schemes follow the comma-separated host lists other
clients use (redis-py itself has no URL form for either). ``user:password`` authenticate
to the data nodes; sentinels that require their own password take the query options
``sentinel_username`` and ``sentinel_password``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection, SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import NoBackoff
from redis.connection import HiredisRespSerializer

from bandit_core.errors import InvalidInputError

CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
SINGLE_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_AUTH_OPTIONS = ("sentinel_username", "sentinel_password")

C = TypeVar("C", bound=AbstractConnection)


def packed_by_hiredis(base: type[C]) -> type[C]:
    """``base`` (the connection class a URL calls for) packing commands with hiredis's C
    packer, as redis-py's synchronous client does when hiredis is installed; its asyncio
    client packs in Python: 150 us for the read script's 54 arguments at K = 50 against
    15 us, the same bytes (tests/service/storage/test_redis_packing.py)."""
    serializer = HiredisRespSerializer()  # redis-py's own, which its sync client uses

    # mypy cannot take a base class from a variable; the TypeVar keeps the callers typed
    class HiredisPacked(base):  # type: ignore[valid-type,misc]
        def pack_command(self, *args: Any) -> list[bytes]:
            return serializer.pack(*args)

    HiredisPacked.__name__ = HiredisPacked.__qualname__ = f"HiredisPacked{base.__name__}"
    return HiredisPacked


@dataclass(frozen=True)
class RedisTarget:
    """A parsed ``BANDIT_REDIS_URL``: ``kind`` is ``single``, ``cluster`` or
    ``sentinel``; ``nodes`` the cluster seeds or the sentinels (empty for ``single``);
    ``options`` the connection options of the data nodes (``parse_url``'s output);
    ``sentinel_options`` the AUTH options of the sentinels."""

    kind: str
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    master_name: str | None = None
    options: dict[str, Any] | None = None
    sentinel_options: dict[str, str] | None = None


def _nodes(netloc_hosts: str, default_port: int, url: str) -> tuple[tuple[str, int], ...]:
    nodes = []
    for item in netloc_hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep:
            host, port = item.strip(), str(default_port)
        host = host.strip("[]")
        if not host or not port.isdigit():
            raise InvalidInputError(f"BANDIT_REDIS_URL {url!r}: {item!r} is not host:port")
        nodes.append((host, int(port)))
    return tuple(nodes)


def parse_redis_url(url: str) -> RedisTarget:
    """Parse a ``BANDIT_REDIS_URL`` (see the module docstring); a malformed one raises
    :class:`InvalidInputError` naming what is wrong."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in SINGLE_SCHEMES:
        try:
            return RedisTarget("single", url, options={**parse_url(url)})
        except ValueError as exc:
            raise InvalidInputError(f"BANDIT_REDIS_URL {url!r}: {exc}") from exc
    if scheme not in CLUSTER_SCHEMES and scheme not in SENTINEL_SCHEMES:
        known = ", ".join([*SINGLE_SCHEMES, *CLUSTER_SCHEMES, *SENTINEL_SCHEMES])
        raise InvalidInputError(f"BANDIT_REDIS_URL {url!r}: the scheme must be one of {known}")
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    query = dict(parse_qsl(parts.query))
    sentinel_options = {k: query.pop(k) for k in SENTINEL_AUTH_OPTIONS if k in query}
    path = [p for p in parts.path.split("/") if p]
    if scheme in CLUSTER_SCHEMES:
        base, default_port, master_name = CLUSTER_SCHEMES[scheme], 6379, None
        if path and path != ["0"]:
            raise InvalidInputError(
                f"BANDIT_REDIS_URL {url!r}: a Redis Cluster has only database 0"
            )
        db = "0"
    else:
        base, default_port = SENTINEL_SCHEMES[scheme], 26379
        if not path or len(path) > 2:
            raise InvalidInputError(
                f"BANDIT_REDIS_URL {url!r}: give the master name as the path, "
                "redis+sentinel://host:port,.../master-name[/db]"
            )
        master_name, db = path[0], (path[1] if len(path) == 2 else "0")
        if not db.isdigit():
            raise InvalidInputError(f"BANDIT_REDIS_URL {url!r}: the database must be a number")
    nodes = _nodes(hosts, default_port, url)
    auth = f"{userinfo}@" if userinfo else ""
    host, port = nodes[0]
    single = f"{base}://{auth}{host}:{port}/{db}" + (f"?{urlencode(query)}" if query else "")
    try:
        options: dict[str, Any] = {**parse_url(single)}
    except ValueError as exc:
        raise InvalidInputError(f"BANDIT_REDIS_URL {url!r}: {exc}") from exc
    for key in ("host", "port"):
        options.pop(key, None)
    kind = "cluster" if scheme in CLUSTER_SCHEMES else "sentinel"
    return RedisTarget(kind, url, nodes, master_name, options, sentinel_options)


@dataclass
class RedisClient:
    """The client the state store talks to and what closes it (a Sentinel client also
    holds connections to the sentinels)."""

    redis: aioredis.Redis | RedisCluster
    close: Callable[[], Awaitable[None]]


def redis_client(url: str, *, socket_timeout: float, max_connections: int) -> RedisClient:
    """The redis-py asyncio client for ``url``: a ``Redis`` on a blocking pool, a
    ``RedisCluster`` or a Sentinel-managed master. One server's and the Sentinel
    master's connections pack with hiredis; the cluster's pack in Python (redis-py's
    own): with the hiredis class set on its nodes, 8 concurrent tasks writing one key
    lost connections ("Connection closed by server", the servers fine) every run.

    ``max_connections`` bounds the connections to each server; a call finding none free
    waits up to ``socket_timeout`` (single server) rather than failing, which the soak
    showed as 503s under load. The cluster and Sentinel pools of redis-py do not block;
    their bound is per node (cluster) or unbounded (Sentinel).

    No client (single server, cluster or Sentinel) sends a command again by itself after a
    timeout or a broken connection (redis-py's default retries 3 times): the command
    may have run, and a commit script run twice finds its own write, reports a
    conflict and applies the update again (seen in the contract suite on a loaded
    machine). The call fails with the store unavailable instead, and the next call
    reconnects (to the refreshed slot map, or to the master the sentinels name now).
    MOVED and ASK redirects are followed as before."""
    target = parse_redis_url(url)
    timeouts: dict[str, Any] = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "health_check_interval": 30,
    }
    options = dict(target.options or {})
    if target.kind == "single":
        # As BlockingConnectionPool.from_url (the URL's options win).
        pool_options = {
            **timeouts,
            "max_connections": max_connections,
            "timeout": socket_timeout,
            "retry": Retry(NoBackoff(), 0),
            **options,
        }
        pool_options["connection_class"] = packed_by_hiredis(
            pool_options.get("connection_class", aioredis.Connection)
        )
        pool = aioredis.BlockingConnectionPool(**pool_options)
        single = aioredis.Redis.from_pool(pool)  # owns and closes the pool
        return RedisClient(single, single.aclose)
    ssl = options.pop("connection_class", None) is SSLConnection
    if target.kind == "cluster":
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            max_connections=max_connections,
            ssl=ssl,
            retry=Retry(NoBackoff(), 0),
            # Every 5th MOVED (the default) redis-py closes the connections of every
            # node, the ones other tasks are waiting on included: they fail with
            # "Connection closed by server". 0: a MOVED only updates the slot's owner
            # (a fresh client's first concurrent calls and a slot migration both
            # answer MOVED; docs/operations.md, "Redis Cluster and Sentinel").
            reinitialize_steps=0,
            **{**timeouts, **options},
        )
        return RedisClient(cluster, cluster.aclose)
    sentinel = Sentinel(
        list(target.nodes),
        # no retry of a sentinel that does not answer: the next sentinel is asked at once
        # (redis-py's default backs off for seconds before each call fails)
        sentinel_kwargs={
            **timeouts,
            "retry": Retry(NoBackoff(), 0),
            **(target.sentinel_options or {}),
        },
    )
    master = sentinel.master_for(
        target.master_name or "",
        connection_class=packed_by_hiredis(
            SentinelManagedSSLConnection if ssl else SentinelManagedConnection
        ),
        retry=Retry(NoBackoff(), 0),
        **{**timeouts, **options},
    )

    async def close() -> None:
        await master.aclose()
        for client in sentinel.sentinels:
            await client.aclose()

    return RedisClient(master, close)
