"""docs/operations.md "Backup and restore" on a real PostgreSQL cluster the test starts:
the PostgreSQL dump and restore commands of the guide, and the restore of a policy's
model from a periodic snapshot. Each command is taken from the guide and run as written
but for its ``docker compose exec -T postgres`` prefix (the tools reach the test's
cluster through ``PGHOST``/``PGPORT``, as the compose network's ``postgres`` would)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from service.settings import Settings
from service.storage.base import DecisionRecord, RewardRecord, Snapshot
from service.storage.migrate import upgrade_head
from service.storage.partitions import DAY_SECONDS
from service.storage.sql_log import SqlEventLog
from tests.servers import PostgresCluster, _pg_bin
from tests.service.conftest import POLICY, running

# One worker runs every test of this module, so its module-scoped servers start once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(__name__)]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operations.md"
IN_CONTAINER = "docker compose exec -T postgres "


def guide_commands(program: str) -> list[str]:
    """The guide's ``docker compose exec -T postgres <program> ...`` lines of the "Backup
    and restore" section, without that prefix, in order."""
    section = GUIDE.read_text().split("\n## Backup and restore\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines()]
    return [line[len(IN_CONTAINER) :] for line in lines if line.startswith(IN_CONTAINER + program)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    """A cluster of the test's own, with the compose file's role ``bandit`` (the
    superuser ``POSTGRES_USER`` the postgres image creates)."""
    server = PostgresCluster()
    server.start()
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE ROLE bandit SUPERUSER LOGIN")
        yield server
    finally:
        server.destroy()


def shell(command: str, cluster: PostgresCluster, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` run by bash in ``cwd``, the cluster's client tools first on the path."""
    env = {
        **os.environ,
        "PATH": f"{Path(_pg_bin('psql')).parent}:{os.environ['PATH']}",
        "PGHOST": "127.0.0.1",
        "PGPORT": str(cluster.port),
    }
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def bandit_url(cluster: PostgresCluster) -> str:
    return f"postgresql://bandit@127.0.0.1:{cluster.port}/bandit"


def table_rows(event_log: SqlEventLog) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the log, partitions by name, sorted."""
    with event_log.engine.connect() as conn:
        tables = conn.execute(
            sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ).scalars()
        return {
            t: sorted(tuple(r) for r in conn.execute(sa.text(f'SELECT * FROM "{t}"')))
            for t in sorted(tables)
        }


def decision(event_id: str, t: float) -> DecisionRecord:
    return DecisionRecord(
        event_id=event_id,
        policy="home",
        created_at=t,
        context=[1.0, 0.5],
        candidates=[{"id": "a", "features": [0.1]}, {"id": "b", "features": [0.2]}],
        arm_id="a",
        propensity=0.95,
        scores=[0.5, 0.25],
        model_version=7,
    )


def reward(event_id: str, t: float) -> RewardRecord:
    return RewardRecord(
        event_id=event_id, policy="home", arm_id="a", value=1.0, source="explicit", created_at=t
    )


def test_the_guides_dump_and_restore_bring_back_a_partitioned_log(
    cluster: PostgresCluster, tmp_path: Path
) -> None:
    shell("createdb -U bandit bandit", cluster, tmp_path).check_returncode()
    url = bandit_url(cluster)
    upgrade_head(url)
    event_log = SqlEventLog(url)
    now = time.time()
    # rows in day partitions (yesterday to two days ahead) and, beyond them, in the
    # default partitions; a policy config and a snapshot
    event_log.prepare_partitions(now, 2)
    times = [now - DAY_SECONDS, now, now + DAY_SECONDS, now + 30 * DAY_SECONDS]
    event_log.append(
        [decision(f"e{i}", t) for i, t in enumerate(times)],
        [reward(f"e{i}", t + 1) for i, t in enumerate(times)],
    )
    event_log.upsert_policy("home", {"algorithm": "linucb", "dimension": 2})
    event_log.save_snapshot(Snapshot("home", now, 7, bytes(range(256)), {"period": 1}))
    dumped = table_rows(event_log)
    assert {"decisions_default", "rewards_default"} <= set(dumped)
    assert sum(len(rows) for t, rows in dumped.items() if t.startswith("decisions_p")) == 3

    (dump,) = guide_commands("pg_dump")
    shell(dump, cluster, tmp_path).check_returncode()
    (written,) = tmp_path.glob("bandit-*.dump")
    event_log.append([decision("after-the-dump", now)], [])  # lost by the restore
    event_log.close()

    dropdb, createdb, restore = (
        guide_commands("dropdb") + guide_commands("createdb") + guide_commands("pg_restore")
    )
    read = re.search(r"< (\S+\.dump)$", restore)
    assert read is not None, restore
    written.rename(tmp_path / read.group(1))
    for command in (dropdb, createdb, restore):
        done = shell(command, cluster, tmp_path)
        assert done.returncode == 0, (command, done.stderr)

    restored = SqlEventLog(url)
    try:
        assert table_rows(restored) == dumped
        upgrade_head(url)  # at head already: nothing to do
        restored.prepare_partitions(now, 2)
        restored.append([decision("after-the-restore", now)], [])
        assert restored.count("home") == (5, 4)
        assert restored.latest_snapshot("home") == Snapshot(
            "home", now, 7, bytes(range(256)), {"period": 1}
        )
    finally:
        restored.close()


@pytest.mark.anyio
async def test_a_policy_is_restored_from_a_periodic_snapshot(
    cluster: PostgresCluster, tmp_path: Path
) -> None:
    """The policy ``home`` learns, a periodic snapshot saves it, it learns more; the
    guide's query writes the newest snapshot as a request body, and ``PUT
    .../snapshot`` with it brings the model back to the snapshot's, bit for bit."""
    shell("dropdb -U bandit --if-exists --force bandit", cluster, tmp_path).check_returncode()
    shell("createdb -U bandit bandit", cluster, tmp_path).check_returncode()
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=bandit_url(cluster),
        demo_policy=False,
        personalizer_loop=False,
        snapshot_interval_seconds=0,
    )
    async with running(settings) as (app, http, _typed):
        assert (await http.put("/policies/home", json=POLICY)).status_code == 200

        async def learn(n: int) -> None:
            for i in range(n):
                body = {"policy": "home", "context": [1.0, i / n, 0.5]}
                decision = (await http.post("/recommend", json=body)).json()
                reward = {"event_id": decision["event_id"], "reward": float(i % 2)}
                assert (await http.post("/reward", json=reward)).status_code == 200

        await learn(20)
        assert await app.state.use_cases.snapshots.snapshot_period(1) == 1
        saved = (await http.get("/policies/home/snapshot")).json()["data"]
        await learn(15)
        assert (await http.get("/policies/home/snapshot")).json()["data"] != saved

        listing, query = guide_commands("psql")
        listed = shell(listing, cluster, tmp_path)
        assert listed.returncode == 0 and "(1 row)" in listed.stdout, listed
        done = await asyncio.to_thread(shell, query, cluster, tmp_path)
        assert done.returncode == 0, done.stderr
        written = re.search(r"> (\S+\.json)$", query)
        assert written is not None, query
        body = (tmp_path / written.group(1)).read_text()
        assert base64.b64decode(saved) == base64.b64decode(json.loads(body)["data"])

        response = await http.put(
            "/policies/home/snapshot",
            content=body,
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        assert (await http.get("/policies/home/snapshot")).json()["data"] == saved
