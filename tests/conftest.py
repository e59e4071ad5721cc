"""Session fixtures of every test: the Redis and PostgreSQL the session owns
(``tests.databases``), stopped when the session ends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.databases import OWNED

TIMED = pytest.mark.xdist_group("timed")
"""The mark of a test that asserts how long something takes (a probe's answer, the
breaker's refusal, the soak's pace): one xdist worker runs all of them, one at a time,
so no two of them load the machine at once."""


@pytest.fixture(scope="session", autouse=True)
def owned_servers() -> Iterator[None]:
    """Stops the private servers (or drops the database) the session started on use."""
    try:
        yield
    finally:
        OWNED.close()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the session's own Redis database; fixtures using it flush it."""
    return OWNED.redis_url()
