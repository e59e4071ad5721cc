"""The console's event page names each feature's contribution ``theta_j * x_j`` to the
chosen arm's score (docs/console.md, "Event"): for a decision made by the model as it
is (nothing learned since), with ``alpha = 0`` (the score is its mean), the
contributions sum to the score the log holds, for float vectors named by
``feature_names`` and for JSON features named by the featurizer; a policy whose score
is not linear shows none."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import numpy as np
import pytest

from tests.service.conftest import running
from tests.service.console_client import console_client, sign_in

pytestmark = pytest.mark.anyio

ARMS = ["a", "b", "c"]
POLICIES: dict[str, dict[str, Any]] = {
    "floats": {
        "algorithm": "linucb",
        "dimension": 3,
        "feature_names": ["age", "tenure"],
        "arms": ARMS,
        "params": {"alpha": 0.0, "epsilon": 0.0},
    },
    "json": {
        "algorithm": "hybrid_linucb",
        "features": {"bits": 6, "interactions": [["*", "*"]]},
        "params": {"alpha": 0.0, "epsilon": 0.0},
    },
    "random": {"algorithm": "random", "dimension": 3, "arms": ARMS},
}


def _request(policy: str, i: int) -> dict[str, Any]:
    if policy == "json":
        return {
            "context": {"user": {"tier": ["gold", "silver"][i % 2], "visits": float(i % 5)}},
            "arms": [
                {"id": a, "features": {"item": {"cat": a, "price": 1.0 + j}}}
                for j, a in enumerate(ARMS)
            ],
        }
    return {
        "context": [float(i % 4), float(i % 3) / 2],
        "arms": [{"id": a, "features": [float(j) - 1.0]} for j, a in enumerate(ARMS)],
    }


def _contributions(html: str) -> tuple[dict[str, float], float]:
    rows = re.findall(
        r'<tr data-feature="([^"]+)">.*?<td class="num contribution">([-0-9.e]+)</td>', html
    )
    total = re.search(r'id="contribution-sum">([-0-9.e]+)<', html)
    assert total is not None
    return {name: float(value) for name, value in rows}, float(total.group(1))


async def test_the_contributions_sum_to_the_logged_score_of_the_unchanged_model(
    make_settings: Any,
) -> None:
    rng = np.random.default_rng(5)
    async with running(make_settings()) as (app, http, client):
        for name, spec in POLICIES.items():
            assert (await http.put(f"/policies/{name}", json=spec)).status_code == 200, name
        last: dict[str, str] = {}
        for i in range(30):
            for name in POLICIES:
                decision = await client.recommend(name, **_request(name, i))
                last[name] = decision.event_id
                if i < 29:  # the last decision is made by the model as it stays
                    assert (await client.reward(decision.event_id, float(rng.random()))).applied
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10)
        async with console_client(app) as browser:
            assert (await sign_in(browser)).status_code == 303
            pages = {n: (await browser.get(f"/console/events/{e}")).text for n, e in last.items()}
        logged = {
            n: await asyncio.to_thread(app.state.use_cases.event_log.event_trail, e)
            for n, e in last.items()
        }
    for name in ("floats", "json"):
        contributions, total = _contributions(pages[name])
        assert total == pytest.approx(logged[name].decision.scores[0], abs=2e-6)
        assert sum(contributions.values()) == pytest.approx(total, abs=1e-5)
        assert any(c != 0.0 for c in contributions.values())
    floats, _ = _contributions(pages["floats"])
    assert set(floats) <= {"age", "tenure", "x[2]"} and "x[2]" in floats
    names, _ = _contributions(pages["json"])
    assert any("tier" in n for n in names) and any("price" in n for n in names)
    assert 'id="contributions"' not in pages["random"]
