"""An evaluation record (:mod:`service.storage.evaluations`) in Personalizer's shapes
(docs/personalizer.md "Offline evaluations"): v1.0 / v1.1-preview (``policyResults``
with per-period ``summary`` and ``totalSummary``) and 2022-09-01-preview (``content``: a
time series per learning setting). The native API's shape:
:func:`service.usecases.evaluation_views.native_view`.

Estimates come from the stored per-period sums (``bandit_core.evaluation.progressive``):
``expectedReward`` / ``averageReward`` is the estimate of the evaluation's estimator (the
loop's ``--cb_type``: IPS, or DR with its reward model), the intervals are 95% Gaussian.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any, Literal

from bandit_core.evaluation import WindowSums
from service.errors import InvalidRequest
from service.personalizer.evaluation_schemas import (
    EvaluationContent,
    EvaluationDetails,
    PersonalizerEvaluation,
    PolicyResult,
    PolicyResultSummary,
    PolicyTimeSeries,
    PreviewEvaluation,
)
from service.storage.evaluations import EvaluationRecord
from service.timeparse import format_duration
from service.usecases.auto_optimize import DECISION_KEY, RUN_PREFIX
from service.usecases.evaluations import result_estimator, total

V1_STATUS = {
    "pending": "pending",
    "running": "pending",
    "succeeded": "completed",
    "failed": "failed",
    "timeout": "timeout",
    "optimal_policy_applied": "optimalPolicyApplied",
    "online_policy_retained": "onlinePolicyRetained",
}
PREVIEW_STATUS = {
    "pending": "NotSubmitted",
    "running": "Running",
    "succeeded": "Succeeded",
    "failed": "Failed",
    "timeout": "Timeout",
    "optimal_policy_applied": "OptimalPolicyApplied",
    "online_policy_retained": "OnlinePolicyRetained",
}
INTERVALS_MINUTES = (5, 60, 360, 720, 1440)
"""The aggregation intervals 2022-09-01-preview's ``intervalInMinutes`` allows."""


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _policies(record: EvaluationRecord) -> list[dict[str, Any]]:
    """The evaluated policies: with their sums when the run finished, else as requested."""
    if record.result is not None:
        return list(record.result["policies"])
    return [{**c, "periods": None} for c in record.request["candidates"]]


def _summary(sums: WindowSums, when: float, window: str, estimator: str) -> PolicyResultSummary:
    return PolicyResultSummary(
        time_stamp=_time(when),
        ips_estimator_numerator=sums.ips_numerator,
        ips_estimator_denominator=sums.n,
        snips_estimator_denominator=sums.snips_denominator,
        aggregate_time_window=window,
        non_zero_probability=sums.nonzero,
        sum_of_squares=sums.sum_of_squares,
        confidence_interval=sums.half_width(estimator),
        average_reward=sums.estimate(estimator),
    )


def v1_evaluation(record: EvaluationRecord) -> PersonalizerEvaluation:
    """The v1.0 / v1.1-preview shape: ``summary`` one entry per 5-minute period with
    events, ``totalSummary`` the whole range (its ``timeStamp`` the range's end)."""
    period = format_duration(record.result["period_seconds"]) if record.result else "PT5M"
    estimator = result_estimator(record.result or {})
    results = []
    for p in _policies(record):
        rows = p["periods"]
        results.append(
            PolicyResult(
                name=p["name"],
                arguments=p["arguments"],
                policy_source=p["source"],
                summary=None
                if rows is None
                else [_summary(WindowSums(*r[1:]), r[0], period, estimator) for r in rows],
                total_summary=None
                if rows is None
                else _summary(
                    total(rows),
                    record.end_time,
                    format_duration(record.end_time - record.start_time),
                    estimator,
                ),
            )
        )
    return PersonalizerEvaluation(
        id=record.evaluation_id,
        name=record.name,
        start_time=_time(record.start_time),
        end_time=_time(record.end_time),
        job_id=record.evaluation_id,
        status=V1_STATUS[record.status],
        policy_results=results,
        optimal_policy=(record.result or {}).get("optimal_policy") or "",
        feature_importance=(record.result or {}).get("feature_importance", []),
        evaluation_type=evaluation_type(record),
        creation_time=_time(record.created_at),
    )


def evaluation_type(record: EvaluationRecord) -> Literal["Manual", "Auto"]:
    """``Auto`` for an Auto-Optimize run (service.usecases.auto_optimize), else ``Manual``."""
    return "Auto" if record.evaluation_id.startswith(RUN_PREFIX) else "Manual"


def preview_details(record: EvaluationRecord) -> EvaluationDetails:
    return EvaluationDetails(
        id=record.evaluation_id,
        name=record.name,
        start_time=_time(record.start_time),
        end_time=_time(record.end_time),
        creation_time=_time(record.created_at),
        status=PREVIEW_STATUS[record.status],
        evaluation_type=evaluation_type(record),
    )


