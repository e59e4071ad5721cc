"""Shared fixtures of the engine tests: the news data set of docs/algorithms.md section 6."""

from __future__ import annotations

import numpy as np
import pytest

from bandit_core.datasets import BanditLog, load_news
from bandit_core.policy import Policy


@pytest.fixture(scope="session")
def news() -> BanditLog:
    """The news data set, parsed once per session."""
    return load_news()


def takes_batched_path(policy: Policy, arm_ids: list[str], X_batch: np.ndarray) -> bool:
    """Whether ``policy.select_until`` would score ``X_batch`` in batches rather than
    loop over ``select``."""
    return policy.batch_scores(arm_ids, X_batch) is not None  # type: ignore[attr-defined]


def select_scores(policy: Policy, arm_ids: list[str], X: np.ndarray) -> np.ndarray:
    """The scores ``policy.select`` gives the candidates, in the order of ``arm_ids``."""
    dec = policy.select(arm_ids, X, explore=False)
    rank = {a: i for i, a in enumerate(dec.ranking)}
    return dec.scores[[rank[a] for a in arm_ids]]
