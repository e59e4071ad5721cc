"""Fixtures of the reliability tests: private Redis and PostgreSQL servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.servers import PostgresCluster, RedisServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[PostgresCluster]:
    """One private cluster per test module (initdb costs seconds)."""
    cluster = PostgresCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_database(pg_cluster: PostgresCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh database in the private cluster; the cluster is running on entry."""
    pg_cluster.start() if not _up(pg_cluster.url) else None
    name = "db_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:50].lower()
    with psycopg.connect(pg_cluster.url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    yield pg_cluster.url.rsplit("/", 1)[0] + "/" + name


def _up(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=2).close()
        return True
    except psycopg.OperationalError:
        return False
