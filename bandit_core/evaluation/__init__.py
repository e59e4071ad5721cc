"""Offline evaluation: the replay method and off-policy estimators (docs/algorithms.md section 6).

* :func:`replay`, :func:`rejection_replay`, :func:`replay_seeds` -- learn-as-you-go
  evaluation of a policy on a log (Li et al. 2011);
* :func:`ips`, :func:`snips`, :func:`dr` -- value of a fixed target policy from logged
  propensities, each returning a float; :func:`estimate` adds a bootstrap interval and
  :func:`support`'s diagnostic (a deterministic log cannot evaluate another policy);
* :func:`off_policy_estimates` -- all three for a fixed greedy policy on logged events.
"""

from bandit_core.evaluation.estimators import (
    EstimateResult,
    SupportDiagnostic,
    UnsupportedLogError,
    dr,
    estimate,
    ips,
    snips,
    support,
)
from bandit_core.evaluation.offpolicy import off_policy_estimates, ridge_q_hat, target_distribution
from bandit_core.evaluation.replay import (
    ReplayResult,
    SeedReplays,
    rejection_replay,
    replay,
    replay_seeds,
)
from bandit_core.evaluation.summary import Spread

__all__ = [
    "EstimateResult",
    "ReplayResult",
    "SeedReplays",
    "Spread",
    "SupportDiagnostic",
    "UnsupportedLogError",
    "dr",
    "estimate",
    "ips",
    "off_policy_estimates",
    "rejection_replay",
    "replay",
    "replay_seeds",
    "ridge_q_hat",
    "snips",
    "support",
    "target_distribution",
]
