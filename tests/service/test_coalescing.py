"""Coalesced ``/recommend`` (service/usecases/recommend.py, docs/performance.md "Coalesced
/recommend"): a policy's requests that arrive while a batch is served are served
together, with the decisions, stored events and log rows of the plain path, one store
transaction per batch, and a request's own failure failing it alone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis

from service.errors import ApiError
from service.schemas import RecommendRequest
from service.usecases.recommendation import Recommendation
from tests.service.conftest import counted_transactions, running

pytestmark = pytest.mark.anyio

BASE = {"reward_range": [0.0, 1.0], "default_reward": 0.0, "reward_wait_seconds": 600}
POLICIES = {
    # epsilon > 0: exploration draws; integer contexts: score ties broken by the keys
    "dense": {"algorithm": "linucb", "dimension": 3, "params": {"alpha": 0.5, "epsilon": 0.2}},
    "ta": {"algorithm": "lnucb_ta", "dimension": 3, "params": {"alpha": 0.5}},
    "json": {
        "algorithm": "hybrid_linucb",
        "features": {"bits": 6, "interactions": [["*", "*"]]},
        "params": {"alpha": 0.3, "epsilon": 0.1},
    },
}
ARMS = ["a", "b", "c", "d"]


def _bodies(round_: int, prefix: str) -> list[dict[str, Any]]:
    """One round of requests, the three policies interleaved: registered arms, sent
    candidates, arms never seen (a cold start: LNUCB-TA's changes its state), a user,
    explore off and requests refused for their input; the policies' names begin with
    ``prefix``."""
    out: list[dict[str, Any]] = []
    for k in range(8):
        ctx = [float((k + round_) % 3), float(k % 2), 1.0]
        registered = [{"id": a} for a in ARMS]
        dense: dict[str, Any] = {"policy": prefix + "dense", "context": ctx, "arms": registered}
        if k == 2:
            dense = {
                "policy": prefix + "dense",
                "context": ctx[:1],
                "arms": [{"id": a, "features": [float(i), 1.0]} for i, a in enumerate(ARMS)],
            }
        if k == 3:
            dense["arms"] = [{"id": a} for a in [*ARMS, f"new{round_}"]]
        if k == 4:
            dense.update(user_id="u1", explore=False)
        if k == 5:
            dense["context"] = ctx[:2]  # refused: 2 of 3 features
        ta = {"policy": prefix + "ta", "context": ctx, "arms": registered}
        if k == 1 and round_ == 0:
            ta["arms"] = [{"id": a} for a in [*ARMS, "ta-new"]]
        items = [
            {"id": f"i{j}", "features": [{"item": {"tag": ("x", "y", "z")[(j + k) % 3], "p": j}}]}
            for j in range(5)
        ]
        json_ = {
            "policy": prefix + "json",
            "context": {"user": {"seg": "ab"[k % 2]}},
            "arms": items,
        }
        if k == 7:
            json_["arms"] = [*items[:2], {"id": "bad", "features": [1.0]}]  # refused
        out += [dense, ta, json_]
    return out


async def _outcome(call: Awaitable[Recommendation]) -> Any:
    try:
        response = (await call).as_response()
    except ApiError as exc:
        return type(exc).__name__, str(exc).replace("batched-", "plain-")
    # the store versions behind model_version count writes, which batches save
    response["policy"] = response["policy"].split("-")[1]
    return {k: v for k, v in response.items() if k not in ("event_id", "model_version")}


async def _serve(make_settings: Callable[..., Any], coalescing: bool) -> tuple[list[Any], Any]:
    """Three rounds of :func:`_bodies` (all at once when coalescing, one after another
    otherwise, in the same order), rewards between them; the outcomes, the store
    transactions per round and policy, and what the app logged and counted."""
    prefix = "batched-" if coalescing else "plain-"
    async with running(make_settings(recommend_coalescing=coalescing)) as (app, http, _):
        for name, spec in POLICIES.items():
            r = await http.put(f"/policies/{prefix}{name}", json={**BASE, **spec})
            assert r.status_code == 200, r.text
        use_cases = app.state.use_cases
        store, recommender = use_cases.store, use_cases.recommender
        outcomes: list[Any] = []
        per_round = []
        with counted_transactions(store) as transactions:
            for round_ in range(3):
                requests = [RecommendRequest.model_validate(b) for b in _bodies(round_, prefix)]
                start = len(transactions)
                if coalescing:
                    got = await asyncio.gather(
                        *(_outcome(recommender.recommend(r)) for r in requests)
                    )
                else:
                    got = [await _outcome(recommender.recommend(r)) for r in requests]
                per_round.append({p: transactions[start:].count(prefix + p) for p in POLICIES})
                outcomes += got
                for i in (0, 2, 4):  # rewards to the same decisions in both runs
                    event = (await recommender.recommend(requests[i])).event_id
                    r = await http.post("/reward", json={"event_id": event, "reward": 1.0})
                    assert r.status_code == 200 and r.json()["applied"], r.text
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        logged = {p: use_cases.event_log.count(prefix + p) for p in POLICIES}
        counters = {p: await store.counters(prefix + p) for p in POLICIES}
        return outcomes, (per_round, logged, counters)


async def test_coalesced_decisions_equal_the_plain_path(make_settings: Callable[..., Any]) -> None:
    batched, (transactions, logged, counters) = await _serve(make_settings, True)
    plain, (plain_transactions, plain_logged, plain_counters) = await _serve(make_settings, False)
    assert batched == plain  # every decision, score, propensity and error, in order
    refused = [o[0] for o in plain if isinstance(o, tuple)]  # alone, twice a round
    assert refused == ["InvalidRequest"] * 6
    assert logged == plain_logged and counters == plain_counters
    served = sum(isinstance(o, dict) for o in plain)
    assert logged["dense"][0] + logged["ta"][0] + logged["json"][0] == served + 9  # + rewarded
    # plain: a transaction per stored decision; coalesced: the first request of each
    # policy alone, the others of the round in one batch (round 0's with LNUCB-TA's
    # cold start one by one)
    assert plain_transactions == [{"dense": 7, "ta": 8, "json": 7}] * 3
    assert transactions[0] == {"dense": 2, "ta": 8, "json": 2}
    assert transactions[1:] == [{"dense": 2, "ta": 2, "json": 2}] * 2


async def test_client_event_ids_in_a_batch(make_settings: Callable[..., Any]) -> None:
    """Requests with a client event id are coalesced with the others (one transaction
    for the batch); a repeat in the same batch answers the original decision, another
    body under a stored id is a 409, an id of another policy is a 409, a request refused
    for its input leaves its id free for a corrected retry, and the stored events keep
    the response and digest a repeat is checked against."""
    async with running(make_settings()) as (app, http, _):
        for name in ("p", "q"):
            r = await http.put(f"/policies/{name}", json={**BASE, **POLICIES["dense"]})
            assert r.status_code == 200, r.text
        arms = [{"id": a} for a in ARMS]
        owned = {"policy": "q", "context": [1.0, 0.0, 0.0], "arms": arms, "event_id": "q-owns"}
        assert (await http.post("/recommend", json=owned)).status_code == 200
        body = {"policy": "p", "context": [1.0, 0.0, 1.0], "arms": arms}
        bodies = (
            [{**body, "event_id": f"mine-{k}"} for k in range(5)]
            + [body] * 3
            + [{**body, "event_id": "mine-0"}]  # a repeat within the batch
            + [{**body, "event_id": "q-owns"}]  # another policy's id
            + [{**body, "event_id": "fixed", "context": [1.0]}]  # refused: 1 of 3 features
        )
        with counted_transactions(app.state.use_cases.store) as transactions:
            answers = await asyncio.gather(*(http.post("/recommend", json=b) for b in bodies))
        codes = [r.status_code for r in answers]
        assert codes == [200] * 9 + [409, 422], [r.text for r in answers]
        assert transactions.count("p") == 2, transactions  # the first alone, then one batch
        assert [answers[k].json()["event_id"] for k in range(5)] == [f"mine-{k}" for k in range(5)]
        assert answers[8].json() == answers[0].json()
        assert len({r.json()["event_id"] for r in answers[5:8]}) == 3
        retried = await http.post("/recommend", json={**body, "event_id": "fixed"})
        assert retried.status_code == 200 and retried.json()["event_id"] == "fixed", retried.text
        for k in range(5):  # repeats after the batch: the original, or 409 for another body
            again = await http.post("/recommend", json={**body, "event_id": f"mine-{k}"})
            assert again.json() == answers[k].json()
        other = {**body, "event_id": "mine-0", "context": [0.0, 1.0, 1.0]}
        assert (await http.post("/recommend", json=other)).status_code == 409
        rewarded = await http.post("/reward", json={"event_id": "mine-3", "reward": 1.0})
        assert rewarded.status_code == 200 and rewarded.json()["applied"], rewarded.text


@pytest.mark.parametrize("coalescing", [True, False])
async def test_each_path_logs_the_latency_from_receipt_to_decision(
    make_settings: Callable[..., Any], coalescing: bool
) -> None:
    """Each logged decision carries its latency: positive and within the wall time of
    the calls, whether the requests were decided one by one or coalesced into batches."""
    async with running(make_settings(recommend_coalescing=coalescing)) as (app, http, _):
        r = await http.put("/policies/p", json={**BASE, **POLICIES["dense"]})
        assert r.status_code == 200, r.text
        use_cases = app.state.use_cases
        body = {"policy": "p", "context": [1.0, 0.0, 1.0], "arms": [{"id": a} for a in ARMS]}
        requests = [RecommendRequest.model_validate(body) for _ in range(6)]
        began = time.perf_counter()
        if coalescing:
            served = await asyncio.gather(*map(use_cases.recommender.recommend, requests))
        else:
            served = [await use_cases.recommender.recommend(r) for r in requests]
        elapsed_us = (time.perf_counter() - began) * 1e6
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        logged = {
            d.event_id: d.latency_us
            for d in await asyncio.to_thread(use_cases.event_log.recent_decisions, "p", 10)
        }
        latencies = [logged[s.event_id] for s in served]
        assert all(us is not None and 0 < us <= elapsed_us for us in latencies), latencies


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_selection_redone_after_a_conflict_draws_as_without_one(
    make_settings: Callable[..., Any],
) -> None:
    """LNUCB-TA's cold start changes its state, so its transaction redoes the selection
    over fresh values; another writer moving a key the transaction read, between the
    read and the commit, makes it redo the selection once more. Two identically seeded
    policies, the second cold start of one of them conflicted so: the same decisions,
    with the same rng state after each."""
    settings = make_settings(recommend_coalescing=False)
    async with running(settings) as (app, http, _):
        for name in ("quiet", "conflicted"):
            r = await http.put(f"/policies/{name}", json={**BASE, **POLICIES["ta"]})
            assert r.status_code == 200, r.text
        use_cases = app.state.use_cases
        store = use_cases.store
        other = redis.Redis.from_url(settings.redis_url)
        transact = store.transact
        conflicts: list[list[str]] = []

        versions = "bandit:{conflicted}:versions"  # service/storage/redis_scripts.py

        async def conflicted_once(policy: str, keys: Any, fn: Any, *args: Any) -> Any:
            stored = "shared" in keys and other.hexists(versions, "shared")
            if policy != "conflicted" or conflicts or not stored:  # not the second cold start
                return await transact(policy, keys, fn, *args)

            def moved_then_fn(values: dict[str, bytes | None]) -> Any:
                if not conflicts:  # another writer moves "shared" (the same value) first
                    other.hincrby(versions, "shared", 1)
                conflicts.append(sorted(values))
                return fn(values)

            return await transact(policy, keys, moved_then_fn, *args)

        served: dict[str, list[tuple[str, Any]]] = {}
        store.transact = conflicted_once
        try:
            for name in ("quiet", "conflicted"):
                served[name] = []
                for k in range(4):  # a cold start of a..d, then of "e"
                    arms = [{"id": a} for a in [*ARMS, *(["e"] if k == 2 else [])]]
                    body = {"policy": name, "context": [1.0, float(k % 2), 0.0], "arms": arms}
                    r = await http.post("/recommend", json=body)
                    assert r.status_code == 200, r.text
                    rng = use_cases.cache.cached(name).policy.rng_state
                    served[name].append((r.json()["arm_id"], rng))
        finally:
            store.transact = transact
            other.close()
        assert len(conflicts) == 2 and "shared" in conflicts[0]  # the cold start of "e", redone
        assert served["conflicted"] == served["quiet"]
