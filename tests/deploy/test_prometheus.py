"""deploy/prometheus: the configuration and the rules are valid for Prometheus (promtool,
and a structural check in Python), and the alert rules fire on what they must and only
on that (their unit tests in alerts_test.yml)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import promql
from tests.tools import system_tool

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [system_tool("promtool"), *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_promtool_accepts_the_configuration_and_its_rule_files() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr


def test_promtool_accepts_the_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(promql.alert_rules())} rules found" in result.stdout


def test_the_alert_rules_pass_their_unit_tests() -> None:
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_catch_a_wrong_threshold(tmp_path: Path) -> None:
    """The alert unit tests can fail: with the error-rate threshold raised above the
    tested 9% they report the missing alert."""
    rules = (PROMETHEUS / "alerts.yml").read_text()
    assert rules.count("> 0.05\n") == 1
    (tmp_path / "alerts.yml").write_text(rules.replace("> 0.05\n", "> 0.10\n"))
    shutil.copy(PROMETHEUS / "alerts_test.yml", tmp_path)
    result = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "BanditHighErrorRate" in result.stdout + result.stderr


def test_every_alert_rule_is_unit_tested() -> None:
    cases = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())["tests"]
    tested = {t["alertname"] for case in cases for t in case.get("alert_rule_test", [])}
    fired = {
        t["alertname"] for case in cases for t in case.get("alert_rule_test", []) if t["exp_alerts"]
    }
    alerts = {rule["alert"] for rule in promql.alert_rules() if "alert" in rule}
    assert tested == alerts and fired == alerts


# ---- the same files checked structurally in Python -------------------------------------------


def test_the_configuration_has_the_shape_prometheus_reads() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    assert set(config) <= {"global", "rule_files", "scrape_configs", "alerting", "remote_write"}
    for key in ("scrape_interval", "evaluation_interval"):
        assert _DURATION.match(config["global"][key]), config["global"][key]
    for rule_file in config["rule_files"]:
        assert (PROMETHEUS / rule_file).is_file(), rule_file
    names = [job["job_name"] for job in config["scrape_configs"]]
    assert len(names) == len(set(names)) and "bandit-api" in names
    api = next(job for job in config["scrape_configs"] if job["job_name"] == "bandit-api")
    assert api["metrics_path"] == "/metrics"
    assert api["dns_sd_configs"][0]["type"] == "A"


def test_the_rules_have_the_shape_prometheus_reads() -> None:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    assert len({g["name"] for g in groups}) == len(groups)
    alerts = []
    for group in groups:
        for rule in group["rules"]:
            assert ("alert" in rule) != ("record" in rule), rule
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert rule["expr"].count("(") == rule["expr"].count(")"), rule["expr"]
            if "alert" in rule:
                alerts.append(rule["alert"])
                assert _DURATION.match(rule["for"]), rule
                assert rule["labels"]["severity"] in {"critical", "warning"}
                assert {"summary", "description"} <= set(rule["annotations"])
                assert set(rule) <= {
                    "alert",
                    "expr",
                    "for",
                    "labels",
                    "annotations",
                    "keep_firing_for",
                }
            else:
                assert re.fullmatch(r"[a-z_]+:[a-z_:]+", rule["record"]), (
                    "level:metric:operation naming"
                )
    assert len(alerts) == len(set(alerts))


@pytest.mark.parametrize(
    "topic, alert",
    [
        ("error rate", "BanditHighErrorRate"),
        ("latency", "BanditHighLatency"),
        ("delta_G above its configured limit", "BanditDeltaGAboveLimit"),
        ("event-log spool growing", "BanditEventLogSpoolGrowing"),
        ("Redis unreachable", "BanditRedisUnreachable"),
        ("PostgreSQL unreachable", "BanditPostgresUnreachable"),
    ],
)
def test_the_operator_hears_about(topic: str, alert: str) -> None:
    assert alert in promql.alert_expressions(), f"no alert for {topic}"


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each dashboard expression (Grafana variables substituted) as a
    recording rule."""
    exprs = promql.dashboard_expressions()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}:expr", "expr": expr}
                    for i, expr in enumerate(exprs.values())
                ],
            }
        ]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    result = promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout
