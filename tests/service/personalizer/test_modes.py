"""Personalizer's learning modes and reward aggregation on the default loop
(docs/personalizer.md, "Learning modes" and "Rewards"), on the embedded default and on
Redis + PostgreSQL: Apprentice serves the baseline and learns from its rewards, its
metrics in closed form; LoggingOnly never changes the model; ``sum`` applies 0.2 + 0.3 +
0.5 once as 1.0 when the wait ends; a reward after the wait is logged, not learned."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.service.conftest import counted_transactions, running, wait_for

pytestmark = pytest.mark.anyio

ACTIONS = [
    {"id": "news", "features": [{"item": {"topic": "news", "length": 3}}]},
    {"id": "sports", "features": [{"item": {"topic": "sports"}}]},
    {"id": "music", "features": [{"item": {"topic": "music", "tags": ["live"]}}]},
]
CONTEXTS = [
    [{"user": {"tier": "gold"}}, {"device": {"mobile": True}}],
    [{"user": {"tier": "basic"}}, {"device": {"mobile": False}}],
]
LOOP = "peritem"
BASE = f"/loops/{LOOP}/personalizer/v1.1-preview.3"
# a loop with a model per action: its per-arm statistics are the closed-form check
PER_ARM_SPEC = {
    "algorithm": "linucb",
    "features": {"bits": 4},
    "reward_range": [-1, 1],
    "epsilon": 0.2,
    "params": {"alpha": 0.0},
}


async def create_loop(http: Any) -> None:
    put = await http.put(f"/policies/{LOOP}", json=PER_ARM_SPEC)
    assert put.status_code == 200, put.text


async def configure(http: Any, **changes: Any) -> dict[str, Any]:
    """PUT the loop's service configuration with ``changes`` (camelCase); its answer."""
    config = (await http.get(f"{BASE}/configurations/service")).json()
    config.pop("latestApprenticeModeMetrics", None)
    put = await http.put(f"{BASE}/configurations/service", json={**config, **changes})
    assert put.status_code == 200, put.text
    answer: dict[str, Any] = put.json()
    return answer


async def arm_stats(http: Any) -> dict[str, dict[str, Any]]:
    stats = (await http.get(f"/policies/{LOOP}/stats")).json()
    return {a: s for a, s in stats["arms"].items() if s["rewarded"]}


async def eventually(
    read: Callable[[], Awaitable[dict[str, Any]]], timeout: float
) -> dict[str, Any]:
    """Poll ``read`` until it answers something non-empty (the sweeper ran), or fail."""
    deadline = time.monotonic() + timeout
    while not (value := await read()):
        assert time.monotonic() < deadline, f"nothing within {timeout}s"
        await asyncio.sleep(0.05)
    return value


async def rank(http: Any, context: list[Any], **extra: Any) -> dict[str, Any]:
    """POST rank on the loop with ``context`` and ACTIONS (or ``extra``'s); its body."""
    ranked = await http.post(
        f"{BASE}/rank", json={"contextFeatures": context, "actions": ACTIONS, **extra}
    )
    assert ranked.status_code == 201, ranked.text
    body: dict[str, Any] = ranked.json()
    return body


async def reward(http: Any, event: str, value: float) -> None:
    answer = await http.post(f"{BASE}/events/{event}/reward", json={"value": value})
    assert answer.status_code == 204, answer.text


async def model_scores(http: Any) -> dict[str, float]:
    """The model's score of each action for the first context, by the native /recommend
    without exploration and with deferred activation (its event is never learned from)."""
    decision = await http.post(
        "/recommend",
        json={
            "policy": LOOP,
            "context": CONTEXTS[0],
            "arms": ACTIONS,
            "explore": False,
            "defer_activation": True,
        },
    )
    assert decision.status_code == 200, decision.text
    return {r["arm_id"]: r["score"] for r in decision.json()["ranking"]}


