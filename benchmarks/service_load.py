"""Service throughput and latency under a loopback load generator.

Starts ``python -m service.cli serve`` (uvicorn; uvloop and httptools come with
``uvicorn[standard]``) on a loopback port for each backend and worker count, creates a
LinUCB policy with K arms at d = 32, and drives it with ``wrk`` (Lua scripts written to
a temporary directory; ``apt-get install wrk``):

* ``recommend max``: ``POST /recommend`` as fast as ``--connections`` closed-loop
  connections go, ``--duration`` seconds;
* ``recommend half``: the same with a per-request ``delay()`` chosen so the offered rate
  is about half the maximum just measured (wrk has no open-loop mode; the achieved rate
  is reported);
* ``recommend+reward``: each connection sends ``POST /reward`` for an event id from an
  earlier ``/recommend`` response whenever one is waiting, else ``/recommend``; the rate
  counts both kinds.

Each row also gives the server's CPU time per request (``cpu_ms_per_request``: user +
system time of the server's process group, Linux ``/proc``, over the requests wrk
completed): on this shared two-core machine the requests/s move with the other
processes' load, the CPU per request much less, so ``x trivial cpu`` (the trivial
endpoint's CPU per request over the row's) is the steadier ratio.

Beside them, in the same run, a trivial FastAPI app (:mod:`benchmarks.trivial_app`:
``async def`` handler, a pydantic model of the same body) under the same server gives
this machine's HTTP ceiling. Backends: the embedded default (in-process state, SQLite
log; one worker only, by design) and Redis + PostgreSQL (a scratch Redis database,
``--redis-db``, flushed first, and a scratch PostgreSQL database, ``--pg-db``, dropped
and re-created).

    python -m benchmarks.service_load
    python -m benchmarks.service_load --duration 5 --ks 50 --workers 1
    python -m benchmarks.service_load --ks 50 --workers 1 --backends redis+postgres --json-bits 7

``--json-bits`` adds, in the same run, a shared model over JSON features (``payload``
"json bits N", :func:`_json_load`; ``hybrid_linucb``, or ``--json-algorithm
diag_linucb``) beside the dense K = 50, d = 32 rows.

``--personalizer-rank`` adds, in the same run, the default Personalizer loop
(``personalizer``: hybrid LinUCB over JSON features, 8 bits, every context x action
namespace pair, epsilon 0.2) called through Personalizer's v1.0 rank route
(``POST /personalizer/v1.0/rank``, :func:`rank_body`: the same request as
``--json-bits``, its context as three namespace objects), ``max`` and ``half`` loads
only; the comparison of docs/performance.md:

    python -m benchmarks.service_load --own-servers --ks 50 --workers 1 --backends redis+postgres --connections 1,16 --loads max --personalizer-rank

``--event-ids`` gives every ``/recommend`` of the ``max`` and ``half`` loads a client
``event_id`` of its own (payload "..., client event ids"), as Personalizer's SDK samples
send ``eventId``.

``--connections`` takes a list (each load at each count, the trivial endpoint too),
``--coalescing on,off`` serves each backend twice, with and without coalesced
``/recommend`` (``BANDIT_RECOMMEND_COALESCING``), ``--loads`` picks among ``max``,
``half`` and ``mixed``, and ``--own-servers`` runs Redis and PostgreSQL as private
servers started for the run (``tests.databases``) instead of the scratch databases of
the machine's. The coalescing comparison of docs/performance.md:

    python -m benchmarks.service_load --own-servers --ks 50 --workers 1 --backends redis+postgres --json-bits 7 --connections 1,4,16,64 --coalescing on,off --loads max --duration 5

``--console-user N`` follows each ``max`` load with N pairs of alternating ``max`` runs
without and with a console user (:func:`console_user`: the policy page of the policy
driven, once a second), the comparison of docs/console.md:

    python -m benchmarks.service_load --own-servers --ks 50 --workers 1 --backends redis+postgres --connections 16 --loads max --console-user 3 --duration 8

``--reward-batching off,on`` serves every row once with ``BANDIT_REWARD_BATCHING``
false and once true (one store transaction per reward, or a policy's concurrent rewards
coalesced: docs/performance.md, "Rewards in batches"); the ``recommend+reward`` rows
count the store transactions the server redid after a conflict
(``transaction_retries``, from ``/metrics``):

    python -m benchmarks.service_load --ks 50 --workers 1,2 --backends redis+postgres \
        --json-bits 7 --loads mixed --reward-batching off,on
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._harness import add_label_argument

RECOMMEND_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [[BODY]]
local pause = PAUSE
function delay() return pause end
"""

