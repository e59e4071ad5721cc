"""Every failure of ``bandit serve`` to start, each a real ``bandit serve`` subprocess:
one line on stderr naming the cause, the documented exit status (docs/operations.md,
"Start-up failures"), nothing served."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from service.storage.migrate import alembic_config, downgrade, head_revision, upgrade_head
from tests.databases import database
from tests.service.test_serve import _clean_env

# the revision before the head: a schema this code cannot use
OLD_REVISION = (
    ScriptDirectory.from_config(alembic_config()).get_revision(head_revision()).down_revision
)
BAD_POLICY = """\
policies:
  home:
    algorithm: linucb
    dimension: 6
  drinks:
    algorithm: guardrailed_linucb
    dimension: 2
    params:
      alpha: -1
"""
IMPORTING_POLICY = """\
shop:
  algorithm: guardrailed_linucb
  dimension: 2
  guardrails: [{type: import, path: "subprocess:Popen", params: {args: "true"}}]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, list[str]]:
    """Exit status and stderr lines of ``bandit serve`` with ``env`` over a clean one."""
    full = {
        **_clean_env(),
        "BANDIT_API_KEYS": "startup-key",  # no warning about open admin routes
        "BANDIT_DATA_DIR": str(tmp_path / "data"),
        "BANDIT_REDIS_TIMEOUT_SECONDS": "1",
        **env,
    }
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", str(_free_port()), *args]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120, check=False
    )
    return done.returncode, done.stderr.splitlines()


@pytest.mark.parametrize(
    ("env", "status", "line"),
    [
        (
            {"BANDIT_REDIS_URL": "redis://127.0.0.1:{closed}/0"},
            1,
            (
                "bandit serve: error: cannot start: Redis: ConnectionError: Error 111 connecting "
                "to 127.0.0.1:{closed}. Connection refused."
            ),
        ),
        (
            {"BANDIT_DATABASE_URL": "postgresql://bandit@127.0.0.1:{closed}/bandit"},
            1,
            (
                "bandit serve: error: cannot start: event log database: connection failed: "
                'connection to server at "127.0.0.1", port {closed} failed: Connection refused Is '
                "the server running on that host and accepting TCP/IP connections?"
            ),
        ),
        (
            {"BANDIT_DATABASE_URL": "mysql://bandit:secret@127.0.0.1/bandit"},
            2,
            (
                "invalid BANDIT_DATABASE_URL: Value error, BANDIT_DATABASE_URL must be a "
                "postgresql:// or sqlite:/// URL, but got 'mysql://bandit:***@127.0.0.1/bandit'"
            ),
        ),
        (
            {"BANDIT_POLICIES_FILE": "{tmp}/missing.yaml"},
            2,
            (
                "bandit serve: error: BANDIT_POLICIES_FILE={tmp}/missing.yaml: No such file or "
                "directory"
            ),
        ),
        (
            {"BANDIT_POLICIES_FILE": "{tmp}/policies.yaml"},
            2,
            (
                "bandit serve: error: BANDIT_POLICIES_FILE={tmp}/policies.yaml: policy 'drinks': "
                "params: alpha must be a finite number >= 0, but got -1"
            ),
        ),
        (
            {"BANDIT_DATA_DIR": "{tmp}/a-file/data"},
            2,
            (
                "bandit serve: error: BANDIT_DATA_DIR={tmp}/a-file/data is not a usable "
                "directory: Not a directory"
            ),
        ),
        (
            {"BANDIT_POLICIES_FILE": "{tmp}/importing.yaml"},
            2,
            (
                "bandit serve: error: BANDIT_POLICIES_FILE={tmp}/importing.yaml: policy 'shop': "
                "guardrails: guardrails of type 'import' load server-side code; the server must "
                "set BANDIT_ALLOW_IMPORT_GUARDRAILS=true to accept them"
            ),
        ),
    ],
    ids=[
        "redis-unreachable",
        "postgresql-unreachable",
        "mysql-url",
        "missing-policies-file",
        "bad-policy",
        "unusable-data-dir",
        "import-guardrail-not-allowed",
    ],
)
def test_a_failure_to_start_is_one_line_and_its_exit_status(
    tmp_path: Path, env: dict[str, str], status: int, line: str
) -> None:
    (tmp_path / "policies.yaml").write_text(BAD_POLICY)
    (tmp_path / "importing.yaml").write_text(IMPORTING_POLICY)
    (tmp_path / "a-file").write_text("")
    names = {"tmp": tmp_path, "closed": _free_port()}  # a port nothing listens on
    code, stderr = _serve(tmp_path, {k: v.format(**names) for k, v in env.items()})
    assert (code, stderr) == (status, [line.format(**names)])


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_a_port_out_of_range_is_refused_before_anything_starts(tmp_path: Path, port: str) -> None:
    cmd = [sys.executable, "-m", "service.cli", "serve", "--port", port]
    done = subprocess.run(
        cmd, cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    last = done.stderr.splitlines()[-1]
    assert last == f"bandit serve: error: argument --port: {port} is not a TCP port (1-65535)"
    assert not (tmp_path / "bandit-data").exists()


def test_several_workers_fail_to_start_as_one(tmp_path: Path) -> None:
    """With ``--workers`` the start is tried once before the workers: the same one line."""
    env = {"BANDIT_REDIS_URL": f"redis://127.0.0.1:{_free_port()}/0"}
    code, stderr = _serve(tmp_path, env, "--workers", "2")
    assert code == 1 and len(stderr) == 1
    assert stderr[0].startswith("bandit serve: error: cannot start: Redis: ConnectionError: ")


def test_a_port_taken_is_a_failure(tmp_path: Path) -> None:
    """Found by uvicorn once the service has started (it stops it again): exit 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        code, stderr = _serve(tmp_path, {}, "--port", port)
    assert code == 1 and "Traceback" not in "\n".join(stderr)
    assert stderr[-1].endswith(f"('127.0.0.1', {port}): address already in use")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_old_schema_is_refused_naming_both_revisions(tmp_path: Path, kind: str) -> None:
    """``BANDIT_RUN_MIGRATIONS=false`` over a database one migration behind: refused,
    instead of serving and failing on the missing tables."""
    with database(kind, tmp_path) as url:
        upgrade_head(url)
        downgrade(url, OLD_REVISION)
        env = {"BANDIT_DATABASE_URL": url, "BANDIT_RUN_MIGRATIONS": "false"}
        code, stderr = _serve(tmp_path, env)
    assert (code, stderr) == (
        1,
        [
            (
                f"bandit serve: error: the event-log database is at schema revision {OLD_REVISION}, "
                f"but this code needs {head_revision()} (the head of migrations/): run 'alembic "
                "upgrade head' or set BANDIT_RUN_MIGRATIONS=true"
            )
        ],
    )
