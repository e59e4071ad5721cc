"""Shared fixtures of the engine tests: the news data set of ALGORITHMS.md section 6."""

from __future__ import annotations

from pathlib import Path

import pytest

from bandit_core.datasets import BanditLog, load_news

NEWS_PATH = Path(__file__).resolve().parents[3] / "shared" / "data" / "news_dataset.txt"


@pytest.fixture(scope="session")
def news() -> BanditLog:
    """The news data set, parsed once per session."""
    return load_news(NEWS_PATH)
