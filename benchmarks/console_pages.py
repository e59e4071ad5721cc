"""How long the console's pages take to render over a large event log on PostgreSQL
(docs/console.md, "Performance"): a policy with ``--decisions`` decisions, each rewarded,
spread over the last 7 days in day partitions, then every page asked ``--requests``
times in process (httpx's ASGI transport: the server's work, no network), its p50 and
p95 in milliseconds.

The script starts its own PostgreSQL (``tests.databases``; ``BANDIT_TEST_POSTGRES_URL``
points it at an existing server instead) and writes ``benchmarks/results/console_pages.json``.

    python -m benchmarks.console_pages
    python -m benchmarks.console_pages --decisions 100000 --requests 20
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks._harness import add_label_argument, load, write_json
from service.api.app import create_app
from service.settings import Settings
from service.storage.base import DecisionRecord, RewardRecord, ips_weights
from service.storage.migrate import upgrade_head
from service.storage.partitions import DAY_SECONDS, create_partitions
from service.storage.sql_log import SqlEventLog
from tests.databases import database

POLICY = "storefront"
ARMS = [f"item-{i}" for i in range(20)]
KEY = "benchmark-key"
DAYS = 7
CHUNK = 10_000


def fill(log: SqlEventLog, total: int, now: float, seed: int = 0) -> str:
    """``total`` decisions of :data:`POLICY` evenly over the :data:`DAYS` days before
    ``now``, each with a reward a minute later, appended in chunks; an event id logged."""
    rng = np.random.default_rng(seed)
    step = DAYS * DAY_SECONDS / total
    start = now - DAYS * DAY_SECONDS
    for first in range(0, total, CHUNK):
        count = min(CHUNK, total - first)
        arms = rng.integers(0, len(ARMS), count)
        values = rng.random(count) < 0.1 + 0.02 * arms
        decisions, rewards = [], []
        for j in range(count):
            i = first + j
            t = start + i * step
            arm = ARMS[arms[j]]
            decisions.append(
                DecisionRecord(
                    event_id=f"e{i}",
                    policy=POLICY,
                    created_at=t,
                    context=[1.0, float(j % 7) / 7, float(j % 3) / 3],
                    candidates=[{"id": a, "features": None} for a in ARMS],
                    arm_id=arm,
                    propensity=0.9,
                    scores=[0.5] * len(ARMS),
                    model_version=i,
                    explored=bool(j % 10 == 0),
                )
            )
            weights = ips_weights(arm, ARMS, 0.9)
            rewards.append(
                RewardRecord(f"e{i}", POLICY, arm, float(values[j]), "explicit", t + 60, *weights)
            )
        log.append(decisions, rewards)
    return f"e{total // 2}"


def percentile(samples: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(samples) * 1000, q)), 2)


async def measure(settings: Settings, event_id: str, requests: int) -> dict[str, Any]:
    """Every page ``requests`` times after 2 unmeasured ones: p50, p95, max (ms)."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            headers = {"Authorization": f"Bearer {KEY}"}
            spec = {"algorithm": "linucb", "dimension": 3, "arms": ARMS}
            (await client.put(f"/policies/{POLICY}", json=spec, headers=headers)).raise_for_status()
            form = (await client.get("/console/signin")).text
            token = re.search(r'name="csrf_token" value="([^"]+)"', form)
            assert token is not None
            signed = await client.post(
                "/console/signin", data={"csrf_token": token.group(1), "key": KEY}
            )
            assert signed.status_code == 303, signed.text
            pages = {
                "home": "/console/",
                "policy_1h": f"/console/policies/{POLICY}",
                "policy_24h": f"/console/policies/{POLICY}?window=24h",
                "policy_7d": f"/console/policies/{POLICY}?window=7d",
                "arms": f"/console/policies/{POLICY}/arms",
                "event": f"/console/events/{event_id}",
                "settings": f"/console/policies/{POLICY}/settings",
                "apprentice": f"/console/policies/{POLICY}/apprentice",
                "evaluations": f"/console/policies/{POLICY}/evaluations",
                "features": f"/console/policies/{POLICY}/features",
                "model": f"/console/policies/{POLICY}/model",
                "log": "/console/log",
            }
            out: dict[str, Any] = {}
            for name, path in pages.items():
                samples = []
                for i in range(requests + 2):
                    t0 = time.perf_counter()
                    answer = await client.get(path)
                    elapsed = time.perf_counter() - t0
                    assert answer.status_code == 200, (path, answer.status_code)
                    if i >= 2:
                        samples.append(elapsed)
                out[name] = {
                    "p50_ms": percentile(samples, 50),
                    "p95_ms": percentile(samples, 95),
                    "max_ms": round(max(samples) * 1000, 2),
                }
                print(name, out[name], flush=True)
    return out


def run(total: int, requests: int) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp())
    with database("postgresql", directory) as url:
        upgrade_head(url)
        log = SqlEventLog(url)
        now = time.time()
        create_partitions(log.engine, now - (DAYS + 1) * DAY_SECONDS, DAYS + 3)
        t0 = time.perf_counter()
        event_id = fill(log, total, now)
        fill_s = time.perf_counter() - t0
        log.close()
        settings = Settings(
            database_url=url,
            data_dir=directory / "data",
            api_keys=[KEY],
            demo_policy=False,
            personalizer_loop=False,
            snapshot_interval_seconds=0,
            log_upkeep_interval_seconds=0,
        )
        pages = asyncio.run(measure(settings, event_id, requests))
    return {
        "decisions": total,
        "rewards": total,
        "days": DAYS,
        "arms": len(ARMS),
        "fill_s": round(fill_s, 1),
        "requests_per_page": requests,
        "pages": pages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=40, help="measured requests per page")
    add_label_argument(parser, "console_pages")
    args = parser.parse_args()
    before = load()
    result = run(args.decisions, args.requests)
    payload = {"load_before": before, "load_after": load(), **result}
    print(payload)
    print(f"wrote {write_json('console_pages', payload, args.label)}")


if __name__ == "__main__":
    main()
