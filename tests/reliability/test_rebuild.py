"""Rebuild: one policy's Redis keys are wiped (another policy's are left alone) and
``bandit rebuild --policy p`` -- the real CLI, in its own process -- restores from the
PostgreSQL event log a state whose decisions equal the original's on a fixed set of
contexts (same arm, same ranking, scores equal to 1e-9 relative), and the same per-arm
statistics."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from service.settings import Settings
from tests.reliability.traffic import HEADERS, spec, wait_until
from tests.servers import ROOT, AppProcess, RedisServer, settings_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180), pytest.mark.slow]
CONTEXTS = np.random.default_rng(99).normal(size=(40, 3)).round(4).tolist()


async def _decisions(
    client: httpx.AsyncClient, policy: str
) -> list[tuple[str, list[str], list[float]]]:
    out = []
    for explore in (True, False):
        for context in CONTEXTS:
            r = await client.post(
                "/recommend", json={"policy": policy, "context": context, "explore": explore}
            )
            assert r.status_code == 200, r.text
            body = r.json()
            out.append(
                (
                    body["arm_id"],
                    [a["arm_id"] for a in body["ranking"]],
                    [a["score"] for a in body["ranking"]],
                )
            )
    return out


async def _stats(client: httpx.AsyncClient, policy: str) -> dict:
    arms = (await client.get(f"/policies/{policy}/stats")).json()["arms"]
    return {a: (s["rewarded"], round(s["reward_sum"], 9)) for a, s in arms.items()}


async def test_rebuild_after_wiping_one_policy(
    tmp_path: Path, private_redis: RedisServer, make_settings: Callable[..., Settings]
) -> None:
    settings = make_settings()
    env = settings_env(settings)
    app = AppProcess(env).start()
    try:
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=10.0) as client:
            rng = np.random.default_rng(5)
            for name in ("p", "q"):
                assert (await client.put(f"/policies/{name}", json=spec())).status_code == 200
                for _ in range(150):
                    ctx = rng.normal(size=3).round(4).tolist()
                    dec = (
                        await client.post("/recommend", json={"policy": name, "context": ctx})
                    ).json()
                    r = await client.post(
                        "/reward",
                        json={"event_id": dec["event_id"], "reward": float(rng.random())},
                    )
                    assert r.status_code == 200, r.text
            original = await _decisions(client, "p")
            original_stats = await _stats(client, "p")
            q_before = await _decisions(client, "q")

            async def logged_all() -> bool:
                ready = (await client.get("/readyz")).json()
                return ready["log_lag_seconds"] == 0 and ready["spool_depth"] == 0

            await wait_until(logged_all, 10, "event log caught up")
        app.stop()  # no cache survives: the next process reads only Redis

        r = private_redis.client()
        wiped = [k for k in r.scan_iter(match="bandit:{p}:*")]
        assert wiped and not any(k.startswith(b"bandit:{q}") for k in wiped)
        r.delete(*wiped)
        r.srem("bandit:policies", "p")
        q_keys = len(list(r.scan_iter(match="bandit:{q}:*")))
        assert q_keys > 0

        cli = subprocess.run(  # noqa: ASYNC221 -- nothing else runs meanwhile
            [sys.executable, "-m", "service.cli", "rebuild", "--policy", "p"],
            check=False,
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        assert "rebuilt p: 150 rewards" in cli.stdout, cli.stdout

        app.start()
        async with httpx.AsyncClient(base_url=app.url, headers=HEADERS, timeout=10.0) as client:
            rebuilt = await _decisions(client, "p")
            assert await _stats(client, "p") == original_stats
            assert await _decisions(client, "q") == q_before
        assert [d[:2] for d in rebuilt] == [d[:2] for d in original]
        np.testing.assert_allclose([d[2] for d in rebuilt], [d[2] for d in original], rtol=1e-9)
    finally:
        app.stop()