# --event-ids: every request carries an event_id of its own (thread, start second,
# counter: unique across the warm-up and the measured runs, which start seconds apart)
EVENT_IDS_LUA = """
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tag", threads .. "-" .. os.time())
end
local counter = 0
function request()
  counter = counter + 1
  local id = '{"event_id":"e' .. tag .. '-' .. counter .. '",'
  return wrk.format(nil, nil, nil, id .. string.sub(wrk.body, 2))
end
"""

MIXED_LUA = """
local rec = [[BODY]]
local waiting = {}
local sent_reward = false
function request()
  local id = table.remove(waiting)
  if id then
    sent_reward = true
    return wrk.format("POST", "/reward", {["Content-Type"] = "application/json"},
                      '{"event_id":"' .. id .. '","reward":1.0}')
  end
  sent_reward = false
  return wrk.format("POST", "/recommend", {["Content-Type"] = "application/json"}, rec)
end
function response(status, headers, body)
  local id = string.match(body, '"event_id":"([^"]+)","arm_id"')
  if id and string.find(body, '"ranking"', 1, true) then table.insert(waiting, id) end
end
"""


def _body(policy: str, d: int) -> str:
    context = [round(0.1 + 0.8 * ((i * 37) % 100) / 100.0, 3) for i in range(d)]
    return json.dumps({"policy": policy, "context": context}, separators=(",", ":"))


def _wait_ready(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout} s")


