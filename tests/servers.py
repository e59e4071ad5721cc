"""Processes the system tests own: a private ``redis-server``, a private
PostgreSQL cluster (``initdb``/``pg_ctl``) and real uvicorn app processes, each on a
free loopback port, each stopped (and its files removed) by the test that started it.

Nothing here is a fake: faults are injected by stopping or killing these processes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis

from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "reliability-key-0123456789abcdef"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_serving(proc: subprocess.Popen[Any], url: str, timeout: float = 60.0) -> None:
    """Poll ``url`` until it answers 200 while ``proc`` (the server) runs, or fail."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None, f"the server exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{url} did not answer 200 within {timeout:.0f}s"
        time.sleep(0.1)


def _wait(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):  # not up yet
            if predicate():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:.0f}s")
        time.sleep(0.05)


class RedisServer:
    """A private redis-server on a free port. ``--save ""`` (no RDB snapshots) but, with
    ``persist`` (the default), an append-only file fsync'ed on every write, so a stop and
    restart keeps every acknowledged write -- an outage, not a data loss."""

    def __init__(self, directory: Path, persist: bool = True) -> None:
        self.dir = directory
        self.persist = persist
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes" if self.persist else "no",
                "--appendfsync",
                "always",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
        )
        _wait(lambda: redis.Redis.from_url(self.url).ping(), 15, "redis-server ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=15)
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the server dies at once, as in a crash; :meth:`start` brings it back
        on the same port from its append-only file."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=15)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def pause(self) -> None:
        """SIGSTOP: the server hangs (connections are accepted by the kernel, nothing
        answers) until :meth:`resume`."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause` (harmless otherwise)."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    assert path, f"PostgreSQL binary {name!r} not found under /usr/lib/postgresql/*/bin or PATH"
    return path


class PostgresCluster:
    """A private PostgreSQL cluster (trust auth, user ``postgres``) on a free port.

    initdb refuses to run as root, so as root the cluster belongs to the ``postgres``
    system user and its commands run through ``runuser``."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bandit-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run(
            [
                _pg_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ]
        )

    def _run(self, cmd: list[str]) -> None:
        if self._as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(
            cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120
        )

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            [
                _pg_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                opts,
                "-l",
                str(self.dir / "log"),
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        _wait(
            lambda: psycopg.connect(self.url, connect_timeout=2).close() is None,
            30,
            "postgres ready",
        )

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: every connection is cut, the server is gone."""
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run([_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (backends and background workers)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                # the fields after the command name, which may hold spaces, closed by ')'
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    children.append(int(stat.parent.name))
        return [postmaster, *children]

    def pause(self) -> list[int]:
        """SIGSTOP the postmaster and every backend: the database hangs (connections are
        accepted by the kernel, nothing answers). Returns the pids for :meth:`resume`."""
        pids = self.processes()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    @staticmethod
    def resume(pids: list[int]) -> None:
        """SIGCONT the processes :meth:`pause` stopped (those still alive)."""
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


class AppProcess:
    """``uvicorn service.api.app:create_app --factory`` in a child process on a free port."""

    def __init__(
        self,
        env: Mapping[str, str],
        port: int | None = None,
        log_level: str = "warning",
        output: Path | None = None,
    ) -> None:
        self.env = dict(env)
        self.log_level = log_level
        self.output = output  # stdout and stderr of the process go here when set
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> AppProcess:
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "service.api.app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
        ]
        sink = open(self.output, "ab") if self.output else None  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env={**os.environ, **self.env},
                stdout=sink,
                stderr=subprocess.STDOUT if sink else None,
            )
        finally:
            if sink:
                sink.close()

        def up() -> bool:
            assert self.proc is not None
            assert self.proc.poll() is None, f"app exited with {self.proc.returncode}"
            return httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200

        deadline = time.monotonic() + timeout
        while True:
            try:
                if up():
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("app process did not become healthy")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL: no lifespan shutdown, nothing flushed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=15)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM: the graceful shutdown (writer closed: queued records written or spooled)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def rss_kib(self) -> int:
        """Resident set size of the process (``VmRSS`` of /proc), KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


def reliability_settings(
    *, data_dir: Path, redis_url: str, database_url: str | None, **overrides: Any
) -> Settings:
    """The reliability tests' one set of settings: Redis and PostgreSQL, the test API
    key, no demo policy, no snapshots, a quick log flush and sweeper; ``overrides``
    replace fields."""
    fields: dict[str, Any] = {
        "redis_url": redis_url,
        "database_url": database_url,
        "api_keys": [API_KEY],
        "data_dir": data_dir,
        "demo_policy": False,
        "personalizer_loop": False,
        "snapshot_interval_seconds": 0,
        "log_flush_seconds": 0.05,
        "sweeper_interval_seconds": 0.2,
        **overrides,
    }
    return Settings(**fields)


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The ``BANDIT_*`` environment that makes an app process read ``settings`` (the
    fields set explicitly), plus ``extra`` variables."""
    env = {}
    for name in settings.model_fields_set:
        value = getattr(settings, name)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list):
            text = ",".join(value)
        else:
            text = str(value)
        env[f"BANDIT_{name.upper()}"] = text
    return {**env, **extra}


@contextlib.contextmanager
def apps(*procs: AppProcess) -> Iterator[tuple[AppProcess, ...]]:
    """Start ``procs``; always stop them afterwards."""
    try:
        for p in procs:
            p.start()
        yield procs
    finally:
        for p in procs:
            p.kill() if p.proc is not None and p.proc.poll() is not None else p.stop()


def _redis_server(port: int, directory: Path, *options: str) -> subprocess.Popen[bytes]:
    """A ``redis-server`` on 127.0.0.1:``port`` keeping its files in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        + ["--dir", str(directory), "--logfile", "redis.log", *options],
        stdout=subprocess.DEVNULL,
    )


