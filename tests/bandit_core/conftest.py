"""Shared helpers of the engine tests: the news data set and the strict replay loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bandit_core.policy import BasePolicy

NEWS_PATH = Path(__file__).resolve().parents[3] / "shared" / "data" / "news_dataset.txt"
N_NEWS_ARMS = 10
NEWS_ARM_IDS = [str(a) for a in range(N_NEWS_ARMS)]


def load_news(path: Path = NEWS_PATH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(logged_arms (n,), clicks (n,), X (n, 10, 10))`` of the news data set
    (ALGORITHMS.md section 6: arm a's features are columns 2+10a .. 11+10a)."""
    raw = np.loadtxt(path, dtype=np.int64)
    return raw[:, 0], raw[:, 1].astype(np.float64), raw[:, 2:].reshape(-1, N_NEWS_ARMS, 10).astype(np.float64)


def strict_replay(policy: BasePolicy, news: tuple[np.ndarray, np.ndarray, np.ndarray], n_matches: int = 800) -> float:
    """Li et al. (2011) replay: stream events in order, select over the 10 arms with the
    row's (10, 10) feature block, count and learn only when the chosen arm equals the
    logged arm; stop after ``n_matches`` matched events. Returns the cumulative reward."""
    arms, clicks, X = news
    total, matched = 0.0, 0
    for logged, click, x in zip(arms, clicks, X):
        dec = policy.select(NEWS_ARM_IDS, x, explore=False)
        if dec.arm_id != NEWS_ARM_IDS[logged]:
            continue
        policy.update(dec.arm_id, x[logged], click)
        total += click
        matched += 1
        if matched == n_matches:
            return total
    raise AssertionError(f"the data set ran out after {matched} of {n_matches} matched events")


@pytest.fixture(scope="session")
def news() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The news data set, parsed once per session."""
    return load_news()
