"""``PUT /policies/{name}/snapshot`` with corrupted snapshots of every algorithm: each is a
422 naming ``data`` and none is taken in (issue 16, item 11: it gave 500s and silent 200s)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

import bandit_core
from tests.bandit_core.test_state_fuzz import HOSTILE_POLICY_META, corruptions, sealed
from tests.service.conftest import running

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("algorithm", sorted(bandit_core.POLICIES))
async def test_corrupted_snapshots_are_refused_and_change_nothing(
    make_settings: Any, algorithm: str
) -> None:
    spec = {"algorithm": algorithm, "dimension": 3, "arms": ["a", "b", "c"]}
    async with running(make_settings()) as (_app, http, client):
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        for i in range(4):
            dec = await client.recommend("p", [0.1 * i, 0.5, 1.0], user_id=f"u{i % 2}")
            assert (await client.reward(dec.event_id, float(i % 2))).applied
        before = (await client.export_snapshot("p")).data
        blob = base64.b64decode(before)
        hostile = [sealed({"kind": "policy", "meta": m, "arrays": []}) for m in HOSTILE_POLICY_META]
        seed = sorted(bandit_core.POLICIES).index(algorithm)
        for data in [*corruptions(blob, seed, mutations=20, truncations=5), *hostile]:
            r = await http.put(
                "/policies/p/snapshot", json={"data": base64.b64encode(data).decode()}
            )
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "data"]
        assert (await client.export_snapshot("p")).data == before
        assert (await http.put("/policies/p/snapshot", json={"data": before})).status_code == 200
