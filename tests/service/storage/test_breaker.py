"""The state store's circuit breaker: its states on a clock the test moves, then on the
Redis store in front of a real, SIGSTOPped redis-server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bandit_core.errors import InvalidInputError
from service.storage.base import StoreUnavailableError
from service.storage.breaker import BreakerOpenError, BreakerState, CircuitBreaker
from service.storage.redis_store import RedisStateStore
from tests.conftest import TIMED
from tests.servers import RedisServer

pytestmark = pytest.mark.anyio


class Clock:
    """Monotonic seconds that move only when the test says."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def failure(exc: Exception) -> bool:
    return isinstance(exc, TimeoutError)


async def answer() -> str:
    return "answer"


async def no_answer() -> None:
    raise TimeoutError("no answer")


async def error_reply() -> None:
    raise ValueError("an error reply is an answer")


def make(
    failures: int = 3, open_seconds: float = 5.0
) -> tuple[CircuitBreaker, Clock, list[BreakerState]]:
    clock, changes = Clock(), list[BreakerState]()
    breaker = CircuitBreaker(failures, open_seconds, on_change=changes.append, clock=clock)
    return breaker, clock, changes


async def fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        with pytest.raises(TimeoutError):
            await breaker.call(no_answer(), failure)


async def test_opens_after_consecutive_failures_and_refuses_without_running() -> None:
    breaker, clock, changes = make(failures=3)
    await fail(breaker, 2)
    assert await breaker.call(answer(), failure) == "answer"  # an answer resets the count
    assert breaker.consecutive_failures == 0
    await fail(breaker, 2)
    with pytest.raises(ValueError):
        await breaker.call(error_reply(), failure)  # not counted: also resets
    await fail(breaker, 2)
    assert breaker.state is BreakerState.CLOSED and changes == []
    await fail(breaker, 1)
    assert breaker.state is BreakerState.OPEN and changes == [BreakerState.OPEN]
    assert breaker.retry_in() == 5.0

    ran = []

    async def tracked() -> None:
        ran.append(1)

    refused = tracked()
    with pytest.raises(BreakerOpenError) as caught:
        await breaker.call(refused, failure)
    assert isinstance(caught.value, StoreUnavailableError)  # the service degrades as when down
    assert ran == [] and refused.cr_frame is None  # never run, and closed (no warning)
    clock.now += 4.9
    with pytest.raises(BreakerOpenError):
        await breaker.call(answer(), failure)
    assert breaker.state is BreakerState.OPEN


async def test_half_open_lets_one_probe_through_and_its_success_closes() -> None:
    breaker, clock, changes = make(failures=1, open_seconds=2.0)
    await fail(breaker, 1)
    clock.now += 2.0
    release = asyncio.Event()

    async def slow_answer() -> str:
        await release.wait()
        return "probe"

    probe = asyncio.create_task(breaker.call(slow_answer(), failure))
    await asyncio.sleep(0)
    assert breaker.state is BreakerState.HALF_OPEN
    with pytest.raises(BreakerOpenError):  # one probe at a time: the others fail fast
        await breaker.call(answer(), failure)
    release.set()
    assert await probe == "probe"
    assert breaker.state is BreakerState.CLOSED
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]
    assert await breaker.call(answer(), failure) == "answer"


async def test_a_failed_probe_reopens_for_another_period() -> None:
    breaker, clock, changes = make(failures=2, open_seconds=3.0)
    await fail(breaker, 2)
    clock.now += 3.0
    await fail(breaker, 1)  # the probe: one failure is enough to reopen
    assert breaker.state is BreakerState.OPEN and breaker.retry_in() == 3.0
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.OPEN]
    clock.now += 3.0
    assert await breaker.call(answer(), failure) == "answer"
    assert breaker.state is BreakerState.CLOSED


async def test_a_cancelled_probe_lets_the_next_call_probe() -> None:
    breaker, clock, _ = make(failures=1, open_seconds=1.0)
    await fail(breaker, 1)
    clock.now += 1.0
    probe = asyncio.create_task(breaker.call(asyncio.sleep(60), failure))
    await asyncio.sleep(0)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert breaker.state is BreakerState.HALF_OPEN
    assert await breaker.call(answer(), failure) == "answer"
    assert breaker.state is BreakerState.CLOSED


def test_settings_are_checked() -> None:
    with pytest.raises(InvalidInputError, match="failures"):
        CircuitBreaker(0, 1.0)
    with pytest.raises(InvalidInputError, match="open_seconds"):
        CircuitBreaker(1, 0.0)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", persist=False)
    server.start()
    try:
        yield server
    finally:
        server.resume()
        server.stop()


@TIMED
async def test_redis_store_fails_fast_while_redis_hangs(redis_server: RedisServer) -> None:
    """A SIGSTOPped Redis: the first calls each wait the socket timeout, then the open
    breaker refuses at once; after SIGCONT the probe call closes it."""
    breaker = CircuitBreaker(2, 1.0)
    store = RedisStateStore(redis_server.url, socket_timeout=0.3, breaker=breaker)
    try:
        await store.add_policy("p")
        redis_server.pause()
        for _ in range(2):
            started = time.perf_counter()
            with pytest.raises(StoreUnavailableError) as caught:
                await store.list_policies()
            assert not isinstance(caught.value, BreakerOpenError)
            assert time.perf_counter() - started >= 0.25  # waited for the socket timeout
        assert breaker.state is BreakerState.OPEN
        opened = time.perf_counter()
        for _ in range(20):
            started = time.perf_counter()
            with pytest.raises(BreakerOpenError):
                await store.read("p", ["arm:a"], {})
            refused = time.perf_counter() - started
            assert refused < 0.15, refused  # generous: well below the 0.3 s timeout
        redis_server.resume()
        await asyncio.sleep(1.0 - (time.perf_counter() - opened) + 0.05)
        assert await store.list_policies() == ["p"]  # the half-open probe call
        assert breaker.state is BreakerState.CLOSED
    finally:
        await store.close()


async def test_a_refused_connection_fails_at_once_and_leaves_the_breaker_closed(
    redis_server: RedisServer,
) -> None:
    """Redis down (not hung): each call fails at once by itself, so nothing is counted and
    calls reach Redis again as soon as it is back."""
    breaker = CircuitBreaker(2, 60.0)
    store = RedisStateStore(redis_server.url, socket_timeout=0.3, breaker=breaker)
    try:
        await store.add_policy("p")
        redis_server.stop()
        for _ in range(5):
            with pytest.raises(StoreUnavailableError) as caught:
                await store.list_policies()
            assert not isinstance(caught.value, BreakerOpenError)
        assert breaker.state is BreakerState.CLOSED and breaker.consecutive_failures == 0
        redis_server.start()
        assert await store.list_policies() == []  # not persisted: a new, empty server
    finally:
        await store.close()
