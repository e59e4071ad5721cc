"""What one app of the service tests costs: ``running`` of tests/service/conftest.py on
each backend, the way a test uses it, timed phase by phase.

A test's app pays its backend's setup (``embedded``: a copy of the migrated SQLite log;
``redis_postgres``: the flushed Redis and a PostgreSQL schema, from
``_backend_urls``), its start (``create_app`` and the lifespan, up to the end of the
recovery check), its first requests (``PUT`` of a policy, two ``/recommend``, one
``/reward``: the first request reaching a router), its stop, and the backend's teardown.
Each phase is the median over ``--apps`` apps (the first, which pays the process's
imports and the servers' start, left out), in milliseconds.

    python -m benchmarks.app_start [--apps 30] [--tree DIR] [--label latest]

``--tree`` measures another checkout of the repository (a worktree of the commit before
a change: ``git worktree add --detach ../before main``), run by this script in a process
of its own whose ``service`` and ``tests`` are that tree's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARK = "app_start"
BACKENDS = ("embedded", "redis_postgres")
PHASES = ("setup", "start", "requests", "stop", "teardown", "total")


async def _one_app(backend: str, base: Path, migrated: Path) -> dict[str, float]:
    """The phases of one test's app on ``backend``, in seconds."""
    from service.settings import Settings
    from tests.databases import OWNED
    from tests.service.conftest import API_KEY, POLICY, _backend_urls, running

    t0 = time.perf_counter()
    data = Path(tempfile.mkdtemp(dir=base)) / "data"
    data.mkdir()
    shutil.copyfile(migrated, data / "events.sqlite3")
    backend_urls = _backend_urls(None if backend == "embedded" else OWNED.redis_url())
    urls = backend_urls.__enter__()
    settings = Settings(
        data_dir=data,
        api_keys=[API_KEY],
        demo_policy=False,
        personalizer_loop=False,
        sweeper_interval_seconds=0.05,
        log_flush_seconds=0.02,
        snapshot_interval_seconds=0,
        redis_timeout_seconds=10.0,
        **urls,
    )
    t1 = time.perf_counter()
    app_running = running(settings)
    _, http, _ = await app_running.__aenter__()
    t2 = time.perf_counter()
    assert (await http.put("/policies/p", json=POLICY)).status_code == 200
    body = {"policy": "p", "context": [1.0, 0.0, 0.5]}
    assert (await http.post("/recommend", json=body)).status_code == 200
    decision = (await http.post("/recommend", json=body)).json()
    reward = {"event_id": decision["event_id"], "reward": 1.0}
    assert (await http.post("/reward", json=reward)).status_code == 200
    t3 = time.perf_counter()
    await app_running.__aexit__(None, None, None)
    t4 = time.perf_counter()
    backend_urls.__exit__(None, None, None)
    t5 = time.perf_counter()
    return {
        "setup": t1 - t0,
        "start": t2 - t1,
        "requests": t3 - t2,
        "stop": t4 - t3,
        "teardown": t5 - t4,
        "total": t5 - t0,
    }


def _measure(backend: str, apps: int) -> dict[str, float]:
    """Median milliseconds per phase over ``apps`` apps after a first one."""
    from service.storage.migrate import upgrade_head
    from tests.databases import OWNED

    base = Path(tempfile.mkdtemp(prefix="app-start-"))
    try:
        migrated = base / "migrated.sqlite3"
        upgrade_head(f"sqlite:///{migrated.as_posix()}")

        async def run() -> list[dict[str, float]]:
            return [await _one_app(backend, base, migrated) for _ in range(apps + 1)]

        rows = asyncio.run(run())[1:]
    finally:
        OWNED.close()
        shutil.rmtree(base, ignore_errors=True)
    return {phase: round(1000 * statistics.median(r[phase] for r in rows), 1) for phase in PHASES}


def _in_tree(tree: Path, backend: str, apps: int) -> dict[str, float]:
    """:func:`_measure` in a process whose ``service`` and ``tests`` are ``tree``'s."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-P", __file__, "--child", backend, str(apps)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    from benchmarks import _harness as h

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apps", type=int, default=30, help="apps per backend (%(default)s)")
    parser.add_argument(
        "--tree", type=Path, default=h.ROOT, help="the checkout measured (default: this one)"
    )
    h.add_label_argument(parser, BENCHMARK)
    args = parser.parse_args()
    before = h.load()
    rows = [{"backend": b, **_in_tree(args.tree.resolve(), b, args.apps)} for b in BACKENDS]
    after = h.load()
    print(h.table(rows, ["backend", *PHASES]))
    payload: dict[str, Any] = {
        "tree": str(args.tree.resolve()),
        "apps": args.apps,
        "milliseconds": rows,
        "load_before": before,
        "load_after": after,
    }
    h.write_json(BENCHMARK, payload, args.label)


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    print(json.dumps(_measure(sys.argv[2], int(sys.argv[3]))))
elif __name__ == "__main__":
    main()
