"""Every series the alert rules and the Grafana dashboard query is one the app exports,
with the labels the queries use; the app's /metrics really serves those names."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

import service.observability.metrics
from service.api.app import create_app
from service.settings import Settings
from tests.deploy import promql

# Sample-name suffixes of each metric type in the exposition format.
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}
# Series Prometheus makes itself, and the target labels it attaches to every scraped one.
_PROMETHEUS_SERIES = {"up": set()}
_TARGET_LABELS = {"job", "instance"}


def exported_series() -> dict[str, set[str]]:
    """Sample name -> label names, for every metric declared in service.observability.metrics."""
    series: dict[str, set[str]] = {}
    for value in vars(service.observability.metrics).values():
        if isinstance(value, MetricWrapperBase):
            for suffix in _SUFFIXES[value._type]:
                labels = set(value._labelnames) | ({"le"} if suffix == "_bucket" else set())
                series[value._name + suffix] = labels
    return series


def known_series() -> dict[str, set[str]]:
    recorded = {name: set() for name in promql.recorded_names()}
    return exported_series() | recorded | _PROMETHEUS_SERIES


QUERIES = {f"alert {k}": v for k, v in promql.alert_expressions().items()} | {
    f"dashboard {k}": v for k, v in promql.dashboard_expressions().items()
}


def test_the_metrics_module_declares_metrics() -> None:
    assert "bandit_http_request_duration_seconds_bucket" in exported_series()
    assert "bandit_decisions_total" in exported_series()


@pytest.mark.parametrize("where", sorted(QUERIES))
def test_every_queried_series_is_exported_with_the_queried_labels(where: str) -> None:
    expr = QUERIES[where]
    names = promql.metric_names(expr)
    known = known_series()
    unknown = names - set(known)
    assert not unknown, (
        f"{where}: {expr!r} queries {sorted(unknown)}, which the app does not export"
    )
    available = set().union(*(known[name] for name in names)) | _TARGET_LABELS
    missing = promql.label_names(expr) - available
    assert not missing, f"{where}: {expr!r} uses labels {sorted(missing)} its series do not carry"


def test_the_dashboard_shows_every_metric_the_app_exports() -> None:
    queried = set().union(
        *(promql.metric_names(e) for e in promql.dashboard_expressions().values())
    )
    families = {
        value._name
        for value in vars(service.observability.metrics).values()
        if isinstance(value, MetricWrapperBase)
    }
    unshown = {f for f in families if not any(name.startswith(f) for name in queried)}
    assert not unshown, f"metrics without a dashboard panel: {sorted(unshown)}"


# ---- the live /metrics of the app after some traffic -----------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        redis_url=None,
        database_url=None,
        data_dir=tmp_path,
        api_keys=["ops-test-key"],
        policies_file=None,
        demo_policy=True,
        snapshot_interval_seconds=0,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield http


@pytest.mark.anyio
async def test_live_metrics_serve_the_queried_series(client: httpx.AsyncClient) -> None:
    auth = {"Authorization": "Bearer ops-test-key"}

    async def scrape() -> list:
        response = await client.get("/metrics")
        assert response.status_code == 200
        return [
            s for family in text_string_to_metric_families(response.text) for s in family.samples
        ]

    def value(samples: list, name: str, **labels: str) -> float:
        return sum(
            s.value for s in samples if s.name == name and labels.items() <= s.labels.items()
        )

    # The metrics live in the process-wide registry, so other tests in this process may
    # have counted already: what this test's traffic adds is the difference of two scrapes.
    before = await scrape()
    for i in range(5):
        decision = await client.post(
            "/recommend", json={"policy": "demo", "context": [1.0, 0.5, 0.0, float(i)]}
        )
        assert decision.status_code == 200, decision.text
        reward = await client.post(
            "/reward", json={"event_id": decision.json()["event_id"], "reward": 1.0}, headers=auth
        )
        assert reward.status_code == 200, reward.text
    assert (
        await client.post("/recommend", json={"policy": "no-such-policy", "context": []})
    ).status_code == 404
    samples = await scrape()
    served = {s.name for s in samples if s.name.startswith("bandit_")}
    # what the module declares is what the endpoint serves (the basis of the checks above)
    assert served <= set(exported_series()), sorted(served - set(exported_series()))

    def added(name: str, **labels: str) -> float:
        return value(samples, name, **labels) - value(before, name, **labels)

    # the route label is the route template, so the dashboard's per-route panels group by it
    assert (
        added("bandit_http_request_duration_seconds_count", route="/recommend", status="200") == 5
    )
    assert (
        added("bandit_http_request_duration_seconds_count", route="/recommend", status="404") == 1
    )
    assert added("bandit_http_request_duration_seconds_count", route="/reward", status="200") == 5
    assert added("bandit_decisions_total", policy="demo") == 5
    assert added("bandit_rewards_total", policy="demo", source="explicit") == 5
    assert added("bandit_reward_positive_sum_total", policy="demo", source="explicit") == 5.0
    assert added("bandit_reward_negative_sum_total", policy="demo", source="explicit") == 0.0


# ---- the per-arm label stays bounded (issue 18 item 7) ---------------------------------------

ARM_SERIES = 2  # BANDIT_METRICS_ARM_SERIES of the test app
# The bound below does not depend on how many arm ids are served: a label per arm id
# would put 2 * DISTINCT_ARMS decision samples (total, created) in the policy's share of
# /metrics, 64 times the bound of 31, so a thousand ids catch it as ten thousand would.
DISTINCT_ARMS = 1_000
# Samples a policy may add to /metrics: decisions (total, created) for ARM_SERIES + 1 arm
# values, rewards and the two parts of the reward sum (total, created) for each of those
# and the one source used, the pending-events and overdue-pending gauges, the audit
# record of the policy's creation (total, created), and the reward drift detector's
# detections (total, created) and excursion.
MAX_POLICY_SAMPLES = 2 * (ARM_SERIES + 1) * 4 + 2 + 2 + 3


@pytest.mark.anyio
async def test_a_thousand_arm_ids_add_a_bounded_number_of_series(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path,
        api_keys=["ops-test-key"],
        demo_policy=False,
        snapshot_interval_seconds=0,
        metrics_arm_series=ARM_SERIES,
    )
    app = create_app(settings)
    auth = {"Authorization": "Bearer ops-test-key"}
    spec = {"algorithm": "linucb", "dimension": 1, "default_reward": None}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            for name, arms in (("open-catalog", None), ("registered", ["a", "b", "c"])):
                r = await http.put(f"/policies/{name}", json={**spec, "arms": arms}, headers=auth)
                assert r.status_code == 200, r.text

            async def serve(policy: str, arm: str, rewarded: bool) -> None:
                body = {"policy": policy, "context": [1.0], "arms": [{"id": arm}]}
                decision = (await http.post("/recommend", json=body)).json()
                assert decision["arm_id"] == arm, decision
                if rewarded:
                    reward = {"event_id": decision["event_id"], "reward": 1.0}
                    r = await http.post("/reward", json=reward, headers=auth)
                    assert r.json()["applied"]

            for start in range(0, DISTINCT_ARMS, 100):  # every 10th arm rewarded too
                arms = range(start, start + 100)
                await asyncio.gather(
                    *(serve("open-catalog", f"item-{i}", i % 10 == 0) for i in arms)
                )
            for arm in ("a", "b", "c"):
                await serve("registered", arm, True)
            text = (await http.get("/metrics")).text

    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    for policy, arms in (("open-catalog", {"__other__"}), ("registered", {"a", "b", "__other__"})):
        mine = [s for s in samples if s.labels.get("policy") == policy]
        assert 0 < len(mine) <= MAX_POLICY_SAMPLES, (policy, len(mine))
        assert {s.labels["arm"] for s in mine if "arm" in s.labels} == arms
        decisions = [s for s in mine if s.name == "bandit_decisions_total"]
        served = DISTINCT_ARMS if policy == "open-catalog" else 3
        assert sum(s.value for s in decisions) == served  # the policy total stays exact
