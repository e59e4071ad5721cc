"""``bandit serve`` with no configuration at all: the embedded default in a fresh
directory (in-process state, SQLite log under ./bandit-data, the demo policy); its JSON
log lines (``BANDIT_LOG_FORMAT=json``) naming each request's id; the exit statuses of
``serve`` and ``rebuild`` when what they need is missing or down."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.servers import wait_until_serving

ROOT = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANDIT_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["PYTHONPATH"] = str(ROOT)
    return env


@dataclass
class ServeRun:
    """A running ``bandit serve``: its base URL; its standard error once stopped."""

    base: str
    stderr: str = ""


@contextmanager
def serving(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[ServeRun]:
    """``bandit serve`` with ``args`` on a free port in ``tmp_path``, ready; terminated
    after the block, its standard error then in ``ServeRun.stderr``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(port), *args]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env={**_clean_env(), **(env or {})}, stderr=subprocess.PIPE, text=True
    )
    run = ServeRun(f"http://127.0.0.1:{port}")
    try:
        wait_until_serving(proc, f"{run.base}/readyz", timeout=30)
        yield run
    finally:
        proc.terminate()
        _, run.stderr = proc.communicate(timeout=20)


def test_serve_on_a_fresh_machine(tmp_path: Path) -> None:
    with serving(tmp_path, "--log-level", "info") as run:
        dec = httpx.post(
            f"{run.base}/recommend", json={"policy": "demo", "context": [0.2, 0.1, 0.0, 0.7]}
        ).json()
        assert dec["arm_id"] in {"article-1", "article-2", "article-3"}
        reward = httpx.post(f"{run.base}/reward", json={"event_id": dec["event_id"], "reward": 1})
        assert reward.json()["status"] == "applied"
    assert "BANDIT_API_KEYS is not set" in run.stderr  # said loudly at start
    assert "POST /recommend" not in run.stderr  # no access log unless --access-log
    assert (tmp_path / "bandit-data" / "events.sqlite3").exists()


def test_json_log_lines_name_the_request_they_were_written_for(tmp_path: Path) -> None:
    env = {"BANDIT_LOG_FORMAT": "json"}
    with serving(tmp_path, "--access-log", env=env) as run:
        body = {"policy": "demo", "context": [0.2, 0.1, 0.0, 0.7]}
        given = httpx.post(f"{run.base}/recommend", json=body, headers={"X-Request-ID": "rq-7"})
        assert given.headers["X-Request-ID"] == "rq-7"
        drawn = httpx.get(f"{run.base}/policies/none").headers["X-Request-ID"]
    lines = [json.loads(line) for line in run.stderr.splitlines()]  # every line is JSON
    assert {"time", "level", "logger", "message", "request_id"} <= set(lines[0])
    by_request = {line["request_id"]: line for line in lines if line["request_id"]}
    assert "POST /recommend" in by_request["rq-7"]["message"]
    assert "404" in by_request[drawn]["message"]
    warning = next(line for line in lines if "BANDIT_API_KEYS is not set" in line["message"])
    assert (warning["level"], warning["request_id"]) == ("WARNING", None)  # at start


def test_serve_access_log_is_an_option() -> None:
    from service.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["serve"]).access_log is False
    assert parser.parse_args(["serve", "--access-log"]).access_log is True


def test_serve_refuses_workers_on_the_embedded_default(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "service.cli", "serve", "--workers", "2"]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and "BANDIT_REDIS_URL" in done.stderr


def test_serve_refuses_an_empty_redis_url(tmp_path: Path) -> None:
    # "" is neither a Redis URL nor unset: each worker would keep its own in-process state.
    cmd = [sys.executable, "-m", "service.cli", "serve"]
    env = {**_clean_env(), "BANDIT_REDIS_URL": ""}
    done = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "invalid BANDIT_REDIS_URL" in done.stderr and "set but empty" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "bandit-data").exists()  # refused before anything started


def test_rebuild_with_the_state_store_down_fails_with_one_line(tmp_path: Path) -> None:
    """A valid command that cannot reach Redis is a failure (exit 1), not a traceback."""
    from service.api.app import make_event_log
    from service.policies import new_info
    from service.schemas import PolicySpec
    from service.settings import Settings
    from tests.service.conftest import POLICY

    url = f"sqlite:///{tmp_path / 'events.sqlite3'}"
    event_log = make_event_log(Settings(data_dir=tmp_path, database_url=url))
    event_log.upsert_policy("p", new_info("p", PolicySpec(**POLICY), 0.0).model_dump(mode="json"))
    event_log.close()
    env = {
        **_clean_env(),
        "BANDIT_REDIS_URL": "redis://127.0.0.1:1/0",
        "BANDIT_DATABASE_URL": url,
        "BANDIT_DATA_DIR": str(tmp_path),
        "BANDIT_REDIS_TIMEOUT_SECONDS": "1",
    }
    cmd = [sys.executable, "-m", "service.cli", "rebuild", "--policy", "p"]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("bandit rebuild: error:") and done.stderr.count("\n") == 1
