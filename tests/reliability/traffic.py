"""A simulated frontend for the fault tests: workers send ``/recommend`` then
``/reward`` over real HTTP and keep a ledger of what the service *answered*, which is
what the checks compare the model and the event log against.

A reward answered 503 (its ``Retry-After`` is checked) or not answered at all (the
process died) is retried later with the same value, as a client following the docs
does; a reward counts as accepted when a 200 comes back (``applied`` or
``already_rewarded``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from tests.servers import API_KEY

HEADERS = {"Authorization": f"Bearer {API_KEY}"}


@dataclass
class Ledger:
    """What the service answered."""

    decisions: dict[str, dict] = field(default_factory=dict)  # event id -> 200 body
    answered_at: dict[str, float] = field(default_factory=dict)  # event id -> unix time
    accepted: dict[str, float] = field(default_factory=dict)  # event id -> accepted reward
    to_retry: dict[str, float] = field(default_factory=dict)  # rewards not (yet) accepted
    recommend_status: Counter = field(default_factory=Counter)
    reward_status: Counter = field(default_factory=Counter)
    reward_503_without_retry_after: int = 0
    # a failover may lose a decision's event (asynchronous replication): its reward then
    # answers 404; such ids are collected here when ``events_may_be_lost``
    events_may_be_lost: bool = False
    lost_events: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)

    @property
    def degraded(self) -> set[str]:
        return {e for e, body in self.decisions.items() if body["degraded"]}

    def arm_totals(self) -> dict[str, tuple[int, float]]:
        """Per served arm: (accepted rewards, their sum)."""
        out: dict[str, tuple[int, float]] = {}
        for event_id, value in self.accepted.items():
            arm = self.decisions[event_id]["arm_id"]
            n, s = out.get(arm, (0, 0.0))
            out[arm] = (n + 1, s + value)
        return out


async def send_reward(
    client: httpx.AsyncClient, ledger: Ledger, event_id: str, value: float
) -> int | None:
    """One reward attempt; updates the ledger; returns the status (None: no answer)."""
    try:
        r = await client.post(
            "/reward", json={"event_id": event_id, "reward": value}, headers=HEADERS
        )
    except httpx.TransportError:
        ledger.reward_status["no answer"] += 1
        ledger.to_retry[event_id] = value
        return None
    ledger.reward_status[r.status_code] += 1
    if r.status_code == 200:
        body = r.json()
        assert body["reward"] == value, body
        ledger.accepted[event_id] = value
        ledger.to_retry.pop(event_id, None)
    elif r.status_code == 503:
        if "retry-after" not in r.headers:
            ledger.reward_503_without_retry_after += 1
        ledger.to_retry[event_id] = value
    elif r.status_code == 404 and ledger.events_may_be_lost:
        ledger.lost_events.add(event_id)
        ledger.to_retry.pop(event_id, None)
    else:
        raise AssertionError(f"reward {event_id}: {r.status_code} {r.text}")
    return r.status_code


async def worker(
    urls: Sequence[str],
    ledger: Ledger,
    stop: asyncio.Event,
    policy: str,
    dimension: int,
    seed: int,
    reward_fraction: float = 0.8,
    pause: float = 0.0,
    max_requests: int = 100_000,
    reward_lag: int = 0,
) -> None:
    """recommend -> (maybe) reward, round-robin over ``urls``, until ``stop``; with
    ``reward_lag`` each reward goes out that many decisions after its own (rewards
    arrive late, as clicks do), the last ones at the end."""
    rng = np.random.default_rng(seed)
    late: deque[tuple[str, float]] = deque()
    clients = [httpx.AsyncClient(base_url=u, timeout=10.0) for u in urls]
    try:
        for i in range(max_requests):
            if stop.is_set():
                break
            client = clients[i % len(clients)]
            context = rng.normal(size=dimension).round(3).tolist()
            t0 = time.perf_counter()
            try:
                r = await client.post("/recommend", json={"policy": policy, "context": context})
            except httpx.TransportError:
                ledger.recommend_status["no answer"] += 1
                await asyncio.sleep(0.05)
                continue
            ledger.latencies.append(time.perf_counter() - t0)
            ledger.recommend_status[r.status_code] += 1
            if r.status_code != 200:
                await asyncio.sleep(0.05)
                continue
            body = r.json()
            ledger.decisions[body["event_id"]] = body
            ledger.answered_at[body["event_id"]] = time.time()
            if not body["degraded"] and rng.random() < reward_fraction:
                value = float(rng.integers(0, 5)) / 4.0  # quarters: float sums are exact
                late.append((body["event_id"], value))
            if late and (len(late) > reward_lag or body["degraded"]):
                event_id, value = late.popleft()
                await send_reward(clients[(i + 1) % len(clients)], ledger, event_id, value)
            if pause:
                await asyncio.sleep(pause)
        for event_id, value in late:
            ledger.to_retry[event_id] = value
    finally:
        for c in clients:
            await c.aclose()


async def drive(
    urls: Sequence[str] | Callable[[], Sequence[str]],
    ledger: Ledger,
    policy: str,
    dimension: int,
    workers: int,
    script: Callable[[], Awaitable[object]],
    **kwargs: Any,
) -> None:
    """Run ``workers`` workers while the coroutine ``script()`` injects faults; stop
    the workers when it returns."""
    stop = asyncio.Event()
    targets = urls() if callable(urls) else urls
    tasks = [
        asyncio.create_task(worker(targets, ledger, stop, policy, dimension, seed=k, **kwargs))
        for k in range(workers)
    ]
    try:
        await script()
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def retry_rewards(url: str, ledger: Ledger, timeout: float = 30.0) -> None:
    """Resend every reward not yet accepted until each is (or fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        while ledger.to_retry:
            assert time.monotonic() < deadline, f"{len(ledger.to_retry)} rewards never accepted"
            for event_id, value in list(ledger.to_retry.items()):
                await send_reward(client, ledger, event_id, value)
            if ledger.to_retry:
                await asyncio.sleep(0.2)


async def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Await the (possibly async) ``predicate`` until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"{what} not reached within {timeout:.0f}s"
        await asyncio.sleep(0.1)


async def failover_under_traffic(
    url: str, ledger: Ledger, kill: Callable[[], Callable[[], bool]]
) -> dict[str, float]:
    """Three frontends on policy ``p`` of the app at ``url``; after 1.5 s ``kill()`` kills
    the Redis master and returns a predicate that turns true once a replica is promoted.
    Waits for the promotion and for a reward accepted after it, lets the traffic run 1 s
    more, then retries every reward not accepted. Returns the seconds from the kill to
    the promotion and to that first accepted reward (the window)."""
    seen: dict[str, float] = {}

    async def script() -> None:
        await asyncio.sleep(1.5)
        accepted_before = ledger.reward_status[200]
        seen["killed"] = time.monotonic()
        promoted = kill()
        while not promoted():
            assert time.monotonic() - seen["killed"] < 60, "no promotion"
            await asyncio.sleep(0.05)
        seen["promoted"] = time.monotonic()
        while ledger.reward_status[200] == accepted_before:
            assert time.monotonic() - seen["killed"] < 60, "no reconnection"
            await asyncio.sleep(0.05)
        seen["rewards again"] = time.monotonic()
        await asyncio.sleep(1.0)

    await drive([url], ledger, "p", 3, workers=3, script=script, pause=0.01, reward_lag=15)
    await retry_rewards(url, ledger)
    return {
        "promotion": seen["promoted"] - seen["killed"],
        "window": seen["rewards again"] - seen["killed"],
    }


def assert_no_error_answers(ledger: Ledger) -> None:
    """Every decision answered 200; every reward 200, 503 with ``Retry-After``, or 404
    (an event a failover lost)."""
    assert ledger.recommend_status.keys() <= {200}, ledger.recommend_status
    assert ledger.reward_status.keys() <= {200, 503, 404}, ledger.reward_status
    assert ledger.reward_503_without_retry_after == 0


async def check_after_failover(url: str, ledger: Ledger, what: str, took: dict[str, float]) -> None:
    """The failover contract (docs/reliability.md): no error answer; the app reconnected
    by itself (a fresh decision is not degraded, ``/readyz`` 200); the model never holds
    more rewards, or a larger sum, than were accepted. Prints what was measured."""
    assert_no_error_answers(ledger)
    async with httpx.AsyncClient(base_url=url, headers=HEADERS) as client:
        r = await client.post("/recommend", json={"policy": "p", "context": [0, 0, 1]})
        assert r.status_code == 200 and not r.json()["degraded"], r.text
        assert (await client.get("/readyz")).status_code == 200
    model = await model_totals(url, "p")
    answered = ledger.arm_totals()
    for arm, (n, total) in model.items():  # never more than accepted
        assert n <= answered[arm][0] and total <= answered[arm][1], (arm, model)
    lost = sum(n for n, _ in answered.values()) - sum(n for n, _ in model.values())
    print(
        f"{what}: promotion after {took['promotion']:.1f}s, rewards applied again after "
        f"{took['window']:.1f}s; {len(ledger.decisions)} decisions ({len(ledger.degraded)} "
        f"degraded), {len(ledger.accepted)} rewards accepted, {ledger.reward_status[503]} "
        f"answered 503 then retried, {lost} accepted rewards lost, "
        f"{len(ledger.lost_events)} decisions whose event was lost (reward answered 404)"
    )


def spec(dimension: int = 3, **overrides: object) -> dict:
    """A LinUCB policy over arms a, b, c with no default reward during the test, and no
    exploration (epsilon 0): the tests compare decisions across processes, and the
    exploration draws come from each process's own RNG."""
    return {
        "algorithm": "linucb",
        "dimension": dimension,
        "params": {"alpha": 0.3},
        "epsilon": 0.0,
        "arms": ["a", "b", "c"],
        "reward_range": [0.0, 1.0],
        "default_reward": None,
        "reward_wait_seconds": 3600,
        **overrides,
    }


async def model_totals(url: str, policy: str) -> dict[str, tuple[int, float]]:
    """Per arm (rewards applied, their sum) as the model holds them (GET stats)."""
    async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
        r = await client.get(f"/policies/{policy}/stats", headers=HEADERS)
    assert r.status_code == 200, r.text
    return {
        a: (s["rewarded"], s["reward_sum"]) for a, s in r.json()["arms"].items() if s["rewarded"]
    }


def logged(database_url: str, policy: str) -> tuple[set[str], dict[str, float], tuple[int, int]]:
    """(decision event ids, reward value by event id, (decision rows, reward rows)) in
    the event log (rewards read from their own table, with or without a decision)."""
    import sqlalchemy as sa

    from service.storage.schema import rewards as rewards_table
    from service.storage.sql_log import SqlEventLog

    log = SqlEventLog(database_url)
    try:
        decisions = {e.decision.event_id for e in log.iter_events(policy)}
        query = sa.select(rewards_table.c.event_id, rewards_table.c.value).where(
            rewards_table.c.policy == policy
        )
        with log.engine.connect() as conn:
            rewards = {event_id: value for event_id, value in conn.execute(query)}
        return decisions, rewards, log.count(policy)
    finally:
        log.close()
