"""Run the Alembic migrations of ``migrations/`` from the application.

``upgrade_head(url)`` is what the app calls on start when configured to, and
``check_schema(url)`` what it calls otherwise. On PostgreSQL
it holds an advisory lock while migrating, so several app processes starting at once
migrate one after the other (the later ones find the schema at head and do nothing).
Alembic keeps its migration context in module globals, so call these from one thread
of a process at a time.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from service.startup import StartupError
from service.storage.schema import create_log_engine
from service.storage.sql_connection import database_reachable

ROOT = Path(__file__).resolve().parents[2]
# An arbitrary 64-bit key for pg_advisory_lock, shared by every process of the service.
_LOCK_KEY = 0x62616E646974  # "bandit"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for ``migrations/`` (the ``alembic.ini`` at the repository root
    serves the ``alembic`` command line), optionally bound to ``url`` (otherwise
    ``env.py`` reads BANDIT_DATABASE_URL)."""
    config = Config()
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["configure_logger"] = False
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def _run(url: str, action: str, revision: str) -> None:
    config = alembic_config(url)
    engine = create_log_engine(url)
    try:
        with database_reachable(), engine.connect() as conn:
            if conn.dialect.name == "postgresql":
                # session-level: held until the connection closes (engine.dispose below)
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _LOCK_KEY})
                conn.commit()
            config.attributes["connection"] = conn
            getattr(command, action)(config, revision)
            conn.commit()
    finally:
        engine.dispose()


def upgrade_head(url: str) -> None:
    """Migrate the event-log database at ``url`` to the newest schema. A database already
    there is left without running Alembic, whose environment and revision scripts were
    otherwise loaded again on every start (20 ms of an app's start on SQLite)."""
    if database_revision(url) != head_revision():
        _run(url, "upgrade", "head")


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at ``url`` down to ``revision`` (``base``: no tables)."""
    _run(url, "downgrade", revision)


@functools.cache
def head_revision() -> str:
    """The newest revision of ``migrations/``: the schema this code reads and writes (read
    once per process)."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "migrations/ has one head"
    return head


def database_revision(url: str) -> str | None:
    """The revision the database at ``url`` was migrated to (None: never migrated)."""
    engine = create_log_engine(url)
    try:
        with database_reachable(), engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def check_schema(url: str) -> None:
    """A :class:`~service.startup.StartupError` naming both revisions unless the database at
    ``url`` is at the code's head revision."""
    found, head = database_revision(url), head_revision()
    if found != head:
        raise StartupError(
            f"the event-log database is at schema revision {found or 'none (never migrated)'}, "
            f"but this code needs {head} (the head of migrations/): run 'alembic upgrade head' "
            "or set BANDIT_RUN_MIGRATIONS=true"
        )
