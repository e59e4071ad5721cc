"""The default Personalizer loop's reward path: immediate updates against folded ones.

For each mode, on a private Redis and PostgreSQL (``tests.databases``; Redis flushed and
a fresh PostgreSQL database per mode), ``--processes`` service processes (``python -m
service.cli serve``, one worker each) serve the default loop (``hybrid_linucb`` over
JSON features, 8 bits: a 257 x 257 shared part). ``--events`` events are ranked
beforehand through Personalizer's v1.0 rank route (the request of
:mod:`benchmarks.featurizer`: 15 context features in 3 namespaces, 50 actions of 6
features), then ``--connections`` wrk connections (``apt-get install wrk``; a wrk process
per service process, its connections split evenly), reward every one of them once
(``POST /personalizer/v1.0/events/{id}/reward``) as fast as they go. Modes:

* ``immediate``: ``modelUpdateFrequency`` ``PT0S``, every reward rewrites the shared
  part in its own transaction (a process's concurrent rewards coalesced);
* ``folded``: ``modelUpdateFrequency`` ``--interval`` (``PT1S``): every reward writes
  a small delta, and the folds take them into the model once per interval
  (docs/architecture.md, "Folded model updates").

Reported per mode, in the issue's columns: rewards accepted per second (the events over
the time from the first reward sent to the last answered, polled every 5 ms), the time
until every reward is in the model (the stored shared part counts them: each folded
exactly once), the folds committed until then (``bandit_folds_total`` of the loop,
summed over the processes' ``/metrics``: each wrote the shared part once), Redis bytes
received per reward (``INFO stats`` ``total_net_input_bytes`` from before the first
reward until everything is folded, over the events), the reward latency's p50 and p99 as
wrk measures it (the larger of the two wrk processes' percentiles), then ``--pair-seconds`` of rank + reward end to end on the
same connections (each ranks, then rewards the event it was given): pairs per second and
the p50 and p99 over both kinds of request, and the load average. The clients run on
the same machine as the servers. About 1.5 minutes with the defaults on a quiet machine.

    python -m benchmarks.reward_folds
    python -m benchmarks.reward_folds --events 1500 --connections 16 --processes 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks._harness import add_label_argument, load, table, write_json
from benchmarks.service_load import wrk_match, wrk_ms

LOOP = "personalizer"
RANK = "/personalizer/v1.0/rank"
CONFIG = "/personalizer/configurations/service"


def rank_bodies(n: int) -> list[dict[str, Any]]:
    """``n`` rank requests over 50 varied contexts (:func:`benchmarks.featurizer.request`),
    as Personalizer's SDKs send them."""
    from benchmarks.featurizer import request

    bodies = []
    for seed in range(min(n, 50)):
        context, actions = request(seed)
        bodies.append(
            {
                "contextFeatures": [{ns: value} for ns, value in context.items()],
                "actions": [{"id": a["item"]["id"], "features": [a]} for a in actions],
            }
        )
    return [bodies[i % len(bodies)] for i in range(n)]


def _http(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        text = resp.read()
    return json.loads(text) if text else None


async def _rank_all(bases: list[str], n: int, connections: int) -> list[str]:
    import httpx

    bodies = rank_bodies(n)
    ids: list[str] = [""] * n

    async def client(i: int) -> None:
        async with httpx.AsyncClient(base_url=bases[i % len(bases)], timeout=60) as http:
            for j in range(i, n, connections):
                r = await http.post(RANK, json=bodies[j])
                r.raise_for_status()
                ids[j] = r.json()["eventId"]

    await asyncio.gather(*(client(i) for i in range(connections)))
    return ids


# One connection per wrk thread, each rewarding its own list of event ids once (a file
# per thread; an id is sent again only if its connection broke before the answer);
# after its last answer the thread writes its count of answers other than 204 to
# done_<thread> and stops. wrk itself ends on SIGINT and then prints its latency.
REWARDS_LUA = """
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("index", threads)
end
function init(args)
  ids = {}
  for line in io.lines(args[1] .. "/ids_" .. index) do ids[#ids + 1] = line end
  answered, bad = 0, 0
end
function request()
  -- the next id not answered yet: wrk asks again when it reconnects before sending
  local id = ids[math.min(answered + 1, #ids)]
  return wrk.format("POST", "/personalizer/v1.0/events/" .. id .. "/reward",
                    {["Content-Type"] = "application/json"}, '{"value":1.0}')
end
function response(status, headers, body)
  answered = answered + 1
  if status ~= 204 then bad = bad + 1 end
  if answered == #ids then
    local f = io.open(DIR .. "/done_" .. index, "w")
    f:write(tostring(bad))
    f:close()
    wrk.thread:stop()
  end
end
"""

# Rank, then reward the event just ranked, on every connection, for the run's duration.
PAIRS_LUA = """
local ranks = {BODIES}
local waiting = nil
local n = 0
function request()
  if waiting then
    local id = waiting
    waiting = nil
    return wrk.format("POST", "/personalizer/v1.0/events/" .. id .. "/reward",
                      {["Content-Type"] = "application/json"}, '{"value":1.0}')
  end
  n = n + 1
  return wrk.format("POST", "/personalizer/v1.0/rank",
                    {["Content-Type"] = "application/json"}, ranks[(n % #ranks) + 1])
end
function response(status, headers, body)
  waiting = string.match(body, '"eventId":"([^"]+)"')
end
"""


def _wrk_latency(out: str) -> tuple[float, float]:
    """p50 and p99 in milliseconds from wrk's ``--latency`` output."""

    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.MULTILINE))
    return wrk_ms(pct["50"]), wrk_ms(pct["99"])


