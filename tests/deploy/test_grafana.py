"""deploy/grafana: the provisioning files have the shape Grafana reads, and the dashboard
is well-formed, uses the provisioned datasource and shows what an operator must see."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import promql
from tests.tools import system_tool

ROOT = Path(__file__).resolve().parents[2]
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"


def _datasources() -> list[dict]:
    config = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    assert config["apiVersion"] == 1
    return config["datasources"]


def test_the_datasource_is_the_default_prometheus_with_a_fixed_uid() -> None:
    (datasource,) = _datasources()
    assert datasource["type"] == "prometheus"
    assert datasource["uid"] == "prometheus" and datasource["isDefault"] is True
    scrape = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert datasource["jsonData"]["timeInterval"] == scrape["global"]["scrape_interval"]


def test_the_dashboard_provider_reads_files() -> None:
    config = yaml.safe_load((PROVISIONING / "dashboards" / "bandit.yml").read_text())
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    assert provider["allowUiUpdates"] is False  # the repository is the source of the dashboard


def test_the_dashboard_is_well_formed() -> None:
    dash = promql.dashboard()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    ids = [panel["id"] for panel in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    uids = {ds["uid"] for ds in _datasources()}
    for panel in promql.dashboard_panels():
        assert panel["datasource"]["uid"] in uids, panel["title"]
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] in uids
            assert target["expr"].strip()
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24 and pos["h"] > 0


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in promql.dashboard()["panels"]:
        pos = panel["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_the_policy_variable_filters_the_per_policy_panels() -> None:
    (variable,) = promql.dashboard()["templating"]["list"]
    assert variable["name"] == "policy" and variable["includeAll"] and variable["allValue"] == ".*"
    for panel in promql.dashboard_panels():
        for target in panel["targets"]:
            if "by (policy" in target["expr"] and "bandit:" not in target["expr"]:
                assert 'policy=~"$policy"' in target["expr"], f"{panel['title']}: {target['expr']}"


@pytest.mark.parametrize(
    "what, series",
    [
        ("request rate per route", "bandit_http_request_duration_seconds_count"),
        ("latency percentiles per route", "bandit_http_request_duration_seconds_bucket"),
        ("decisions per policy and arm", "bandit_decisions_total"),
        ("mean reward, positive part", "bandit_reward_positive_sum_total"),
        ("mean reward, negative part", "bandit_reward_negative_sum_total"),
        ("exploration alpha per arm", "bandit_lnucb_ta_alpha"),
        ("guardrail blocks", "bandit_guardrail_blocks_total"),
        ("delta_G", "bandit_guardrail_delta_g"),
        ("pending events", "bandit_pending_events"),
        ("default rewards", "bandit_default_rewards_total"),
        ("event-log lag", "bandit_event_log_lag_seconds"),
        ("spool depth", "bandit_event_log_spool_depth"),
        ("store errors", "bandit_store_errors_total"),
    ],
)
def test_the_dashboard_shows(what: str, series: str) -> None:
    queried = set().union(
        *(promql.metric_names(e) for e in promql.dashboard_expressions().values())
    )
    assert series in queried, f"no panel for {what}"


def test_latency_is_shown_as_p50_p95_p99_per_route() -> None:
    (panel,) = [p for p in promql.dashboard_panels() if "Latency" in p["title"]]
    exprs = [t["expr"] for t in panel["targets"]]
    for quantile in ("0.5", "0.95", "0.99"):
        assert any(
            e.startswith(f"histogram_quantile({quantile}, sum by (route, le)") for e in exprs
        )


def test_the_mean_reward_panels_show_a_loop_whose_rewards_are_negative(tmp_path: Path) -> None:
    """The mean-reward queries, evaluated by promtool over the counters of a loop whose
    rewards average -0.5 (positive part 1/s, negative part 3/s, 4 rewards/s), give -0.5."""
    labels = {"policy": "loop", "arm": "a", "source": "explicit"}
    rates = {
        "bandit_reward_positive_sum_total": 60,
        "bandit_reward_negative_sum_total": 180,
        "bandit_rewards_total": 240,
    }
    exprs = [
        expr
        for expr in promql.dashboard_expressions().values()
        if "bandit_reward_negative_sum_total" in expr
    ]
    assert len(exprs) == 2  # per policy and arm, per policy and source

    def selector(names: list[str]) -> str:
        return "{" + ", ".join(f'{name}="{labels[name]}"' for name in names) + "}"

    cases = [
        {
            "expr": expr,
            "eval_time": "10m",
            "exp_samples": [
                {
                    "labels": selector(re.search(r"by \(([^)]*)\)", expr)[1].split(", ")),
                    "value": -0.5,
                }
            ],
        }
        for expr in exprs
    ]
    series = [
        {"series": name + selector(list(labels)), "values": f"0+{per_minute}x20"}
        for name, per_minute in rates.items()
    ]
    tests = {"rule_files": [], "evaluation_interval": "1m"}
    tests["tests"] = [{"interval": "1m", "input_series": series, "promql_expr_test": cases}]
    (tmp_path / "mean_reward_test.yml").write_text(yaml.safe_dump(tests))
    result = subprocess.run(
        [system_tool("promtool"), "test", "rules", "mean_reward_test.yml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
