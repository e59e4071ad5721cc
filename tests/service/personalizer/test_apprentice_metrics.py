"""``latestApprenticeModeMetrics`` stay readable after Apprentice mode ends, whatever
replaces the model afterwards: switching back to Online, a learning policy with other
interactions (a new model), ``DELETE model`` and the native reset keep them; only
turning Apprentice on again starts them afresh (docs/personalizer.md, "Learning modes");
on the embedded default and on Redis + PostgreSQL."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.service.conftest import running
from tests.service.personalizer.test_modes import (
    BASE,
    CONTEXTS,
    LOOP,
    PER_ARM_SPEC,
    configure,
    rank,
    reward,
)

pytestmark = pytest.mark.anyio
SHARED_SPEC = {
    **PER_ARM_SPEC,
    "algorithm": "hybrid_linucb",
    "params": {"alpha": 0.0, "context_dim": 0},
    "features": {"bits": 8, "interactions": [["*", "*"]]},
}
REWARDS = [1.0, 0.25, 0.5, 0.0, 1.0]


async def apprentice_metrics(http: Any) -> dict[str, Any] | None:
    config = (await http.get(f"{BASE}/configurations/service")).json()
    metrics: dict[str, Any] | None = config.get("latestApprenticeModeMetrics")
    return metrics


async def decisions(http: Any) -> int:
    count: int = (await http.get(f"/policies/{LOOP}/stats")).json()["decisions"]
    return count


@pytest.mark.parametrize("backend", ["embedded", "redis"])
async def test_apprentice_metrics_outlive_the_mode_and_every_model_reset(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (_, http, _):
        assert (await http.put(f"/policies/{LOOP}", json=SHARED_SPEC)).status_code == 200
        assert await apprentice_metrics(http) is None  # absent: never in Apprentice mode
        started = (await configure(http, learningMode="Apprentice"))["latestApprenticeModeMetrics"]
        for i, value in enumerate(REWARDS):
            await reward(http, (await rank(http, CONTEXTS[i % 2]))["eventId"], value)
        learned = await apprentice_metrics(http)
        assert learned is not None and learned["startTime"] == started["startTime"]
        assert learned["numberOfEvents"] == len(REWARDS)
        assert math.isclose(learned["sumOfRewards"], sum(REWARDS))
        assert await decisions(http) == len(REWARDS)

        await configure(http, learningMode="Online")
        assert await apprentice_metrics(http) == learned
        # a new learning policy starts the model over (not relearned from the log:
        # tests/service/test_retrain.py)
        await configure(http, modelRetrainDays=0)
        policy = f"{BASE}/configurations/policy"
        changes = [
            ("PUT", policy, {"name": "ua", "arguments": "--cb_explore_adf --epsilon 0.2 -q UA"}),
            ("DELETE", f"{BASE}/model", None),
            ("POST", f"/policies/{LOOP}/reset", None),
            ("DELETE", policy, None),
        ]
        for method, path, body in changes:
            await reward(http, (await rank(http, CONTEXTS[0]))["eventId"], 1.0)  # Online
            assert await decisions(http) > 0
            answer = await http.request(method, path, json=body)
            assert answer.status_code in (200, 204), (path, answer.text)
            assert await decisions(http) == 0, path  # the model started over
            assert await apprentice_metrics(http) == learned, path

        again = (await configure(http, learningMode="Apprentice"))["latestApprenticeModeMetrics"]
        assert (again["numberOfEvents"], again["sumOfRewards"]) == (0, 0.0)
        assert again["startTime"] > learned["startTime"]
