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
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import mkdtemp
from typing import Any

import psycopg
from psycopg import sql

from service.settings import Settings
from service.storage.migrate import upgrade_head
from service.storage.sql_log import SqlEventLog
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
        self.idle_schemas: list[tuple[str, str | None]] = []  # (name, definition): migrated_schema

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
        self.idle_schemas = []


def _with_database(url: str, name: str) -> str:
    """``url`` with its database (path) replaced by ``name``, query kept."""
    base, _, query = url.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + (f"?{query}" if query else "")


OWNED = OwnedServers()


def _schema_url(server: str, schema: str) -> str:
    """``server`` with its connections' ``search_path`` set to ``schema``."""
    separator = "&" if "?" in server else "?"
    return f"{server}{separator}options=-csearch_path%3D{schema}"


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A plain ``postgresql://`` URL whose connections use a new, empty schema in the
    session's own database; the schema and everything in it is dropped afterwards."""
    server = OWNED.postgres_url()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield _schema_url(server, schema)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


_DEFINITION = """
SELECT concat_ws(E'\n',
  (SELECT string_agg(concat_ws(' ', c.relname, c.relkind, pg_get_expr(c.relpartbound, c.oid),
     c.reloptions::text, c.relacl::text), ',' ORDER BY c.relname)
   FROM pg_class c WHERE c.relnamespace = n.oid),
  (SELECT string_agg(concat_ws(' ', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
     a.attnotnull, pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY c.relname, a.attnum)
   FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE c.relnamespace = n.oid AND a.attnum > 0 AND NOT a.attisdropped),
  (SELECT string_agg(pg_get_indexdef(i.indexrelid), ',' ORDER BY pg_get_indexdef(i.indexrelid))
   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = n.oid),
  (SELECT string_agg(concat_ws(' ', conname, pg_get_constraintdef(k.oid)), ','
     ORDER BY conname, pg_get_constraintdef(k.oid))
   FROM pg_constraint k WHERE k.connamespace = n.oid),
  (SELECT string_agg(pg_get_triggerdef(t.oid), ',' ORDER BY pg_get_triggerdef(t.oid))
   FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = n.oid),
  (SELECT string_agg(concat_ws(' ', p.proname, md5(p.prosrc)), ',' ORDER BY p.proname, p.prosrc)
   FROM pg_proc p WHERE p.pronamespace = n.oid))
FROM pg_namespace n WHERE n.nspname = %s
"""
"""A schema's definition, without its rows: its relations (partitions and their bounds,
privileges), columns, indexes, constraints, triggers and functions."""


def _definition(conn: psycopg.Connection[Any], schema: str) -> str | None:
    """The definition of ``schema`` (:data:`_DEFINITION`) and its alembic revision; None
    without the schema or its ``alembic_version`` table."""
    row = conn.execute(_DEFINITION, (schema,)).fetchone()
    found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".alembic_version',)).fetchone()
    if row is None or found is None or found[0] is None:
        return None
    version = conn.execute(f'SELECT version_num FROM "{schema}".alembic_version').fetchall()
    return f"{row[0]}\n{version}"


def _empty(conn: psycopg.Connection[Any], schema: str) -> None:
    """Empty ``schema`` but its ``alembic_version`` as it was when new: the tables that hold
    rows or were analyzed truncated (their size and planner statistics unknown again, as
    after ``CREATE TABLE``), the sequences that were used restarted. Truncating every
    table and partition took 0.1 s at load 9; most tests write a few."""
    tables = conn.execute(
        "SELECT relname, reltuples >= 0 FROM pg_class WHERE relnamespace = %s::regnamespace "
        "AND relkind = 'r' AND relname <> 'alembic_version'",
        (schema,),
    ).fetchall()
    holding = sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT {} WHERE EXISTS (SELECT FROM {})").format(
            sql.Literal(name), sql.Identifier(schema, name)
        )
        for name, _ in tables
    )
    used = {name for (name,) in conn.execute(holding)} | {name for name, seen in tables if seen}
    if used:
        names = sql.SQL(", ").join(sql.Identifier(schema, name) for name in sorted(used))
        conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(names))
    sequences = conn.execute(
        "SELECT sequencename FROM pg_sequences WHERE schemaname = %s AND last_value IS NOT NULL",
        (schema,),
    ).fetchall()
    for (name,) in sequences:
        conn.execute(sql.SQL("ALTER SEQUENCE {} RESTART").format(sql.Identifier(schema, name)))


@contextmanager
def migrated_schema() -> Iterator[str]:
    """Like :func:`postgres_schema`, a URL whose connections use a schema of their own,
    here migrated to head with the day partitions an app's start prepares (nothing left
    for the app's own ``upgrade head`` to do): a PostgreSQL-backed app's start was mostly
    migrating an empty schema (0.3 s). The schema is the session's to reuse: afterwards,
    when its definition (:data:`_DEFINITION`, and the alembic revision) is still the one it
    was handed out with, it is emptied (:func:`_empty`) and waits for the next caller;
    otherwise it is dropped."""
    server = OWNED.postgres_url()
    if OWNED.idle_schemas:
        schema, definition = OWNED.idle_schemas.pop()
    else:
        schema = f"m_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = _schema_url(server, schema)
        upgrade_head(url)
        event_log = SqlEventLog(url)
        try:
            days = Settings.model_fields["log_partition_days_ahead"].default
            event_log.prepare_partitions(time.time(), days)
        finally:
            event_log.close()
        with psycopg.connect(server, autocommit=True) as conn:
            definition = _definition(conn, schema)
    try:
        yield _schema_url(server, schema)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            if definition is not None and _definition(conn, schema) == definition:
                _empty(conn, schema)
                OWNED.idle_schemas.append((schema, definition))
            else:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database of ``kind`` (``postgresql`` or ``sqlite``)."""
    if kind == "postgresql":
        with postgres_schema() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'log.db'}"
