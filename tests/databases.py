"""Throwaway databases for tests: a fresh schema in the real PostgreSQL ``test`` database
(selected through ``search_path`` in the URL) or a SQLite file under ``tmp_path``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

REDIS_URL = os.environ.get("BANDIT_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "BANDIT_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


@contextmanager
def postgres_schema() -> Iterator[str]:
    """A plain ``postgresql://`` URL whose connections use a new, empty schema; the
    schema and everything in it is dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@contextmanager
def database(kind: str, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database of ``kind`` (``postgresql`` or ``sqlite``)."""
    if kind == "postgresql":
        with postgres_schema() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'log.db'}"
