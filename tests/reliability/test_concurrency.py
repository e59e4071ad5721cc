"""Three app processes over one Redis under concurrent recommend and reward traffic,
with default rewards due after 1 s: explicit rewards race the sweepers of all three
processes. Per arm, the model's counts and sums must equal exactly what the clients
were told (quarter rewards, so float sums are exact), and every event not rewarded
explicitly must receive the default reward exactly once."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.settings import Settings
from tests.reliability.traffic import HEADERS, logged, spec, wait_until
from tests.servers import AppProcess, apps, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180), pytest.mark.slow]
PROCESSES, CLIENTS, PER_CLIENT = 3, 6, 60
DEFAULT = 0.25


async def test_replicas_count_exactly_and_sweep_once(
    tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    replicas = [
        make_settings(data_dir=tmp_path / f"data{i}", sweeper_interval_seconds=0.1)
        for i in range(PROCESSES)
    ]
    db_url = replicas[0].database_url
    procs = [
        AppProcess(settings_env(settings, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)))
        for settings in replicas
    ]
    with apps(*procs):
        clients = [httpx.AsyncClient(base_url=p.url, headers=HEADERS, timeout=30.0) for p in procs]
        try:
            r = await clients[0].put(
                "/policies/p", json=spec(default_reward=DEFAULT, reward_wait_seconds=1.0)
            )
            assert r.status_code == 200, r.text
            served: dict[str, str] = {}
            explicit: dict[str, float] = {}
            refused: set[str] = set()  # 409: the sweeper finalized it first

            async def reward_later(event_id: str, value: float, delay: float, k: int) -> None:
                await asyncio.sleep(delay)
                r = await clients[k % PROCESSES].post(
                    "/reward", json={"event_id": event_id, "reward": value}
                )
                if r.status_code == 200:
                    assert r.json()["applied"], r.text
                    explicit[event_id] = value
                else:
                    assert r.status_code == 409, r.text
                    refused.add(event_id)

            async def client(k: int) -> None:
                rng = np.random.default_rng(k)
                later = []
                for j in range(PER_CLIENT):
                    context = rng.normal(size=3).round(3).tolist()
                    r = await clients[(k + j) % PROCESSES].post(
                        "/recommend", json={"policy": "p", "context": context}
                    )
                    assert r.status_code == 200, r.text
                    served[r.json()["event_id"]] = r.json()["arm_id"]
                    if rng.random() < 0.6:
                        value = float(rng.integers(0, 5)) / 4.0
                        later.append(
                            asyncio.create_task(
                                reward_later(
                                    r.json()["event_id"],
                                    value,
                                    rng.uniform(0.2, 1.6),
                                    k + j + 1,
                                )
                            )
                        )
                await asyncio.gather(*later)

            await asyncio.gather(*(client(k) for k in range(CLIENTS)))
            total = CLIENTS * PER_CLIENT
            assert len(served) == total
            defaulted = set(served) - set(explicit)
            assert refused <= defaulted

            async def all_final() -> bool:
                stats = (await clients[1].get("/policies/p/stats")).json()
                return stats["rewards"] >= total

            await wait_until(all_final, 30, "every event rewarded or defaulted")
            await asyncio.sleep(0.5)  # any duplicate sweep would land by now
            stats = (await clients[2].get("/policies/p/stats")).json()
            assert stats["decisions"] == total
            assert stats["rewards"] == total
            assert stats["default_rewards"] == len(defaulted)
            for arm in ("a", "b", "c"):
                events = [e for e, a in served.items() if a == arm]
                got = stats["arms"].get(arm, {"pulls": 0, "rewarded": 0, "reward_sum": 0.0})
                want_sum = sum(explicit.get(e, DEFAULT) for e in events)
                assert (got["pulls"], got["rewarded"], got["reward_sum"]) == (
                    len(events),
                    len(events),
                    want_sum,
                ), arm
            text = (await clients[0].get("/metrics")).text
            m = re.search(r'bandit_default_rewards_total\{policy="p"\} (\S+)', text)
            assert m and float(m.group(1)) == len(defaulted), m

            async def log_complete() -> bool:
                return len(logged(db_url, "p")[1]) == total

            await wait_until(log_complete, 20, "every reward logged")
            decisions, rewards, counts = logged(db_url, "p")
            assert decisions == set(served) and counts == (total, total)
            assert {e: v for e, v in rewards.items() if e in explicit} == explicit
            assert all(rewards[e] == DEFAULT for e in defaulted)
            print(
                f"concurrency: {PROCESSES} processes, {total} decisions, {len(explicit)} explicit "
                f"rewards, {len(defaulted)} default rewards ({len(refused)} explicit ones lost the race, 409)"
            )
        finally:
            for c in clients:
                await c.aclose()
