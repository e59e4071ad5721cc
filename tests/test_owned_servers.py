"""The test suite touches no server it does not own: by default its Redis and PostgreSQL
are processes it starts itself (never the machine's 127.0.0.1:6379 db 0 or a database
named ``test``), and an override (``BANDIT_TEST_POSTGRES_URL``) only ever creates and
drops a database of its own."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
import redis

from tests.databases import OWNED, POSTGRES_OVERRIDE, REDIS_OVERRIDE, OwnedServers


@pytest.fixture
def no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REDIS_OVERRIDE, raising=False)
    monkeypatch.delenv(POSTGRES_OVERRIDE, raising=False)


def test_by_default_redis_and_postgres_are_processes_the_session_started(
    no_overrides: None,
) -> None:
    servers = OwnedServers()
    try:
        client = redis.Redis.from_url(servers.redis_url())
        assert servers.redis is not None and servers.redis.proc is not None
        assert client.info("server")["process_id"] == servers.redis.proc.pid
        assert servers.redis.port != 6379
        with psycopg.connect(servers.postgres_url()) as conn:
            data_directory = conn.execute("SHOW data_directory").fetchone()[0]
        assert servers.postgres is not None
        assert Path(data_directory) == servers.postgres.data
        redis_dir, postgres_dir = servers.redis.dir, servers.postgres.dir
        redis_proc = servers.redis.proc
    finally:
        servers.close()
    assert redis_proc.poll() is not None, "redis-server still running after the session"
    assert not redis_dir.exists() and not postgres_dir.exists()


def test_a_postgres_override_gets_a_database_of_its_own_dropped_at_the_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = OWNED.postgres_url()  # stands in for a developer's server
    monkeypatch.setenv(POSTGRES_OVERRIDE, server)
    servers = OwnedServers()
    url = servers.postgres_url()
    name = url.rsplit("/", 1)[1]
    assert re.fullmatch(r"bandit_test_[0-9a-f]{16}", name)
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE t (x int)")
    servers.close()
    with psycopg.connect(server) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    assert found is None and servers.postgres is None
