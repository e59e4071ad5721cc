"""An evaluation record (:mod:`service.storage.evaluations`) in the native API's shape:
IPS, SNIPS and the evaluation's own estimator's estimates with their 95% Gaussian
intervals, from the stored per-period sums (``bandit_core.evaluation.progressive``; docs/offline.md "Evaluations")."""

from __future__ import annotations

from typing import Any

from bandit_core.evaluation import WindowSums
from service.schemas.evaluations import EvaluatedPolicy, EvaluationView
from service.storage.evaluations import EvaluationRecord
from service.usecases.evaluations import result_estimator, total


def _native_estimates(sums: WindowSums, estimator: str) -> dict[str, Any]:
    ips_half, snips_half = sums.ips_half_width(), sums.snips_half_width()
    value, half = sums.estimate(estimator), sums.half_width(estimator)
    return {
        "estimate": {"value": value, "ci_low": value - half, "ci_high": value + half},
        "ips": {"value": sums.ips, "ci_low": sums.ips - ips_half, "ci_high": sums.ips + ips_half},
        "snips": {
            "value": sums.snips,
            "ci_low": sums.snips - snips_half,
            "ci_high": sums.snips + snips_half,
        },
    }


def native_view(record: EvaluationRecord) -> EvaluationView:
    """The native API's shape: IPS, SNIPS and the evaluation's estimator with 95%
    intervals, in total and per period."""
    results, estimator = None, None
    if record.result is not None:
        estimator = result_estimator(record.result)
        results = [
            EvaluatedPolicy.model_validate(
                {
                    "name": p["name"],
                    "arguments": p["arguments"],
                    "source": p["source"],
                    "events": int(total(p["periods"]).n),
                    **_native_estimates(total(p["periods"]), estimator),
                    "periods": [
                        {
                            "start": r[0],
                            "events": int(r[1]),
                            **_native_estimates(WindowSums(*r[1:]), estimator),
                        }
                        for r in p["periods"]
                    ],
                }
            )
            for p in record.result["policies"]
        ]
    return EvaluationView(
        policy=record.policy,
        evaluation_id=record.evaluation_id,
        name=record.name,
        status=record.status,
        progress=record.progress,
        created_at=record.created_at,
        start_time=record.start_time,
        end_time=record.end_time,
        message=record.message,
        period_seconds=None if record.result is None else record.result["period_seconds"],
        estimator=estimator,
        optimal_policy=None if record.result is None else record.result["optimal_policy"],
        results=results,
    )
