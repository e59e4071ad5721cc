"""The audit trail (service/usecases/audit.py) on the embedded default and on Redis +
PostgreSQL: every change to a policy, its model or its log writes exactly one record
naming who (a hash of the API key, loopback, policies-file, system), what, when and the
changed settings before and after; ``GET /policies/{name}/history`` and ``GET /audit``
serve them oldest first, page by page; every response carries its ``X-Request-ID``."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import time
from typing import Any

import httpx
import pytest

from service.cli import main
from service.settings import get_settings
from service.storage.base import DecisionRecord
from service.storage.partitions import DAY_SECONDS, day_partition
from tests.service.conftest import API_KEY, POLICY, running

pytestmark = pytest.mark.anyio
ACTOR = "key:" + hashlib.sha256(API_KEY.encode()).hexdigest()[:12]
# a config's fields that are not settings (the audit trail records the spec's)
TIMES = {"name", "revision", "created_at", "updated_at", "reset_at", "retrained_from", "declared"}


class Trail:
    """The audit records of one policy read through the API, checked one change at a
    time: :meth:`one` asserts that exactly one record was added since the last check."""

    def __init__(self, app: Any, http: httpx.AsyncClient, policy: str) -> None:
        self.app, self.http, self.policy = app, http, policy
        self.seen: list[dict[str, Any]] = []
        self.request_id: str | None = None

    async def records(self) -> list[dict[str, Any]]:
        assert await asyncio.to_thread(self.app.state.use_cases.sink.flush, 10)
        r = await self.http.get(f"/policies/{self.policy}/history", params={"limit": 1000})
        assert r.status_code == 200, r.text
        return r.json()["records"]

    def headers(self) -> dict[str, str]:
        """A fresh request id for the next change (the record must carry it)."""
        self.request_id = f"change-{len(self.seen)}-{time.monotonic_ns()}"
        return {"X-Request-ID": self.request_id}

    async def one(self, action: str, **expected: Any) -> dict[str, Any]:
        records = await self.records()
        assert records[: len(self.seen)] == self.seen
        added = records[len(self.seen) :]
        assert [r["action"] for r in added] == [action]
        record = added[0]
        assert record["policy"] == self.policy
        assert record["request_id"] == self.request_id
        for key, value in expected.items():
            assert record[key] == value, (key, record)
        self.seen = records
        return record

    async def none(self) -> None:
        assert await self.records() == self.seen


def settings_of(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k not in TIMES}


def counted(metrics_text: str, policy: str, action: str) -> float:
    """``bandit_audit_records_total`` of ``policy`` and ``action`` in a ``/metrics`` text."""
    labels = f'{{action="{action}",policy="{policy}"}}'
    for line in metrics_text.splitlines():
        if line.startswith("bandit_audit_records_total" + labels):
            return float(line.split()[-1])
    return 0.0


async def test_every_native_change_writes_one_record(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        trail = Trail(app, http, "p")
        created = await http.put("/policies/p", json=POLICY, headers=trail.headers())
        # read once p exists: /metrics shows no series of a policy that does not
        updates_before = counted((await http.get("/metrics")).text, "p", "update")
        await trail.one("create", actor=ACTOR, before=None, after=settings_of(created.json()))
        await http.put("/policies/p", json=POLICY, headers=trail.headers())
        await trail.none()  # the same settings: no change
        await http.put("/policies/p", json={**POLICY, "epsilon": 0.2}, headers=trail.headers())
        await trail.one(
            "update", before={"epsilon": created.json()["epsilon"]}, after={"epsilon": 0.2}
        )
        await http.put(
            "/policies/p", json={**POLICY, "epsilon": 0.2, "dimension": 2}, headers=trail.headers()
        )
        await trail.one(
            "update", before={"dimension": 3}, after={"dimension": 2}, detail={"state_reset": True}
        )
        await http.post("/policies/p/arms", json={"arms": ["d"]}, headers=trail.headers())
        await trail.one("update", before={"arms": ["a", "b", "c"]}, after={"arms": list("abcd")})
        await http.post("/policies/p/arms/retire", json={"arms": ["d"]}, headers=trail.headers())
        await trail.one("update", after={"arms": list("abc")}, detail={"retired_arms": ["d"]})
        # an arm that is no registered arm but has state (policy q lists none)
        q_spec = {k: v for k, v in POLICY.items() if k != "arms"}
        q = Trail(app, http, "q")
        await http.put("/policies/q", json=q_spec, headers=q.headers())
        await q.one("create")
        served = await http.post(
            "/recommend", json={"policy": "q", "context": [1.0, 0.0, 0.5], "arms": [{"id": "z"}]}
        )
        assert served.status_code == 200, served.text
        await http.post("/policies/q/arms/retire", json={"arms": ["z"]}, headers=q.headers())
        await q.one("retire_arms", before=None, after=None, detail={"retired_arms": ["z"]})
        reset = await http.post("/policies/p/reset", headers=trail.headers())
        await trail.one("reset", detail={"reset_at": reset.json()["reset_at"]})
        snapshot = (await http.get("/policies/p/snapshot")).json()
        restored = await http.put(
            "/policies/p/snapshot", json={"data": snapshot["data"]}, headers=trail.headers()
        )
        assert restored.status_code == 200, restored.text
        size = len(base64.b64decode(snapshot["data"]))
        await trail.one("snapshot_restore", detail={"arms": 0, "bytes": size})
        model = (await http.get("/policies/p/model")).content
        imported = await http.put("/policies/p/model", content=model, headers=trail.headers())
        assert imported.status_code == 200, imported.text
        await trail.one(
            "model_import", before=None, after=None, detail={"arms": 0, "bytes": len(model)}
        )
        bad = await http.put("/policies/p/model", content=b"not a model", headers=trail.headers())
        assert bad.status_code == 422
        await trail.none()  # a refused change records nothing
        await http.delete("/policies/p/model", headers=trail.headers())
        await trail.one("reset")
        for _ in range(3):
            await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0]})
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10)
        await http.delete("/policies/p/logs", headers=trail.headers())
        await trail.one("log_delete", detail={"deleted_rows": 3})
        updates = counted((await http.get("/metrics")).text, "p", "update")
        assert updates - updates_before == 4
        last = (await http.get("/policies/p")).json()
        await http.delete("/policies/p", headers=trail.headers())
        await trail.one("delete", before=settings_of(last), after=None)
        # the history outlives the policy (its metric series leave /metrics with it); every
        # record is the key's, in time order
        records = await trail.records()
        assert len(records) == 11
        assert counted((await http.get("/metrics")).text, "p", "update") == 0
        assert {r["actor"] for r in records} == {ACTOR}
        assert [r["created_at"] for r in records] == sorted(r["created_at"] for r in records)


async def test_personalizer_changes_are_recorded_as_the_native_ones(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        trail = Trail(app, http, "p")
        http.headers["Ocp-Apim-Subscription-Key"] = API_KEY  # the Personalizer routes read this one
        await http.put("/policies/p", json=POLICY, headers=trail.headers())
        await trail.one("create", actor=ACTOR)
        base = "/loops/p/personalizer/v1.0"
        config = (await http.get(f"{base}/configurations/service")).json()
        changed = {**config, "rewardWaitTime": "PT1H", "logRetentionDays": 3}
        put = await http.put(
            f"{base}/configurations/service", json=changed, headers=trail.headers()
        )
        assert put.status_code == 200, put.text
        record = await trail.one("update", actor=ACTOR)
        assert record["before"]["reward_wait_seconds"] == 600
        assert record["after"]["reward_wait_seconds"] == 3600
        assert record["after"]["personalizer"]["logRetentionDays"] == 3
        policy = {"name": "explore more", "arguments": "--cb_explore_adf --epsilon 0.3"}
        put = await http.put(f"{base}/configurations/policy", json=policy, headers=trail.headers())
        assert put.status_code == 200, put.text
        record = await trail.one("update")
        assert record["after"]["epsilon"] == 0.3
        await http.delete(f"{base}/configurations/policy", headers=trail.headers())
        await trail.one("update")
        model = (await http.get(f"{base}/model")).content
        assert (await http.put(f"{base}/model", content=model, headers=trail.headers())).is_success
        await trail.one("model_import")
        assert (await http.delete(f"{base}/model", headers=trail.headers())).status_code == 204
        await trail.one("reset")
        assert (await http.delete(f"{base}/logs", headers=trail.headers())).status_code == 204
        await trail.one("log_delete", detail={"deleted_rows": 0})
        assert {r["actor"] for r in await trail.records()} == {ACTOR}


async def test_policies_file_overrides_are_recorded_at_start(
    make_settings: Any, backend: str, tmp_path: Any
) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(
        "policies:\n  home:\n    algorithm: linucb\n    dimension: 2\n    epsilon: 0.05\n"
    )
    settings = make_settings(policies_file=path)
    async with running(settings) as (app, http, _):
        trail = Trail(app, http, "home")
        [created] = await trail.records()
        assert (created["action"], created["actor"]) == ("create", "policies-file")
        changed = await http.put(
            "/policies/home", json={"algorithm": "linucb", "dimension": 2, "epsilon": 0.2}
        )
        assert changed.status_code == 200
    # the file edited since it was last applied: its edit overrides the API's value
    path.write_text(path.read_text().replace("epsilon: 0.05", "epsilon: 0.3"))
    async with running(settings) as (app, http, _):
        records = await Trail(app, http, "home").records()
        # the embedded default rebuilds its state from the log first
        rebuilt = [("rebuild", "system")] if backend == "embedded" else []
        assert [(r["action"], r["actor"]) for r in records] == [
            ("create", "policies-file"),
            ("update", ACTOR),
            *rebuilt,
            ("update", "policies-file"),
        ]
        assert (records[-1]["before"], records[-1]["after"]) == (
            {"epsilon": 0.2},
            {"epsilon": 0.3},
        )
        assert records[-1]["request_id"] is None
        assert (await http.get("/policies/home")).json()["epsilon"] == 0.3


async def test_retention_drops_are_recorded_by_the_system(make_settings: Any, backend: str) -> None:
    async with running(make_settings(log_upkeep_interval_seconds=0)) as (app, http, _):
        spec = {**POLICY, "personalizer": {"logRetentionDays": 1}}
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        assert (await http.put("/policies/keep", json=POLICY)).status_code == 200
        use_cases = app.state.use_cases
        now = time.time()
        old = [
            DecisionRecord(
                f"old-{i}",
                "p",
                now - 3 * DAY_SECONDS + i,
                [1.0, 0.0, 0.5],
                [{"id": "a"}],
                "a",
                1.0,
                [0.1],
                1,
            )
            for i in range(10)
        ]
        await asyncio.to_thread(use_cases.event_log.append, old, [])
        await use_cases.log_upkeep.upkeep_once()
        await use_cases.log_upkeep.upkeep_once()  # nothing left to drop: no second record
        records = await Trail(app, http, "p").records()
        assert [(r["action"], r["actor"]) for r in records] == [
            ("create", ACTOR),
            ("retention", "system"),
        ]
        detail = records[-1]["detail"]
        assert now - DAY_SECONDS <= detail["cutoff"] <= time.time() - DAY_SECONDS
        if backend == "embedded":  # SQLite: rows deleted
            assert (detail["dropped_partitions"], detail["deleted_rows"]) == ([], 10)
        else:  # PostgreSQL: the day's partition dropped whole
            day = day_partition("decisions", int(old[0].created_at // DAY_SECONDS)).name
            assert (detail["dropped_partitions"], detail["deleted_rows"]) == ([day], 0)
        assert use_cases.event_log.count("p") == (0, 0)
        assert [r["action"] for r in await Trail(app, http, "keep").records()] == ["create"]


@pytest.mark.parametrize("backend", ["embedded"])
async def test_without_keys_a_loopback_client_acts_as_loopback(make_settings: Any) -> None:
    async with running(make_settings(api_keys=[])) as (app, http, _):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        [record] = await Trail(app, http, "p").records()
        assert (record["action"], record["actor"]) == ("create", "loopback")


async def test_history_pages_in_order(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        for i in range(8):
            put = await http.put("/policies/p", json={**POLICY, "epsilon": i / 10})
            assert put.status_code == 200
        await http.put("/policies/q", json=POLICY)
        everything = await Trail(app, http, "p").records()
        assert [r["action"] for r in everything] == ["create"] + ["update"] * 7
        assert [r["after"]["epsilon"] for r in everything] == [i / 10 for i in range(8)]
        pages, after = [], None
        while True:
            params: dict[str, Any] = {"limit": 3, **({"after": after} if after else {})}
            page = (await http.get("/policies/p/history", params=params)).json()
            pages.append(page["records"])
            after = page["next"]
            if after is None:
                break
        assert [len(p) for p in pages] == [3, 3, 2]
        assert [r for p in pages for r in p] == everything
        since = everything[5]["created_at"]
        later = (await http.get("/policies/p/history", params={"since": since})).json()
        assert later == {"records": everything[5:], "next": None}
        every_policy = (await http.get("/audit", params={"limit": 1000})).json()["records"]
        assert [r["policy"] for r in every_policy] == ["p"] * 8 + ["q"]
        only_q = (await http.get("/audit", params={"policy": "q"})).json()["records"]
        assert only_q == every_policy[-1:]
        for params, field in (({"after": "nope"}, "after"), ({"limit": 0}, "limit")):
            bad = await http.get("/policies/p/history", params=params)
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", field]
        unauthenticated = await http.get("/audit", headers={"Authorization": "Bearer wrong"})
        assert unauthenticated.status_code == 401


@pytest.mark.parametrize("backend", ["embedded"])
async def test_every_response_carries_a_request_id(make_settings: Any) -> None:
    async with running(make_settings()) as (_app, http, _):
        given = await http.get("/healthz", headers={"X-Request-ID": "order-42.retry:1"})
        assert given.headers["X-Request-ID"] == "order-42.retry:1"
        ids = []
        for header in ({}, {"X-Request-ID": "has space"}, {"X-Request-ID": "x" * 129}):
            r = await http.get("/healthz", headers=header)
            assert re.fullmatch("[0-9a-f]{32}", r.headers["X-Request-ID"])
            ids.append(r.headers["X-Request-ID"])
        assert len(set(ids)) == 3
        refused = await http.get("/policies/none", headers={"X-Request-ID": "lost-1"})
        assert (refused.status_code, refused.headers["X-Request-ID"]) == (404, "lost-1")


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_bandit_rebuild_is_recorded_as_the_cli(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings()
    async with running(settings) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        for i in range(4):
            body = {"policy": "p", "context": [1.0, 0.0, i / 4]}
            event_id = (await http.post("/recommend", json=body)).json()["event_id"]
            if i % 2:
                await http.post("/reward", json={"event_id": event_id, "reward": 1.0})
        assert await asyncio.to_thread(app.state.use_cases.sink.flush, 10)
        event_log = app.state.use_cases.event_log
        for name in ("redis_url", "database_url", "data_dir"):
            monkeypatch.setenv(f"BANDIT_{name.upper()}", str(getattr(settings, name)))
        get_settings.cache_clear()
        try:
            assert await asyncio.to_thread(main, ["rebuild", "--policy", "p"]) == 0
        finally:
            get_settings.cache_clear()
        records = event_log.audit_records("p")
    assert [(r.action, r.actor) for r in records] == [("create", ACTOR), ("rebuild", "cli")]
    detail = records[-1].detail or {}
    assert (detail["decisions"], detail["rewards"]) == (4, 2)
    assert 1 <= detail["parts"] <= 3  # the rewarded arms' state parts
