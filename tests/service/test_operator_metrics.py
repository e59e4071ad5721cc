"""The metrics an operator watches beyond traffic: build info, requests in flight, 404s by
reason, state-store and event-log latency, rows written, event-log errors apart from
state-store errors, the series of a deleted policy leaving ``/metrics`` (one process and
several workers' files), and the periodic snapshots: retention, last success, failures."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

import service.observability.metrics
from service.settings import Settings
from tests.databases import postgres_schema
from tests.reliability.traffic import wait_until
from tests.servers import AppProcess, apps, settings_env
from tests.service.conftest import POLICY, running
from tests.service.storage.tcp_proxy import TcpProxy

pytestmark = pytest.mark.anyio

LAST_SNAPSHOT = "bandit_snapshot_last_success_timestamp_seconds"


async def scrape(http: httpx.AsyncClient) -> list[Sample]:
    response = await http.get("/metrics")
    assert response.status_code == 200
    return [s for f in text_string_to_metric_families(response.text) for s in f.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())


def policies_in(samples: list[Sample]) -> set[str]:
    return {s.labels["policy"] for s in samples if "policy" in s.labels}


async def test_build_info_in_flight_and_404s_by_reason(make_settings: Any) -> None:
    async with running(make_settings()) as (_, http, _typed):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        before = await scrape(http)
        misses = {
            "policy": [http.post("/recommend", json={"policy": "nope", "context": [1, 0, 0]})],
            "event": [
                http.post("/reward", json={"event_id": "nope", "reward": 1.0}),
                http.post("/events/nope/activate"),
            ],
            "arm": [http.post("/policies/p/arms/retire", json={"arms": ["zz"]})],
            "route": [http.get("/no/such/route"), http.get("/personalizer/v9.9/nothing")],
        }
        for reason, calls in misses.items():
            for call in calls:
                response = await call
                assert response.status_code == 404, (reason, response.text)
        # a Personalizer route answering its own error shape counts the same
        loop = await http.post(
            "/loops/nope/personalizer/v1.0/rank",
            json={"actions": [{"id": "a", "features": [{"x": 1}]}]},
        )
        assert loop.status_code == 404, loop.text
        samples = await scrape(http)

    def added(name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    assert added("bandit_not_found_total", reason="policy") == 2
    assert added("bandit_not_found_total", reason="event") == 2
    assert added("bandit_not_found_total", reason="arm") == 1
    assert added("bandit_not_found_total", reason="route") == 2
    # the scrape itself is the one request in flight
    assert value(samples, "bandit_http_requests_in_flight") == 1
    (info,) = [s for s in samples if s.name == "bandit_build_info"]
    assert info.value == 1 and info.labels["version"] == metadata.version("bandit-service")
    assert info.labels["commit"]


async def test_store_and_event_log_latency_and_rows_written(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _typed):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        before = await scrape(http)
        for _ in range(4):
            decision = await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
            assert decision.status_code == 200, decision.text
            event = decision.json()["event_id"]
            assert (await http.post("/reward", json={"event_id": event, "reward": 1})).is_success
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10.0)
        samples = await scrape(http)

    def added(name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    assert added("bandit_event_log_rows_written_total", table="decisions") == 4
    assert added("bandit_event_log_rows_written_total", table="rewards") == 4
    assert added("bandit_event_log_operation_duration_seconds_count", operation="append") >= 1
    # every decision reads the store once and commits once; every reward transacts once
    assert added("bandit_store_operation_duration_seconds_count", operation="read") >= 4
    assert added("bandit_store_operation_duration_seconds_count", operation="transact") >= 8
    assert added("bandit_event_log_errors_total") == 0


async def test_a_database_outage_counts_event_log_errors_not_store_errors(tmp_path: Path) -> None:
    """PostgreSQL cut off: the readiness probe and the writer's appends fail as
    event-log errors, the state store (in process) has none, and a 503 names the event
    log. The app runs as a process of its own, so that its metrics count its own calls
    only (an in-process app shares the registry with whatever earlier tests of the
    worker left running)."""
    with proxied_postgres() as (proxy, url):
        settings = outage_settings(tmp_path, url, log_flush_seconds=0.02)
        with apps(AppProcess(settings_env(settings))) as (app,):
            async with httpx.AsyncClient(base_url=app.url, timeout=30) as http:
                assert (await http.put("/policies/p", json=POLICY)).status_code == 200
                before = await scrape(http)
                proxy.stop()
                # a probe already in flight when the proxy stopped may still answer ok:
                # the next one finds the log cut off, and readiness reports it without
                # unreadiness
                for _ in range(100):
                    if (ready := (await http.get("/readyz")).json())["event_log"] != "ok":
                        break
                    await asyncio.sleep(0.05)
                assert (ready["status"], ready["event_log"]) == ("ready", "degraded"), ready
                decision = await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
                assert decision.status_code == 200

                async def append_failed() -> bool:
                    samples = await scrape(http)
                    name = "bandit_event_log_errors_total"
                    return value(samples, name, operation="append") > value(
                        before, name, operation="append"
                    )

                await wait_until(append_failed, 30, "the writer's failed append")
                samples = await scrape(http)
                # a policy change needs the log: 503, naming the event log
                refused = await http.put("/policies/q", json=POLICY)
                assert refused.status_code == 503
                assert refused.json()["detail"].startswith("event log unavailable, retry later")

    def added(name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    assert added("bandit_event_log_errors_total", operation="ping") >= 1
    assert added("bandit_event_log_errors_total", operation="append") >= 1
    assert added("bandit_store_errors_total") == 0


@contextmanager
def proxied_postgres() -> Iterator[tuple[TcpProxy, str]]:
    """A fresh schema of the session's PostgreSQL behind a proxy a test can stop, and the
    URL through the proxy."""
    with postgres_schema() as url:
        server = urlsplit(url)
        proxy = TcpProxy((server.hostname or "127.0.0.1", server.port or 5432))
        proxy.start()
        try:
            yield proxy, url.replace(f":{server.port}/", f":{proxy.port}/")
        finally:
            proxy.stop()


def outage_settings(tmp_path: Path, database_url: str, **overrides: Any) -> Settings:
    """The in-process store and the event log at ``database_url``."""
    fields: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "database_url": database_url,
        "demo_policy": False,
        "personalizer_loop": False,
        "snapshot_interval_seconds": 0,
        **overrides,
    }
    return Settings(**fields)


async def test_a_deleted_policys_series_leave_metrics(make_settings: Any) -> None:
    async with running(make_settings()) as (_, http, _typed):
        for name in ("keep", "gone"):
            assert (await http.put(f"/policies/{name}", json=POLICY)).status_code == 200
            decision = await http.post("/recommend", json={"policy": name, "context": [1, 0, 0]})
            assert decision.status_code == 200
            assert (await http.get(f"/policies/{name}/stats")).status_code == 200  # the gauges
        assert {"keep", "gone"} <= policies_in(await scrape(http))
        assert (await http.delete("/policies/gone")).status_code == 204
        samples = await scrape(http)
        assert "gone" not in policies_in(samples)
        assert value(samples, "bandit_decisions_total", policy="keep") >= 1
        assert value(samples, "bandit_pending_events", policy="keep") >= 1
        # created again, it is back
        assert (await http.put("/policies/gone", json=POLICY)).status_code == 200
        assert (await http.get("/policies/gone/stats")).status_code == 200
        assert "gone" in policies_in(await scrape(http))


def test_several_workers_files_drop_a_deleted_policy_too(tmp_path: Path) -> None:
    """Multi-process mode (``bandit serve --workers N``) keeps values in files, which
    ``remove`` cannot touch: two worker processes write, a third renders without the
    deleted policy."""
    script = textwrap.dedent(
        """
        import sys
        from service.observability import metrics
        if sys.argv[1] == "write":
            metrics.DECISIONS.labels("keep", "a").inc()
            metrics.DECISIONS.labels("gone", "a").inc(2)
            metrics.PENDING_EVENTS.labels("gone").set(3)
            metrics.EVENT_LOG_ROWS.labels("decisions").inc(5)
        else:
            sys.stdout.write(metrics.render({"keep"})[0].decode())
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def run(mode: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", script, mode],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return done.stdout

    run("write")
    run("write")
    samples = [s for f in text_string_to_metric_families(run("render")) for s in f.samples]
    assert policies_in(samples) == {"keep"}
    assert value(samples, "bandit_decisions_total", policy="keep") == 2
    assert value(samples, "bandit_event_log_rows_written_total", table="decisions") == 10


async def test_periodic_snapshots_are_pruned_and_their_last_success_published(
    make_settings: Any,
) -> None:
    """Ten periods, one an hour apart: the log keeps the newest three (``snapshot_keep``);
    with no count limit, those younger than 2.5 hours but the newest; the gauge holds the
    last one's time."""
    settings = make_settings(snapshot_keep=3, snapshot_max_age_seconds=2.5 * 3600)
    async with running(settings) as (app, http, _typed):
        for name in ("p", "q"):
            assert (await http.put(f"/policies/{name}", json=POLICY)).status_code == 200
        snapshots = app.state.use_cases.snapshots
        event_log = app.state.use_cases.event_log
        start = 1_800_000_000.0
        now = [start]
        snapshots.clock = lambda: now[0]
        for period in range(10):
            now[0] = start + period * 3600
            assert await snapshots.snapshot_period(period) == 2
        kept = snapshot_times(event_log, "p")
        assert kept == [start + 7 * 3600, start + 8 * 3600, start + 9 * 3600]
        samples = await scrape(http)
        assert value(samples, LAST_SNAPSHOT, policy="p") == now[0]

        # the max age alone: with snapshot_keep 0 only the age prunes
        snapshots.settings = settings.model_copy(update={"snapshot_keep": 0})
        now[0] = start + 10 * 3600
        assert await snapshots.snapshot_period(10) == 2
        assert snapshot_times(event_log, "p") == [start + 8 * 3600, start + 9 * 3600, now[0]]


async def test_snapshots_failing_on_a_database_outage_are_counted(tmp_path: Path) -> None:
    """PostgreSQL cut off: each policy's save fails on its own and counts a failure and
    an event-log error; the last-success gauge keeps the last saved snapshot's time; back
    up, the next period saves both."""
    with proxied_postgres() as (proxy, url):
        async with running(outage_settings(tmp_path, url)) as (app, http, _typed):
            for name in ("p", "q"):
                assert (await http.put(f"/policies/{name}", json=POLICY)).status_code == 200
            snapshots = app.state.use_cases.snapshots
            assert await snapshots.snapshot_period(1) == 2
            before = await scrape(http)
            proxy.stop()
            assert await snapshots.snapshot_period(2) == 0
            samples = await scrape(http)
            proxy.start()
            assert await snapshots.snapshot_period(3) == 2

    def added(name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    assert added("bandit_snapshot_failures_total", policy="p") == 1
    assert added("bandit_snapshot_failures_total", policy="q") == 1
    assert added("bandit_event_log_errors_total", operation="snapshots") == 2
    assert added("bandit_store_errors_total") == 0
    assert value(samples, LAST_SNAPSHOT, policy="p") == value(before, LAST_SNAPSHOT, policy="p")


def snapshot_times(event_log: Any, policy: str) -> list[float]:
    with event_log.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT created_at FROM model_snapshots WHERE policy = :p ORDER BY created_at"),
            {"p": policy},
        )
        return [t for (t,) in rows]


def test_the_operations_guide_lists_every_metric() -> None:
    declared = {
        metric._name + ("_total" if metric._type == "counter" else "")
        for metric in vars(service.observability.metrics).values()
        if isinstance(metric, MetricWrapperBase)
    }
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    listed = set(
        re.findall(r"^\| `(bandit_\w+)` \| (?:counter|gauge|histogram) \|", guide, re.MULTILINE)
    )
    assert listed == declared


async def test_the_last_log_upkeep_and_a_given_build_commit_are_published(
    make_settings: Any,
) -> None:
    settings = make_settings(build_commit="0123456789ab", log_upkeep_interval_seconds=0)
    async with running(settings) as (app, http, _typed):
        upkeep = app.state.use_cases.log_upkeep
        upkeep.clock = lambda: 1_800_000_000.0
        await upkeep.upkeep_once()
        samples = await scrape(http)
    assert value(samples, "bandit_log_upkeep_last_success_timestamp_seconds") == 1_800_000_000.0
    assert value(samples, "bandit_build_info", commit="0123456789ab") == 1
