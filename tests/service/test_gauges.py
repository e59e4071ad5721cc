"""The gauges stay live with no API call: the lifespan's refresh loop republishes alpha
per arm, delta_G and its per-policy limit, pending events and the store probes
(``bandit_dependency_up``); ``/metrics`` refreshes the event-log backlog and the
dead-letter counter at scrape time. Real Redis and PostgreSQL for the stores."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.observability import metrics
from service.storage.base import DecisionRecord
from tests.databases import OWNED
from tests.servers import RedisServer
from tests.service.conftest import running

pytestmark = pytest.mark.anyio

TA = {"algorithm": "lnucb_ta", "dimension": 3, "arms": ["a", "b", "c"], "reward_wait_seconds": 600}
GUARDED = {
    "algorithm": "guardrailed_linucb",
    "dimension": 2,
    "feature_names": ["age", "score"],
    "arms": ["beer", "juice", "water"],
    "safe_arm": "water",
    "reward_wait_seconds": 600,
    "guardrails": [
        {"type": "feature_threshold", "feature": "age", "op": "<", "value": 18, "arms": ["beer"]}
    ],
}


async def scrape(http: httpx.AsyncClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = (await http.get("/metrics")).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


async def until(http: httpx.AsyncClient, check: Any, timeout: float = 10.0) -> dict[Any, float]:
    """Scrape until ``check(samples)`` holds (the refresh loop ran) or fail."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await scrape(http)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, "the gauges were not refreshed in time"
        await asyncio.sleep(0.05)


def forget_gauges() -> None:
    """What a replica that served none of the traffic holds: no per-policy samples."""
    for gauge in (metrics.LNUCB_TA_ALPHA, metrics.DELTA_G, metrics.DELTA_G_LIMIT):
        gauge.clear()
    metrics.PENDING_EVENTS.clear()


async def test_policy_gauges_are_refreshed_without_stats_calls(make_settings: Any) -> None:
    settings = make_settings(
        metrics_refresh_seconds=0.05, sweeper_interval_seconds=3600, default_delta_g_limit=0.07
    )
    async with running(settings) as (_app, http, _client):
        assert (await http.put("/policies/ta", json=TA)).status_code == 200
        limited = {**GUARDED, "delta_g_limit": 0.3}
        assert (await http.put("/policies/g", json=limited)).status_code == 200
        assert (await http.put("/policies/g2", json=GUARDED)).status_code == 200
        events = []
        for i in range(6):
            r = await http.post("/recommend", json={"policy": "ta", "context": [1.0, i, 0.5]})
            events.append(r.json()["event_id"])
        for event_id in events[:4]:
            r = await http.post("/reward", json={"event_id": event_id, "reward": 1.0})
            assert r.status_code == 200
        for policy in ("g", "g2"):
            for age in (16, 30, 12):
                ctx = {"age": age, "score": 1.0}
                r = await http.post("/recommend", json={"policy": policy, "context": ctx})
                assert r.status_code == 200

        forget_gauges()
        samples = await until(
            http,
            # the loop refreshes policies in the store's (unordered) listing order: wait
            # for every policy's gauges, not just the first and last one written
            lambda s: (
                sample(s, "bandit_lnucb_ta_alpha", policy="ta", arm="c") is not None
                and sample(s, "bandit_pending_events", policy="ta") is not None
                and sample(s, "bandit_pending_events", policy="g") is not None
                and sample(s, "bandit_guardrail_delta_g", policy="g") is not None
                and sample(s, "bandit_guardrail_delta_g_limit", policy="g") is not None
                and sample(s, "bandit_guardrail_delta_g_limit", policy="g2") is not None
            ),
        )
        stats = (await http.get("/policies/ta/stats")).json()
        for arm, arm_stats in stats["arms"].items():
            assert sample(samples, "bandit_lnucb_ta_alpha", policy="ta", arm=arm) == pytest.approx(
                arm_stats["alpha"]
            )
        assert sample(samples, "bandit_pending_events", policy="ta") == 2.0
        assert sample(samples, "bandit_pending_events", policy="g") == 3.0
        g_stats = (await http.get("/policies/g/stats")).json()
        assert sample(samples, "bandit_guardrail_delta_g", policy="g") == pytest.approx(
            g_stats["delta_G"]
        )
        assert sample(samples, "bandit_guardrail_delta_g_limit", policy="g") == 0.3
        assert sample(samples, "bandit_guardrail_delta_g_limit", policy="g2") == 0.07
        # only guardrailed policies have a delta_G, so only they export a limit
        assert sample(samples, "bandit_guardrail_delta_g_limit", policy="ta") is None

        # changing the limit keeps the learned state and reaches the gauge by itself
        r = await http.put("/policies/g", json={**GUARDED, "delta_g_limit": 0.2})
        assert r.status_code == 200
        assert (await http.get("/policies/g/stats")).json()["decisions"] == 3
        metrics.DELTA_G_LIMIT.clear()
        await until(http, lambda s: sample(s, "bandit_guardrail_delta_g_limit", policy="g") == 0.2)


