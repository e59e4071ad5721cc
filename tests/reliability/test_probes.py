"""Probes and the state store's circuit breaker against hung servers: the test's own
redis-server, then its own PostgreSQL (postmaster and backends), SIGSTOPped under a real
uvicorn app process (docs/reliability.md, "A hung Redis or PostgreSQL").

- Redis hung: once the breaker has opened, every decision is degraded at once (well
  below the store's timeout) and every reward a 503 with ``Retry-After``; ``/readyz``
  answers within 1 s, not ready; after SIGCONT the breaker probes, closes, and decisions
  are normal again.
- PostgreSQL hung: ``/readyz`` answers within 1 s, ready, with the event log degraded;
  decisions go on; after SIGCONT the log holds every decision answered.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable

import httpx
import pytest

from service.settings import Settings
from tests.conftest import TIMED
from tests.reliability.traffic import HEADERS, logged, spec, wait_until
from tests.servers import AppProcess, PostgresCluster, RedisServer, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180), TIMED, pytest.mark.slow]

PROBE_BOUND = 1.0  # every probe route answers within this, whatever hangs behind it
STORE_TIMEOUT = 1.0  # BANDIT_REDIS_TIMEOUT_SECONDS of these tests


async def timed_get(client: httpx.AsyncClient, path: str) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await client.get(path)
    return response, time.perf_counter() - started


async def decide(client: httpx.AsyncClient) -> tuple[dict, float]:
    started = time.perf_counter()
    r = await client.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
    assert r.status_code == 200, r.text
    return r.json(), time.perf_counter() - started


def metric(text: str, name: str, state: str) -> float:
    found = re.search(rf'{name}\{{state="{state}"\}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


async def test_hung_redis_opens_the_breaker_and_decisions_degrade_at_once(
    private_redis: RedisServer, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings(
        redis_timeout_seconds=STORE_TIMEOUT,
        redis_retry_after_seconds=1,
        store_breaker_failures=3,
        store_breaker_open_seconds=2.0,
    )
    app = AppProcess(settings_env(settings)).start()
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=30) as client:
            assert (await client.put("/policies/p", json=spec())).status_code == 200
            warm, _ = await decide(client)  # the process caches the policy
            assert warm["degraded"] is False

            private_redis.pause()
            opening: list[float] = []
            while True:  # each call waits the store timeout until the breaker opens
                deps = (await client.get("/health/dependencies")).json()["dependencies"]
                if deps[0]["breaker"] == "open":
                    break
                decision, seconds = await decide(client)
                assert decision["degraded"] is True
                opening.append(seconds)
                assert len(opening) <= 3, opening

            fast = []
            for _ in range(50):
                decision, seconds = await decide(client)
                assert decision["degraded"] is True
                fast.append(seconds)
            assert max(fast) < 0.5 * STORE_TIMEOUT, fast  # generous: measured in ms

            started = time.perf_counter()
            r = await client.post("/reward", json={"event_id": warm["event_id"], "reward": 1.0})
            refused = time.perf_counter() - started
            assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
            assert refused < 0.5 * STORE_TIMEOUT

            ready, took = await timed_get(client, "/readyz")
            assert took < PROBE_BOUND and ready.status_code == 503
            body = ready.json()
            assert body["status"] == "not_ready" and body["state_store"] == "unavailable"
            assert "breaker" in body["checks"]["state_store"]["error"]
            text = (await client.get("/metrics")).text
            assert metric(text, "bandit_store_breaker_state", "open") == 1.0

            private_redis.resume()
            recovered = time.perf_counter()

            async def normal_again() -> bool:
                decision, _ = await decide(client)
                return not decision["degraded"]

            await wait_until(normal_again, 15, "a decision not degraded after SIGCONT")
            recovery = time.perf_counter() - recovered
            deps = (await client.get("/health/dependencies")).json()["dependencies"]
            assert deps[0]["breaker"] == "closed" and deps[0]["status"] == "ok", deps
            ready, took = await timed_get(client, "/readyz")
            assert ready.status_code == 200 and took < PROBE_BOUND
            r = await client.post("/reward", json={"event_id": warm["event_id"], "reward": 1.0})
            assert r.status_code == 200 and r.json()["applied"] is True, r.text
            text = (await client.get("/metrics")).text
            # closed again through its probe call (half_open), or by a call sent before it
            # opened that Redis answered after SIGCONT: an answer closes it either way
            for state in ("open", "closed"):
                assert metric(text, "bandit_store_breaker_transitions_total", state) >= 1
            assert metric(text, "bandit_store_breaker_state", "closed") == 1.0
        print(
            f"hung redis: {len(opening)} decisions before the breaker opened "
            f"({', '.join(f'{s:.2f}' for s in opening)} s); then 50 degraded decisions: "
            f"median {1000 * statistics.median(fast):.1f} ms, max {1000 * max(fast):.1f} ms; "
            f"reward refused in {1000 * refused:.1f} ms; /readyz in {1000 * took:.0f} ms; "
            f"decisions normal {recovery:.1f} s after SIGCONT"
        )
    finally:
        private_redis.resume()
        app.stop()


async def test_hung_postgres_keeps_the_process_ready_and_probes_answer_in_time(
    private_redis: RedisServer,
    pg_cluster: PostgresCluster,
    pg_database: str,
    make_settings: Callable[..., Settings],
) -> None:
    app = AppProcess(settings_env(make_settings(database_url=pg_database))).start()
    paused: list[int] = []
    answered: set[str] = set()
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=30) as client:
            assert (await client.put("/policies/p", json=spec())).status_code == 200
            ready = (await client.get("/readyz")).json()
            assert ready["status"] == "ready" and ready["event_log"] == "ok", ready

            paused = pg_cluster.pause()
            answered.add((await decide(client))[0]["event_id"])
            probes: list[float] = []
            backlog: list[tuple[int, float]] = []
            for _ in range(5):
                ready, took = await timed_get(client, "/readyz")
                probes.append(took)
                body = ready.json()
                backlog.append((body["spool_depth"], body["log_lag_seconds"]))
                assert ready.status_code == 200, body
                assert body["status"] == "ready" and body["state_store"] == "ok", body
                assert body["event_log"] == "degraded", body
                deps, took = await timed_get(client, "/health/dependencies")
                probes.append(took)
                log = deps.json()["dependencies"][1]
                assert log["name"] == "event_log" and log["status"] == "unavailable", log
                assert log["error"].startswith("no answer within"), log
                answered.add((await decide(client))[0]["event_id"])
            assert max(probes) < PROBE_BOUND, probes

            pg_cluster.resume(paused)
            paused = []

            async def log_back() -> bool:
                return (await client.get("/readyz")).json()["event_log"] == "ok"

            await wait_until(log_back, 30, "event log ok after SIGCONT")
            await wait_until(
                lambda: logged(pg_database, "p")[0] >= answered, 30, "decisions logged"
            )
        print(
            f"hung postgres: /readyz and /health/dependencies in "
            f"{1000 * min(probes):.0f} to {1000 * max(probes):.0f} ms, ready with the event log "
            f"degraded; {len(answered)} decisions answered meanwhile, all logged after SIGCONT; "
            f"(spool depth, log lag s) seen: {backlog}"
        )
    finally:
        pg_cluster.resume(paused)
        app.stop()
