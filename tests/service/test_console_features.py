"""The console's features page (docs/console.md, "Features") in process: a job started
from the form over the log's range shows the API's scores as bars ranked by score, a
context feature with a new value in every decision is flagged and the others are not;
a bad time shows the error beside its field and starts nothing; a read-only key
changes nothing; a missing job is the 404 page. The cardinality rule against counts
made by hand."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import numpy as np
import pytest

from service.storage.base import DecisionRecord
from service.usecases.feature_cardinality import MIN_DESCRIBED, cardinalities
from tests.service.conftest import running, wait_for
from tests.service.console_client import console_client, csrf_of, sign_in

READONLY_KEY = "read-only-key-0123"
DECISIONS = 40
ITEMS = [{"id": i, "features": {"item": {"kind": i}}} for i in ("x", "y")]


def _decision(event_id: str, context: Any, candidates: list[dict[str, Any]]) -> DecisionRecord:
    return DecisionRecord(event_id, "p", 0.0, context, candidates, "a", 1.0, [0.0], 0)


def test_a_feature_is_flagged_when_it_names_nearly_everything_it_describes() -> None:
    n = MIN_DESCRIBED
    decisions = [
        _decision(
            f"e{i}",
            {
                "user": {"tier": i % 3, "_private": i},
                "at": f"2026-11-28T00:00:{i:02d}Z",
                "unix": 1_795_000_000 + i,
            },
            [
                {
                    "id": f"item{j}",
                    "features": {
                        "sku": f"s{j}",
                        "colour": j % 2,
                        "price": j + 0.5,
                        "tags": ["a", "b", "c", "d", "e"][: j % 6],
                    },
                }
                for j in range(n)
            ],
        )
        for i in range(n)
    ]
    found = cardinalities(decisions)
    assert set(found) == {
        ("user", "tier"),
        ("", "at"),
        ("", "unix"),
        ("", "sku"),
        ("", "colour"),
        ("", "price"),
        ("", "tags"),
    }
    assert (found["", "at"].distinct, found["", "at"].described) == (n, n)
    assert found["", "at"].looks_like_id and found["", "sku"].looks_like_id
    assert found["", "unix"].looks_like_id  # numbers, but unix times
    assert (found["", "price"].distinct, found["", "price"].described) == (n, n)
    assert not found["", "price"].looks_like_id  # a number per item: one scaled column
    assert found["", "tags"].distinct == 5  # each tag a column, not each set of tags
    assert not found["", "tags"].looks_like_id
    assert (found["user", "tier"].distinct, found["", "colour"].distinct) == (3, 2)
    assert not found["user", "tier"].looks_like_id and not found["", "colour"].looks_like_id
    few = cardinalities(decisions[: n - 1])
    assert not few["", "at"].looks_like_id  # too few decisions to tell


async def _traffic(http: Any, log: Any) -> None:
    rng = np.random.default_rng(1)
    spec = {"algorithm": "hybrid_linucb", "features": {"bits": 6}, "epsilon": 0.3}
    spec |= {"params": {"alpha": 0.0}, "reward_wait_seconds": 600}
    assert (await http.put("/policies/p", json=spec)).status_code == 200
    for i in range(DECISIONS):
        likes = str(rng.choice(["x", "y"]))
        context = {"user": {"likes": likes}, "session": {"id": f"s-{i}"}}
        body = {"policy": "p", "context": context, "arms": ITEMS}
        decision = (await http.post("/recommend", json=body)).json()
        reward = float(decision["arm_id"] == likes)
        await http.post("/reward", json={"event_id": decision["event_id"], "reward": reward})
    await wait_for(lambda: log.count("p") == (DECISIONS, DECISIONS), timeout=30)


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_job_from_the_form_ranks_the_features_and_flags_an_id(make_settings: Any) -> None:
    settings = make_settings(console_readonly_keys=[READONLY_KEY])
    async with running(settings) as (app, http, _), console_client(app) as browser:
        await _traffic(http, app.state.use_cases.event_log)
        await sign_in(browser)
        listing = await browser.get("/console/policies/p/features")
        assert listing.status_code == 200
        token = csrf_of(listing.text)
        since = re.search(r'id="since" name="since" value="([^"]+)"', listing.text)
        until = re.search(r'id="until" name="until" value="([^"]+)"', listing.text)
        assert since and until
        form = {"csrf_token": token, "name": "all", "since": since[1], "until": until[1]}
        backwards = await browser.post(
            "/console/policies/p/features", data={**form, "until": "2020-01-01T00:00:00Z"}
        )
        assert backwards.status_code == 422 and 'id="until-error"' in backwards.text
        not_a_time = await browser.post(
            "/console/policies/p/features", data={**form, "since": "yesterday"}
        )
        assert not_a_time.status_code == 422 and 'id="since-error"' in not_a_time.text
        async with console_client(app) as readonly:
            await sign_in(readonly, READONLY_KEY)
            seen = await readonly.get("/console/policies/p/features")
            refused = await readonly.post(
                "/console/policies/p/features", data={**form, "csrf_token": csrf_of(seen.text)}
            )
            assert refused.status_code == 403
        assert (await http.get("/policies/p/feature-importances")).json()["jobs"] == []

        created = await browser.post("/console/policies/p/features", data=form)
        assert created.status_code == 303
        target = created.headers["location"]
        deadline = time.monotonic() + 180
        while 'id="status">Running<' in (page := (await browser.get(target)).text):
            assert 'http-equiv="refresh"' in page
            assert time.monotonic() < deadline, "the job did not finish"
            await asyncio.sleep(0.2)
        assert 'id="status">Succeeded<' in page, page
        job_id = target.rsplit("/", 1)[1]
        job = (await http.get(f"/policies/p/feature-importances/{job_id}")).json()
        bars = re.findall(
            r'class="ranked" data-feature="([^"]+)" data-value="([\d.]+)" data-flagged="(\w+)"',
            page,
        )
        expected = sorted(job["feature_scores"], key=lambda s: -s["score"])
        assert [label for label, _, _ in bars] == [
            f"{s['namespace']}.{s['name']}" for s in expected
        ]
        assert [float(v) for _, v, _ in bars] == pytest.approx(
            [s["score"] for s in expected], abs=1e-6
        )
        flagged = {label for label, _, flag in bars if flag == "true"}
        assert flagged == {"session.id"}

        missing = await browser.get("/console/policies/p/features/no-such-job")
        assert missing.status_code == 404
