"""Change detection on each policy's reward stream (docs/algorithms.md section 10.5).

Every applied reward of a policy (explicit or default) goes through a Page-Hinkley
detector (:mod:`bandit_core.drift`) with the policy's ``drift_detection`` settings
(River's defaults: ``delta = 0.005``, ``threshold = 50``, ``min_samples = 30``). A detection counts
``bandit_drift_detections_total{policy}``; ``bandit_drift_excursion{policy}`` shows how
close the stream is to the next one (the detector's excursion, in reward units, against
the threshold). The detectors live in the process: with several workers or replicas,
each watches the rewards it applies, a sample of the policy's stream (docs/operations.md,
"Drift detection"). Each detection is also an audit record (action ``drift``, actor
``system``, :attr:`DriftWatch.audit`), which the console marks on the reward chart.

A policy with a ``drift_response`` explores more for a while after a detection
(:meth:`DriftWatch.exploration_boost`, applied by the recommend use case with
:func:`bandit_core.exploring`); ``bandit_exploration_boost_until_seconds{policy}`` is
the Unix time the latest boost ends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bandit_core.drift import PageHinkley, PageHinkleyConfig
from service.observability import metrics
from service.schemas import DriftResponse
from service.usecases.audit import DRIFT, SYSTEM, acting_as

if TYPE_CHECKING:
    from service.usecases.audit import AuditTrail

logger = logging.getLogger(__name__)


@dataclass
class DriftWatch:
    """One Page-Hinkley detector per policy, created at the policy's first reward and
    started anew when the policy's settings change, and the time of each policy's
    latest detection in this process; ``audit`` records each detection."""

    detectors: dict[str, PageHinkley] = field(default_factory=dict)
    detected_at: dict[str, float] = field(default_factory=dict)
    audit: AuditTrail | None = None

    def observe(
        self,
        policy: str,
        reward: float,
        config: PageHinkleyConfig,
        now: float,
        response: DriftResponse | None = None,
    ) -> bool:
        """Feed one applied reward of ``policy`` at ``now``, whose detector has the
        settings ``config``; return whether a change was detected. With a ``response``
        a detection starts a boost of the policy's exploration until ``now +
        response.seconds``."""
        detector = self.detectors.get(policy)
        if detector is None or detector.config != config:
            detector = self.detectors[policy] = PageHinkley(config)
            metrics.DRIFT_DETECTIONS.labels(policy)  # the series exists at 0 from the first reward
        detected = detector.update(reward)
        if detected:
            metrics.DRIFT_DETECTIONS.labels(policy).inc()
            self.detected_at[policy] = now
            if self.audit is not None:
                detail = {"reward": reward, "threshold": config.threshold}
                with acting_as(SYSTEM):
                    self.audit.record(policy, DRIFT, detail=detail)
            if response is not None:
                until = now + response.seconds
                metrics.EXPLORATION_BOOST_UNTIL.labels(policy).set(until)
                logger.warning(
                    "policy %r: reward drift detected; exploration raised to %s until %.3f",
                    policy,
                    response.exploration,
                    until,
                )
        metrics.DRIFT_EXCURSION.labels(policy).set(detector.excursion)
        return detected

    def exploration_boost(
        self, policy: str, now: float, response: DriftResponse | None
    ) -> float | None:
        """The exploration level ``policy`` (whose settings hold ``response``) selects
        with at ``now``: ``response.exploration`` within ``response.seconds`` of its
        latest detection, else None (its own settings)."""
        if response is None:
            return None
        detected_at = self.detected_at.get(policy)
        if detected_at is None or not detected_at <= now < detected_at + response.seconds:
            return None
        return response.exploration
