"""A real Ray cluster on loopback that a test starts and removes itself: a head node and
worker nodes, each ``ray start --block`` (``tests.ray_node``) in a process group of its own (its GCS, raylet
and worker processes), with its own ports and temp dir, importing this checkout's
``service`` and ``bandit_core``. Ray missing skips the test with the install command,
except under ``CI=true``, where it fails: CI never skips these tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from service.usecases.offline_engine import RAY_EXTRA, ray_installed
from tests.servers import ROOT, free_port

STARTED = b"Ray runtime started."
"""What ``ray start`` prints once its node is up and registered with the head."""


def require_ray() -> None:
    """Skip (fail under CI) when Ray is not installed."""
    if ray_installed():
        return
    message = f"Ray is not installed: {RAY_EXTRA}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)


def descendants(pid: int) -> list[int]:
    """The processes ``pid`` started, and theirs (from /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def command_line(pid: int) -> str:
    """Process ``pid``'s command line as its title shows it (Ray's workers name their
    task there); empty once it has ended."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


class RayCluster:
    """``nodes`` nodes of ``cpus`` CPUs each; :attr:`address` is the head's GCS."""

    def __init__(self, nodes: int = 2, cpus: int = 1) -> None:
        self.nodes, self.cpus = nodes, cpus
        self.dir = Path(tempfile.mkdtemp(prefix="bandit-ray-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "disabled",
            # a loaded machine starts a node's agents slower than the raylet waits for
            # them by default (it then crashes), and its workers slower than it waits
            "RAY_agent_register_timeout_ms": "300000",
            "RAY_raylet_start_wait_time_s": "300",
            "RAY_worker_register_timeout_seconds": "300",
        }

    def _node(self, index: int) -> subprocess.Popen[bytes]:
        worker_ports = free_port()
        command = [
            sys.executable, "-m", "tests.ray_node", "start", "--block",
            "--node-ip-address", "127.0.0.1",
            "--num-cpus", str(self.cpus),
            "--num-gpus", "0",
            "--temp-dir", str(self.dir / f"node{index}"),
            "--node-manager-port", str(free_port()),
            "--object-manager-port", str(free_port()),
            "--dashboard-agent-grpc-port", str(free_port()),
            "--dashboard-agent-listen-port", str(free_port()),
            "--metrics-export-port", str(free_port()),
            "--runtime-env-agent-port", str(free_port()),
            "--min-worker-port", str(worker_ports),
            "--max-worker-port", str(worker_ports + 30),
            "--object-store-memory", str(80 * 2**20),
            "--disable-usage-stats",
            # no log monitor: every driver here connects with log_to_driver=False
            "--include-log-monitor", "false",
        ]  # fmt: skip
        if index == 0:
            # no autoscaler monitor: the cluster's nodes are the ones started here
            command += [
                "--head", "--port", str(self.port), "--include-dashboard", "false",
                "--ray-client-server-port", str(free_port()), "--no-monitor",
            ]  # fmt: skip
        else:
            command += ["--address", self.address]
        log = (self.dir / f"node{index}.log").open("wb")
        return subprocess.Popen(
            command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def start(self, timeout: float = 200.0, attempts: int = 3) -> None:
        """Start the nodes and wait until all of them are alive. A loaded machine can
        exceed Ray's fixed waits while a node starts (its raylet then crashes): a node
        that exits (at once when its raylet or GCS server dies before it registers,
        ``tests.ray_node``) or is not alive after ``timeout`` is started again, up to
        ``attempts`` times."""
        self.dir.mkdir(exist_ok=True)
        self.procs = []
        for index in range(self.nodes):
            for attempt in range(attempts):
                self.procs.append(self._node(index))
                try:
                    self._wait_nodes(index + 1, timeout)
                    break
                except (RuntimeError, TimeoutError):
                    self.stop_node(index)
                    self.procs.pop()
                    if attempt == attempts - 1:
                        raise

    def alive_nodes(self) -> int:
        """Nodes the head counts alive (asked from a separate process: a driver that
        loses its cluster is ended by Ray)."""
        script = (
            f"import ray; ray.init(address={self.address!r}, log_to_driver=False); "
            "print(sum(n['Alive'] for n in ray.nodes()))"
        )
        try:
            result = subprocess.run(
                [sys.executable, "-c", script],
                check=False,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:  # a loaded machine: ask again
            return 0
        counts = [line for line in result.stdout.splitlines() if line.strip().isdigit()]
        return int(counts[0]) if result.returncode == 0 and counts else 0

    def started(self, index: int) -> bool:
        """Whether node ``index``'s ``ray start`` has printed :data:`STARTED`: it does
        once its raylet has registered with the head (and exits instead when the raylet
        or GCS server dies first, ``tests.ray_node``)."""
        log = self.dir / f"node{index}.log"
        return STARTED in log.read_bytes() if log.exists() else False

    def _wait_nodes(self, count: int, timeout: float) -> None:
        """Until the head counts ``count`` nodes alive. The head is asked (a process of
        its own: an interpreter, Ray's import and a driver's start, seconds of CPU on a
        loaded machine) once every node has printed :data:`STARTED`, not before."""
        deadline = time.monotonic() + timeout
        while not all(map(self.started, range(count))) or self.alive_nodes() < count:
            for proc in self.procs:
                if proc.poll() is not None:
                    tail = "".join(f.read_text()[-2000:] for f in self.dir.glob("node*.log"))
                    raise RuntimeError(f"a ray node exited:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} ray node(s) not alive after {timeout} s")
            time.sleep(0.2)

    def stop_node(self, index: int) -> None:
        """Kill node ``index`` and every process it started: its process group, and its
        worker processes (which Ray puts in groups of their own)."""
        proc = self.procs[index]
        started = descendants(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop every node (head last)."""
        for index in reversed(range(len(self.procs))):
            self.stop_node(index)
        self.procs = []

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
