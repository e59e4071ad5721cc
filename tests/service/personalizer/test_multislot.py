"""Personalizer multi-slot (service/personalizer/multislot.py, docs/algorithms.md section 9)
in process: the slots get distinct actions none excluded for them, baselines are validated
as Personalizer did, each slot is one pending event rewarded once (earliest) or given the
default reward by the sweeper, a refused request stores nothing, and the rewards reach
the model."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest

from service.personalizer.loops import DEFAULT_LOOP
from service.personalizer.multislot import slot_event_id
from tests.service.conftest import API_KEY, running

pytestmark = pytest.mark.anyio

HEADERS = {"Ocp-Apim-Subscription-Key": API_KEY}
RANK = "/personalizer/v1.1-preview.3/multislot/rank"
TOPICS = ["news", "sports", "music", "food", "travel"]
ACTIONS = [{"id": t, "features": [{"item": {"topic": t}}]} for t in TOPICS]
CONTEXT = [{"user": {"tier": "gold"}}]


def page(*slots: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"contextFeatures": CONTEXT, "actions": ACTIONS, "slots": list(slots), **fields}


def slot(slot_id: str, baseline: str, *excluded: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": slot_id,
        "baselineAction": baseline,
        "excludedActions": list(excluded),
        "features": [{"slot": {"name": slot_id}}],
        **fields,
    }


async def stats(http: Any) -> dict[str, Any]:
    return (await http.get(f"/policies/{DEFAULT_LOOP}/stats")).json()


async def test_slots_get_distinct_actions_never_excluded_each_one_event(
    make_settings: Any,
) -> None:
    rng = np.random.default_rng(7)
    served_slots = 0
    answers: dict[str, list[str | None]] = {}
    async with running(make_settings(personalizer_loop=True)) as (app, http, _):
        for _ in range(40):
            n = int(rng.integers(1, len(TOPICS) + 1))
            baselines = rng.permutation(TOPICS)[:n]
            slots = []
            for i, baseline in enumerate(baselines):
                others = [t for t in TOPICS if t != baseline]
                excluded = list(rng.choice(others, size=int(rng.integers(0, 4)), replace=False))
                slots.append(slot(f"s{i}", str(baseline), *map(str, excluded)))
            ranked = await http.post(RANK, json=page(*slots), headers=HEADERS)
            assert ranked.status_code == 201, ranked.text
            answer = ranked.json()
            assert [s["id"] for s in answer["slots"]] == [s["id"] for s in slots]
            chosen = [s.get("rewardActionId") for s in answer["slots"]]
            assert chosen[0] is not None  # the first slot always has its baseline left
            placed = [a for a in chosen if a is not None]
            assert len(placed) == len(set(placed))  # distinct across slots
            for request, action in zip(slots, chosen, strict=True):
                if action is None:  # only when every action left is excluded from the slot
                    left = set(TOPICS) - set(placed)
                    assert left <= set(request["excludedActions"])
                else:
                    assert action not in request["excludedActions"]
            served_slots += len(placed)
            answers[answer["eventId"]] = chosen
        counted = await stats(http)
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
        logged = list(app.state.use_cases.event_log.iter_events(DEFAULT_LOOP))
    assert counted["decisions"] == served_slots  # one decision (pending event) per slot
    # each served slot is logged as its own decision E:slot<i>, with its own propensity,
    # among the candidates left to it, its slot's features joined to the context
    assert len(logged) == served_slots
    for event in logged:
        event_id, index = event.decision.event_id.rsplit(":slot", 1)
        assert event.decision.arm_id == answers[event_id][int(index)]
        candidates = {c["id"] for c in event.decision.candidates}
        assert candidates.isdisjoint(a for a in answers[event_id][: int(index)] if a)
        assert 0 < event.decision.propensity <= 1
        assert event.decision.context[-1] == {"slot": {"name": f"s{index}"}}


@pytest.mark.parametrize("backend", ["embedded"])
@pytest.mark.parametrize(
    ("body", "named"),
    [
        (page(slot("a", "nope")), "slots[0].baselineAction"),
        (page(slot("a", "news", "news")), "slots[0].baselineAction"),
        (page(slot("a", "news"), slot("b", "news")), "slots[1].baselineAction"),
        (page({"id": "a"}), "slots.0.baselineAction"),
        (page(slot("a", "news"), slot("a", "music")), "slots: duplicate slot ids"),
        (page(*[slot(f"s{i}", TOPICS[i % 5]) for i in range(6)]), "slots: 6 slots"),
        (page(slot("a", "news"), slot("b", "music", features=[{"x": [[1]]}])), "slots[1].features"),
        (page(slot("a", "news"), eventId="e" * 257), "eventId"),
        (page(), "slots"),
        ({**page(slot("a", "news")), "contextFeatures": [{"u": [[1]]}]}, "contextFeatures[0].u"),
    ],
)
async def test_bad_requests_are_400s_naming_the_field_and_store_nothing(
    make_settings: Any, body: dict[str, Any], named: str
) -> None:
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        refused = await http.post(RANK, json=body, headers=HEADERS)
        assert refused.status_code == 400
        error = refused.json()["error"]
        assert error["code"] == "InvalidRankRequest"
        assert error["message"].startswith(named), error["message"]
        assert (await stats(http))["decisions"] == 0


async def immediate_updates(http: Any) -> None:
    """Set the loop's ``modelUpdateFrequency`` to ``PT0S``: each reward in the model at
    once (the policy stats below read the model)."""
    config = (await http.get("/personalizer/configurations/service", headers=HEADERS)).json()
    at_once = {**config, "modelUpdateFrequency": "PT0S"}
    put = await http.put("/personalizer/configurations/service", json=at_once, headers=HEADERS)
    assert put.status_code == 200, put.text


async def test_each_slot_is_rewarded_once_with_its_earliest_reward(make_settings: Any) -> None:
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        await immediate_updates(http)
        body = page(slot("hero", "news"), slot("side", "music"), eventId="page-1")
        ranked = (await http.post(RANK, json=body, headers=HEADERS)).json()
        assert (await http.post(RANK, json=body, headers=HEADERS)).json() == ranked  # idempotent
        twice = page(slot("hero", "news"), slot("side", "music"), eventId="page-2")
        racing = await asyncio.gather(*(http.post(RANK, json=twice, headers=HEADERS) for _ in "ab"))
        assert [r.status_code for r in racing] == [201, 201]
        assert racing[0].json() == racing[1].json()  # one decision per slot, answered twice
        other = page(slot("hero", "news"), eventId="page-1")
        reused = await http.post(RANK, json=other, headers=HEADERS)
        assert reused.status_code == 409
        assert reused.json()["error"]["message"].startswith("eventId 'page-1' was already used")
        before = (await http.get(f"/policies/{DEFAULT_LOOP}/snapshot")).json()["data"]
        reward = "/personalizer/multislot/events/page-1/reward"
        unknown = await http.post(
            reward,
            json={"reward": [{"slotId": "hero", "value": 1}, {"slotId": "footer", "value": 1}]},
            headers=HEADERS,
        )
        assert unknown.status_code == 400
        assert unknown.json()["error"]["code"] == "InvalidRewardRequest"
        assert unknown.json()["error"]["message"].startswith("reward[1].slotId")
        assert (await stats(http))["rewards"] == 0  # the known slot was not rewarded either
        first = {"reward": [{"slotId": "hero", "value": 1}, {"slotId": "side", "value": 0.25}]}
        assert (await http.post(reward, json=first, headers=HEADERS)).status_code == 204
        again = {"reward": [{"slotId": "hero", "value": -1}, {"slotId": "hero", "value": 0.5}]}
        assert (await http.post(reward, json=again, headers=HEADERS)).status_code == 204
        counted = await stats(http)
        after = (await http.get(f"/policies/{DEFAULT_LOOP}/snapshot")).json()["data"]
        assert (counted["decisions"], counted["rewards"]) == (4, 2)
        assert counted["policy_stats"]["reward_sum"] == 1.25  # the earliest of each slot
        assert after != before  # the rewards reached the model
        # each slot is the single-slot event E:slot<i>, served with its own propensity
        hero = await http.post(
            "/reward", json={"event_id": slot_event_id("page-1", 0), "reward": 1}
        )
        assert (hero.json()["status"], hero.json()["arm_id"]) == (
            "already_rewarded",
            ranked["slots"][0]["rewardActionId"],
        )
        ignored = await http.post(
            "/personalizer/multislot/events/never-ranked/reward",
            json={"reward": [{"slotId": "hero", "value": 1}]},
            headers=HEADERS,
        )
        assert ignored.status_code == 204  # accepted and ignored, as Personalizer did
        out_of_range = await http.post(
            reward, json={"reward": [{"slotId": "hero", "value": 2}]}, headers=HEADERS
        )
        assert out_of_range.status_code == 400
        assert out_of_range.json()["error"]["message"].startswith("reward.0.value")


async def test_deferred_slots_learn_only_once_activated_and_default_when_unrewarded(
    make_settings: Any,
) -> None:
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        config = (await http.get("/personalizer/configurations/service", headers=HEADERS)).json()
        quick = {**config, "rewardWaitTime": "PT0.3S", "defaultReward": 0.5}
        quick["modelUpdateFrequency"] = "PT0S"  # the stats read the model
        assert (
            await http.put("/personalizer/configurations/service", json=quick, headers=HEADERS)
        ).status_code == 200
        body = page(slot("hero", "news"), slot("side", "music"), deferActivation=True)
        deferred = (await http.post(RANK, json=body, headers=HEADERS)).json()
        events = f"/personalizer/multislot/events/{deferred['eventId']}"
        early = {"reward": [{"slotId": "hero", "value": 1}]}
        assert (await http.post(f"{events}/reward", json=early, headers=HEADERS)).status_code == 204
        assert (await stats(http))["rewards"] == 0  # not activated: not learned
        assert (await http.post(f"{events}/activate", headers=HEADERS)).status_code == 204
        assert (await http.post(f"{events}/reward", json=early, headers=HEADERS)).status_code == 204
        served = page(slot("hero", "news"), slot("side", "music"))
        await http.post(RANK, json=served, headers=HEADERS)  # activated, never rewarded

        counted = await stats(http)
        deadline = time.monotonic() + 10.0
        while counted["rewards"] < 4 and time.monotonic() < deadline:  # the sweeper's turn
            await asyncio.sleep(0.05)
            counted = await stats(http)
    # the deferred page: hero rewarded 1, side defaulted; the other page: both defaulted
    assert (counted["decisions"], counted["rewards"], counted["default_rewards"]) == (4, 4, 3)
    assert counted["policy_stats"]["reward_sum"] == 1 + 3 * 0.5


@pytest.mark.parametrize("backend", ["embedded"])
async def test_slot_rewards_reach_the_model_and_each_slot_learns_its_own_best(
    make_settings: Any,
) -> None:
    """Clicks: the hero slot pays for music only, the side slot for sports only (sports
    in the hero slot earns nothing). With the slot's features joined to the context (and
    the context x action interactions) each slot learns its own best action."""
    best = {"hero": "music", "side": "sports"}
    late: list[dict[str, str]] = []
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        await immediate_updates(http)  # learning from round to round, not once a second
        for round_ in range(150):
            body = page(slot("hero", "news"), slot("side", "food"))
            ranked = (await http.post(RANK, json=body, headers=HEADERS)).json()
            chosen = {s["id"]: s["rewardActionId"] for s in ranked["slots"]}
            rewards = [
                {"slotId": s, "value": float(chosen[s] == best[s])} for s in ("hero", "side")
            ]
            done = await http.post(
                f"/personalizer/multislot/events/{ranked['eventId']}/reward",
                json={"reward": rewards},
                headers=HEADERS,
            )
            assert done.status_code == 204
            if round_ >= 100:
                late.append(chosen)
        assert (await stats(http))["rewards"] == 300
    for slot_id, action in best.items():
        share = sum(c[slot_id] == action for c in late) / len(late)
        assert share > 0.7, (slot_id, share)  # epsilon 20% explores the rest
