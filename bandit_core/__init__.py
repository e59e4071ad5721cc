"""bandit_core: the pure numpy contextual-bandit engine.

Policies (``make_policy(name, d, **params)``): ``linucb``, ``hybrid_linucb``,
``diag_linucb``, ``lnucb_ta``, ``guardrailed_linucb``, ``hare``, ``random``,
``epsilon_greedy``, ``discounted_linucb``, ``sliding_window_linucb``. Every policy offers
``select(arm_ids, X) -> Decision`` and ``update(arm_id, x, reward)`` over explicit state
that serializes to bytes (``to_bytes`` / ``from_bytes``) without pickle; ``clock_at(policy,
now)`` runs them at a time, for the policies that forget by wall-clock time;
``exploring(policy, level)`` raises their exploration for a while.
"""

from bandit_core.clock import clock_at
from bandit_core.errors import (
    BanditError,
    ConfigError,
    InvalidFeatureError,
    InvalidInputError,
    ModelError,
    NoEligibleArmError,
    StateFormatError,
    UnknownArmError,
)
from bandit_core.exploration import exploring
from bandit_core.policy import (
    ArmStats,
    BasePolicy,
    Decision,
    GuardrailOutcome,
    Policy,
    PolicyConfig,
    SelectRequest,
)
from bandit_core.registry import POLICIES, make_policy, policy_class, policy_from_bytes

__all__ = [
    "POLICIES",
    "ArmStats",
    "BanditError",
    "BasePolicy",
    "ConfigError",
    "Decision",
    "GuardrailOutcome",
    "InvalidFeatureError",
    "InvalidInputError",
    "ModelError",
    "NoEligibleArmError",
    "Policy",
    "PolicyConfig",
    "SelectRequest",
    "StateFormatError",
    "UnknownArmError",
    "clock_at",
    "exploring",
    "make_policy",
    "policy_class",
    "policy_from_bytes",
]
