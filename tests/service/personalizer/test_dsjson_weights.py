"""The importance weights of imported rewards (``service.storage.dsjson``;
docs/console.md, "Baseline and random"): decisions served by a Personalizer loop among
candidate lists of changing order and length (some with an excluded action), exported
with ``bandit export-log`` and imported with ``bandit import-log`` into SQLite and
PostgreSQL, give the event log's rollups the same IPS sums of the baseline and of
uniform random as the log that served them, every reward counted as weighted."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from service.cli import main
from service.settings import get_settings
from service.storage.sql_log import SqlEventLog
from tests.databases import database
from tests.service.conftest import running
from tests.service.loop_logs import loop_log

LOOP = "shop"
ITEMS = ("x", "y", "z", "w")
BASE = f"/loops/{LOOP}/personalizer/v1.0"
DECISIONS = 90


def _ips_sums(url: str, since: float, until: float) -> list[float]:
    """The rollups' rewards, weighted rewards and sums (and sums of squares) of ``r·w``
    for the baseline's and random's weights, over ``[since, until)``."""
    log = SqlEventLog(url)
    try:
        activity = log.activity(LOOP, since, until, 60.0)
    finally:
        log.close()
    sums = [0.0] * 6
    for b in activity.rewards:
        terms = (b.rewards, b.weighted, b.baseline_total, b.baseline_squares, b.random_total)
        sums = [a + v for a, v in zip(sums, (*terms, b.random_squares), strict=True)]
    return sums


async def _serve(settings: Any) -> dict[str, Any]:
    """Ranks among 2 to 4 actions in turning orders, a fifth of them with the first
    excluded, most rewarded; the loop's stored settings."""
    rng = np.random.default_rng(3)
    async with running(settings) as (app, http, _):
        put = await http.put(
            f"/policies/{LOOP}",
            json={"algorithm": "linucb", "features": {"bits": 4}, "epsilon": 0.5},
        )
        assert put.status_code == 200, put.text
        for i in range(DECISIONS):
            turned = ITEMS[i % 4 :] + ITEMS[: i % 4]
            body: dict[str, Any] = {
                "contextFeatures": [{"shopper": {"n": i % 5}}],
                "actions": [{"id": t, "features": [{"item": {"name": t}}]} for t in turned][
                    : 2 + i % 3
                ],
            }
            if i % 5 == 0:
                body["excludedActions"] = [turned[0]]
            rank = await http.post(f"{BASE}/rank", json=body)
            assert rank.status_code == 201, rank.text
            if i % 7 == 6:
                continue  # not rewarded within the test: exported without a reward
            event = rank.json()["eventId"]
            value = float(rng.random())
            reward = await http.post(f"{BASE}/events/{event}/reward", json={"value": value})
            assert reward.status_code == 204, reward.text
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10.0)
        return dict(app.state.use_cases.event_log.policies()[LOOP])


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["embedded"])
@pytest.mark.parametrize("target", ["sqlite", "postgresql"])
async def test_imported_rewards_carry_the_weights_of_the_served_ones(
    make_settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    settings = make_settings()
    since = math.floor(time.time() / 60) * 60 - 60
    config = await _serve(settings)
    until = math.ceil(time.time() / 60) * 60 + 60
    exported = tmp_path / "served.json"
    monkeypatch.setenv("BANDIT_DATABASE_URL", settings.log_url)
    monkeypatch.setenv("BANDIT_DATA_DIR", str(settings.data_dir))
    get_settings.cache_clear()
    assert (
        main(["export-log", "--format", "dsjson", "--loop", LOOP, "--output", str(exported)]) == 0
    )

    with (
        database(target, tmp_path / "imported") as url,
        loop_log(url, tmp_path / "imported", monkeypatch, LOOP, config),
    ):
        assert (
            main(
                [
                    "import-log",
                    "--format",
                    "dsjson",
                    "--no-progress",
                    "--loop",
                    LOOP,
                    str(exported),
                ]
            )
            == 0
        )
        served, imported = (
            _ips_sums(settings.log_url, since, until),
            _ips_sums(url, since, until),
        )
    rewarded = DECISIONS - DECISIONS // 7
    assert served[:2] == [rewarded, rewarded]  # every served reward carries its weights
    assert imported[:2] == served[:2]
    assert imported[2:] == pytest.approx(served[2:], rel=1e-9)
    assert min(served[2:]) > 0.0
