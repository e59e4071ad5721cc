"""``BANDIT_REDIS_URL`` beyond one server: the URL forms, hiredis packing on the
Sentinel master's connections, and policies spread over the shards of a real cluster
(the cluster answers CROSSSLOT to any command spanning slots, so these would fail)."""

from __future__ import annotations

import time
import uuid

import pytest
from redis.asyncio.connection import SSLConnection
from redis.asyncio.sentinel import SentinelManagedConnection

from bandit_core.errors import InvalidInputError
from service.storage.base import Claim, Schedule
from service.storage.redis_store import RedisStateStore
from service.storage.redis_urls import parse_redis_url
from tests.servers import RedisClusterServers, SentinelGroup

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("url", "kind", "nodes", "master", "options"),
    [
        ("redis://u:pw@h:1/2", "single", (), None, {"db": 2, "password": "pw"}),
        (
            "redis+cluster://u:pw@a:7000,b:7001,[::1]:7002?socket_keepalive=true",
            "cluster",
            (("a", 7000), ("b", 7001), ("::1", 7002)),
            None,
            {"db": 0, "username": "u", "password": "pw", "socket_keepalive": True},
        ),
        ("redis+cluster://a", "cluster", (("a", 6379),), None, {"db": 0}),
        (
            "redis+sentinel://:pw@s1:26379,s2/mymaster/3",
            "sentinel",
            (("s1", 26379), ("s2", 26379)),
            "mymaster",
            {"db": 3, "password": "pw"},
        ),
        ("rediss+sentinel://s1:5/m", "sentinel", (("s1", 5),), "m", {"db": 0}),
    ],
)
def test_url_forms(url: str, kind: str, nodes: tuple, master: str | None, options: dict) -> None:
    target = parse_redis_url(url)
    assert (target.kind, target.nodes, target.master_name) == (kind, nodes, master)
    assert target.options is not None
    assert {k: target.options.get(k) for k in options} == options


def test_tls_schemes_keep_tls() -> None:
    for url in ("rediss+cluster://a:1", "rediss+sentinel://a:1/m"):
        options = parse_redis_url(url).options
        assert options is not None and options["connection_class"] is SSLConnection


def test_sentinel_auth_is_separate() -> None:
    target = parse_redis_url("redis+sentinel://:data@s:1/m?sentinel_password=sent")
    assert target.sentinel_options == {"sentinel_password": "sent"}
    assert target.options is not None and target.options["password"] == "data"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://h:1", "the scheme must be one of redis, rediss, unix, redis\\+cluster"),
        ("redis+cluster://a:1/2", "a Redis Cluster has only database 0"),
        ("redis+cluster://a:x", "'a:x' is not host:port"),
        ("redis+sentinel://a:1", "give the master name as the path"),
        ("redis+sentinel://a:1/m/0/extra", "give the master name as the path"),
        ("redis+sentinel://a:1/m/x", "the database must be a number"),
    ],
)
def test_bad_urls_name_the_problem(url: str, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        parse_redis_url(url)


@pytest.mark.slow
@pytest.mark.xdist_group("redis_sentinel")
async def test_sentinel_connections_pack_with_hiredis(redis_sentinel: SentinelGroup) -> None:
    store = RedisStateStore(redis_sentinel.url)
    try:
        await store.ping()
        connection_class = store.client.connection_pool.connection_class
        assert connection_class.__mro__[1] is SentinelManagedConnection
        assert connection_class.__name__ == "HiredisPackedSentinelManagedConnection"
    finally:
        await store.close()


def _policies_on_every_master(cluster: RedisClusterServers) -> list[str]:
    """One fresh policy name per master of ``cluster`` (by its hash tag's slot)."""
    client = cluster.client()
    by_node: dict[str, str] = {}
    while len(by_node) < 3:
        name = f"shard-{uuid.uuid4().hex[:8]}"
        node = client.get_node_from_key(f"bandit:{{{name}}}:versions")
        by_node.setdefault(node.name, name)
    return list(by_node.values())


@pytest.mark.slow
@pytest.mark.xdist_group("redis_cluster")
async def test_policies_on_different_shards(redis_cluster: RedisClusterServers) -> None:
    """Registry, deadline index, counters, list and delete across the three masters."""
    policies = _policies_on_every_master(redis_cluster)
    store = RedisStateStore(redis_cluster.url)
    now = time.time()
    try:
        events = {}
        for i, policy in enumerate(policies):
            await store.add_policy(policy)
            for j in range(5):  # the claims' registry keys land on all shards
                event_id = uuid.uuid4().hex
                events[event_id] = policy
                await store.transact(
                    policy,
                    [f"event:{event_id}"],
                    lambda v, e=event_id: {f"event:{e}": b"pending"},
                    schedule=lambda e=event_id, j=j: Schedule(e, now - 10 + j, {"pending": 1}),
                    claim=Claim(event_id, 60),
                )
            assert await store.register_event(f"plain-{policy}", policy, 60)
            await store.add_counters(policy, {"decisions": i + 1})
        assert set(policies) <= set(await store.list_policies())
        for event_id, policy in events.items():
            assert await store.event_policy(event_id) == policy
        for i, policy in enumerate(policies):
            mine = [e for e, p in events.items() if p == policy]
            assert await store.due_events(policy, now, limit=10) == mine
            assert await store.counters(policy) == {"pending": 5.0, "decisions": i + 1.0}
            await store.unschedule(policy, mine[0])
            assert await store.due_events(policy, now, limit=10) == mine[1:]
    finally:
        for policy in policies:
            await store.delete_policy(policy)
        registry = [*(f"plain-{p}" for p in policies), *events]
        redis_cluster.client().delete(*(f"bandit:event:{e}" for e in registry))
        remaining = set(await store.list_policies())
        await store.close()
    assert not set(policies) & remaining
