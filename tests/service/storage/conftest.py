"""Storage tests run against the session's own Redis and PostgreSQL (tests/conftest.py),
and against the Redis Cluster and the Sentinel group of tests/service/conftest.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from service.storage.migrate import upgrade_head
from service.storage.sql_log import SqlEventLog
from tests.databases import database
from tests.service.conftest import ON_REDIS_CLUSTER, ON_REDIS_SENTINEL

# The Redis deployments every Redis test runs against.
DEPLOYMENTS = [
    "redis",
    pytest.param("cluster", marks=ON_REDIS_CLUSTER),
    pytest.param("sentinel", marks=ON_REDIS_SENTINEL),
]


@dataclass(frozen=True)
class RedisDeployment:
    """A Redis the store under test uses: its ``BANDIT_REDIS_URL`` and a synchronous
    client of its data (the master, or the whole cluster) for inspecting keys."""

    kind: str
    url: str
    client: Callable[[], redis.Redis | redis.RedisCluster]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def deployment(request: pytest.FixtureRequest, kind: str) -> RedisDeployment:
    """The deployment ``kind`` (one of :data:`DEPLOYMENTS`), started on first use."""
    if kind == "redis":
        url = request.getfixturevalue("redis_url")
        return RedisDeployment(kind, url, lambda: redis.Redis.from_url(url))
    servers = request.getfixturevalue(f"redis_{kind}")
    return RedisDeployment(kind, servers.url, servers.client)


@pytest.fixture(params=DEPLOYMENTS)
def redis_deployment(request: pytest.FixtureRequest) -> RedisDeployment:
    return deployment(request, request.param)


@pytest.fixture(params=["postgresql", "sqlite"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlEventLog]:
    """An event log migrated to head in an empty PostgreSQL schema, then in an SQLite file."""
    with database(request.param, tmp_path) as url:
        upgrade_head(url)
        event_log = SqlEventLog(url)
        yield event_log
        event_log.close()
