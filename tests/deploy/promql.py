"""What the repository's PromQL queries read: the metric names and label names of the
expressions in deploy/prometheus/alerts.yml and the Grafana dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "bandit.json"

# Grafana's variables, replaced by values that make the expression plain PromQL.
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__interval": "1m",
    "$__range": "1h",
    "$policy": ".*",
}

_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "start",
    "end",
    "atan2",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?")
_MATCHER_LABEL = re.compile(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)")


def substitute_grafana(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Series names an expression selects (functions, keywords and labels excluded).

    >>> sorted(metric_names('sum by (route, le) (rate(a_bucket{s=~"5.."}[5m])) > on () group_left () b:c'))
    ['a_bucket', 'b:c']
    """
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _GROUPING.sub("", text)
    return {
        match.group(1)
        for match in _IDENT.finditer(text)
        if not match.group(2) and match.group(1) not in _KEYWORDS
    }


def label_names(expr: str) -> set[str]:
    """Labels an expression groups, joins or matches on.

    >>> sorted(label_names('sum by (route) (rate(x{status=~"5..", method="POST"}[5m])) > on (policy) y'))
    ['method', 'policy', 'route', 'status']
    """
    text = _STRING.sub('""', expr)
    labels = {label for body in _MATCHERS.findall(text) for label in _MATCHER_LABEL.findall(body)}
    for _, body in _GROUPING.findall(text):
        labels |= {part.strip() for part in body.split(",") if part.strip()}
    return labels


def alert_rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def recorded_names() -> set[str]:
    """Series the rule file records itself (recording rules)."""
    return {rule["record"] for rule in alert_rules() if "record" in rule}


def alert_expressions() -> dict[str, str]:
    return {rule.get("alert") or rule["record"]: rule["expr"] for rule in alert_rules()}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels() -> list[dict]:
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def dashboard_expressions() -> dict[str, str]:
    """``"<panel title> #<refId>"`` -> the expression with Grafana variables substituted;
    template variables' queries included as ``"$<name>"``."""
    exprs = {
        f"{panel['title']} #{target['refId']}": substitute_grafana(target["expr"])
        for panel in dashboard_panels()
        for target in panel["targets"]
    }
    for variable in dashboard()["templating"]["list"]:
        query = (
            variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        )
        match = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", query.strip())
        assert match, f"template variable {variable['name']}: unsupported query {query!r}"
        if match.group(1):
            # label_values(<series selector>, <label>): the selector, grouped by the label
            exprs[f"${variable['name']}"] = f"count by ({match.group(2)}) ({match.group(1)})"
    return exprs
