"""Session fixtures of every test: the Redis and PostgreSQL the session owns
(``tests.databases``), stopped when the session ends; each module starts with no
policy's metric series."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypeVar

import pytest

from service.observability import metrics
from tests.databases import OWNED
from tests.servers import RedisClusterServers, SentinelGroup

TIMED = pytest.mark.xdist_group("timed")
"""The mark of a test that asserts how long something takes (a probe's answer, the
breaker's refusal, the soak's pace): one xdist worker runs all of them, one at a time,
so no two of them load the machine at once."""


@pytest.fixture(scope="session", autouse=True)
def owned_servers() -> Iterator[None]:
    """Stops the private servers (or drops the database) the session started on use."""
    try:
        yield
    finally:
        OWNED.close()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the session's own Redis database; fixtures using it flush it."""
    return OWNED.redis_url()


class Servers(Protocol):
    """A group of server processes a test session starts and stops."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Servers)


def running(servers: S) -> Iterator[S]:
    """``servers`` started, then stopped when the generator closes."""
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A 3-master, 3-replica Redis Cluster for the whole session (the
    tests marked ``ON_REDIS_CLUSTER`` of tests/service/conftest.py)."""
    yield from running(RedisClusterServers())


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelGroup]:
    """A master, a replica and three sentinels for the whole session (the
    tests marked ``ON_REDIS_SENTINEL`` of tests/service/conftest.py)."""
    yield from running(SentinelGroup())


@pytest.fixture(scope="module", autouse=True)
def no_series_of_other_modules() -> None:
    """Drop the metric series of every policy (``metrics.POLICY_METRICS``) and of every
    route (``metrics.REQUEST_LATENCY``) before a module's tests: the registry is the
    process's, and every ``/metrics`` scrape walks every series it holds, so after a
    worker's thousands of policies each scrape took about a second, and after a
    thousand tests' requests (900 route, method and status series, 1.8 MB of text) 0.18
    s. No service code keeps a series between calls, and no module reads another's
    series."""
    for metric in (*metrics.POLICY_METRICS, metrics.REQUEST_LATENCY):
        metric.clear()