def _request(method: str, url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def wrk_match(pattern: str, text: str, flags: int = 0) -> re.Match[str]:
    """The first match of ``pattern`` in wrk's output; wrk printing something else is an error."""
    match = re.search(pattern, text, flags)
    if match is None:
        raise ValueError(f"wrk output without {pattern!r}: {text!r}")
    return match


def wrk_ms(text: str) -> float:
    """A wrk duration (``812.5us``, ``3.2ms``, ``1.1s``) in milliseconds."""
    value, unit = wrk_match(r"^([\d.]+)(us|ms|s)$", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def _group_cpu_seconds(pgid: int) -> float | None:
    """User + system CPU seconds of the live processes in process group ``pgid`` (the
    server and its uvicorn workers); None where ``/proc`` is not there to read."""
    root = Path("/proc")
    if not root.is_dir():
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in root.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == pgid:  # fields[0] is the state: pgrp is field 5 of stat
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def wrk(
    url: str,
    script: Path,
    duration: float,
    connections: int,
    threads: int = 2,
    server: Server | None = None,
) -> dict[str, Any]:
    """One wrk run; requests/s, non-2xx count and the latency percentiles it prints,
    and the ``server``'s CPU milliseconds per completed request."""
    cpu0 = None if server is None else _group_cpu_seconds(server.proc.pid)
    out = subprocess.run(
        [
            "wrk",
            f"-t{min(threads, connections)}",  # wrk needs a connection per thread
            f"-c{connections}",
            f"-d{round(duration)}s",
            "--latency",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu1 = None if server is None else _group_cpu_seconds(server.proc.pid)
    done = re.search(r"(\d+) requests in", out)
    cpu_ms = None
    if cpu0 is not None and cpu1 is not None and done and int(done.group(1)):
        cpu_ms = 1000 * (cpu1 - cpu0) / int(done.group(1))
    pct = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)\s*$", out, re.MULTILINE))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests_per_s": float(wrk_match(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": wrk_ms(pct["50"]) if "50" in pct else None,
        "p90_ms": wrk_ms(pct["90"]) if "90" in pct else None,
        "p99_ms": wrk_ms(pct["99"]) if "99" in pct else None,
        "raw": out if len(pct) < 4 else None,
        "non_2xx": int(bad.group(1)) if bad else 0,
        "errors": re.findall(r"Socket errors: .*", out),
        "cpu_ms_per_request": cpu_ms,
    }


class Server:
    """``python -m service.cli serve`` (or the trivial app under uvicorn) as a subprocess."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, ready_path: str) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        self.base = f"http://127.0.0.1:{port}"
        _wait_ready(self.base + ready_path)

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def _scripts(tmp: Path, body: str, pause_ms: int, event_ids: bool = False) -> tuple[Path, Path]:
    rec = tmp / f"recommend_{pause_ms}.lua"
    script = RECOMMEND_LUA + (EVENT_IDS_LUA if event_ids else "")
    rec.write_text(script.replace("BODY", body).replace("PAUSE", str(pause_ms)))
    mixed = tmp / "mixed.lua"
    mixed.write_text(MIXED_LUA.replace("BODY", body))
    return rec, mixed


def _json_load(policy: str, bits: int, algorithm: str) -> tuple[dict[str, Any], str]:
    """A hybrid_linucb policy over JSON features of ``bits`` and the request of the
    performance goal (``benchmarks.featurizer.request``: 15 context features in 3 namespaces,
    50 candidates of 6 features, every context x action interaction). The same body on
    every request: the catalog repeats, so the server's cache of hashed candidates hits."""
    from benchmarks.featurizer import request

    context, actions = request(0)
    spec = {"algorithm": algorithm, "features": {"bits": bits}}
    arms = [{"id": a["item"]["id"], "features": a} for a in actions]
    return spec, json.dumps(
        {"policy": policy, "context": context, "arms": arms}, separators=(",", ":")
    )


def rank_body() -> str:
    """The default loop's Personalizer rank request: :func:`_json_load`'s request with
    its context as Personalizer's list of namespace objects and each action's features
    as a one-object list, as the SDKs send them."""
    from benchmarks.featurizer import request

    context, actions = request(0)
    body = {
        "contextFeatures": [{namespace: value} for namespace, value in context.items()],
        "actions": [{"id": a["item"]["id"], "features": [a]} for a in actions],
    }
    return json.dumps(body, separators=(",", ":"))


@contextmanager
def console_user(base: str, policy: str) -> Iterator[list[tuple[int, float]]]:
    """A console user on a thread: ``GET /console/policies/{policy}`` (the 1-hour
    policy page; no API keys, so the loopback rule lets it in) once a second while
    the block runs; yields the (status, milliseconds) of each page, filled as it goes."""
    pages: list[tuple[int, float]] = []
    stop = threading.Event()

    def refresh() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"{base}/console/policies/{policy}", timeout=30) as r:
                r.read()
                pages.append((r.status, 1000 * (time.perf_counter() - t0)))
            stop.wait(max(0.0, 1.0 - (time.perf_counter() - t0)))

    thread = threading.Thread(target=refresh, daemon=True)
    thread.start()
    try:
        yield pages
    finally:
        stop.set()
        thread.join()


def _drive(
    server: Server,
    tmp: Path,
    body: str,
    label: dict[str, Any],
    args: argparse.Namespace,
    path: str = "/recommend",
) -> list[dict[str, Any]]:
    """The ``--loads`` (max, about half the max rate, recommend+reward) on one body, at
    each of ``--connections``; at a ``path`` other than ``/recommend`` (the Personalizer
    rank) only max and half, and no client event ids."""
    from benchmarks import _harness as h

    native = path == "/recommend"
    rec, mixed = _scripts(tmp, body, 0, args.event_ids and native)
    url = server.base + path
    rows = []
    for connections in args.connections:
        at = {**label, "connections": connections}
        wrk(url, rec, 2, connections)
        top = wrk(url, rec, args.duration, connections, server=server)
        if "max" in args.loads:
            rows.append({**at, "load": "recommend max", **top, "loadavg": h.load()["loadavg"]})
        if args.console_user and native:  # alternating runs without and with the user
            policy = json.loads(body)["policy"]
            for state in ["off", "on"] * args.console_user:
                if state == "off":
                    r = wrk(url, rec, args.duration, connections, server=server)
                    pages: list[tuple[int, float]] = []
                else:
                    with console_user(server.base, policy) as pages:
                        r = wrk(url, rec, args.duration, connections, server=server)
                    assert pages and all(status == 200 for status, _ in pages), pages
                load = "recommend max, console user " + state
                page_ms = sorted(ms for _, ms in pages)
                rows.append(
                    {
                        **at,
                        "load": load,
                        **r,
                        "console_pages": len(pages),
                        "console_page_p50_ms": page_ms[len(page_ms) // 2] if pages else None,
                        "loadavg": h.load()["loadavg"],
                    }
                )
        if "half" in args.loads:  # each connection pauses between requests
            rate = max(top["requests_per_s"] / 2, 1)
            pause = max(0, round(1000 * connections / rate - (top["p50_ms"] or 0)))
            half, _ = _scripts(tmp, body, pause, args.event_ids and native)
            r = wrk(url, half, args.duration, connections, server=server)
            load = f"recommend ~half rate (pause {pause} ms)"
            rows.append({**at, "load": load, **r, "loadavg": h.load()["loadavg"]})
        if "mixed" in args.loads and native:
            retries = _transaction_retries(server.base)
            r = wrk(url, mixed, args.duration, connections, server=server)
            r["transaction_retries"] = _transaction_retries(server.base) - retries
            rows.append({**at, "load": "recommend+reward", **r, "loadavg": h.load()["loadavg"]})
    return rows


def _transaction_retries(base: str) -> float:
    """Store transactions the server redid after a conflict so far (every policy, every
    worker: ``bandit_store_transaction_retries_total`` of ``/metrics``)."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    found = re.findall(
        r"^bandit_store_transaction_retries_total\{[^}]*\} (\S+)$", text, re.MULTILINE
    )
    return sum(float(v) for v in found)


def _reset_backends(redis_url: str, pg_admin: str, pg_db: str) -> None:
    import redis

    redis.Redis.from_url(redis_url).flushdb()
    for sql in (f'DROP DATABASE IF EXISTS "{pg_db}" WITH (FORCE)', f'CREATE DATABASE "{pg_db}"'):
        subprocess.run(["psql", pg_admin, "-qc", sql], check=True, capture_output=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import _harness as h

    tmp = Path(tempfile.mkdtemp(prefix="bench-service-"))
    port = args.port
    rows: list[dict[str, Any]] = []
    d = 32
    try:
        # The HTTP ceiling: same server, same body size, a handler that only parses it.
        for workers in args.workers:
            body = _body("bench_k50", d)
            rec, _ = _scripts(tmp, body, 0)
            server = Server(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "benchmarks.trivial_app:app",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--workers",
                    str(workers),
                    "--log-level",
                    "warning",
                ],
                dict(os.environ),
                port,
                "/healthz",
            )
            try:
                for connections in args.connections:
                    wrk(server.base + "/recommend", rec, 2, connections)
                    r = wrk(
                        server.base + "/recommend", rec, args.duration, connections, server=server
                    )
                    rows.append(
                        {
                            "backend": "trivial endpoint",
                            "workers": workers,
                            "connections": connections,
                            "K": None,
                            "load": "recommend max",
                            **r,
                            "loadavg": h.load()["loadavg"],
                        }
                    )
            finally:
                server.stop()
        for backend, workers, coalescing, batching in (
            (b, w, c, r)
            for b in args.backends
            for w in args.workers
            for c in args.coalescing
            for r in args.reward_batching
        ):
            if backend == "embedded" and workers > 1:
                continue  # the embedded default keeps state in process: one worker only
            env = dict(
                os.environ,
                BANDIT_DATA_DIR=str(tmp / f"data-{backend}-{workers}-{coalescing}-{batching}"),
                BANDIT_DEMO_POLICY="false",
                BANDIT_RECOMMEND_COALESCING=str(coalescing == "on").lower(),
                BANDIT_REWARD_BATCHING=str(batching == "on").lower(),
            )
            if backend == "redis+postgres":
                _reset_backends(args.redis_url, args.pg_admin, args.pg_db)
                env.update(
                    BANDIT_REDIS_URL=args.redis_url,
                    BANDIT_DATABASE_URL=f"{args.pg_admin.rsplit('/', 1)[0]}/{args.pg_db}",
                )
            server = Server(
                [
                    sys.executable,
                    "-m",
                    "service.cli",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--workers",
                    str(workers),
                ],
                env,
                port,
                "/readyz",
            )
            try:
                loads = [(K, "dense", f"bench_k{K}") for K in args.ks]
                if args.json_bits is not None:
                    loads.append((50, f"json bits {args.json_bits}", "bench_json"))
                for K, payload, policy in loads:
                    spec, body = (
                        _json_load(policy, args.json_bits, args.json_algorithm)
                        if policy == "bench_json"
                        else (
                            {
                                "algorithm": "linucb",
                                "dimension": d,
                                "arms": [f"arm{i}" for i in range(K)],
                            },
                            _body(policy, d),
                        )
                    )
                    _request("PUT", f"{server.base}/policies/{policy}", spec)
                    label = {
                        "backend": backend,
                        "coalescing": coalescing,
                        "reward_batching": batching,
                        "workers": workers,
                        "K": K,
                        "payload": payload + (", client event ids" if args.event_ids else ""),
                    }
                    rows.extend(_drive(server, tmp, body, label, args))
                if args.personalizer_rank:
                    label = {
                        "backend": backend,
                        "coalescing": coalescing,
                        "reward_batching": batching,
                        "workers": workers,
                        "K": 50,
                        "payload": "personalizer rank, default loop",
                    }
                    rows.extend(
                        _drive(server, tmp, rank_body(), label, args, "/personalizer/v1.0/rank")
                    )
            finally:
                server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"rows": rows}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Three panels against connections: requests/s as a fraction of the trivial
    endpoint's, p99 latency and server CPU per request, one line per backend, payload and
    coalescing (the ``recommend max`` rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["load"] == "recommend max":
            name = r["backend"]
            if r.get("payload"):
                name += f", {r['payload']}, coalescing {r.get('coalescing', 'on')}"
            lines.setdefault(name, []).append(r)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    panels = (
        ("x trivial ceiling", "requests/s / trivial endpoint's"),
        ("p99_ms", "p99 latency (ms)"),
        ("cpu_ms_per_request", "server CPU per request (ms)"),
    )
    for ax, (key, label) in zip(axes, panels):
        for name, points in lines.items():
            points = sorted(points, key=lambda r: r["connections"])
            style = "s--" if "off" in name else ("k:" if "trivial" in name else "o-")
            xs = [r["connections"] for r in points]
            ax.plot(xs, [r[key] for r in points], style, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("connections (wrk, closed loop)")
        ax.set_ylabel(label)
        if key == "p99_ms":
            ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("POST /recommend, K = 50, one worker; 2-core shared VM (ratios within one run)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run (default 8)")
    parser.add_argument(
        "--connections", type=lambda s: [int(v) for v in s.split(",")], default=[32]
    )
    parser.add_argument(
        "--coalescing",
        type=lambda s: s.split(","),
        default=["on"],
        help="on, off or on,off: serve with and/or without coalesced /recommend",
    )
    parser.add_argument(
        "--loads",
        type=lambda s: s.split(","),
        default=["max", "half", "mixed"],
        help="of max, half, mixed (default all three)",
    )
    parser.add_argument(
        "--own-servers",
        action="store_true",
        help="private Redis and PostgreSQL servers started for the run (tests.databases)",
    )
    parser.add_argument("--ks", type=lambda s: [int(v) for v in s.split(",")], default=[10, 50])
    parser.add_argument("--workers", type=lambda s: [int(v) for v in s.split(",")], default=[1, 2])
    parser.add_argument(
        "--backends", type=lambda s: s.split(","), default=["embedded", "redis+postgres"]
    )
    parser.add_argument("--port", type=int, default=18181)
    parser.add_argument(
        "--redis-url", default="redis://127.0.0.1:6379/12", help="scratch Redis db (flushed)"
    )
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument(
        "--pg-db", default="bench_service", help="scratch database (dropped, re-created)"
    )
    parser.add_argument(
        "--json-bits",
        type=int,
        default=None,
        metavar="BITS",
        help="also drive a shared model over JSON features hashed into 2**BITS "
        "buckets with the goal's request (15 context features, 50 candidates x 6)",
    )
    parser.add_argument(
        "--personalizer-rank",
        action="store_true",
        help="also drive the default Personalizer loop through POST /personalizer/v1.0/rank "
        "with the goal's request (max and half loads)",
    )
    parser.add_argument(
        "--event-ids",
        action="store_true",
        help="every /recommend of the max and half loads carries a client event_id of "
        "its own, as Personalizer's SDK samples send eventId (the mixed load sends none)",
    )
    parser.add_argument(
        "--json-algorithm",
        choices=["hybrid_linucb", "diag_linucb"],
        default="hybrid_linucb",
        help="the shared model of --json-bits (default hybrid_linucb)",
    )
    parser.add_argument(
        "--reward-batching",
        type=lambda s: s.split(","),
        default=["on"],
        help="on, off or off,on: BANDIT_REWARD_BATCHING of the servers (default on)",
    )
    parser.add_argument(
        "--console-user",
        type=int,
        default=0,
        metavar="N",
        help="after each max load, N pairs of alternating max-load runs without and with a "
        "console user refreshing the policy page every second",
    )
    parser.add_argument(
        "--plot",
        action="store_true",
        help="draw the run against connections (docs/img/service_load_<label>.png)",
    )
    parser.add_argument(
        "--replot", action="store_true", help="only redraw run --label from the results file"
    )
    add_label_argument(parser, "service_load", figure=True)
    args = parser.parse_args(argv)
    from benchmarks._harness import figure_path, read_run

    if args.replot:
        plot(read_run("service_load", args.label)["rows"], figure_path("service_load", args.label))
        return 0
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    from benchmarks import _harness as h

    if args.own_servers:
        from tests.databases import OwnedServers

        owned = OwnedServers()
        args.redis_url = owned.redis_url()
        args.pg_admin = owned.postgres_url()
    result = run(args)
    trivial = {
        (r["workers"], r["connections"]): r
        for r in result["rows"]
        if r["backend"] == "trivial endpoint"
    }
    for r in result["rows"]:
        t = trivial.get((r["workers"], r["connections"]))
        r["x trivial ceiling"] = r["requests_per_s"] / t["requests_per_s"] if t else None
        r["x trivial cpu"] = (
            t["cpu_ms_per_request"] / r["cpu_ms_per_request"]
            if t and t["cpu_ms_per_request"] and r["cpu_ms_per_request"]
            else None
        )
    print(
        h.table(
            result["rows"],
            [
                "backend",
                "coalescing",
                "reward_batching",
                "workers",
                "connections",
                "K",
                "payload",
                "load",
                "requests_per_s",
                "p50_ms",
                "p90_ms",
                "p99_ms",
                "non_2xx",
                "transaction_retries",
                "console_pages",
                "console_page_p50_ms",
                "x trivial ceiling",
                "cpu_ms_per_request",
                "x trivial cpu",
                "loadavg",
            ],
        )
    )
    path = h.write_json(
        "service_load",
        {**result, "duration_s": args.duration},
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    if args.plot:
        plot(result["rows"], figure_path("service_load", args.label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
