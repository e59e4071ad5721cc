"""Capacity of the scale-out path: one Redis against a Redis Cluster, one
policy against eight, and the units of capacity planning (docs/operations.md,
"Capacity planning").

Starts a private ``redis-server`` and a private 3-master (+3 replica) Redis Cluster
(``tests.servers``), a private PostgreSQL schema for each, and one ``bandit serve``
(one worker) on each. Eight LinUCB policies (K = 50 arms, d = 32) exist on both; on the
cluster their slots spread over the three masters. ``wrk`` drives each contender
closed-loop with ``--connections`` connections for ``--duration`` seconds:

* ``recommend``: ``POST /recommend``, cycling over the policies of the row (1 or 8);
* ``recommend+reward``: as ``benchmarks.service_load``: a ``POST /reward`` for an event
  id of an earlier answer whenever one is waiting, else a ``POST /recommend``.

The contenders (2 backends x 1 or 8 policies x 2 loads) run in a fresh random order
each round, ``--rounds`` rounds; the table gives the median over rounds. Beside
requests/s and latency percentiles each row gives the CPU the request cost, read from
``/proc``: the api's (``api_cpu_ms``; ``per api core`` = 1000 / it) and the Redis
masters' (``redis_cpu_us``, summed over the masters, replicas left out, less what the
masters spend idle: cron, cluster bus; measured before the rounds). A policy lives
in one slot, so one policy's traffic is served by one shard: ``per shard`` = 10^6 /
``redis_cpu_us`` is what one Redis core sustains for one policy's requests of that
kind. On this 2-core machine the api saturates long before Redis, so shard capacity is
derived from Redis's CPU per request, not measured at saturation.

Last, the event-log writer (``service.storage.writer.EventLogWriter`` over PostgreSQL,
the service's own batching writer) writes ``--log-rows`` decisions and as many
rewards, shaped as the service logs them for these policies (32 context floats, 50
candidate ids and scores); ``rows/s`` counts both.

    python -m benchmarks.cluster_capacity
    python -m benchmarks.cluster_capacity --duration 3 --rounds 1 --log-rows 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks._harness import add_label_argument

K, D, POLICIES = 50, 32, 8
RECOMMEND_LUA = """
local bodies = {BODIES}
local i = 0
function request()
  i = i + 1
  return wrk.format("POST", "/recommend", {["Content-Type"] = "application/json"},
                    bodies[i % #bodies + 1])
end
"""
MIXED_LUA = """
local bodies = {BODIES}
local i = 0
local waiting = {}
function request()
  local id = table.remove(waiting)
  if id then
    return wrk.format("POST", "/reward", {["Content-Type"] = "application/json"},
                      '{"event_id":"' .. id .. '","reward":1.0}')
  end
  i = i + 1
  return wrk.format("POST", "/recommend", {["Content-Type"] = "application/json"},
                   bodies[i % #bodies + 1])
end
function response(status, headers, body)
  local id = string.match(body, '"event_id":"([^"]+)","arm_id"')
  if id and string.find(body, '"ranking"', 1, true) then table.insert(waiting, id) end
end
"""


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes ``pids`` so far (Linux ``/proc``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def policy_names(n: int) -> list[str]:
    return [f"p{i}" for i in range(n)]


def lua_script(tmp: Path, template: str, policies: list[str]) -> Path:
    """``template`` with one ``/recommend`` body per policy (the same context)."""
    context = [round(0.1 + 0.8 * ((i * 37) % 100) / 100.0, 3) for i in range(D)]
    bodies = ", ".join(
        "[[" + json.dumps({"policy": p, "context": context}, separators=(",", ":")) + "]]"
        for p in policies
    )
    path = tmp / f"{uuid.uuid4().hex}.lua"
    path.write_text(template.replace("{BODIES}", "{" + bodies + "}"))
    return path


def start_api(tmp: Path, name: str, redis_url: str, database_url: str) -> Any:
    """``bandit serve`` (one worker) on the backend, with the eight policies."""
    from benchmarks.service_load import Server
    from tests.servers import free_port

    port = free_port()
    env = dict(
        os.environ,
        BANDIT_REDIS_URL=redis_url,
        BANDIT_DATABASE_URL=database_url,
        BANDIT_DATA_DIR=str(tmp / f"data-{name}"),
        BANDIT_DEMO_POLICY="false",
        BANDIT_PERSONALIZER_LOOP="false",
    )
    argv = [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1"]
    server = Server([*argv, "--port", str(port)], env, port, "/readyz")
    spec = {"algorithm": "linucb", "dimension": D, "arms": [f"arm{i}" for i in range(K)]}
    for policy in policy_names(POLICIES):
        request = urllib.request.Request(
            f"{server.base}/policies/{policy}",
            data=json.dumps(spec).encode(),
            method="PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as resp:
            assert resp.status == 200
    return server


def measure_apis(
    args: argparse.Namespace, tmp: Path
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every contender ``args.rounds`` times in shuffled order: one row per contender
    with the medians over rounds, and each backend's idle Redis CPU (ms per second)."""
    import numpy as np

    from benchmarks import _harness as h
    from benchmarks.service_load import wrk
    from tests.databases import postgres_schema
    from tests.servers import RedisClusterServers, RedisServer

    with ExitStack() as stack:
        single = RedisServer(tmp / "redis", persist=False)
        single.start()
        stack.callback(single.stop)
        cluster = RedisClusterServers()
        cluster.start()
        stack.callback(cluster.stop)
        assert single.proc is not None  # started above
        masters = {
            "redis": [single.proc.pid],
            "cluster": [cluster.procs[cluster.ports.index(p)].pid for p in cluster.masters()],
        }
        servers = {}
        for backend, url in (("redis", single.url), ("cluster", cluster.url)):
            database = stack.enter_context(postgres_schema())
            servers[backend] = start_api(tmp, backend, url, database)
            stack.callback(servers[backend].stop)
        contenders = [
            (backend, n, load)
            for backend in servers
            for n in (1, POLICIES)
            for load in ("recommend", "recommend+reward")
        ]
        scripts = {
            (n, load): lua_script(
                tmp, RECOMMEND_LUA if load == "recommend" else MIXED_LUA, policy_names(n)
            )
            for n in (1, POLICIES)
            for load in ("recommend", "recommend+reward")
        }
        for backend, server in servers.items():  # warm-up: every policy loaded, pools open
            wrk(server.base + "/", scripts[(POLICIES, "recommend+reward")], 2, args.connections)
        # Redis's own background work per second (cron, cluster bus, replication
        # pings), measured idle and subtracted from each run: the rest is the requests'.
        idle0 = {b: cpu_seconds(pids) for b, pids in masters.items()}
        time.sleep(args.duration)
        idle = {b: (cpu_seconds(p) - idle0[b]) / args.duration for b, p in masters.items()}
        runs: dict[tuple[str, int, str], list[dict[str, Any]]] = {c: [] for c in contenders}
        rng = np.random.default_rng(0)
        for _ in range(args.rounds):
            for i in rng.permutation(len(contenders)):
                backend, n, load = contenders[i]
                server = servers[backend]
                redis0, start = cpu_seconds(masters[backend]), time.perf_counter()
                r = wrk(
                    server.base + "/",
                    scripts[(n, load)],
                    args.duration,
                    args.connections,
                    server=server,
                )
                redis1, elapsed = cpu_seconds(masters[backend]), time.perf_counter() - start
                done = r["requests_per_s"] * args.duration
                busy = redis1 - redis0 - idle[backend] * elapsed
                r["redis_cpu_us"] = 1e6 * max(busy, 0.0) / max(done, 1)
                r["loadavg"] = h.load()["loadavg"]
                runs[(backend, n, load)].append(r)
    rows = []
    for (backend, n, load), rs in runs.items():

        def median(key: str, rs: list[dict[str, Any]] = rs) -> float | None:
            values = [r[key] for r in rs if r[key] is not None]
            return statistics.median(values) if values else None

        api_cpu, redis_cpu = median("cpu_ms_per_request"), median("redis_cpu_us")
        rows.append(
            {
                "backend": backend,
                "policies": n,
                "load": load,
                "requests_per_s": median("requests_per_s"),
                "p50_ms": median("p50_ms"),
                "p99_ms": median("p99_ms"),
                "non_2xx": sum(r["non_2xx"] for r in rs),
                "api_cpu_ms": api_cpu,
                "per api core": 1000 / api_cpu if api_cpu else None,
                "redis_cpu_us": redis_cpu,
                "per shard": 1e6 / redis_cpu if redis_cpu else None,
                "loadavg": [r["loadavg"] for r in rs],
            }
        )
    return rows, {b: round(1000 * v, 2) for b, v in idle.items()}


def measure_log_writer(rows: int, tmp: Path) -> dict[str, Any]:
    """``rows`` decisions and ``rows`` rewards through the service's writer into a fresh
    PostgreSQL schema; rows/s over the whole write (submit to flushed)."""
    from benchmarks import _harness as h
    from service.storage.base import DecisionRecord, RewardRecord
    from service.storage.migrate import upgrade_head
    from service.storage.sql_log import SqlEventLog
    from service.storage.writer import EventLogWriter
    from tests.databases import postgres_schema

    context = [0.5] * D
    candidates = [{"id": f"arm{i}"} for i in range(K)]
    scores = [0.25] * K
    with postgres_schema() as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        writer = EventLogWriter(log, tmp / "spool", batch_size=500, flush_interval=0.2)
        try:
            now = time.time()
            start = time.perf_counter()
            for i in range(rows):
                event = f"e{i}"
                writer.submit_decision(
                    DecisionRecord(event, "p0", now, context, candidates, "arm0", 1.0, scores, i)
                )
                writer.submit_reward(RewardRecord(event, "p0", "arm0", 1.0, "explicit", now))
            assert writer.flush(600)
            seconds = time.perf_counter() - start
            assert log.count("p0") == (rows, rows)
        finally:
            writer.close()
            log.close()
    return {
        "decisions": rows,
        "rewards": rows,
        "seconds": seconds,
        "rows_per_s": 2 * rows / seconds,
        "loadavg": h.load()["loadavg"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run (default 5)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every contender (default 3)"
    )
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--log-rows", type=int, default=20_000, help="decisions (and rewards) written"
    )
    add_label_argument(parser, "cluster_capacity")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    from benchmarks import _harness as h

    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        before = h.load()
        rows, idle_ms = measure_apis(args, tmp)
        writer = measure_log_writer(args.log_rows, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    columns = ["backend", "policies", "load", "requests_per_s", "p50_ms", "p99_ms", "non_2xx"]
    columns += ["api_cpu_ms", "per api core", "redis_cpu_us", "per shard", "loadavg"]
    print(h.table(rows, columns))
    print(f"\nidle Redis masters' CPU, ms per second (subtracted): {idle_ms}")
    print(
        f"\nevent-log writer: {writer['decisions']} decisions + {writer['rewards']} rewards "
        f"in {writer['seconds']:.1f} s = {writer['rows_per_s']:,.0f} rows/s "
        f"(load {writer['loadavg']})"
    )
    path = h.write_json(
        "cluster_capacity",
        {
            "rows": rows,
            "idle_redis_cpu_ms_per_s": idle_ms,
            "log_writer": writer,
            "duration_s": args.duration,
            "rounds": args.rounds,
            "connections": args.connections,
            "load_before": before,
            "load_after": h.load(),
        },
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
