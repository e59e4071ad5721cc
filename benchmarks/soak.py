"""Bounded soak of the service on loopback: a real uvicorn app over a private
redis-server and a fresh PostgreSQL schema, driven open-loop at a steady rate of
``/recommend`` calls, each followed by a ``/reward`` for a fraction of them.

Records p50/p99/max latency per route, the error count (any non-2xx or transport
error), the achieved rate, the app's resident memory (``VmRSS``) every second, and
checks at the end that the event log holds every answered decision and accepted reward.
Fails (exit 1) on any error, on a log that does not match, when memory keeps growing
(the median RSS of the last fifth of the run may exceed that of the first fifth after
warm-up by at most ``--max-growth-mib``), or when more than ``--max-skipped`` of the
scheduled decisions had to be skipped because ``--max-in-flight`` requests were still
waiting (the app fell behind the rate; a skipped request is counted, never queued
without bound, so a stall cannot snowball into an unbounded backlog).

    python benchmarks/soak.py                   # 120 s at 50 decisions/s (docs/reliability.md)
    python benchmarks/soak.py --short           # 20 s, what the test suite runs
    python benchmarks/soak.py --output soak.json

PostgreSQL: a private cluster started for the run (``tests.databases``; or a database
created and dropped on the server ``BANDIT_TEST_POSTGRES_URL`` names), a schema in it for
the run. redis-server and the PostgreSQL binaries must be on PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx
import numpy as np

from tests.databases import postgres_schema
from tests.reliability.traffic import HEADERS, logged, spec
from tests.servers import AppProcess, RedisServer, reliability_settings, settings_env


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def soak(
    url: str,
    app: AppProcess,
    duration: float,
    rate: float,
    reward_fraction: float,
    warmup: float,
    max_in_flight: int,
) -> dict:
    lat: dict[str, list[float]] = {"recommend": [], "reward": []}
    errors: list[str] = []
    answered: set[str] = set()
    accepted: dict[str, float] = {}
    rss: list[tuple[float, int]] = []
    skipped = 0
    rng = np.random.default_rng(0)
    limits = httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight)
    async with httpx.AsyncClient(
        base_url=url, headers=HEADERS, timeout=10.0, limits=limits
    ) as client:
        assert (await client.put("/policies/soak", json=spec(dimension=8))).status_code == 200
        in_flight = asyncio.Semaphore(max_in_flight)

        async def call(route: str, body: dict) -> dict | None:
            t0 = time.perf_counter()
            try:
                r = await client.post(f"/{route}", json=body)
            except httpx.HTTPError as exc:
                errors.append(f"{route}: {type(exc).__name__}")
                return None
            lat[route].append(time.perf_counter() - t0)
            if r.status_code != 200:
                errors.append(f"{route}: {r.status_code} {r.text[:200]}")
                return None
            return r.json()

        async def one(context: list[float], reward: float | None) -> None:
            async with in_flight:
                dec = await call("recommend", {"policy": "soak", "context": context})
                if dec is None:
                    return
                answered.add(dec["event_id"])
                if reward is None:
                    return
                if (
                    await call("reward", {"event_id": dec["event_id"], "reward": reward})
                    is not None
                ):
                    accepted[dec["event_id"]] = reward

        async def sample_memory(stop: asyncio.Event) -> None:
            while not stop.is_set():
                rss.append((time.monotonic(), app.rss_kib()))
                try:
                    await asyncio.wait_for(stop.wait(), 1.0)
                except TimeoutError:
                    pass

        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_memory(stop))
        tasks = []
        start = time.monotonic()
        n = int(duration * rate)
        for i in range(n):
            due = start + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if in_flight.locked():
                skipped += 1  # the app is not keeping up: counted, not queued without bound
                continue
            context = rng.normal(size=8).round(4).tolist()
            reward = float(rng.integers(0, 5)) / 4.0 if rng.random() < reward_fraction else None
            tasks.append(asyncio.create_task(one(context, reward)))
        await asyncio.gather(*tasks)
        elapsed = time.monotonic() - start
        stop.set()
        await sampler
    after = [kib for t, kib in rss if t - start >= warmup]
    fifth = max(1, len(after) // 5)
    first, last = statistics.median(after[:fifth]), statistics.median(after[-fifth:])
    return {
        "duration_s": round(elapsed, 2),
        "target_decisions_per_s": rate,
        "decisions": len(answered),
        "rewards": len(accepted),
        "achieved_requests_per_s": round((len(lat["recommend"]) + len(lat["reward"])) / elapsed, 1),
        "skipped_not_keeping_up": skipped,
        "errors": len(errors),
        "error_samples": errors[:5],
        "latency_ms": {
            route: {
                "p50": round(percentile(v, 50) * 1e3, 2),
                "p99": round(percentile(v, 99) * 1e3, 2),
                "max": round(max(v) * 1e3, 2) if v else None,
            }
            for route, v in lat.items()
        },
        "rss_mib": {
            "start": round(rss[0][1] / 1024, 1),
            "after_warmup_first_fifth_median": round(first / 1024, 1),
            "last_fifth_median": round(last / 1024, 1),
            "peak": round(max(k for _, k in rss) / 1024, 1),
            "growth_after_warmup": round((last - first) / 1024, 1),
            "slope_after_warmup_mib_per_min": round(
                float(np.polyfit([t - start for t, k in rss if t - start >= warmup], after, 1)[0])
                * 60
                / 1024,
                3,
            )
            if len(after) > 2
            else None,
        },
        "_answered": answered,
        "_accepted": accepted,
    }


async def wait_logged(
    db_url: str, answered: set[str], accepted: dict[str, float], timeout: float
) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        decisions, rewards, _ = await asyncio.to_thread(logged, db_url, "soak")
        if decisions == answered and rewards == accepted:
            return True
        await asyncio.sleep(0.5)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of traffic")
    parser.add_argument("--rate", type=float, default=50.0, help="decisions per second")
    parser.add_argument("--reward-fraction", type=float, default=0.8)
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds excluded from the memory trend"
    )
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument(
        "--max-skipped", type=float, default=0.02, help="fraction of scheduled decisions"
    )
    parser.add_argument("--max-growth-mib", type=float, default=16.0)
    parser.add_argument("--short", action="store_true", help="20 s run (the test suite's)")
    parser.add_argument("--output", type=Path, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.short:
        args.duration, args.warmup = 20.0, 4.0

    with tempfile.TemporaryDirectory(prefix="bandit-soak-") as tmp:
        redis_server = RedisServer(Path(tmp) / "redis")
        redis_server.start()
        try:
            with postgres_schema() as db_url:
                settings = reliability_settings(
                    data_dir=Path(tmp) / "data",
                    redis_url=redis_server.url,
                    database_url=db_url,
                    log_flush_seconds=0.2,
                    sweeper_interval_seconds=1,
                )
                app = AppProcess(settings_env(settings))
                app.start()
                try:
                    result = asyncio.run(
                        soak(
                            app.url,
                            app,
                            args.duration,
                            args.rate,
                            args.reward_fraction,
                            args.warmup,
                            args.max_in_flight,
                        )
                    )
                    answered, accepted = result.pop("_answered"), result.pop("_accepted")
                    result["log_matches_answers"] = asyncio.run(
                        wait_logged(db_url, answered, accepted, 30)
                    )
                finally:
                    app.stop()
        finally:
            redis_server.stop()
    result["command"] = "python benchmarks/soak.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    ok = (
        result["errors"] == 0
        and result["skipped_not_keeping_up"] <= args.max_skipped * args.duration * args.rate
        and result["log_matches_answers"]
        and result["rss_mib"]["growth_after_warmup"] <= args.max_growth_mib
    )
    result["ok"] = ok
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
