"""Change detection on each policy's reward stream (docs/algorithms.md section 10.5).

Every applied reward of a policy (explicit or default) goes through a Page-Hinkley
detector (:mod:`bandit_core.drift`) with the policy's ``drift_detection`` settings
(River's defaults: ``delta = 0.005``, ``threshold = 50``, ``min_samples = 30``). A detection counts
``bandit_drift_detections_total{policy}``; ``bandit_drift_excursion{policy}`` shows how
close the stream is to the next one (the detector's excursion, in reward units, against
the threshold). The detectors live in the process: with several workers or replicas,
each watches the rewards it applies, a sample of the policy's stream (docs/operations.md,
"Drift detection").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bandit_core.drift import PageHinkley, PageHinkleyConfig
from service.observability import metrics


@dataclass
class DriftWatch:
    """One Page-Hinkley detector per policy, created at the policy's first reward and
    started anew when the policy's settings change."""

    detectors: dict[str, PageHinkley] = field(default_factory=dict)

    def observe(self, policy: str, reward: float, config: PageHinkleyConfig) -> bool:
        """Feed one applied reward of ``policy``, whose detector has the settings
        ``config``; return whether a change was detected."""
        detector = self.detectors.get(policy)
        if detector is None or detector.config != config:
            detector = self.detectors[policy] = PageHinkley(config)
            metrics.DRIFT_DETECTIONS.labels(policy)  # the series exists at 0 from the first reward
        detected = detector.update(reward)
        if detected:
            metrics.DRIFT_DETECTIONS.labels(policy).inc()
        metrics.DRIFT_EXCURSION.labels(policy).set(detector.excursion)
        return detected
