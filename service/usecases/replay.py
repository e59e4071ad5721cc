"""Learning from the event log: the rewards of logged decisions applied to an engine
policy as they were applied live (``bandit rebuild``, feature importance over a log range)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bandit_core import BasePolicy
from bandit_core.features import Featurizer
from service.schemas import PolicyInfo
from service.storage.base import LoggedDecision
from service.usecases.json_features import logged_rows


def learn_logged_rewards(
    policy: BasePolicy, info: PolicyInfo, rewarded: Sequence[LoggedDecision]
) -> None:
    """Apply each logged reward of ``rewarded`` (in the order given) to ``policy`` of
    ``info``'s config: the served arm's logged row (for a policy with ``features``, its
    logged JSON featurized again by the policy's featurizer) and the reward value."""
    config = info.featurizer_config
    featurizer = None if config is None else Featurizer(config)
    for event in rewarded:
        d = event.decision
        served = next(c for c in d.candidates if c["id"] == d.arm_id)
        if featurizer is None:
            x = np.asarray(served["features"], dtype=np.float64)
        else:  # the log keeps JSON features as sent: featurize the served row again
            x = logged_rows(featurizer, policy, d.context, [served])[0]
        policy.add_arm(d.arm_id)
        policy.update(d.arm_id, x, event.reward.value, user_id=d.user_id)  # type: ignore[union-attr]
