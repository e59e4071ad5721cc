"""Redis unreachable: /recommend serves from this process's cached model flagged
``degraded`` (and still logs the decision), /reward answers 503 with Retry-After and
changes nothing, /readyz reports the store. A private redis-server is stopped for it."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.service.conftest import POLICY, running

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(url).ping()
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "private redis-server did not start"
            time.sleep(0.05)
    try:
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_redis_down(
    make_settings: Any, private_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = private_redis
    async with running(make_settings(redis_url=url, redis_retry_after_seconds=7)) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        warm = (await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})).json()
        assert warm["degraded"] is False
        proc.terminate()
        proc.wait(timeout=10)

        r = await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
        assert r.status_code == 200 and r.json()["degraded"] is True
        assert r.json()["arm_id"] in {"a", "b", "c"}
        assert (
            await http.post("/recommend", json={"policy": "other", "context": [1]})
        ).status_code == 503

        r = await http.post("/reward", json={"event_id": warm["event_id"], "reward": 1.0})
        assert r.status_code == 503 and r.headers["retry-after"] == "7"

        ready = await http.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["state_store"] == "unavailable" and ready.json()["event_log"] == "ok"

        service = app.state.service
        await asyncio.to_thread(service.sink.flush, 5.0)
        decisions, rewards = await asyncio.to_thread(service.event_log.count, "p")
        assert (decisions, rewards) == (2, 0)
        degraded = [e.decision.degraded for e in service.event_log.iter_events("p")]
        assert degraded == [False, True]
        assert "bandit_degraded_decisions_total" in (await http.get("/metrics")).text
