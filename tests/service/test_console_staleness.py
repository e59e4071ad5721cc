"""The policy page's staleness of a folded model (docs/console.md, "Pages") in process, on
the embedded default and on Redis + PostgreSQL: the rewards waiting for a fold and how
long the oldest waited, as ``GET /policies/{name}/model/properties`` reports them; the
page itself folds nothing; none after a fold; a policy learning at each reward shows no
staleness."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from tests.service.conftest import POLICY, running
from tests.service.console_client import console_client, sign_in
from tests.service.test_folds import NAME, NO_LOOP, SPEC, decisions

pytestmark = pytest.mark.anyio


def _staleness(html: str) -> tuple[int, float]:
    """The page's pending rewards and the oldest one's wait in seconds."""
    pending = re.search(r'id="pending-rewards">(\d+)<', html)
    waited = re.search(r'id="staleness-seconds" data-seconds="([0-9.]+)"', html)
    assert pending and waited, "no staleness on the page"
    return int(pending.group(1)), float(waited.group(1))


async def test_the_policy_page_shows_the_rewards_waiting_for_a_fold(make_settings: Any) -> None:
    async with running(make_settings(**NO_LOOP)) as (app, http, _), console_client(app) as browser:
        spec = {**SPEC, "model_update_interval": 3600.0}
        assert (await http.put(f"/policies/{NAME}", json=spec)).status_code == 200
        ids = await decisions(http, 5)
        await sign_in(browser)
        url = f"/console/policies/{NAME}"
        assert _staleness((await browser.get(url)).text) == (0, 0.0)
        started = time.time()
        for event_id in ids:
            sent = await http.post("/reward", json={"event_id": event_id, "reward": 0.5})
            assert sent.status_code == 200 and sent.json()["applied"], sent.text
        await asyncio.sleep(0.2)
        for _ in range(2):  # the page folds nothing: the second view sees the same rewards
            page = await browser.get(url)
            assert page.status_code == 200, page.text
            pending, waited = _staleness(page.text)
            assert pending == len(ids)
            assert 0.2 <= waited <= time.time() - started
        properties = (await http.get(f"/policies/{NAME}/model/properties")).json()
        assert properties["pending_rewards"] == len(ids)
        assert await app.state.use_cases.folds.fold(NAME) == len(ids)
        assert _staleness((await browser.get(url)).text) == (0, 0.0)

        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        plain = await browser.get("/console/policies/p")
        assert plain.status_code == 200 and 'id="staleness"' not in plain.text
