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
    X = policy._batch_input(arm_ids, X_batch)  # type: ignore[attr-defined]
    return X is not None and policy._checked_batch_scores(arm_ids, X, None) is not None  # type: ignore[attr-defined]