def _stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)


def _persistence(persist: bool) -> list[str]:
    """``redis-server`` options: with ``persist``, an append-only file fsync'ed on every
    write (a restart keeps every acknowledged write); without, none."""
    return ["--appendonly", "yes", "--appendfsync", "always"] if persist else ["--appendonly", "no"]


class RedisClusterServers:
    """A Redis Cluster of ``masters`` masters with one replica each, from ``redis-server
    --cluster-enabled yes`` processes joined by ``redis-cli --cluster create``.
    ``url`` is the service's ``redis+cluster://`` URL listing every node. ``persist``:
    every node keeps an append-only file (:func:`_persistence`), so :meth:`restart`
    brings a node back with its data. ``node_timeout_ms``: how long a master may be
    unreachable before its replica takes over."""

    def __init__(
        self, masters: int = 3, persist: bool = False, node_timeout_ms: int = 2000
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bandit-redis-cluster-"))
        self.ports = [free_port() for _ in range(2 * masters)]
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._options = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(node_timeout_ms),
            *_persistence(persist),
        ]
        self._bus_ports = {port: free_port() for port in self.ports}

    def _node(self, port: int) -> subprocess.Popen[bytes]:
        # --cluster-port: the bus; port + 10000 may exceed 65535
        options = [*self._options, "--cluster-port", str(self._bus_ports[port])]
        return _redis_server(port, self.dir / str(port), *options)

    def start(self) -> None:
        try:
            for port in self.ports:
                self.procs.append(self._node(port))
            for port in self.ports:
                _wait(
                    lambda port=port: redis.Redis(host="127.0.0.1", port=port).ping(),
                    15,
                    "cluster node ready",
                )
            subprocess.run(
                ["redis-cli", "--cluster", "create"]
                + [f"127.0.0.1:{p}" for p in self.ports]
                + ["--cluster-replicas", "1", "--cluster-yes"],
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=60,
            )
            for port in self.ports:
                _wait(
                    lambda port=port: (
                        redis.Redis(host="127.0.0.1", port=port).cluster("info")["cluster_state"]
                        == "ok"
                    ),
                    30,
                    "cluster_state:ok",
                )
            _wait(  # every slot range served by a master and its replica
                lambda: all(
                    len(r["replicas"]) == 1 for r in self.client().cluster_slots().values()
                ),
                30,
                "replicas in the slot map",
            )
        except BaseException:
            self.stop()
            raise

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0])

    def node(self, port: int) -> redis.Redis:
        """A client of the one node on ``port`` (no redirects followed)."""
        return redis.Redis(host="127.0.0.1", port=port)

    def master_of(self, slot: int, asking: int | None = None) -> int:
        """Port of the master serving ``slot``, as the live node on ``asking`` (default:
        the first live node) sees it."""
        port = asking or next(p for p, proc in zip(self.ports, self.procs) if proc.poll() is None)
        for start, end, master, *_ in self.node(port).execute_command("CLUSTER SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise AssertionError(f"slot {slot} is not served")

    def masters(self) -> list[int]:
        """Ports of the live masters."""
        return sorted(
            p
            for p, proc in zip(self.ports, self.procs)
            if proc.poll() is None and self.node(p).info("replication")["role"] == "master"
        )

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port``."""
        proc = self.procs[self.ports.index(port)]
        proc.kill()
        proc.wait(timeout=15)

    def restart(self, port: int) -> None:
        """Start the node on ``port`` again (after :meth:`kill`) on its files, and wait
        until it answers as part of a cluster whose every slot is served."""
        self.procs[self.ports.index(port)] = self._node(port)
        _wait(
            lambda: self.node(port).cluster("info")["cluster_state"] == "ok",
            30,
            "the restarted node in a cluster_state:ok",
        )

    def migrate_slot(self, slot: int, target: int, batch: int = 10, pause: float = 0.0) -> int:
        """Move ``slot`` to the master on ``target`` as ``redis-cli --cluster reshard``
        does (``CLUSTER SETSLOT IMPORTING/MIGRATING``, ``MIGRATE`` of ``batch`` keys at
        a time with ``pause`` seconds between batches, then ``SETSLOT NODE`` on every
        master); returns how many keys moved."""
        source = self.master_of(slot)
        src, dst = self.node(source), self.node(target)
        src_id, dst_id = src.execute_command("CLUSTER MYID"), dst.execute_command("CLUSTER MYID")
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        moved = 0
        while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, batch):
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(pause)
        for port in [target, source, *(m for m in self.masters() if m not in (target, source))]:
            self.node(port).execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
        return moved

    def stop(self) -> None:
        _stop_all(self.procs)
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelGroup:
    """A master, one replica and three sentinels monitoring them as ``mymaster``
    (down after ``down_after_ms``, 1 s by default). ``url`` is the service's
    ``redis+sentinel://`` URL. ``persist``: both servers keep an append-only file
    (:func:`_persistence`), so :meth:`restart` brings one back with its data."""

    MASTER_NAME = "mymaster"

    def __init__(self, persist: bool = False, down_after_ms: int = 1000) -> None:
        self.persist = persist
        self.down_after_ms = down_after_ms
        self.dir = Path(tempfile.mkdtemp(prefix="bandit-redis-sentinel-"))
        self.master_port, self.replica_port = free_port(), free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.url = (
            "redis+sentinel://"
            + ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
            + f"/{self.MASTER_NAME}/0"
        )
        self.servers: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinels: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        try:
            self.servers[self.master_port] = self._server(self.master_port)
            self.servers[self.replica_port] = self._server(
                self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port)
            )
            _wait(
                lambda: (
                    redis.Redis(host="127.0.0.1", port=self.replica_port).info("replication")[
                        "master_link_status"
                    ]
                    == "up"
                ),
                15,
                "replica in sync",
            )
            for port in self.sentinel_ports:
                conf = self.dir / f"sentinel-{port}.conf"
                conf.write_text(
                    f"port {port}\nbind 127.0.0.1\ndir {self.dir}\n"
                    f"sentinel monitor {self.MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
                    f"sentinel down-after-milliseconds {self.MASTER_NAME} {self.down_after_ms}\n"
                    f"sentinel failover-timeout {self.MASTER_NAME} 10000\n"
                )
                self.sentinels.append(
                    subprocess.Popen(
                        ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL
                    )
                )
            for port in self.sentinel_ports:
                _wait(
                    lambda port=port: (
                        redis.Redis(host="127.0.0.1", port=port).info("sentinel")["master0"][
                            "slaves"
                        ]
                        == 1
                        and redis.Redis(host="127.0.0.1", port=port).info("sentinel")["master0"][
                            "sentinels"
                        ]
                        == 3
                    ),
                    30,
                    "sentinels see the replica and each other",
                )
        except BaseException:
            self.stop()
            raise

    def master_address(self) -> tuple[str, int]:
        """The master as the sentinels name it now."""
        host, port = redis.Redis(
            host="127.0.0.1", port=self.sentinel_ports[0]
        ).sentinel_get_master_addr_by_name(self.MASTER_NAME)
        return host.decode() if isinstance(host, bytes) else host, int(port)

    def _server(self, port: int, *options: str) -> subprocess.Popen[bytes]:
        name = "master" if port == self.master_port else "replica"
        return _redis_server(port, self.dir / name, *_persistence(self.persist), *options)

    def restart(self, port: int) -> None:
        """Start the server on ``port`` again (after :meth:`kill_master`) on its files.
        It comes back as it started; a server that was the master while the sentinels
        still name it so, the master again."""
        options = (
            [] if port == self.master_port else ["--replicaof", "127.0.0.1", str(self.master_port)]
        )
        self.servers[port] = self._server(port, *options)
        _wait(lambda: redis.Redis(host="127.0.0.1", port=port).ping(), 15, "redis-server ready")

    def kill_master(self) -> int:
        """SIGKILL the current master; returns its port."""
        port = self.master_address()[1]
        proc = self.servers[port]
        proc.kill()
        proc.wait(timeout=15)
        return port

    def client(self) -> redis.Redis:
        """A client of the current master."""
        return redis.Redis(host="127.0.0.1", port=self.master_address()[1])

    def stop(self) -> None:
        _stop_all([*self.servers.values(), *self.sentinels])
        self.servers, self.sentinels = {}, []
        shutil.rmtree(self.dir, ignore_errors=True)
