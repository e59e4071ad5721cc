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


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://h:1", "the scheme must be one of"),
        ("redis+sentinel://s:26379", "give the master name as the path"),
    ],
)
def test_a_malformed_redis_url_is_refused_at_start(url: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        Settings(redis_url=url)


@pytest.mark.parametrize(
    "url", ["redis+cluster://a:7000,b:7001", "redis+sentinel://s1:26379,s2:26379/mymaster/0"]
)
def test_cluster_and_sentinel_urls_are_accepted(url: str) -> None:
    assert Settings(redis_url=url).redis_url == url
