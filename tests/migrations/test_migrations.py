"""The Alembic migrations build exactly the schema of service.storage.schema, and undo it."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from service.storage.base import StoreUnavailableError
from service.storage.migrate import ROOT, alembic_config, downgrade, upgrade_head
from service.storage.schema import create_log_engine, include_name, is_partition, metadata
from tests.databases import database

TABLES = {
    "policies",
    "decisions",
    "rewards",
    "late_rewards",
    "model_snapshots",
    "evaluations",
    "audit_log",
    "decision_counts",
    "reward_sums",
    "decision_latency",
}


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path):
    with database(request.param, tmp_path) as u:
        yield u


def _tables(url: str) -> set[str]:
    engine = create_log_engine(url)
    try:
        return {n for n in sa.inspect(engine).get_table_names() if not is_partition(n)}
    finally:
        engine.dispose()


def _diff(url: str) -> list:
    engine = create_log_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "include_name": include_name}
            )
            return compare_metadata(context, metadata)
    finally:
        engine.dispose()


def test_upgrade_matches_metadata_and_downgrade_removes_everything(url: str) -> None:
    upgrade_head(url)
    assert _tables(url) == TABLES | {"alembic_version"}
    assert _diff(url) == []
    upgrade_head(url)  # at head already: a no-op
    downgrade(url, "base")
    assert _tables(url) == {"alembic_version"}
    # and the empty database differs from the metadata by exactly those tables
    assert {d[1].name for d in _diff(url) if d[0] == "add_table"} == TABLES


@pytest.mark.slow
def test_concurrent_upgrades_on_postgres_serialise(tmp_path: Path) -> None:
    """App processes starting together all run upgrade_head; the advisory lock makes
    them migrate one after the other instead of racing to create the same tables."""
    with database("postgresql", tmp_path) as url:
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=upgrade_head, args=(url,)) for _ in range(3)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=40)
            if p.is_alive():
                p.kill()
        assert [p.exitcode for p in procs] == [0, 0, 0]
        assert _diff(url) == []


def test_unreachable_database_raises_store_unavailable() -> None:
    with pytest.raises(StoreUnavailableError, match="event log database"):
        upgrade_head("postgresql://postgres@127.0.0.1:1/test")


def test_migrations_are_static_and_named_by_date_and_slug() -> None:
    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(script.walk_revisions())
    assert len(script.get_heads()) == 1
    for rev in revisions:
        name = Path(rev.path).name
        assert name.split("-", 1)[1].startswith(rev.revision), name
        assert name[:4].isdigit() and name[4] == "_", name
        source = Path(rev.path).read_text()
        assert "service.storage" not in source, f"{name} must not import the live metadata"


def test_alembic_cli_reads_bandit_database_url(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    env = {**os.environ, "BANDIT_DATABASE_URL": f"sqlite:///{db}"}
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    assert _tables(f"sqlite:///{db}") == TABLES | {"alembic_version"}
