"""The databases the tests own, and throwaway namespaces inside them.

By default a test session touches no server it did not start: the first test that needs
Redis or PostgreSQL starts a private ``redis-server`` / PostgreSQL cluster on a free
loopback port (``tests.servers``), and ``tests/conftest.py`` stops them (removing their
files) when the session ends. Two environment variables point the tests at existing
servers instead, to save the start-up seconds:

``BANDIT_TEST_REDIS_URL``
    a Redis database the tests may flush, e.g. ``redis://127.0.0.1:6379/15``. Never
    point it at a database holding data you want to keep.
``BANDIT_TEST_POSTGRES_URL``
    a PostgreSQL server and a role allowed to ``CREATE DATABASE``, e.g.
    ``postgresql://postgres@127.0.0.1:5432/postgres``: the session creates one database
    with a unique name (``bandit_test_...``) there and drops it at the end.
"""

from __future__ import annotations

import atexit
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import mkdtemp

import psycopg

from tests.servers import PostgresCluster, RedisServer

REDIS_OVERRIDE = "BANDIT_TEST_REDIS_URL"
POSTGRES_OVERRIDE = "BANDIT_TEST_POSTGRES_URL"


class OwnedServers:
    """This process's private servers, started on first use, stopped by ``close`` (which
    also runs at interpreter exit, for scripts such as ``benchmarks/soak.py``)."""

    def __init__(self) -> None:
        atexit.register(self.close)
        self.redis: RedisServer | None = None
        self.postgres: PostgresCluster | None = None
        self._postgres_url: str | None = None
        self._created_database: tuple[str, str] | None = None  # (server URL, name)

    def redis_url(self) -> str:
        """URL of a Redis database only this session uses (flushable)."""
        override = os.environ.get(REDIS_OVERRIDE)
        if override:
            return override
        if self.redis is None:
            server = RedisServer(Path(mkdtemp(prefix="bandit-redis-")), persist=False)
            server.start()
            self.redis = server
        return self.redis.url

    def postgres_url(self) -> str:
        """URL of a PostgreSQL database only this session uses."""
        if self._postgres_url is None:
            override = os.environ.get(POSTGRES_OVERRIDE)
            if override:
                name = f"bandit_test_{uuid.uuid4().hex[:16]}"
                with psycopg.connect(override, autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                self._created_database = (override, name)
                self._postgres_url = _with_database(override, name)
            else:
                cluster = PostgresCluster()
                cluster.start()
                self.postgres = cluster
                self._postgres_url = cluster.url
        return self._postgres_url

    def close(self) -> None:
        """Stop what was started and drop what was created."""
        if self.redis is not None:
            self.redis.stop()
            shutil.rmtree(self.redis.dir, ignore_errors=True)
            self.redis = None
        if self.postgres is not None:
            self.postgres.destroy()
            self.postgres = None
        if self._created_database is not None:
            server, name = self._created_database
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self._created_database = None
        self._postgres_url = None


def _with_database(url: str, name: str) -> str:
    """``url`` with its database (path) replaced by ``name``, query kept."""
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + (f"?{query}" if query else "")


OWNED = OwnedServers()


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A plain ``postgresql://`` URL whose connections use a new, empty schema in the
    session's own database; the schema and everything in it is dropped afterwards."""
    server = OWNED.postgres_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        separator = "&" if "?" in server else "?"
        yield f"{server}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database of ``kind`` (``postgresql`` or ``sqlite``)."""
    if kind == "postgresql":
        with postgres_schema() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'log.db'}"
