"""``Probe``: an answer within its timeout whatever hangs behind it, one check running at a
time however many ask, and a fresh check once the hung one ended; the probe routes'
bodies on both backends (hung servers: tests/reliability/test_probes.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from service.usecases.probes import Probe
from tests.conftest import TIMED
from tests.service.conftest import running

pytestmark = [pytest.mark.anyio, TIMED]


async def test_an_answer_in_time_is_the_result() -> None:
    calls = []

    async def check() -> None:
        calls.append(1)

    probe = Probe(check, timeout=0.5)
    first, second = await probe.run(), await probe.run()
    assert first.ok and second.ok and first.error is None and calls == [1, 1]
    assert 0 <= first.seconds < 0.5


async def test_a_failing_check_names_its_error() -> None:
    async def check() -> None:
        raise ConnectionRefusedError("refused")

    result = await Probe(check, timeout=0.5).run()
    assert not result.ok and result.error == "ConnectionRefusedError: refused"


async def test_a_hung_check_is_answered_in_time_and_never_queued() -> None:
    """A check blocked in a thread (a synchronous client on a hung database): every call
    answers by the timeout, 20 concurrent calls and 5 later ones share the one check, and
    once it ended the next call checks again."""
    release = threading.Event()
    started = []

    def blocking_ping() -> None:
        started.append(threading.get_ident())
        release.wait(30)

    probe = Probe(lambda: asyncio.to_thread(blocking_ping), timeout=0.2)
    try:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(probe.run() for _ in range(20)))
        assert time.perf_counter() - t0 < 1.0
        assert all(not r.ok and r.error.startswith("no answer within 0.2s") for r in results)
        for _ in range(5):  # past the timeout: at once, no new check
            t0 = time.perf_counter()
            later = await probe.run()
            assert time.perf_counter() - t0 < 0.1
            assert not later.ok and later.seconds >= 0.2
        assert len(started) == 1
        release.set()
        deadline = time.monotonic() + 10
        while not (result := await probe.run()).ok and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert result.ok and len(started) == 2  # the next call checked again
    finally:
        release.set()


async def test_close_cancels_a_running_check() -> None:
    cancelled = asyncio.Event()

    async def check() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.set()

    probe = Probe(check, timeout=0.05)
    assert not (await probe.run()).ok
    await probe.close()
    assert cancelled.is_set()


async def test_probe_routes_name_each_dependency(make_settings: Any, backend: str) -> None:
    async with running(make_settings()) as (_app, http, _):
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
        assert ready.status_code == 200
        body = ready.json()
        assert body["status"] == "ready"
        assert list(body["checks"]) == ["state_store", "policies_present"]
        assert all(c["ok"] and c["error"] is None for c in body["checks"].values())
        assert body["policies_missing"] == []
        assert (body["state_store"], body["event_log"]) == ("ok", "ok")
        deps = (await http.get("/health/dependencies")).json()["dependencies"]
        store, log = deps
        embedded = backend == "embedded"
        assert store["name"] == "state_store" and store["required"] is True
        assert store["backend"] == ("in-process" if embedded else "redis")
        assert store["breaker"] == (None if embedded else "closed")
        assert log["name"] == "event_log" and log["required"] is False
        assert log["backend"] == ("sqlite" if embedded else "postgresql")
        assert log["spool_depth"] == 0 and store["spool_depth"] is None
        for dep in deps:
            assert dep["status"] == "ok" and dep["error"] is None
            assert 0 <= dep["latency_seconds"] < 1
        if not embedded:  # every state's series exists before its first transition
            text = (await http.get("/metrics")).text
            assert 'bandit_store_breaker_state{state="closed"} 1.0' in text
            for state in ("closed", "open", "half_open"):
                assert f'bandit_store_breaker_transitions_total{{state="{state}"}}' in text
