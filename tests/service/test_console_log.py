"""The console's event-log page (docs/console.md, "Log") in process, on SQLite and on
PostgreSQL: each policy's logged range is the log's and its retention the policy's;
PostgreSQL's day partitions are listed with their sizes and, once analyzed, their rows;
a deletion without the policy's name typed, by a read-only key or without the token
deletes nothing, and with it deletes the policy's whole log."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import sqlalchemy as sa

from service.storage.partitions import DAY_SECONDS, day_partition
from tests.service.conftest import BACKENDS, POLICY, running, wait_for
from tests.service.console_client import console_client, csrf_of, sign_in

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", BACKENDS)]
READONLY_KEY = "read-only-key-0123"
DECISIONS = 8


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


async def test_the_log_page_lists_ranges_partitions_and_deletes_with_confirmation(
    make_settings: Any,
) -> None:
    settings = make_settings(console_readonly_keys=[READONLY_KEY])
    async with running(settings) as (app, http, _), console_client(app) as browser:
        log = app.state.use_cases.event_log
        kept = {**POLICY, "personalizer": {"logRetentionDays": 30}}
        assert (await http.put("/policies/p", json=kept)).status_code == 200
        assert (await http.put("/policies/q", json=POLICY)).status_code == 200
        for policy in ("p", "q"):
            for _ in range(DECISIONS):
                body = {"policy": policy, "context": [1.0, 0.0, 0.5]}
                decision = (await http.post("/recommend", json=body)).json()
                await http.post("/reward", json={"event_id": decision["event_id"], "reward": 1})
        await wait_for(lambda: log.count() == (2 * DECISIONS, 2 * DECISIONS), timeout=30)
        await sign_in(browser)
        page = await browser.get("/console/log")
        assert page.status_code == 200
        first, last = log.time_range("p")
        row = re.search(r'<tr data-policy="p">(.*?)</tr>', page.text, re.DOTALL)
        assert row
        assert f'class="first">{_utc(first)}<' in row[1]
        assert f'class="last">{_utc(last)}<' in row[1]
        assert "30 days: events before" in row[1]
        assert "keeps everything" in page.text  # q has no retention

        if log.partitioned:
            with log.engine.begin() as conn:
                conn.execute(sa.text("ANALYZE decisions"))
            page = await browser.get("/console/log")
            today = day_partition("decisions", int(time.time() // DAY_SECONDS)).name
            listed = re.search(rf'<tr data-partition="{today}">(.*?)</tr>', page.text, re.DOTALL)
            assert listed, f"{today} not listed"
            cells = re.findall(r'<td class="num"[^>]*>([^<]*)<', listed[1])
            assert cells[0] == str(2 * DECISIONS)  # the planner's rows after ANALYZE
            size = re.search(r'data-bytes="(\d+)"', listed[1])
            assert size and int(size[1]) > 0
            assert 'id="not-partitioned"' not in page.text
        else:
            assert 'id="not-partitioned"' in page.text

        token = csrf_of(page.text)
        unconfirmed = await browser.post(
            "/console/log/delete", data={"csrf_token": token, "policy": "p", "confirm": "q"}
        )
        assert unconfirmed.status_code == 422 and "type the policy&#39;s name" in unconfirmed.text
        async with console_client(app) as readonly:
            await sign_in(readonly, READONLY_KEY)
            seen = await readonly.get("/console/log")
            assert seen.status_code == 200 and "Delete log" not in seen.text
            refused = await readonly.post(
                "/console/log/delete",
                data={"csrf_token": csrf_of(seen.text), "policy": "p", "confirm": "p"},
            )
            assert refused.status_code == 403
        no_token = await browser.post("/console/log/delete", data={"policy": "p", "confirm": "p"})
        assert no_token.status_code == 403
        assert log.count("p") == (DECISIONS, DECISIONS)

        deleted = await browser.post(
            "/console/log/delete", data={"csrf_token": token, "policy": "p", "confirm": "p"}
        )
        assert deleted.status_code == 303
        assert log.count("p") == (0, 0) and log.count("q") == (DECISIONS, DECISIONS)
        shown = await browser.get(deleted.headers["location"])
        assert f"Deleted the log of p: {2 * DECISIONS} rows." in shown.text
        missing = await browser.post(
            "/console/log/delete", data={"csrf_token": token, "policy": "nope", "confirm": "x"}
        )
        assert missing.status_code == 404
