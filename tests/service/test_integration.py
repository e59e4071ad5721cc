"""A simulated frontend against the whole service, on the embedded default and on the
real Redis and PostgreSQL (there through two app replicas sharing the stores, both
running the default-reward sweeper).

Environment (seeded): three context regions; the context is the region's one-hot
vector plus N(0, 0.1^2) noise; arm ``k`` is clicked with probability 0.8 in region
``k`` and 0.1 elsewhere, so a uniformly random policy clicks at (0.8 + 2 * 0.1) / 3 =
1/3. The frontend reports 85% of the decisions and leaves 15% to the default reward.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

import numpy as np
import pytest

from tests.service.conftest import running, wait_for

pytestmark = pytest.mark.anyio

N_EVENTS = 2000
P_BEST, P_OTHER = 0.8, 0.1
UNIFORM_RATE = (P_BEST + 2 * P_OTHER) / 3
SPEC = {
    "algorithm": "linucb",
    "dimension": 3,
    "params": {"alpha": 0.3},
    "arms": ["r0", "r1", "r2"],
    "reward_range": [0.0, 1.0],
    "default_reward": 0.0,
    "reward_wait_seconds": 1.0,
}


async def test_simulated_frontend(make_settings: Any, backend: str) -> None:
    replicas = 1 if backend == "embedded" else 2
    rng = np.random.default_rng(20261122)
    async with AsyncExitStack() as stack:
        apps = [await stack.enter_async_context(running(make_settings())) for _ in range(replicas)]
        await apps[0][1].put("/policies/news", json=SPEC)
        responses: dict[str, dict[str, Any]] = {}
        explicit: dict[str, float] = {}
        unrewarded: set[str] = set()
        clicks_late: list[float] = []
        for i in range(N_EVENTS):
            _, http, _ = apps[i % replicas]
            region = int(rng.integers(3))
            context = np.eye(3)[region] + rng.normal(0.0, 0.1, 3)
            r = await http.post("/recommend", json={"policy": "news", "context": context.tolist()})
            assert r.status_code == 200, r.text
            dec = r.json()
            assert not dec["degraded"], dec
            responses[dec["event_id"]] = dec
            click = float(rng.random() < (P_BEST if dec["arm_id"] == f"r{region}" else P_OTHER))
            if i >= N_EVENTS // 2:
                clicks_late.append(click)
            if rng.random() < 0.15:
                unrewarded.add(dec["event_id"])
                continue
            _, http2, _ = apps[(i + 1) % replicas]  # the reward may reach another replica
            rr = await http2.post("/reward", json={"event_id": dec["event_id"], "reward": click})
            assert rr.status_code == 200 and rr.json()["applied"], rr.text
            explicit[dec["event_id"]] = click

        rate = float(np.mean(clicks_late))
        # Measured 0.812 on this seed (both backends); uniform random is 1/3, the best arm 0.8.
        assert rate > UNIFORM_RATE + 0.25, rate

        app, http, _ = apps[0]
        use_cases = app.state.use_cases
        total = len(explicit) + len(unrewarded)

        async def stats() -> dict[str, Any]:
            return (await http.get("/policies/news/stats")).json()

        deadline = asyncio.get_running_loop().time() + 15
        while (await stats())["default_rewards"] < len(unrewarded):
            assert asyncio.get_running_loop().time() < deadline, await stats()
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # more sweeps by every replica change nothing
        final = await stats()
        assert final["default_rewards"] == len(unrewarded)
        assert final["rewards"] == total and final["decisions"] == N_EVENTS
        assert (
            sum(a["rewarded"] for a in final["arms"].values()) == total
        )  # each event learned once
        assert sum(a["pulls"] for a in final["arms"].values()) == N_EVENTS
        assert sum(a["reward_sum"] for a in final["arms"].values()) == pytest.approx(
            sum(explicit.values())
        )

        for a, _, _ in apps:
            await asyncio.to_thread(a.state.use_cases.sink.flush, 10.0)
        await wait_for(lambda: use_cases.event_log.count("news") == (N_EVENTS, total))
        logged = list(use_cases.event_log.iter_events("news"))
        assert {e.decision.event_id for e in logged} == set(
            responses
        )  # decisions in log == responses
        for e in logged:
            sent = responses[e.decision.event_id]
            assert e.decision.arm_id == sent["arm_id"]
            assert e.decision.propensity == sent["ranking"][0]["propensity"]
            assert e.decision.model_version == sent["model_version"]
            assert e.reward is not None
            if e.decision.event_id in explicit:
                assert (e.reward.source, e.reward.value) == (
                    "explicit",
                    explicit[e.decision.event_id],
                )
            else:
                assert (e.reward.source, e.reward.value) == ("default", 0.0)


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_default_reward_exactly_once_with_four_sweeping_replicas(make_settings: Any) -> None:
    """Four replicas sweep the same 200 due events every 10 ms: each event gets the
    default reward once (counters, model and log agree)."""
    n = 200
    async with AsyncExitStack() as stack:
        apps = [
            await stack.enter_async_context(running(make_settings(sweeper_interval_seconds=0.01)))
            for _ in range(4)
        ]
        _, http, _ = apps[0]
        await http.put(
            "/policies/p", json={**SPEC, "reward_wait_seconds": 0.5, "default_reward": 0.5}
        )
        for i in range(n):
            r = await apps[i % 4][1].post(
                "/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.0]}
            )
            assert r.status_code == 200 and not r.json()["degraded"]

        async def stats() -> dict[str, Any]:
            return (await http.get("/policies/p/stats")).json()

        deadline = asyncio.get_running_loop().time() + 15
        while (await stats())["default_rewards"] < n:
            assert asyncio.get_running_loop().time() < deadline, await stats()
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)
        final = await stats()
        assert final["default_rewards"] == final["rewards"] == n
        assert sum(a["rewarded"] for a in final["arms"].values()) == n
        assert sum(a["reward_sum"] for a in final["arms"].values()) == 0.5 * n
        for a, _, _ in apps:
            await asyncio.to_thread(a.state.use_cases.sink.flush, 10.0)
        log = apps[0][0].state.use_cases.event_log
        await wait_for(lambda: log.count("p") == (n, n))


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_replica_serves_the_config_another_replica_wrote(make_settings: Any) -> None:
    """A replica caches a policy's config and rereads it only when its store version
    moves: arm changes, a reconfiguration and a deletion made through another replica
    are each seen by the next /recommend."""
    async with AsyncExitStack() as stack:
        (_, a, _), (_, b, _) = [
            await stack.enter_async_context(running(make_settings())) for _ in range(2)
        ]
        body = {"policy": "p", "context": [1.0, 0.0, 0.0]}
        await a.put("/policies/p", json=SPEC)
        for _ in range(3):  # cached and unchanged
            r = await a.post("/recommend", json=body)
            assert r.status_code == 200 and r.json()["algorithm"] == "linucb"
            assert sorted(x["arm_id"] for x in r.json()["ranking"]) == ["r0", "r1", "r2"]
        assert (await b.post("/policies/p/arms", json={"arms": ["r3"]})).status_code == 200
        r = await a.post("/recommend", json=body)
        assert sorted(x["arm_id"] for x in r.json()["ranking"]) == ["r0", "r1", "r2", "r3"]
        assert (await b.put("/policies/p", json={**SPEC, "algorithm": "random"})).status_code == 200
        assert (await a.post("/recommend", json=body)).json()["algorithm"] == "random"
        assert (await b.delete("/policies/p")).status_code == 204
        assert (await a.post("/recommend", json=body)).status_code == 404
