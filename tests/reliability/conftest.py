"""Fixtures of the reliability tests: private Redis and PostgreSQL servers, and the one
settings factory every test builds its app from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest

from service.settings import Settings
from tests.databases import postgres_schema
from tests.servers import PostgresCluster, RedisServer, reliability_settings


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


@pytest.fixture
def make_settings(tmp_path: Path, private_redis: RedisServer) -> Iterator[Callable[..., Settings]]:
    """``make_settings(**overrides)``: ``tests.servers.reliability_settings`` over this
    test's private Redis, ``tmp_path / "data"`` and, unless ``database_url`` is given, a
    fresh PostgreSQL schema (one per test, dropped afterwards)."""
    with ExitStack() as stack:
        schema: list[str] = []

        def make(**overrides: Any) -> Settings:
            if "database_url" not in overrides and not schema:
                schema.append(stack.enter_context(postgres_schema()))
            fields: dict[str, Any] = {
                "data_dir": tmp_path / "data",
                "redis_url": private_redis.url,
                "database_url": schema[0] if schema else None,
                **overrides,
            }
            return reliability_settings(**fields)

        yield make


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
