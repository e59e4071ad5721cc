"""The settings refuse a configuration that would silently split state across workers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.settings import Settings


@pytest.mark.parametrize("url", ["", "  "])
def test_an_empty_redis_url_is_an_error_not_in_process_state(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError, match="BANDIT_REDIS_URL is set but empty"):
        Settings(redis_url=url)
    monkeypatch.setenv("BANDIT_REDIS_URL", url)
    with pytest.raises(ValidationError, match="BANDIT_REDIS_URL is set but empty"):
        Settings()


def test_embedded_means_no_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BANDIT_REDIS_URL", raising=False)
    assert Settings().embedded
    assert not Settings(redis_url="redis://127.0.0.1:6379/0").embedded
