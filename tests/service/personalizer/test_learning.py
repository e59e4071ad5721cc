"""A Personalizer-style integration (JSON context and actions, the default loop's epsilon
20%) on a simulated storefront: its click rate rises well above random, and the same
traffic through the native ``/recommend`` on a policy with the same spec gets the same
decisions (the same seed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from service.usecases.loops import DEFAULT_LOOP, DEFAULT_LOOP_SPEC
from tests.service.conftest import running

pytestmark = pytest.mark.anyio

SEGMENTS = ["student", "parent", "gamer", "chef"]
CATEGORIES = ["books", "toys", "consoles", "cookware"]
ROUNDS = 400


def click_probability(segment: int, category: int) -> float:
    """Each segment likes one category (0.8), the others rarely (0.1)."""
    return 0.8 if segment == category else 0.1


def storefront_traffic(seed: int) -> list[tuple[int, float]]:
    """Per round: the segment, and the uniform draw deciding a click."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(len(SEGMENTS))), float(rng.random())) for _ in range(ROUNDS)]


ACTIONS = [
    {"id": f"item-{c}", "features": [{"item": {"category": c, "price": 10 + i}}]}
    for i, c in enumerate(CATEGORIES)
]


async def personalizer_run(http: Any, traffic: list[tuple[int, float]]) -> tuple[list[str], float]:
    served, clicks = [], 0.0
    for segment, draw in traffic:
        context = [{"user": {"segment": SEGMENTS[segment]}}, {"page": {"kind": "home"}}]
        r = await http.post(
            "/personalizer/v1.0/rank", json={"contextFeatures": context, "actions": ACTIONS}
        )
        assert r.status_code == 201, r.text
        chosen = r.json()["rewardActionId"]
        click = float(
            draw < click_probability(segment, CATEGORIES.index(chosen.removeprefix("item-")))
        )
        reward = await http.post(
            f"/personalizer/v1.0/events/{r.json()['eventId']}/reward", json={"value": click}
        )
        assert reward.status_code == 204
        served.append(chosen)
        clicks += click
    return served, clicks


async def native_run(http: Any, traffic: list[tuple[int, float]]) -> list[str]:
    served = []
    for segment, draw in traffic:
        context = [{"user": {"segment": SEGMENTS[segment]}}, {"page": {"kind": "home"}}]
        r = await http.post(
            "/recommend",
            json={"policy": "native", "context": context, "arms": ACTIONS},
        )
        assert r.status_code == 200, r.text
        chosen = r.json()["arm_id"]
        click = float(
            draw < click_probability(segment, CATEGORIES.index(chosen.removeprefix("item-")))
        )
        await http.post("/reward", json={"event_id": r.json()["event_id"], "reward": click})
        served.append(chosen)
    return served


@pytest.mark.parametrize("backend", ["embedded"])
async def test_default_loop_learns_and_matches_the_native_api(make_settings: Any) -> None:
    traffic = storefront_traffic(seed=7)
    async with running(make_settings(personalizer_loop=True)) as (_, http, _):
        served, clicks = await personalizer_run(http, traffic)
        put = await http.put("/policies/native", json=DEFAULT_LOOP_SPEC.model_dump(mode="json"))
        assert put.status_code == 200, put.text
        assert served == await native_run(http, traffic)
        stats = (await http.get(f"/policies/{DEFAULT_LOOP}/stats")).json()
    assert stats["rewards"] == ROUNDS
    random_rate = np.mean([click_probability(s, c) for s in range(4) for c in range(4)])  # 0.275
    late = traffic[ROUNDS // 2 :]
    late_clicks = sum(
        draw < click_probability(segment, CATEGORIES.index(arm.removeprefix("item-")))
        for (segment, draw), arm in zip(late, served[ROUNDS // 2 :], strict=True)
    )
    # greedy best: 0.8; with 20% exploration about 0.8 * 0.85 + 0.1 * 0.15 = 0.695
    assert late_clicks / len(late) > random_rate + 0.25, (late_clicks / len(late), clicks / ROUNDS)


@pytest.mark.parametrize("backend", ["embedded"])
async def test_default_loop_is_created_once_and_kept_across_restarts(make_settings: Any) -> None:
    settings = make_settings(personalizer_loop=True)
    headers = {"Ocp-Apim-Subscription-Key": settings.api_keys[0]}
    async with running(settings) as (_, http, _):
        config = (await http.get("/personalizer/configurations/service", headers=headers)).json()
        changed = {**config, "rewardWaitTime": "PT1H", "logRetentionDays": 3}
        put = await http.put("/personalizer/configurations/service", json=changed, headers=headers)
        assert put.status_code == 200, put.text
        ranked = await http.post(
            "/personalizer/rank", json={"actions": ACTIONS[:2]}, headers=headers
        )
        assert ranked.status_code == 201
        await http.post(
            f"/personalizer/events/{ranked.json()['eventId']}/reward",
            json={"value": 1},
            headers=headers,
        )
        before = (await http.get(f"/policies/{DEFAULT_LOOP}/snapshot")).json()["data"]
    async with running(settings) as (_, http, _):  # rebuilt from the log, not recreated
        again = (await http.get("/personalizer/configurations/service", headers=headers)).json()
        assert (again["rewardWaitTime"], again["logRetentionDays"]) == ("PT1H", 3)
        assert (await http.get(f"/policies/{DEFAULT_LOOP}/snapshot")).json()["data"] == before
    async with running(
        make_settings(personalizer_loop=False, data_dir=settings.data_dir / "other")
    ) as (_, http, _):
        missing = await http.get("/personalizer/configurations/service", headers=headers)
        assert missing.status_code == 404
