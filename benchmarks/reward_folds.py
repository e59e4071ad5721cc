"""The default Personalizer loop's reward path: immediate updates against folded ones.

For each mode, on a private Redis and PostgreSQL (``tests.databases``; Redis flushed and
a fresh PostgreSQL database per mode), ``--processes`` service processes (``python -m
service.cli serve``, one worker each) serve the default loop (``hybrid_linucb`` over
JSON features, 8 bits: a 257 x 257 shared part). ``--events`` events are ranked
beforehand through Personalizer's v1.0 rank route (the request of
:mod:`benchmarks.featurizer`: 15 context features in 3 namespaces, 50 actions of 6
features), then ``--connections`` client connections, spread over the processes, reward
every one of them once (``POST /personalizer/v1.0/events/{id}/reward``) as fast as
they go. Modes:

* ``immediate``: ``modelUpdateFrequency`` ``PT0S``, every reward rewrites the shared
  part in its own transaction (a process's concurrent rewards coalesced);
* ``batched``: ``modelUpdateFrequency`` ``--interval`` (``PT1S``): every reward writes
  a small delta, and the folds take them into the model once per interval
  (docs/architecture.md, "Folded model updates").

Reported per mode: rewards accepted per second (the events over the time from the first
reward sent to the last answered), the time until every reward is in the model (the
stored shared part counts them: each folded exactly once), Redis bytes received per
reward (``INFO stats`` ``total_net_input_bytes`` from before the first reward until
everything is folded, over the events), the reward latency's p50 and p99 as the clients
measure it, and the load average. The clients run on the same machine as the servers.

    python -m benchmarks.reward_folds
    python -m benchmarks.reward_folds --events 1500 --connections 16 --processes 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument, load, table, write_json

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


async def _reward_all(
    bases: list[str], ids: list[str], connections: int
) -> tuple[float, list[float]]:
    """Reward every event once from ``connections`` clients; the seconds from the first
    request to the last answer and each request's latency in milliseconds."""
    import httpx

    latencies: list[float] = []

    async def client(i: int) -> None:
        async with httpx.AsyncClient(base_url=bases[i % len(bases)], timeout=60) as http:
            for event_id in ids[i::connections]:
                start = time.perf_counter()
                r = await http.post(
                    f"/personalizer/v1.0/events/{event_id}/reward", json={"value": 1.0}
                )
                latencies.append(1000 * (time.perf_counter() - start))
                if r.status_code != 204:
                    raise RuntimeError(f"reward of {event_id}: {r.status_code} {r.text}")

    start = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(connections)))
    return time.perf_counter() - start, latencies


def _folded(redis_client: Any) -> tuple[int, int]:
    """The rewards the stored shared part holds, and the deltas still pending."""
    from bandit_core.hybrid_linucb import HybridSharedState

    prefix = f"bandit:{{{LOOP}}}:"
    data = redis_client.get(prefix + "k:shared")
    n = 0 if data is None else HybridSharedState.from_bytes(data).n
    pending = sum(1 for _ in redis_client.hscan_iter(prefix + "versions", match="delta:*"))
    return n, pending


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
        frequency = args.interval if mode == "batched" else "PT0S"
        _http("PUT", bases[0] + CONFIG, {**config, "modelUpdateFrequency": frequency})
        ids = asyncio.run(_rank_all(bases, args.events, args.connections))
        before = int(redis_client.info("stats")["total_net_input_bytes"])
        start = time.perf_counter()
        seconds, latencies = asyncio.run(_reward_all(bases, ids, args.connections))
        while _folded(redis_client) != (args.events, 0):
            if time.perf_counter() - start > 600:
                raise RuntimeError(f"{mode}: not every reward folded: {_folded(redis_client)}")
            time.sleep(0.05)
        in_model = time.perf_counter() - start
        received = int(redis_client.info("stats")["total_net_input_bytes"]) - before
        return {
            "mode": mode,
            "model_update_frequency": frequency,
            "processes": args.processes,
            "connections": args.connections,
            "events": args.events,
            "rewards_per_s": args.events / seconds,
            "all_in_model_s": in_model,
            "redis_bytes_in_per_reward": received / args.events,
            "p50_ms": float(np.percentile(latencies, 50)),
            "p99_ms": float(np.percentile(latencies, 99)),
            "loadavg": load()["loadavg"],
        }
    finally:
        for server in servers:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=1500, help="events rewarded (1500)")
    parser.add_argument("--connections", type=int, default=16, help="client connections (16)")
    parser.add_argument("--processes", type=int, default=2, help="service processes (2)")
    parser.add_argument("--interval", default="PT1S", help="batched modelUpdateFrequency")
    parser.add_argument(
        "--max-deltas", type=int, default=1000, help="BANDIT_FOLD_MAX_DELTAS (1000)"
    )
    parser.add_argument("--modes", default="immediate,batched", help="modes, comma separated")
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
    columns = list(rows[0])
    print(table(rows, columns))
    path = write_json("reward_folds", {"rows": rows}, args.label)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
