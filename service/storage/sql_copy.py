"""Batch inserts of the event log's records (``service.storage.sql_log``): the rows of an
``INSERT``, and PostgreSQL's ``COPY`` into a table that skips records logged already
(docs/performance.md "Event-log writes")."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection

from service.storage.schema import json_dumps


def insert_rows(records: Sequence[Any], fields: list[str]) -> list[dict[str, Any]]:
    """Insert parameters of ``records``: a shallow dict per record. ``dataclasses.asdict``
    deep-copies every nested list and dict (205 us for a K = 50 decision against 0.65 us
    shallow), and the insert only reads them."""
    return [{name: getattr(record, name) for name in fields} for record in records]


def copy_insert(
    conn: Connection, insert: Any, table: sa.Table, records: Sequence[Any], fields: list[str]
) -> None:
    """``insert`` of ``records`` on PostgreSQL by ``COPY`` (text format; JSON columns as
    :func:`json_dumps` text, as SQLAlchemy's serializer writes them): straight into the
    table, in a savepoint; when a record is logged already (a batch sent again),
    into the staging table ``bandit_copy_<table>`` of this session (created on first
    use, its rows deleted at commit) and from there by ``insert``'s ``ON CONFLICT DO
    NOTHING``, after which the staging table is emptied."""
    rows = _copy_rows(records, fields, [isinstance(table.c[name].type, sa.JSON) for name in fields])
    names = ", ".join(fields)
    driver = conn.connection.driver_connection
    try:
        with conn.begin_nested():
            _copy(driver, f"{table.name} ({names})", rows)
        return
    except sa_exc.IntegrityError as exc:
        if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
            raise
    stage = sa.table(f"bandit_copy_{table.name}", *(sa.column(name) for name in fields))
    conn.execute(
        sa.text(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage.name} ON COMMIT DELETE ROWS AS "
            f"SELECT {names} FROM {table.name} WITH NO DATA"
        )
    )
    _copy(driver, f"{stage.name} ({names})", rows)
    conn.execute(insert.from_select(fields, sa.select(*stage.c)))
    # a transaction may copy several batches (EventLog.append_batches): each its own rows;
    # TRUNCATE, as a DELETE's dead rows would stay in the table until the commit
    conn.execute(sa.text(f"TRUNCATE {stage.name}"))


def _copy_rows(records: Sequence[Any], fields: list[str], json: list[bool]) -> list[list[Any]]:
    """The ``COPY`` rows of ``records``: the values of ``fields``, as JSON text where
    ``json`` says so (:func:`json_dumps`; None stays NULL). A value shared by several
    records (an import's decisions share their candidate list) is encoded once."""
    values = operator.attrgetter(*fields)
    encode = [i for i, is_json in enumerate(json) if is_json]
    # by id(): the records hold every value while this runs, so no id is reused
    encoded: dict[int, str] = {}
    rows = []
    for record in records:
        row = list(values(record))
        for i in encode:
            value = row[i]
            if value is not None:
                text = encoded.get(id(value))
                if text is None:
                    text = encoded[id(value)] = json_dumps(value)
                row[i] = text
        rows.append(row)
    return rows


def _copy(driver: Any, target: str, rows: list[list[Any]]) -> None:
    """``COPY target FROM STDIN`` of ``rows`` on the psycopg connection ``driver``; its
    errors raised as SQLAlchemy's, as a statement through the engine would be."""
    statement = f"COPY {target} FROM STDIN"
    try:
        with driver.cursor() as cursor, cursor.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
    except psycopg.Error as exc:
        raise sa_exc.DBAPIError.instance(statement, None, exc, psycopg.Error) from exc