async def greedy_choice(http: Any, context: list[Any], actions: list[Any]) -> str:
    """The model's own choice now: the native /recommend without exploration, on the
    same JSON features (it stores an event that is never rewarded within the test)."""
    decision = await http.post(
        "/recommend",
        json={"policy": LOOP, "context": context, "arms": actions, "explore": False},
    )
    assert decision.status_code == 200, decision.text
    arm: str = decision.json()["arm_id"]
    return arm


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_apprentice_serves_the_baseline_learns_its_rewards_and_counts_imitations(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (_, http, _):
        await create_loop(http)
        config = await configure(http, learningMode="Apprentice")
        assert config["learningMode"] == "Apprentice"
        started = config["latestApprenticeModeMetrics"]
        assert (started["numberOfEvents"], started["sumOfRewards"]) == (0, 0.0)
        expected: dict[str, Any] = {
            "events": 0,
            "imitated": 0,
            "rewards": 0.0,
            "imitated_rewards": 0.0,
            "per_arm": {},
        }
        for i in range(24):
            context = CONTEXTS[i % 2]
            # the application's own choice (its baseline) rotates; it is paid for news
            order = ACTIONS[i % 3 :] + ACTIONS[: i % 3]
            excluded = [order[0]["id"]] if i % 4 == 0 else []
            baseline = next(a["id"] for a in order if a["id"] not in excluded)
            candidates = [a for a in order if a["id"] not in excluded]
            greedy = await greedy_choice(http, context, candidates)
            body = await rank(http, context, actions=order, excludedActions=excluded)
            assert body["rewardActionId"] == baseline
            probabilities = {r["id"]: r["probability"] for r in body["ranking"]}
            assert probabilities[baseline] == 1.0
            assert math.isclose(sum(probabilities.values()), 1.0)
            value = 1.0 if baseline == "news" else 0.25
            await reward(http, body["eventId"], value)
            expected["events"] += 1
            expected["rewards"] += value
            n, total = expected["per_arm"].get(baseline, (0, 0.0))
            expected["per_arm"][baseline] = (n + 1, total + value)
            if greedy == baseline:
                expected["imitated"] += 1
                expected["imitated_rewards"] += value
        metrics = (await http.get(f"{BASE}/configurations/service")).json()[
            "latestApprenticeModeMetrics"
        ]
        stats = await arm_stats(http)
    assert 0 < expected["imitated"] < expected["events"]  # the model learned some, not all
    assert metrics["numberOfEvents"] == expected["events"]
    assert metrics["numberOfImitatedEvents"] == expected["imitated"]
    assert math.isclose(metrics["sumOfRewards"], expected["rewards"])
    assert math.isclose(metrics["sumOfImitatedRewards"], expected["imitated_rewards"])
    assert metrics["lastBatchMetrics"]["numberOfEvents"] <= expected["events"]
    assert metrics["startTime"] == started["startTime"]
    # the model learned from every baseline reward, each once, on the baseline's arm
    learned = {a: (s["rewarded"], s["reward_sum"]) for a, s in stats.items()}
    assert learned.keys() == expected["per_arm"].keys()
    for arm, (n, total) in expected["per_arm"].items():
        rewarded, reward_sum = learned[arm]
        assert rewarded == n
        assert math.isclose(reward_sum, total)


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_logging_only_serves_the_baseline_and_never_changes_the_model(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (app, http, _):
        await create_loop(http)
        before = await model_scores(http)
        await configure(http, learningMode="LoggingOnly", defaultReward=0.5, rewardWaitTime="PT1S")
        for i in range(6):
            ranked = await rank(http, CONTEXTS[i % 2])
            assert ranked["rewardActionId"] == "news"
            if i % 2:  # the others get the default reward after the wait
                await reward(http, ranked["eventId"], 1.0)
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count(LOOP)[1] == 6, timeout=30)  # 3 explicit, 3 default
        stats = (await http.get(f"/policies/{LOOP}/stats")).json()
        assert stats["rewards"] == 6
        assert all(s["rewarded"] == 0 for s in stats["arms"].values())
        assert await model_scores(http) == before  # the model is what it was
        # the same check sees a change once the loop learns again
        await configure(http, learningMode="Online")
        await reward(http, (await rank(http, CONTEXTS[0]))["eventId"], 1.0)
        assert await model_scores(http) != before


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_sum_applies_the_rewards_of_the_wait_once_and_logs_a_late_reward(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (app, http, _):
        await create_loop(http)
        config = await configure(http, rewardAggregation="sum", rewardWaitTime="PT4S")
        assert config["rewardAggregation"] == "sum"
        ranked = await rank(http, CONTEXTS[0])
        event, served = ranked["eventId"], ranked["rewardActionId"]
        for value in (0.2, 0.3, 0.5):
            await reward(http, event, value)
        assert await arm_stats(http) == {}  # nothing learned within the wait
        stats = await eventually(lambda: arm_stats(http), timeout=30)
        assert stats == {served: {**stats[served], "rewarded": 1, "reward_sum": 1.0}}
        await reward(http, event, 0.7)  # after the wait
        log = app.state.use_cases.event_log
        await wait_for(lambda: len(log.late_rewards(LOOP)) == 1, timeout=30)
        assert await arm_stats(http) == stats  # the late reward changed nothing
        logged = {e.decision.event_id: e.reward for e in log.iter_events(LOOP)}
        assert logged[event] is not None and logged[event].value == 1.0
        [record] = log.late_rewards(LOOP)
        assert (record.event_id, record.arm_id, record.value, record.source) == (
            event,
            served,
            0.7,
            "late",
        )
        assert (await http.delete(f"{BASE}/logs")).status_code == 204
        assert log.late_rewards(LOOP) == []  # deleted with the loop's other logs


async def activate(http: Any, event: str) -> None:
    answer = await http.post(f"{BASE}/events/{event}/activate")
    assert answer.status_code == 204, answer.text


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_rewards_before_activation_are_learned_once_at_activation_never_without(
    make_settings: Any,
) -> None:
    """Deferred events rewarded before ``activate``: the earliest reward is learned once,
    at activation; an event never activated expires with its reward logged as late and
    the model unchanged; under ``sum`` the rewards before and after activation add up."""
    async with running(make_settings()) as (app, http, _):
        await create_loop(http)
        await configure(http, rewardWaitTime="PT3S", defaultReward=None)
        first = await rank(http, CONTEXTS[0], deferActivation=True)
        never = await rank(http, CONTEXTS[1], deferActivation=True)
        await reward(http, first["eventId"], 0.6)
        await reward(http, first["eventId"], 0.9)  # earliest: the 0.6 counts
        await reward(http, never["eventId"], 0.4)
        assert await arm_stats(http) == {}  # nothing learned before activation
        await activate(http, first["eventId"])
        served = first["rewardActionId"]
        learned = await arm_stats(http)
        assert {a: (s["rewarded"], s["reward_sum"]) for a, s in learned.items()} == {
            served: (1, 0.6)
        }
        await activate(http, first["eventId"])  # a repeat applies nothing again
        await reward(http, first["eventId"], 1.0)
        assert await arm_stats(http) == learned
        log = app.state.use_cases.event_log
        await wait_for(lambda: len(log.late_rewards(LOOP)) == 1, timeout=30)
        [late] = log.late_rewards(LOOP)
        assert (late.event_id, late.arm_id, late.value) == (
            never["eventId"],
            never["rewardActionId"],
            0.4,
        )
        assert await arm_stats(http) == learned  # the expired event was not learned from
        await activate(http, never["eventId"])  # after its wait: accepted, ignored
        assert await arm_stats(http) == learned
        await configure(http, rewardAggregation="sum", defaultReward=None)
        summed = await rank(http, CONTEXTS[0], deferActivation=True)
        for value in (0.2, 0.3):
            await reward(http, summed["eventId"], value)
        await activate(http, summed["eventId"])
        await reward(http, summed["eventId"], 0.1)
        arm = summed["rewardActionId"]
        before = learned.get(arm, {"rewarded": 0, "reward_sum": 0.0})
        stats = await eventually(lambda: _changed(http, arm, before["rewarded"]), timeout=30)
        assert stats["rewarded"] == before["rewarded"] + 1
        assert math.isclose(stats["reward_sum"] - before["reward_sum"], 0.6)


async def _changed(http: Any, arm: str, rewarded: int) -> dict[str, Any]:
    """``arm``'s statistics once it has more than ``rewarded`` rewards ({} before)."""
    stats = (await arm_stats(http)).get(arm, {})
    return stats if stats.get("rewarded", 0) > rewarded else {}


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_model_rebuilt_from_the_log_skips_what_logging_only_served(
    make_settings: Any,
) -> None:
    """The embedded default rebuilds its state from the log at start: the rewards of the
    events served in LoggingOnly mode are in the log and stay unlearned."""
    settings = make_settings()
    async with running(settings) as (app, http, _):
        await create_loop(http)
        await configure(http, learningMode="LoggingOnly")
        for context in CONTEXTS:
            await reward(http, (await rank(http, context))["eventId"], 1.0)
        await configure(http, learningMode="Online")
        await reward(http, (await rank(http, CONTEXTS[0]))["eventId"], 1.0)
        live = await model_scores(http)
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
        assert app.state.use_cases.event_log.count(LOOP)[1] == 3
    async with running(settings) as (_, http, _):
        stats = (await http.get(f"/policies/{LOOP}/stats")).json()
        assert sum(s["rewarded"] for s in stats["arms"].values()) == 1
        assert await model_scores(http) == live


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_concurrent_rewards_of_a_sum_are_applied_once_as_their_total(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (app, http, _):
        await create_loop(http)
        await configure(http, rewardAggregation="sum", rewardWaitTime="PT4S")
        ranked = await rank(http, CONTEXTS[1])
        event, served = ranked["eventId"], ranked["rewardActionId"]
        await asyncio.gather(*(reward(http, event, 0.125) for _ in range(8)))
        stats = await eventually(lambda: arm_stats(http), timeout=30)
        # the sweeper logs the total after its transaction, which the stats show first
        log = app.state.use_cases.event_log
        await wait_for(lambda: any(e.reward for e in log.iter_events(LOOP)), timeout=30)
        logged = [e.reward for e in log.iter_events(LOOP)]
    assert {a: (s["rewarded"], s["reward_sum"]) for a, s in stats.items()} == {served: (1, 1.0)}
    assert [r.value for r in logged if r is not None] == [1.0]


@pytest.mark.parametrize("backend", ["embedded"])
async def test_service_configuration_keeps_the_model_and_new_interactions_relearn_it(
    make_settings: Any,
) -> None:
    """docs/personalizer.md, "Learning settings and the model"."""
    async with running(make_settings()) as (app, http, _):
        await create_loop(http)
        put = await http.put(
            f"/policies/{LOOP}",
            json={
                **PER_ARM_SPEC,
                "algorithm": "hybrid_linucb",
                "params": {"alpha": 0.0, "context_dim": 0},
                "features": {"bits": 8, "interactions": [["*", "*"]]},
            },
        )
        assert put.status_code == 200, put.text
        prior = await model_scores(http)
        await reward(http, (await rank(http, CONTEXTS[0]))["eventId"], 1.0)
        learned = await model_scores(http)
        assert learned != prior
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.last_reward_at(LOOP) is not None)  # what a retrain reads
        for changes in (
            {"explorationPercentage": 0.5, "rewardWaitTime": "PT1H", "defaultReward": 0.1},
            {"rewardAggregation": "sum"},
            {"learningMode": "Apprentice"},
            {"learningMode": "LoggingOnly", "rewardAggregation": "earliest"},
            {"learningMode": "Online"},
        ):
            await configure(http, **changes)
            assert await model_scores(http) == learned, changes
        policy = f"{BASE}/configurations/policy"
        same = await http.put(
            policy, json={"name": "e", "arguments": "--cb_explore_adf --epsilon 0.3 -q ::"}
        )
        assert same.status_code == 200
        assert await model_scores(http) == learned  # only the exploration changed
        # other interactions: a new model, relearned from the logged reward
        # (tests/service/test_retrain.py checks it against the rebuild in closed form)
        other = await http.put(policy, json={"name": "q", "arguments": "--cb_explore_adf -q ui"})
        assert other.status_code == 200
        properties_path = f"/policies/{LOOP}/model/properties"
        deadline = time.monotonic() + 120
        while (properties := (await http.get(properties_path)).json())["retrain"][
            "state"
        ] == "running":
            assert time.monotonic() < deadline, properties
            await asyncio.sleep(0.1)
        assert properties["retrain"]["state"] == "done"
        assert properties["retrain"]["events"] == 1
        relearned = await model_scores(http)
        assert relearned not in (learned, dict.fromkeys(learned, 0.0))


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_concurrent_ranks_coalesce_online_and_each_serves_its_baseline_otherwise(
    make_settings: Any,
) -> None:
    """Concurrent ranks without an eventId share store transactions in the Online mode
    (their baseline changes nothing there); in Apprentice each is served on its own and
    serves its own baseline."""
    orders = [ACTIONS[i % 3 :] + ACTIONS[: i % 3] for i in range(12)]
    async with running(make_settings()) as (app, http, _):
        await create_loop(http)
        counts = {}
        with counted_transactions(app.state.use_cases.store) as transactions:
            for mode in ("Online", "Apprentice"):
                await configure(http, learningMode=mode)
                await rank(http, CONTEXTS[0])  # the loop's configuration is cached
                start = len(transactions)
                served = await asyncio.gather(
                    *(rank(http, CONTEXTS[i % 2], actions=order) for i, order in enumerate(orders))
                )
                counts[mode] = transactions[start:].count(LOOP)
    assert counts["Online"] < len(orders)
    assert counts["Apprentice"] == len(orders)
    assert [body["rewardActionId"] for body in served] == [order[0]["id"] for order in orders]
