"""The console's event page (docs/console.md, "Pages") in process: the scores are shown in
the decision's ranking, the served arm's first, as ``/recommend`` answered them, and
the candidates in the order they were sent."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.service.conftest import POLICY, running, wait_for
from tests.service.console_client import console_client, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]


async def test_scores_follow_the_decisions_ranking(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _), console_client(app) as browser:
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        context = [1.0, 0.0, 0.0]
        for _ in range(3):  # c earns, so the model ranks it above the first candidates
            body = {"policy": "p", "context": context, "arms": [{"id": "c"}]}
            decision = (await http.post("/recommend", json=body)).json()
            await http.post("/reward", json={"event_id": decision["event_id"], "reward": 1.0})
        body = {"policy": "p", "context": context, "explore": False}
        answer = (await http.post("/recommend", json=body)).json()
        assert answer["arm_id"] == "c" != answer["ranking"][1]["arm_id"]
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("p")[0] == 4, timeout=30)
        await sign_in(browser)
        page = (await browser.get(f"/console/events/{answer['event_id']}")).text
        table = re.search(r'<table id="scores">(.*?)</table>', page, re.DOTALL)
        assert table
        shown = [float(v) for v in re.findall(r'<td class="num">(-?[\d.]+)</td></tr>', table[1])]
        assert shown == pytest.approx([r["score"] for r in answer["ranking"]], abs=1e-4)
        assert re.search(r'class="chosen"><td class="num">1</td><td>c</td>', table[1])
        sent = re.search(r'<table id="candidates">(.*?)</table>', page, re.DOTALL)
        assert sent and re.findall(r"<tr[^>]*><td>(\w+)</td>", sent[1]) == ["a", "b", "c"]