@pytest.mark.parametrize(
    "limit, field", [(0.0, "delta_g_limit"), (1.5, "delta_g_limit"), ("x", "delta_g_limit")]
)
@pytest.mark.parametrize("backend", ["embedded"])
async def test_an_invalid_delta_g_limit_is_refused(
    make_settings: Any, limit: Any, field: str
) -> None:
    async with running(make_settings()) as (_app, http, _):
        r = await http.put("/policies/g", json={**GUARDED, "delta_g_limit": limit})
        assert r.status_code == 422 and field in r.text
        assert (await http.get("/policies/g")).status_code == 404


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_backlog_is_refreshed_at_scrape_time(make_settings: Any) -> None:
    async with running(make_settings(metrics_refresh_seconds=3600)) as (_app, http, _):
        await asyncio.sleep(0.1)  # the refresh loop's first round is done
        metrics.SPOOL_DEPTH.set(-1)
        metrics.LOG_LAG.set(-1)
        samples = await scrape(http)
        assert sample(samples, "bandit_event_log_spool_depth") == 0
        assert sample(samples, "bandit_event_log_lag_seconds") == 0


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_dead_lettered_records_are_counted(make_settings: Any) -> None:
    async with running(make_settings(metrics_refresh_seconds=3600)) as (app, http, _):
        before = sample(await scrape(http), "bandit_event_log_dead_letters_total")
        assert before is not None
        use_cases = app.state.use_cases
        # PostgreSQL rejects a NUL byte in text for good: not an outage, so no retry
        for i in range(2):
            use_cases.sink.submit_decision(
                DecisionRecord(
                    event_id=f"nul-{i}-{uuid.uuid4().hex}",
                    policy="bad\x00name",
                    created_at=time.time(),
                    context=[1.0],
                    candidates=[{"id": "a"}],
                    arm_id="a",
                    propensity=1.0,
                    scores=[0.0],
                    model_version=0,
                )
            )
        assert await asyncio.to_thread(use_cases.sink.flush, 10.0)
        after = sample(await scrape(http), "bandit_event_log_dead_letters_total")
        assert after == before + 2
        assert sample(await scrape(http), "bandit_event_log_dead_letters_total") == after


@contextmanager
def postgres_role_schema() -> Iterator[tuple[str, str]]:
    """``(url, role)``: a fresh schema owned by a fresh login role, so the test can lock
    that role out of the real PostgreSQL (an outage for this app only)."""
    role = f"r_{uuid.uuid4().hex[:12]}"
    server = OWNED.postgres_url()
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'CREATE SCHEMA "{role}" AUTHORIZATION "{role}"')
    base = server.replace("postgres@", f"{role}@", 1)
    try:
        yield f"{base}?options=-csearch_path%3D{role}", role
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{role}" CASCADE')
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f'DROP ROLE "{role}"')


def set_login(role: str, allowed: bool) -> None:
    with psycopg.connect(OWNED.postgres_url(), autocommit=True) as conn:
        conn.execute(f'ALTER ROLE "{role}" {"LOGIN" if allowed else "NOLOGIN"}')
        if not allowed:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )


def up(samples: dict[Any, float], dependency: str) -> float | None:
    return sample(samples, "bandit_dependency_up", dependency=dependency)


# "embedded" only picks the base settings: this test brings its own Redis and PostgreSQL role.
@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_probe_reports_each_dependency_without_traffic(
    make_settings: Any, tmp_path: Path
) -> None:
    redis_server = RedisServer(tmp_path / "redis", persist=False)
    redis_server.start()
    try:
        with postgres_role_schema() as (database_url, role):
            settings = make_settings(
                redis_url=redis_server.url,
                database_url=database_url,
                metrics_refresh_seconds=0.05,
                redis_timeout_seconds=1.0,
            )
            async with running(settings) as (_app, http, _):
                await until(http, lambda s: up(s, "redis") == 1 and up(s, "database") == 1)

                set_login(role, False)
                await until(http, lambda s: up(s, "database") == 0 and up(s, "redis") == 1)
                set_login(role, True)
                await until(http, lambda s: up(s, "database") == 1)

                redis_server.stop()
                await until(http, lambda s: up(s, "redis") == 0 and up(s, "database") == 1)
    finally:
        redis_server.stop()
