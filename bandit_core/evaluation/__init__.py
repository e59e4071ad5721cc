"""Offline evaluation: the replay method and off-policy estimators (docs/algorithms.md section 6).

* :func:`replay`, :func:`rejection_replay`, :func:`replay_seeds` -- learn-as-you-go
  evaluation of a policy on a log (Li et al. 2011); :class:`ReplayRun` the same fed a
  log's parts one after the other;
* :func:`ips`, :func:`snips`, :func:`dr` -- value of a fixed target policy from logged
  propensities, each returning a float; :func:`estimate` adds a bootstrap interval and
  :func:`support`'s diagnostic (a deterministic log cannot evaluate another policy);
* :func:`off_policy_estimates` -- all three for a fixed greedy policy on logged events;
* :func:`progressive_distribution`, :class:`WindowSums` -- learning settings evaluated as
  they learn along the log, as per-period sums with Gaussian intervals (evaluations);
  :class:`RewardModels` their DR estimates' reward models, fit progressively from the log.
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
from bandit_core.evaluation.progressive import (
    ESTIMATORS,
    RewardModels,
    WindowSums,
    baseline_distribution,
    importance_weights,
    period_sums,
    progressive_distribution,
    uniform_distribution,
)
from bandit_core.evaluation.replay import (
    ReplayResult,
    ReplayRun,
    SeedReplays,
    rejection_replay,
    replay,
    replay_seeds,
    smallest_pscore,
)
from bandit_core.evaluation.summary import Spread

__all__ = [
    "ESTIMATORS",
    "EstimateResult",
    "ReplayResult",
    "ReplayRun",
    "RewardModels",
    "SeedReplays",
    "Spread",
    "SupportDiagnostic",
    "UnsupportedLogError",
    "WindowSums",
    "baseline_distribution",
    "dr",
    "estimate",
    "importance_weights",
    "ips",
    "off_policy_estimates",
    "period_sums",
    "progressive_distribution",
    "rejection_replay",
    "replay",
    "replay_seeds",
    "ridge_q_hat",
    "smallest_pscore",
    "snips",
    "support",
    "target_distribution",
    "uniform_distribution",
]