def preview_evaluation(
    record: EvaluationRecord,
    start: datetime | None,
    end: datetime | None,
    interval_minutes: int | None,
    window: str | None,
) -> PreviewEvaluation:
    """The 2022-09-01-preview shape. ``content`` (once the run succeeded) holds, per
    learning setting, the estimate over the stored 5-minute periods overlapping ``[start,
    end)`` (the evaluation's range when omitted) and a time series with a point for each
    ``interval_minutes`` interval (default 5) holding events: the estimate of that
    interval (``Rolling``) or of everything up to its end (``Expanding``, the default)."""
    interval = interval_minutes or INTERVALS_MINUTES[0]
    if interval not in INTERVALS_MINUTES:
        raise InvalidRequest(
            f"intervalInMinutes must be one of {list(INTERVALS_MINUTES)}, but got {interval}",
            ["query", "intervalInMinutes"],
        )
    mode = window or "Expanding"
    if mode not in ("Expanding", "Rolling"):
        raise InvalidRequest(
            f"window must be Expanding or Rolling, but got {mode!r}", ["query", "window"]
        )
    lo = record.start_time if start is None else max(record.start_time, _seconds(start))
    hi = record.end_time if end is None else min(record.end_time, _seconds(end))
    if hi <= lo:
        raise InvalidRequest(
            "endTime must be after startTime within the evaluation's range", ["query", "endTime"]
        )
    details = preview_details(record)
    content = None
    if record.result is not None:
        step, period = interval * 60.0, record.result["period_seconds"]
        estimator = result_estimator(record.result)
        values = []
        for p in record.result["policies"]:
            rows = [r for r in p["periods"] if r[0] + period > lo and r[0] < hi]
            buckets: dict[float, WindowSums] = {}
            for r in rows:  # the intervals holding events, in time order
                key = math.floor(r[0] / step) * step
                buckets[key] = buckets.get(key, WindowSums()) + WindowSums(*r[1:])
            points, so_far = [], WindowSums()
            for key in sorted(buckets):
                so_far = so_far + buckets[key] if mode == "Expanding" else buckets[key]
                points.append({"timeStamp": _time(key), **_estimate(so_far, estimator)})
            values.append(
                PolicyTimeSeries.model_validate(
                    {
                        "name": p["name"],
                        "arguments": p["arguments"],
                        "policySource": p["source"],
                        "summary": _estimate(total(rows), estimator),
                        "timeseries": {"data": points},
                    }
                )
            )
        content = EvaluationContent(
            start_time=_time(lo), end_time=_time(hi), interval_in_minutes=interval, value=values
        )
    return PreviewEvaluation(
        **details.model_dump(),
        optimal_policy=(record.result or {}).get("optimal_policy"),
        description=record.message or ((record.result or {}).get(DECISION_KEY) or {}).get("reason"),
        content=content,
    )


def _seconds(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _estimate(sums: WindowSums, estimator: str) -> dict[str, Any]:
    value, half = sums.estimate(estimator), sums.half_width(estimator)
    return {"expectedReward": value, "confidenceInterval": [value - half, value + half]}


DEFAULT_PAGE_SIZE = 100
"""``maxpagesize`` when the request gives none (the 2022-09-01-preview specification)."""
FILTER_FIELDS = ("id", "name", "status", "evaluationType")
_CONDITION = re.compile(r"\s*(\w+)\s+eq\s+'((?:[^']|'')*)'\s*")


def evaluation_filter(expression: str) -> dict[str, str]:
    """The conditions of a list ``filter``: ``<field> eq '<value>'`` joined by ``and``
    (OData's syntax, ``''`` a quote in a value; the specification's example
    ``metadata=evaluationType eq 'Manual'`` is read without its ``metadata=``), over the
    fields of :data:`FILTER_FIELDS`; a 400 naming ``filter`` for anything else."""
    text = expression.strip().removeprefix("metadata=")
    conditions: dict[str, str] = {}
    for part in re.split(r"\s+and\s+", text):
        match = _CONDITION.fullmatch(part)
        if match is None or match.group(1) not in FILTER_FIELDS:
            raise InvalidRequest(
                f"filter: {part.strip()!r} is not a condition this service reads (<field> eq "
                f"'<value>' joined by 'and', fields {', '.join(FILTER_FIELDS)})",
                ["query", "filter"],
            )
        conditions[match.group(1)] = match.group(2).replace("''", "'")
    return conditions


def evaluation_page(
    records: list[EvaluationRecord],
    filter_expression: str | None,
    top: int | None,
    skip: int,
    max_page_size: int | None,
) -> tuple[list[EvaluationDetails], dict[str, int] | None]:
    """One page of the preview evaluation list: the records (newest first) the filter
    keeps, from ``skip``, at most ``top`` in all and ``max_page_size`` (default
    :data:`DEFAULT_PAGE_SIZE`) in this page; with the query parameters of the next page
    (``skip``, ``top``, ``maxpagesize``, for its ``nextLink``) when more remain."""
    conditions = {} if filter_expression is None else evaluation_filter(filter_expression)
    details = [preview_details(r) for r in records]
    kept = [
        d
        for d in details
        if all(str(d.model_dump(by_alias=True)[f]) == v for f, v in conditions.items())
    ]
    size = DEFAULT_PAGE_SIZE if max_page_size is None else max_page_size
    wanted = len(kept) - skip if top is None else min(top, len(kept) - skip)
    page = kept[skip : skip + min(size, max(wanted, 0))]
    if wanted <= len(page):
        return page, None
    following = {"skip": skip + len(page), "maxpagesize": size}
    if top is not None:
        following["top"] = top - len(page)
    return page, following
