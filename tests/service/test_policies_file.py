"""The policies file at start (service/usecases/policies_file.py, docs/operations.md
"The policies file and the API"): it creates what does not exist, applies a field it
changed since it last applied it (logged with policy, field, before and after), keeps a
setting changed through the API, and never resets a policy with history. Each start is a
new process's lifespan; on the embedded default the store starts empty and the policy
comes back from the log first."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.service.conftest import POLICY, running

pytestmark = pytest.mark.anyio


def _declare(path: Path, **fields: Any) -> None:
    path.write_text(yaml.safe_dump({"policies": {"p": {**POLICY, **fields}}}))


async def _learn(http: Any) -> None:
    dec = (await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})).json()
    r = await http.post("/reward", json={"event_id": dec["event_id"], "reward": 1.0})
    assert r.status_code == 200, r.text


async def test_a_setting_changed_through_the_api_survives_a_restart(
    make_settings: Any, tmp_path: Path
) -> None:
    path = tmp_path / "policies.yaml"
    _declare(path, epsilon=0.1)
    settings = make_settings(policies_file=path)
    async with running(settings) as (_app, http, _):
        created = (await http.get("/policies/p")).json()
        assert created["declared"]["epsilon"] == 0.1
        await _learn(http)
        changed = {**POLICY, "epsilon": 0.05, "personalizer": {"logRetentionDays": 30}}
        assert (await http.put("/policies/p", json=changed)).status_code == 200
    async with running(settings) as (_app, http, _):
        info = (await http.get("/policies/p")).json()
        stats = (await http.get("/policies/p/stats")).json()
    assert (info["epsilon"], info["personalizer"]) == (0.05, {"logRetentionDays": 30})
    assert info["reset_at"] == created["reset_at"] and stats["rewards"] == 1


async def test_a_field_edited_in_the_file_is_applied_and_logged(
    make_settings: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policies.yaml"
    _declare(path, epsilon=0.1)
    settings = make_settings(policies_file=path)
    async with running(settings) as (_app, http, _):
        await _learn(http)
        changed = {**POLICY, "epsilon": 0.05, "personalizer": {"logRetentionDays": 30}}
        assert (await http.put("/policies/p", json=changed)).status_code == 200
        before = (await http.get("/policies/p")).json()
    _declare(path, epsilon=0.3)
    with caplog.at_level(logging.INFO, logger="bandit.service"):
        async with running(settings) as (_app, http, _):
            info = (await http.get("/policies/p")).json()
            stats = (await http.get("/policies/p/stats")).json()
    assert info["epsilon"] == 0.3  # edited in the file: applied
    assert info["personalizer"] == {"logRetentionDays": 30}  # the file did not change it
    assert info["reset_at"] == before["reset_at"] and stats["rewards"] == 1
    assert "policies file overrides policy 'p' epsilon: 0.05 -> 0.3" in caplog.text
    assert "policy 'p' keeps personalizer={'logRetentionDays': 30}" in caplog.text


async def test_an_engine_change_in_the_file_never_resets_a_policy_with_history(
    make_settings: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policies.yaml"
    _declare(path)
    settings = make_settings(policies_file=path)
    async with running(settings) as (_app, http, _):
        await _learn(http)
        before = (await http.get("/policies/p/stats")).json()
    _declare(path, params={"alpha": 2.0}, reward_wait_seconds=60)
    with caplog.at_level(logging.WARNING, logger="bandit.service"):
        async with running(settings) as (_app, http, _):
            info = (await http.get("/policies/p")).json()
            after = (await http.get("/policies/p/stats")).json()
    assert info["params"] == POLICY["params"]  # not applied: it would reset the policy
    assert info["reward_wait_seconds"] == 60  # the rest of the edit is applied
    assert info["declared"]["params"] == POLICY["params"]  # so it is reported again
    assert after["arms"] == before["arms"] and after["rewards"] == 1
    assert "policy 'p' has learned state; not applied" in caplog.text
    assert "params={'alpha': 2.0}" in caplog.text


async def test_an_engine_change_in_the_file_applies_to_a_policy_without_history(
    make_settings: Any, tmp_path: Path
) -> None:
    path = tmp_path / "policies.yaml"
    _declare(path)
    settings = make_settings(policies_file=path)
    async with running(settings) as (_app, http, _):
        created = (await http.get("/policies/p")).json()
    _declare(path, params={"alpha": 2.0})
    async with running(settings) as (_app, http, _):
        info = (await http.get("/policies/p")).json()
    assert info["params"] == {"alpha": 2.0} and info["declared"]["params"] == {"alpha": 2.0}
    assert info["reset_at"] > created["reset_at"]
