"""The console's Apprentice page (docs/console.md, "Apprentice") in process: the matching
share of one decision against its closed form; on a Personalizer loop in Apprentice
mode the page shows the mode, the matching ratio over the decisions served the baseline
(not those before the mode began) and the loop's apprentice metrics as the API reports
them; the switch to Online is the API's, refused to a read-only key, without the token
and for a loop already Online; a float-vector policy is Online; a missing one is 404."""

from __future__ import annotations

import re
from typing import Any

import pytest

from service.usecases.activity import matched_share
from tests.service.conftest import POLICY, running, wait_for
from tests.service.console_client import console_client, csrf_of, sign_in
from tests.service.personalizer.test_modes import BASE, CONTEXTS, LOOP, configure, rank, reward

READONLY_KEY = "read-only-key-0123"
SHARED_SPEC = {
    "algorithm": "hybrid_linucb",
    "params": {"alpha": 0.0, "context_dim": 0},
    "features": {"bits": 8, "interactions": [["*", "*"]]},
    "reward_range": [-1, 1],
    "epsilon": 0.2,
}
ONLINE_RANKS = 6
APPRENTICE_RANKS = 10


def test_the_model_matches_the_baseline_when_no_other_candidate_scores_higher() -> None:
    assert matched_share([3.0, 1.0, 2.0]) == 1.0
    assert matched_share([1.0, 3.0, 2.0]) == 0.0
    assert matched_share([2.0, 2.0, 1.0]) == 0.5  # a tie: the model picks either
    assert matched_share([0.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert matched_share([5.0]) == 1.0


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["embedded"])
async def test_apprentice_page_and_the_switch_to_online(make_settings: Any) -> None:
    settings = make_settings(console_readonly_keys=[READONLY_KEY])
    async with running(settings) as (app, http, _), console_client(app) as browser:
        log = app.state.use_cases.event_log
        assert (await http.put(f"/policies/{LOOP}", json=SHARED_SPEC)).status_code == 200
        for i in range(ONLINE_RANKS):
            await reward(http, (await rank(http, CONTEXTS[i % 2]))["eventId"], float(i % 2))
        await configure(http, learningMode="Apprentice")
        for i in range(APPRENTICE_RANKS):
            await reward(http, (await rank(http, CONTEXTS[i % 2]))["eventId"], 1.0 - i % 2)
        total = ONLINE_RANKS + APPRENTICE_RANKS
        await wait_for(lambda: log.count(LOOP)[0] == total, timeout=30)
        apprentice = log.recent_decisions(LOOP, APPRENTICE_RANKS)  # the latest: Apprentice's
        assert all(d.propensity == 1.0 for d in apprentice)
        expected = sum(matched_share(d.scores) for d in apprentice) / APPRENTICE_RANKS

        await sign_in(browser)
        page = await browser.get(f"/console/policies/{LOOP}/apprentice")
        assert page.status_code == 200
        assert 'id="mode">Apprentice<' in page.text
        assert f"latest {APPRENTICE_RANKS} decisions" in page.text
        assert f'id="matching-ratio">{100 * expected:.1f} %<' in page.text
        config = (await http.get(f"{BASE}/configurations/service")).json()
        metrics = config["latestApprenticeModeMetrics"]
        assert f'id="events">{metrics["numberOfEvents"]}<' in page.text
        assert metrics["numberOfEvents"] == APPRENTICE_RANKS
        assert f'id="matched">{metrics["numberOfImitatedEvents"]}' in page.text
        baseline = metrics["sumOfRewards"] / metrics["numberOfEvents"]
        assert f'id="baseline-reward">{baseline:.4f}<' in page.text

        token = csrf_of(page.text)
        async with console_client(app) as readonly:
            await sign_in(readonly, READONLY_KEY)
            seen = await readonly.get(f"/console/policies/{LOOP}/apprentice")
            assert 'id="online-form"' not in seen.text
            refused = await readonly.post(
                f"/console/policies/{LOOP}/apprentice/online",
                data={"csrf_token": csrf_of(seen.text)},
            )
            assert refused.status_code == 403
        no_token = await browser.post(f"/console/policies/{LOOP}/apprentice/online")
        assert no_token.status_code == 403
        mode = (await http.get(f"{BASE}/configurations/service")).json()["learningMode"]
        assert mode == "Apprentice"

        switched = await browser.post(
            f"/console/policies/{LOOP}/apprentice/online", data={"csrf_token": token}
        )
        assert switched.status_code == 303
        mode = (await http.get(f"{BASE}/configurations/service")).json()["learningMode"]
        assert mode == "Online"
        after = await browser.get(switched.headers["location"])
        assert 'id="switched"' in after.text and 'id="mode">Online<' in after.text
        assert 'id="online-form"' not in after.text
        again = await browser.post(
            f"/console/policies/{LOOP}/apprentice/online", data={"csrf_token": token}
        )
        assert again.status_code == 409 and 'id="mode-error"' in again.text

        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        plain = await browser.get("/console/policies/p/apprentice")
        assert plain.status_code == 200 and re.search(r'id="mode">Online<', plain.text)
        assert (await browser.get("/console/policies/nope/apprentice")).status_code == 404
