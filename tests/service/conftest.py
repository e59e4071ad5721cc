"""Fixtures of the service tests: the app on the embedded default or on the real Redis
and PostgreSQL, driven in process through ``httpx.ASGITransport``."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from service.api.app import create_app
from service.client import AsyncBanditClient
from service.settings import Settings
from service.storage.migrate import upgrade_head
from tests.databases import migrated_schema

API_KEY = "test-key-0123456789"
BACKENDS = ["embedded", "redis_postgres"]
# The marks of a test on the session's Redis Cluster (Sentinel group; the fixtures
# ``redis_cluster`` and ``redis_sentinel`` of tests/conftest.py): starting one takes
# seconds, so ``slow``; one xdist group each, so a parallel run starts one cluster and
# one Sentinel group, on the worker that runs all of their tests.
ON_REDIS_CLUSTER = [pytest.mark.slow, pytest.mark.xdist_group("redis_cluster")]
ON_REDIS_SENTINEL = [pytest.mark.slow, pytest.mark.xdist_group("redis_sentinel")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An SQLite event log migrated to head, which the embedded default's data
    directories start from: the app's own ``upgrade head`` then finds nothing to do
    (a migration from empty was most of an embedded app's start)."""
    path = tmp_path_factory.mktemp("migrated") / "events.sqlite3"
    upgrade_head(f"sqlite:///{path.as_posix()}")
    return path


@pytest.fixture
def make_settings(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Settings]]:
    """Settings for the backend under test; keyword arguments override fields. The
    embedded default's ``data_dir`` holds a copy of :func:`migrated_sqlite`."""
    url = None if backend == "embedded" else request.getfixturevalue("redis_url")
    if url is None:
        (tmp_path / "data").mkdir()
        shutil.copyfile(
            request.getfixturevalue("migrated_sqlite"), tmp_path / "data" / "events.sqlite3"
        )
    with _backend_urls(url) as urls:

        def make(**overrides: Any) -> Settings:
            fields: dict[str, Any] = {
                "data_dir": tmp_path / "data",
                "api_keys": [API_KEY],
                "demo_policy": False,
                "personalizer_loop": False,
                "sweeper_interval_seconds": 0.05,
                "log_flush_seconds": 0.02,
                "snapshot_interval_seconds": 0,
                "redis_timeout_seconds": 10.0,  # a loaded CI machine is not an outage
                **urls,
            }
            fields.update(overrides)
            return Settings(**fields)

        yield make


@contextmanager
def _backend_urls(redis_url: str | None) -> Iterator[dict[str, Any]]:
    """No URLs for the embedded default; the flushed session Redis and an empty
    PostgreSQL schema migrated to head (``migrated_schema``) otherwise."""
    if redis_url is None:
        yield {}
        return
    redis.Redis.from_url(redis_url).flushdb()
    with migrated_schema() as url:
        yield {"redis_url": redis_url, "database_url": url}


@asynccontextmanager
async def running(settings: Settings, client_host: str = "127.0.0.1") -> AsyncIterator[Any]:
    """The app with its lifespan running and the policies the store lacked rebuilt from
    the log; yields ``(app, httpx client, typed client)``."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await app.state.use_cases.recovery.wait()
        transport = httpx.ASGITransport(app=app, client=(client_host, 50000))
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://app", headers=headers
        ) as http:
            typed = AsyncBanditClient("http://app", api_key=API_KEY, transport=transport)
            try:
                yield app, http, typed
            finally:
                await typed.aclose()


@contextmanager
def counted_transactions(store: Any) -> Iterator[list[str]]:
    """The policy of each ``store.transact`` call made inside the block, in call order."""
    transactions: list[str] = []
    transact = store.transact

    async def counted(policy: str, *args: Any, **kwargs: Any) -> Any:
        transactions.append(policy)
        return await transact(policy, *args, **kwargs)

    store.transact = counted
    try:
        yield transactions
    finally:
        store.transact = transact


async def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``predicate`` (e.g. the event log caught up) until true or fail."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {timeout:.1f}s")
        await asyncio.sleep(0.02)


POLICY = {
    "algorithm": "linucb",
    "dimension": 3,
    "params": {"alpha": 0.5},
    "arms": ["a", "b", "c"],
    "reward_range": [0.0, 1.0],
    "default_reward": 0.0,
    "reward_wait_seconds": 600,
}