def _wrk(base: str, script: Path, connections: int, seconds: int, args: list[str]) -> Any:
    return subprocess.Popen(
        ["wrk", f"-t{connections}", f"-c{connections}", f"-d{seconds}s", "--latency"]
        + ["--timeout", "60s", "-s", str(script), base, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def reward_all(
    bases: list[str], ids: list[str], connections: int, tmp: Path
) -> tuple[float, float, float]:
    """Reward every event of ``ids`` once from ``connections`` wrk connections spread over
    ``bases`` (one wrk process per base): the seconds from the start to the last answer
    (polled every 5 ms), and the reward latency's p50 and p99 in milliseconds."""
    runs = []
    for b, base in enumerate(bases):
        share = ids[b :: len(bases)]
        conns = max(1, min(len(share), connections // len(bases)))
        folder = tmp / f"wrk-{b}"
        folder.mkdir()
        for t in range(conns):
            (folder / f"ids_{t + 1}").write_text("\n".join(share[t::conns]) + "\n")
        script = folder / "rewards.lua"
        script.write_text(REWARDS_LUA.replace("DIR", json.dumps(str(folder))))
        runs.append((folder, conns))
    start = time.perf_counter()
    procs = [_wrk(base, f / "rewards.lua", c, 600, [str(f)]) for base, (f, c) in zip(bases, runs)]
    try:
        while not all(len(list(f.glob("done_*"))) == c for f, c in runs):
            if any(p.poll() is not None for p in procs) or time.perf_counter() - start > 600:
                raise RuntimeError(f"wrk ended or hung: {[p.poll() for p in procs]}")
            time.sleep(0.005)
        seconds = time.perf_counter() - start
    finally:
        for p in procs:
            p.send_signal(signal.SIGINT)
    outs = [p.communicate(timeout=30)[0] for p in procs]
    bad = sum(int(d.read_text()) for f, _ in runs for d in f.glob("done_*"))
    if bad:
        raise RuntimeError(f"{bad} rewards were not answered 204")
    # each wrk's percentiles over its half: the slower process's are the run's bound
    p50s, p99s = zip(*(_wrk_latency(out) for out in outs), strict=True)
    return seconds, max(p50s), max(p99s)


def rank_and_reward(
    bases: list[str], connections: int, seconds: int, tmp: Path
) -> dict[str, float]:
    """Rank then reward the ranked event on each of ``connections`` connections for
    ``seconds``: the pairs per second and the p50 and p99 of both kinds of request."""
    bodies = ",".join(f"[==[{json.dumps(b, separators=(',', ':'))}]==]" for b in rank_bodies(50))
    script = tmp / "pairs.lua"
    script.write_text(PAIRS_LUA.replace("BODIES", bodies))
    conns = max(1, connections // len(bases))
    procs = [_wrk(base, script, conns, seconds, []) for base in bases]
    outs = [p.communicate(timeout=seconds + 60)[0] for p in procs]
    rate = sum(float(wrk_match(r"Requests/sec:\s+([\d.]+)", o).group(1)) for o in outs)
    p50s, p99s = zip(*(_wrk_latency(out) for out in outs), strict=True)
    return {"pairs_per_s": rate / 2, "pair_p50_ms": max(p50s), "pair_p99_ms": max(p99s)}


def _folded(redis_client: Any) -> tuple[int, int]:
    """The rewards the stored shared part holds, and the deltas still pending."""
    from bandit_core.hybrid_linucb import HybridSharedState

    prefix = f"bandit:{{{LOOP}}}:"
    data = redis_client.get(prefix + "k:shared")
    n = 0 if data is None else HybridSharedState.from_bytes(data).n
    pending = sum(1 for _ in redis_client.hscan_iter(prefix + "versions", match="delta:*"))
    return n, pending


def folds_committed(bases: list[str]) -> int:
    """The loop's ``bandit_folds_total`` summed over the service processes at ``bases``."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for base in bases:
        with urllib.request.urlopen(base + "/metrics", timeout=60) as resp:
            text = resp.read().decode()
        total += sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "bandit_folds_total" and sample.labels.get("policy") == LOOP
        )
    return int(total)


def run_mode(
    mode: str, args: argparse.Namespace, redis_url: str, database_url: str, tmp: Path
) -> dict[str, Any]:
    import redis

    from benchmarks.service_load import Server

    redis_client = redis.Redis.from_url(redis_url)
    redis_client.flushdb()
    env = dict(
        os.environ,
        BANDIT_DATA_DIR=str(tmp / f"data-{mode}"),
        BANDIT_DEMO_POLICY="false",
        BANDIT_PERSONALIZER_LOOP="true",
        BANDIT_REDIS_URL=redis_url,
        BANDIT_DATABASE_URL=database_url,
        BANDIT_FOLD_MAX_DELTAS=str(args.max_deltas),
    )
    servers = []
    try:
        for i in range(args.processes):
            port = args.port + i
            argv = [sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1"]
            argv += ["--port", str(port), "--workers", "1"]
            servers.append(Server(argv, env, port, "/readyz"))
        bases = [s.base for s in servers]
        config = _http("GET", bases[0] + CONFIG)
        frequency = args.interval if mode == "folded" else "PT0S"
        _http("PUT", bases[0] + CONFIG, {**config, "modelUpdateFrequency": frequency})
        ids = asyncio.run(_rank_all(bases, args.events, args.connections))
        folds_before = folds_committed(bases)
        before = int(redis_client.info("stats")["total_net_input_bytes"])
        start = time.perf_counter()
        folder = tmp / f"rewards-{mode}"
        folder.mkdir()
        seconds, p50, p99 = reward_all(bases, ids, args.connections, folder)
        while _folded(redis_client) != (args.events, 0):
            if time.perf_counter() - start > 600:
                raise RuntimeError(f"{mode}: not every reward folded: {_folded(redis_client)}")
            time.sleep(0.05)
        in_model = time.perf_counter() - start
        received = int(redis_client.info("stats")["total_net_input_bytes"]) - before
        folds = folds_committed(bases) - folds_before
        row: dict[str, Any] = {
            "mode": mode,
            "model_update_frequency": frequency,
            "processes": args.processes,
            "connections": args.connections,
            "events": args.events,
            "rewards_per_s": args.events / seconds,
            "all_in_model_s": in_model,
            "folds": folds,
            "redis_bytes_in_per_reward": received / args.events,
            "p50_ms": p50,
            "p99_ms": p99,
        }
        if args.pair_seconds > 0:
            row |= rank_and_reward(bases, args.connections, args.pair_seconds, folder)
        return row | {"loadavg": load()["loadavg"]}
    finally:
        for server in servers:
            server.stop()


COLUMNS = {
    "mode": "mode",
    "rewards_per_s": "rewards/s",
    "all_in_model_s": "all in model s",
    "folds": "folds",
    "redis_bytes_in_per_reward": "Redis bytes in per reward",
    "p50_ms": "reward p50 ms",
    "p99_ms": "reward p99 ms",
    "pairs_per_s": "rank + reward pairs/s",
    "pair_p50_ms": "pair requests p50 ms",
    "pair_p99_ms": "pair requests p99 ms",
    "loadavg": "load average",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Needs wrk (apt-get install wrk), redis-server and PostgreSQL (tests.databases).",
    )
    parser.add_argument("--events", type=int, default=1500, help="events rewarded (1500)")
    parser.add_argument("--connections", type=int, default=16, help="client connections (16)")
    parser.add_argument("--processes", type=int, default=2, help="service processes (2)")
    parser.add_argument("--interval", default="PT1S", help="folded modelUpdateFrequency (PT1S)")
    parser.add_argument(
        "--max-deltas", type=int, default=1000, help="BANDIT_FOLD_MAX_DELTAS (1000)"
    )
    parser.add_argument(
        "--pair-seconds",
        type=int,
        default=10,
        help="seconds of rank + reward pairs after the rewards, per mode (10; 0: none)",
    )
    parser.add_argument("--modes", default="immediate,folded", help="modes, comma separated")
    parser.add_argument("--port", type=int, default=8731, help="first server port (8731)")
    add_label_argument(parser, "reward_folds")
    args = parser.parse_args(argv)
    from tests.databases import OwnedServers

    owned = OwnedServers()
    tmp = Path(tempfile.mkdtemp(prefix="bench-folds-"))
    rows = []
    try:
        redis_url = owned.redis_url()
        for mode in args.modes.split(","):
            rows.append(run_mode(mode, args, redis_url, owned.postgres_url(), tmp))
            owned.close()  # a fresh PostgreSQL (and Redis) for the next mode
            redis_url = owned.redis_url()
    finally:
        owned.close()
        shutil.rmtree(tmp, ignore_errors=True)
    named = [{COLUMNS[k]: v for k, v in row.items() if k in COLUMNS} for row in rows]
    print(table(named, [c for c in COLUMNS.values() if c in named[0]]))
    path = write_json("reward_folds", {"rows": rows}, args.label)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
