"""The HTTP contract: field names, idempotency, deferred activation, administration,
and the table of bad inputs (each a 4xx naming the field, nothing written)."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import bandit_core
from bandit_core.linear import LinearArmState
from bandit_core.shared_model import SharedModelPolicy
from service.api.app import YOUNG_GC_THRESHOLD
from service.schemas import RankedArm, RecommendResponse
from service.storage.base import StoreUnavailableError
from service.usecases.events import PendingEvent, event_key
from tests.service.conftest import POLICY, running, wait_for

pytestmark = pytest.mark.anyio


async def _counts(app: Any, policy: str) -> tuple[int, int]:
    use_cases = app.state.use_cases
    await asyncio.to_thread(use_cases.sink.flush, 5.0)
    return await asyncio.to_thread(use_cases.event_log.count, policy)


async def _state(http: Any, app: Any, policy: str = "p") -> tuple[Any, tuple[int, int]]:
    stats = (await http.get(f"/policies/{policy}/stats")).json()
    return stats, await _counts(app, policy)


def _is_the_model(body: dict[str, Any]) -> None:
    """The service writes /recommend's JSON itself: it must be what the documented
    model would write, field for field and in its order."""
    assert list(body) == list(RecommendResponse.model_fields)
    assert all(list(x) == list(RankedArm.model_fields) for x in body["ranking"])
    assert RecommendResponse.model_validate(body).model_dump(mode="json") == body


async def test_recommend_then_reward_contract(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        r = await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.5]})
        assert r.status_code == 200
        body = r.json()
        assert set(body) >= {
            "event_id",
            "arm_id",
            "ranking",
            "policy",
            "algorithm",
            "model_version",
        }
        assert (
            len(body["event_id"]) == 32 and int(body["event_id"], 16) >= 0
        )  # 128 random bits, hex
        assert body["policy"] == "p" and body["algorithm"] == "linucb"
        _is_the_model(body)
        ranking = body["ranking"]
        assert ranking[0]["arm_id"] == body["arm_id"]
        assert sorted(x["arm_id"] for x in ranking) == ["a", "b", "c"]
        assert all(set(x) >= {"arm_id", "score", "propensity", "width"} for x in ranking)
        assert sum(x["propensity"] for x in ranking) == pytest.approx(1.0)

        first = await http.post("/reward", json={"event_id": body["event_id"], "reward": 1.0})
        assert first.status_code == 200
        assert first.json() == {
            "event_id": body["event_id"],
            "arm_id": body["arm_id"],
            "reward": 1.0,
            "applied": True,
            "status": "applied",
            "ignored_reward": None,
        }
        stats_once, counts_once = await _state(http, app)
        repeat = await http.post("/reward", json={"event_id": body["event_id"], "reward": 1.0})
        assert repeat.status_code == 200
        assert repeat.json() == {
            **first.json(),
            "applied": False,
            "status": "already_rewarded",
            "ignored_reward": None,
        }
        conflicting = await http.post("/reward", json={"event_id": body["event_id"], "reward": 0.0})
        assert conflicting.status_code == 200
        assert conflicting.json() == {
            **first.json(),
            "applied": False,
            "status": "conflicting_reward",
            "ignored_reward": 0.0,
        }
        stats_twice, counts_twice = await _state(http, app)
        assert stats_twice == stats_once and counts_twice == counts_once == (1, 1)
        arm = stats_once["arms"][body["arm_id"]]
        assert arm == {**arm, "pulls": 1, "rewarded": 1, "reward_sum": 1.0, "mean_reward": 1.0}

        # The learned model moves the next greedy choice for the same context.
        again = await http.post(
            "/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.5], "explore": False}
        )
        assert again.json()["arm_id"] == body["arm_id"]
        assert again.json()["model_version"] > body["model_version"]


async def test_client_event_id_repeat_returns_the_original(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        req = {"policy": "p", "context": [0.1, 0.2, 0.3], "event_id": "order-42"}
        first = await http.post("/recommend", json=req)
        # the same body, keys in another order and a default spelled out: the same request
        same = {"explore": True, "event_id": "order-42", "context": [0.1, 0.2, 0.3], "policy": "p"}
        second = await http.post("/recommend", json=same)
        assert first.status_code == second.status_code == 200
        assert second.json() == first.json()
        assert await _counts(app, "p") == (1, 0)


@pytest.mark.parametrize(
    "change",
    [{"context": [9.0, 9.0, 9.0]}, {"top_k": 1}, {"explore": False}, {"arms": [{"id": "a"}]}],
)
async def test_client_event_id_reused_with_another_body_is_409(
    make_settings: Any, change: dict[str, Any]
) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        req = {"policy": "p", "context": [0.1, 0.2, 0.3], "event_id": "order-42"}
        first = await http.post("/recommend", json=req)
        reused = await http.post("/recommend", json={**req, **change})
        assert first.status_code == 200 and reused.status_code == 409
        assert "event_id 'order-42'" in reused.json()["detail"]
        assert "different request body" in reused.json()["detail"]
        assert (await http.post("/recommend", json=req)).json() == first.json()
        assert await _counts(app, "p") == (1, 0)


async def test_top_k_exclude_named_features_and_arm_features(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        spec = {**POLICY, "dimension": 4, "feature_names": ["age", "hour"], "arms": None}
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        arms = [{"id": a, "features": [float(i), 1.0]} for i, a in enumerate("wxyz")]
        r = await http.post(
            "/recommend",
            json={
                "policy": "p",
                "context": {"hour": 0.5, "age": 0.3},
                "arms": arms,
                "exclude": ["x"],
                "top_k": 2,
            },
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["ranking"]) == 2 and "x" not in [a["arm_id"] for a in body["ranking"]]
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
        (event,) = list(app.state.use_cases.event_log.iter_events("p"))
        features = {c["id"]: c["features"] for c in event.decision.candidates}
        assert features["w"] == [
            0.3,
            0.5,
            0.0,
            1.0,
        ]  # context in feature_names order, then the arm's


async def test_deferred_activation(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json={**POLICY, "reward_wait_seconds": 0.3})
        ctx = {"policy": "p", "context": [1.0, 0.0, 0.0], "defer_activation": True}
        never = (await http.post("/recommend", json=ctx)).json()
        later = (await http.post("/recommend", json=ctx)).json()
        assert never["activated"] is False
        r = await http.post("/reward", json={"event_id": later["event_id"], "reward": 1.0})
        assert r.status_code == 409 and "activate" in r.json()["detail"]
        assert (await http.post(f"/events/{later['event_id']}/activate")).json()[
            "activated"
        ] is True
        assert (
            await http.post("/reward", json={"event_id": later["event_id"], "reward": 1.0})
        ).status_code == 200
        await asyncio.sleep(0.6)  # the sweeper expires the never-activated event: no learning
        stats = (await http.get("/policies/p/stats")).json()
        assert stats["rewards"] == 1 and stats["default_rewards"] == 0
        assert sum(a["rewarded"] for a in stats["arms"].values()) == 1
        r = await http.post("/reward", json={"event_id": never["event_id"], "reward": 1.0})
        assert r.status_code == 409
        assert await _counts(app, "p") == (2, 1)


async def test_an_activation_and_its_deadline_commit_together(make_settings: Any) -> None:
    """The deadline of an activated event is set by the commit that activates it: a
    store whose every call after that commit fails (its separate ``schedule`` too) still
    holds the event activated on its new deadline, ``reward_wait_seconds`` after the
    activation. A commit that fails writes neither: the event stays deferred on the
    deadline its decision set."""
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json={**POLICY, "reward_wait_seconds": 600})
        ctx = {"policy": "p", "context": [1.0, 0.0, 0.0], "defer_activation": True}
        event_id = (await http.post("/recommend", json=ctx)).json()["event_id"]
        store, rewards = app.state.use_cases.store, app.state.use_cases.rewards
        now = time.time()
        rewards.clock = lambda: now + 3600.0  # activated an hour after the decision
        transact = store.transact
        down = [False]

        async def down_after_commit(*args: Any, **kwargs: Any) -> dict[str, int]:
            if down[0]:
                raise StoreUnavailableError("connection reset by peer")
            out = await transact(*args, **kwargs)
            down[0] = True  # the store is gone once the commit returned
            return out

        async def unreachable(*args: Any, **kwargs: Any) -> None:
            raise StoreUnavailableError("connection reset by peer")

        def activated() -> bool:
            return bool(PendingEvent.from_json(raw[event_key(event_id)].data).activated)

        store.schedule = unreachable
        try:
            store.transact, down[0] = down_after_commit, True  # the commit itself fails
            r = await http.post(f"/events/{event_id}/activate")
            assert r.status_code == 503, r.text
            raw = await store.read("p", [event_key(event_id)], {})
            assert not activated()
            assert await store.due_events("p", now + 601, 10) == [event_id]
            down[0] = False
            r = await http.post(f"/events/{event_id}/activate")
        finally:
            del store.transact, store.schedule
        assert r.status_code == 200 and r.json()["activated"] is True, r.text
        raw = await store.read("p", [event_key(event_id)], {})
        assert activated()
        assert await store.due_events("p", now + 4199, 10) == []
        assert await store.due_events("p", now + 4201, 10) == [event_id]
        r = await http.post("/reward", json={"event_id": event_id, "reward": 1.0})
        assert r.status_code == 200 and r.json()["applied"], r.text


async def test_default_reward_then_reward_is_409(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put(
            "/policies/p", json={**POLICY, "reward_wait_seconds": 0.1, "default_reward": 0.25}
        )
        ev = (
            await http.post("/recommend", json={"policy": "p", "context": [1.0, 1.0, 1.0]})
        ).json()
        await wait_for(lambda: app.state.use_cases.event_log.count("p")[1] == 1)
        r = await http.post("/reward", json={"event_id": ev["event_id"], "reward": 1.0})
        assert r.status_code == 409 and "defaulted" in r.json()["detail"]
        stats = (await http.get("/policies/p/stats")).json()
        assert stats["default_rewards"] == 1
        assert stats["arms"][ev["arm_id"]]["reward_sum"] == 0.25


async def test_policy_administration(make_settings: Any) -> None:
    async with running(make_settings()) as (_app, http, client):
        info = await client.put_policy("p", POLICY)
        assert info.name == "p" and info.arms == ["a", "b", "c"]
        assert [p.name for p in await client.list_policies()] == ["p"]
        assert (await client.get_policy("p")).revision == info.revision
        await client.add_arms("p", ["d"])
        assert (await client.get_policy("p")).arms == ["a", "b", "c", "d"]
        dec = await client.recommend("p", [1.0, 0.0, 0.0], arms=["d"])
        assert (await client.reward(dec.event_id, 1.0)).applied
        snap = await client.export_snapshot("p")
        await client.retire_arms("p", ["d"])
        r = await http.post(
            "/recommend", json={"policy": "p", "context": [1, 0, 0], "arms": [{"id": "d"}]}
        )
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "arms", 0, "id"]
        assert (
            "d" not in (await client.stats("p")).arms
            or (await client.stats("p")).arms["d"].rewarded == 0
        )
        await client.add_arms("p", ["d"])
        await client.import_snapshot("p", snap.data)
        assert (await client.stats("p")).arms["d"].rewarded == 1
        await client.reset("p")
        assert (await client.stats("p")).arms["d"].rewarded == 0
        await client.delete_policy("p")
        assert (await http.get("/policies/p")).status_code == 404
        assert (
            await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})
        ).status_code == 404


FRESH_POLICIES = 30


@pytest.mark.parametrize("algorithm", sorted(bandit_core.POLICIES))
async def test_every_registered_algorithm_serves_learns_and_round_trips(
    make_settings: Any, algorithm: str
) -> None:
    """Thirty fresh policies each serve a first request and learn its reward, so a fault
    showing once in a few runs (HARE's NaN from an empty contraction, issue 16) cannot
    hide; then one policy learns 20 rewards and round-trips its snapshot."""
    spec = {"algorithm": algorithm, "dimension": 3, "arms": ["a", "b", "c"]}
    rng = np.random.default_rng(1)
    async with running(make_settings()) as (_app, http, client):
        for n in range(FRESH_POLICIES):
            assert (await http.put(f"/policies/fresh{n}", json=spec)).status_code == 200
            first = await http.post(
                "/recommend",
                json={"policy": f"fresh{n}", "context": rng.random(3).tolist(), "user_id": "u"},
            )
            assert first.status_code == 200, (n, first.text)
            assert (await client.reward(first.json()["event_id"], 1.0)).applied
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        for i in range(20):
            dec = await client.recommend("p", rng.random(3).tolist(), user_id=f"u{i % 3}")
            assert dec.algorithm == algorithm
            assert (await client.reward(dec.event_id, float(i % 2))).applied
        stats = await client.stats("p")
        if issubclass(
            bandit_core.POLICIES[algorithm], SharedModelPolicy
        ):  # no per-arm part: policy-wide counters
            assert stats.policy_stats == {"rewarded": 20.0, "reward_sum": 10.0}
        else:
            assert sum(a.rewarded for a in stats.arms.values()) == 20
            assert sum(a.reward_sum for a in stats.arms.values()) == 10.0
        if algorithm == "lnucb_ta":  # the per-arm exploration weight is reported and exported
            assert all(a.alpha is not None and a.alpha >= 0 for a in stats.arms.values())
            assert 'bandit_lnucb_ta_alpha{arm="a",policy="p"}' in (await http.get("/metrics")).text
        snap = await client.export_snapshot("p")
        await client.reset("p")
        assert sum(a.rewarded for a in (await client.stats("p")).arms.values()) == 0
        await client.import_snapshot("p", snap.data)
        restored = await client.stats("p")
        assert {k: v.rewarded for k, v in restored.arms.items()} == {
            k: v.rewarded for k, v in stats.arms.items()
        }
        assert restored.policy_stats == stats.policy_stats


async def test_hybrid_linucb_updates_the_arm_and_the_shared_part_together(
    make_settings: Any,
) -> None:
    """With a per-arm part a reward writes ``arm:<id>`` and ``shared`` in one transaction:
    the per-arm and the policy-wide counters agree."""
    spec = {
        "algorithm": "hybrid_linucb",
        "dimension": 3,
        "params": {"context_dim": 1},
        "arms": ["a", "b"],
    }
    async with running(make_settings()) as (_app, http, client):
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        for i in range(12):
            dec = await client.recommend("p", [1.0, 0.0, 1.0])
            assert (await client.reward(dec.event_id, float(i % 3 == 0))).applied
        stats = await client.stats("p")
        assert sum(a.rewarded for a in stats.arms.values()) == 12 == stats.policy_stats["rewarded"]
        assert (
            sum(a.reward_sum for a in stats.arms.values())
            == 4.0
            == stats.policy_stats["reward_sum"]
        )


async def test_guardrailed_policy(make_settings: Any) -> None:
    spec = {
        "algorithm": "guardrailed_linucb",
        "dimension": 2,
        "feature_names": ["age", "score"],
        "arms": ["beer", "juice", "water"],
        "safe_arm": "water",
        "guardrails": [
            {
                "type": "feature_threshold",
                "feature": "age",
                "op": "<",
                "value": 18,
                "arms": ["beer", "juice"],
            }
        ],
    }
    async with running(make_settings()) as (_app, http, _):
        assert (await http.put("/policies/g", json=spec)).status_code == 200
        minor = (
            await http.post(
                "/recommend", json={"policy": "g", "context": {"age": 16, "score": 1.0}}
            )
        ).json()
        assert minor["arm_id"] == "water"
        assert minor["guardrail"]["safe_arm_served"] is True
        _is_the_model(minor)
        assert set(minor["guardrail"]["blocked"]) == {"beer", "juice"}
        adult = (
            await http.post(
                "/recommend", json={"policy": "g", "context": {"age": 30, "score": 1.0}}
            )
        ).json()
        assert adult["guardrail"]["blocked"] == {}
        stats = (await http.get("/policies/g/stats")).json()
        # The unconstrained argmax (a cold tie among all three) was blocked with probability 2/3.
        assert stats["decisions"] == 2 and stats["delta_G"] in (0.0, 0.5)
        assert stats["policy_stats"]["decisions"] == 2
        assert (
            await http.post("/reward", json={"event_id": minor["event_id"], "reward": 1})
        ).status_code == 200
        # Every candidate blocked and the safe arm not among them: the engine's error,
        # answered 422 naming the candidates field and the engine error's class.
        r = await http.post(
            "/recommend",
            json={
                "policy": "g",
                "context": {"age": 16, "score": 1.0},
                "arms": [{"id": "beer"}, {"id": "juice"}],
            },
        )
        assert r.status_code == 422
        (detail,) = r.json()["detail"]
        assert detail["loc"] == ["body", "arms"] and detail["type"] == "NoEligibleArmError", detail


async def test_policies_file_is_loaded_at_start(make_settings: Any, tmp_path: Any) -> None:
    path = tmp_path / "policies.yaml"
    path.write_text(
        "policies:\n"
        "  home:\n"
        "    algorithm: epsilon_greedy\n"
        "    dimension: 1\n"
        "    epsilon: 0.2\n"
        "    arms: [x, y]\n"
    )
    async with running(make_settings(policies_file=path)) as (_app, http, _):
        info = (await http.get("/policies/home")).json()
        assert (info["algorithm"], info["epsilon"], info["arms"]) == (
            "epsilon_greedy",
            0.2,
            ["x", "y"],
        )
        r = await http.post("/recommend", json={"policy": "home", "context": [1.0]})
        assert r.status_code == 200 and r.json()["arm_id"] in {"x", "y"}
    async with running(make_settings(policies_file=path)) as (_app, http, _):  # a restart keeps it
        assert (await http.get("/policies/home")).json()["revision"] == info["revision"]


EXAMPLE_POLICIES = Path(__file__).resolve().parents[2] / "deploy" / "policies.example.yaml"


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_documented_policies_file_example_serves(make_settings: Any) -> None:
    operations = (EXAMPLE_POLICIES.parents[1] / "docs" / "operations.md").read_text()
    assert EXAMPLE_POLICIES.read_text() in operations  # the doc shows the tested file verbatim
    async with running(make_settings(policies_file=EXAMPLE_POLICIES)) as (_app, http, _):
        listed = {p["name"]: p for p in (await http.get("/policies")).json()["policies"]}
        assert sorted(listed) == ["banner", "drinks", "home"]
        assert (listed["home"]["epsilon"], listed["banner"]["epsilon"]) == (0.05, 0.1)
        contexts = {"home": [0.1] * 6, "drinks": {"age": 16, "score": 0.3}, "banner": [1.0]}
        for name, context in contexts.items():
            r = await http.post("/recommend", json={"policy": name, "context": context})
            assert r.status_code == 200, r.text
            assert r.json()["arm_id"] != "beer"  # the guardrail holds for the minor


async def test_changing_epsilon_keeps_what_was_learned(make_settings: Any) -> None:
    async with running(make_settings()) as (_app, http, _):
        before = (await http.put("/policies/p", json=POLICY)).json()
        ev = (await http.post("/recommend", json=_recommend())).json()
        await http.post("/reward", json={"event_id": ev["event_id"], "reward": 1.0})
        after = (await http.put("/policies/p", json={**POLICY, "epsilon": 0.2})).json()
        assert after["epsilon"] == 0.2 and after["reset_at"] == before["reset_at"]
        stats = (await http.get("/policies/p/stats")).json()
        assert stats["arms"][ev["arm_id"]]["rewarded"] == 1
        reset = (await http.put("/policies/p", json={**POLICY, "params": {"alpha": 0.7}})).json()
        assert reset["reset_at"] > before["reset_at"]  # a hyperparameter still resets


async def test_health_ready_metrics(make_settings: Any) -> None:
    async with running(make_settings()) as (_app, http, _):
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = (await http.get("/readyz")).json()
        assert ready["status"] == "ready" and ready["state_store"] == ready["event_log"] == "ok"
        await http.put("/policies/p", json=POLICY)
        dec = (await http.post("/recommend", json={"policy": "p", "context": [1, 0, 0]})).json()
        await http.post("/reward", json={"event_id": dec["event_id"], "reward": 1})
        text = (await http.get("/metrics")).text
        assert f'bandit_decisions_total{{arm="{dec["arm_id"]}",policy="p"}}' in text
        assert (
            'bandit_http_request_duration_seconds_count{method="POST",route="/recommend",status="200"}'
            in text
        )


@pytest.mark.parametrize("backend", ["embedded"])
async def test_embedded_default_starts_with_demo_policy_and_rebuilds(make_settings: Any) -> None:
    settings = make_settings(demo_policy=True)
    async with running(settings) as (_app, http, _):
        dec = (
            await http.post("/recommend", json={"policy": "demo", "context": [1, 0, 0, 0]})
        ).json()
        assert (
            await http.post("/reward", json={"event_id": dec["event_id"], "reward": 1})
        ).status_code == 200
        before = (await http.get("/policies/demo/stats")).json()
    async with running(settings) as (_app, http, _):  # a restart: state rebuilt from the SQLite log
        after = (await http.get("/policies/demo/stats")).json()
    assert after["arms"] == before["arms"]


# ---- bad input: 4xx naming the field, nothing written ----------------------------------------
def _recommend(**fields: Any) -> dict[str, Any]:
    return {"policy": "p", "context": [0.1, 0.2, 0.3], **fields}


BAD_RECOMMEND = [
    ("nan in context", b'{"policy": "p", "context": [0.1, NaN, 0.3]}', 422, "context"),
    ("inf in context", b'{"policy": "p", "context": [0.1, Infinity, 0.3]}', 422, "context"),
    (
        "inf in arm features",
        json.dumps(
            _recommend(context=[0.1, 0.2], arms=[{"id": "a", "features": [1e999]}])
        ).encode(),
        422,
        "features",
    ),
    ("wrong dimension", json.dumps(_recommend(context=[0.1, 0.2])).encode(), 422, "context"),
    (
        "wrong arm feature length",
        json.dumps(_recommend(arms=[{"id": "a", "features": [1.0]}])).encode(),
        422,
        "features",
    ),
    ("unknown policy", json.dumps(_recommend(policy="nope")).encode(), 404, "nope"),
    ("unknown arm", json.dumps(_recommend(arms=[{"id": "zzz"}])).encode(), 422, "arms"),
    ("empty candidates", json.dumps(_recommend(arms=[])).encode(), 422, "arms"),
    ("all excluded", json.dumps(_recommend(exclude=["a", "b", "c"])).encode(), 422, "arms"),
    (
        "too many candidates",
        json.dumps(_recommend(arms=[{"id": f"x{i}"} for i in range(1001)])).encode(),
        422,
        "at most 1000",
    ),
    (
        "duplicate arm",
        json.dumps(_recommend(arms=[{"id": "a"}, {"id": "a"}])).encode(),
        422,
        "arms",
    ),
    (
        "named features without feature_names",
        json.dumps(_recommend(context={"x": 1.0})).encode(),
        422,
        "context",
    ),
    ("context not numeric", json.dumps(_recommend(context=["x", 1, 2])).encode(), 422, "context"),
    ("top_k zero", json.dumps(_recommend(top_k=0)).encode(), 422, "top_k"),
    ("unknown field", json.dumps(_recommend(colour="red")).encode(), 422, "colour"),
    ("missing policy", b'{"context": [0.1, 0.2, 0.3]}', 422, "policy"),
    ("malformed json", b'{"policy": "p", "context": [0.1,', 422, "json"),
    ("oversized body", b'{"policy": "p", "context": [' + b"0.1," * 300_000 + b"0.1]}", 413, "body"),
]


@pytest.mark.parametrize(
    ("case", "body", "status", "named"), BAD_RECOMMEND, ids=[c[0] for c in BAD_RECOMMEND]
)
async def test_bad_recommend_is_4xx_naming_the_field_and_writes_nothing(
    make_settings: Any, case: str, body: bytes, status: int, named: str
) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        before = await _state(http, app)
        r = await http.post(
            "/recommend", content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == status, r.text
        assert named in r.text
        assert await _state(http, app) == before


BAD_REWARD = [
    ("unknown event", {"event_id": "f" * 32, "reward": 1.0}, 404, "event_id"),
    ("reward above range", {"reward": 1.5}, 422, "reward"),
    ("reward below range", {"reward": -0.1}, 422, "reward"),
    ("reward not a number", {"reward": "high"}, 422, "reward"),
    ("wrong arm", {"reward": 1.0, "arm_id": "not-served"}, 422, "arm_id"),
    ("missing reward", {}, 422, "reward"),
]


@pytest.mark.parametrize(
    ("case", "fields", "status", "named"), BAD_REWARD, ids=[c[0] for c in BAD_REWARD]
)
async def test_bad_reward_is_4xx_naming_the_field_and_writes_nothing(
    make_settings: Any, case: str, fields: dict[str, Any], status: int, named: str
) -> None:
    async with running(make_settings()) as (app, http, _):
        await http.put("/policies/p", json=POLICY)
        ev = (await http.post("/recommend", json=_recommend())).json()
        before = await _state(http, app)
        r = await http.post("/reward", json={"event_id": ev["event_id"], **fields})
        assert r.status_code == status, r.text
        assert named in r.text
        assert await _state(http, app) == before


async def test_nan_reward_is_422(make_settings: Any) -> None:
    async with running(make_settings()) as (_app, http, _):
        await http.put("/policies/p", json=POLICY)
        ev = (await http.post("/recommend", json=_recommend())).json()
        body = b'{"event_id": "%s", "reward": NaN}' % ev["event_id"].encode()
        r = await http.post("/reward", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and "reward" in r.text


BAD_POLICY = [
    ("unknown algorithm", {"algorithm": "thompson"}, "algorithm"),
    ("zero dimension", {"dimension": 0}, "dimension"),
    ("unknown hyperparameter", {"params": {"alpah": 1.0}}, "params"),
    ("negative alpha", {"params": {"alpha": -1.0}}, "params"),
    ("inverted reward range", {"reward_range": [1.0, 0.0]}, "reward_range"),
    ("default outside range", {"default_reward": 2.0}, "default_reward"),
    ("epsilon above one", {"epsilon": 1.5}, "epsilon"),
    ("non-positive wait", {"reward_wait_seconds": 0}, "reward_wait_seconds"),
    (
        "import guardrail",
        {
            "algorithm": "guardrailed_linucb",
            "guardrails": [
                {"type": "import", "path": "subprocess:Popen", "params": {"args": "true"}}
            ],
        },
        "guardrails",
    ),
    (
        "invalid guardrail",
        {"algorithm": "guardrailed_linucb", "guardrails": [{"type": "no_such_guardrail"}]},
        "params",
    ),
    ("guardrails on linucb", {"guardrails": [{"type": "exposure_cap"}]}, "params"),
    ("d in params", {"params": {"d": 5}}, "params.d"),
    ("epsilon in two places", {"epsilon": 0.1, "params": {"epsilon": 0.2}}, "params.epsilon"),
    ("reward range in two places", {"params": {"reward_range": [0, 2]}}, "params.reward_range"),
]


@pytest.mark.parametrize(("case", "fields", "named"), BAD_POLICY, ids=[c[0] for c in BAD_POLICY])
async def test_bad_policy_is_422_naming_the_field_and_writes_nothing(
    make_settings: Any, case: str, fields: dict[str, Any], named: str
) -> None:
    async with running(make_settings()) as (app, http, _):
        r = await http.put("/policies/p", json={**POLICY, **fields})
        assert r.status_code == 422, r.text
        assert named in r.text
        assert (await http.get("/policies")).json() == {"policies": []}
        assert await asyncio.to_thread(app.state.use_cases.event_log.policies) == {}


async def test_an_unknown_parameter_is_named_and_only_hyperparameters_are_offered(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (_app, http, _):
        r = await http.put("/policies/p", json={**POLICY, "params": {"alpah": 1.0}})
        assert r.status_code == 422
        (error,) = r.json()["detail"]
        assert error["loc"] == ["body", "params", "alpah"]
        offered = error["msg"].split("expected some of ")[1]
        assert "'alpha'" in offered
        assert not any(f"'{k}'" in offered for k in ("d", "epsilon", "reward_range"))


async def test_a_setting_given_in_params_is_decided_once_and_shown_where_it_applies(
    make_settings: Any,
) -> None:
    guarded = {
        **POLICY,
        "algorithm": "guardrailed_linucb",
        "arms": ["water", "juice"],
        "feature_names": ["age", "score", "bias"],
        "params": {"alpha": 0.5, "safe_arm": "water", "epsilon": 0.2},
        "guardrails": [
            {
                "type": "feature_threshold",
                "feature": "age",
                "op": "<",
                "value": 18,
                "arms": ["juice"],
            }
        ],
    }
    async with running(make_settings()) as (_app, http, _):
        r = await http.put("/policies/g", json=guarded)
        assert r.status_code == 200, r.text
        shown = (await http.get("/policies/g")).json()
        assert (shown["safe_arm"], shown["epsilon"], shown["params"]) == (
            "water",
            0.2,
            {"alpha": 0.5},
        )
        minor = {"policy": "g", "context": {"age": 16, "score": 1.0, "bias": 1.0}}
        served = (await http.post("/recommend", json=minor)).json()
        assert (
            served["guardrail"]["safe_arm_served"] is True
        )  # the shown safe arm is the applied one
        # the same setting in both places, agreeing, is one setting
        same = {**POLICY, "epsilon": 0.3, "params": {"alpha": 0.5, "epsilon": 0.3}}
        assert (await http.put("/policies/p", json=same)).json()["epsilon"] == 0.3


async def test_a_model_error_is_a_500_naming_the_policy_and_logged(
    make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Finite, bounded features that give a non-finite score are the model's fault (here a
    NaN state imported from a snapshot), not the request's: 500, not a 422 on the arms."""
    broken = bandit_core.make_policy("linucb", d=3, seed=0)
    nan_arm = LinearArmState.prior(3, 1.0)
    nan_arm.theta[:] = np.nan
    broken.import_parts({"arm:b": nan_arm.to_bytes()})
    async with running(make_settings()) as (_app, http, client):
        await http.put("/policies/p", json=POLICY)
        await client.import_snapshot("p", base64.b64encode(broken.to_bytes()).decode())
        with caplog.at_level(logging.ERROR, logger="bandit.service"):
            r = await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.5]})
        assert r.status_code == 500
        assert "policy 'p'" in r.json()["detail"] and "non-finite score nan" in r.json()["detail"]
        assert any("policy 'p'" in rec.getMessage() for rec in caplog.records)


async def test_a_corrupted_stored_part_is_a_500_naming_the_policy(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, client):
        await http.put("/policies/p", json=POLICY)
        dec = await client.recommend("p", [1.0, 0.0, 0.5])
        await client.reward(dec.event_id, 1.0)  # the served arm's part is stored from now on
        part = f"arm:{dec.arm_id}"
        stored = app.state.use_cases.store
        blob = (await stored.read("p", [part], {}))[part].data
        damaged = blob[:-1] + bytes([blob[-1] ^ 1])
        await stored.transact("p", [part], lambda _values: {part: damaged})
        r = await http.post("/recommend", json={"policy": "p", "context": [1.0, 0.0, 0.5]})
        assert r.status_code == 500, r.text
        assert "policy 'p'" in r.json()["detail"] and "checksum" in r.json()["detail"]


async def test_snapshot_import_rejects_garbage(make_settings: Any) -> None:
    async with running(make_settings()) as (_app, http, _):
        await http.put("/policies/p", json=POLICY)
        for data in ("not base64!", base64.b64encode(b"BCS1garbage").decode()):
            r = await http.put("/policies/p/snapshot", json={"data": data})
            assert r.status_code == 422 and "data" in r.text


async def test_serving_collects_the_young_generation_less_often(make_settings: Any) -> None:
    before = gc.get_threshold()
    try:
        async with running(make_settings()) as (_app, http, _):
            assert (await http.get("/healthz")).status_code == 200
            assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, *before[1:])
    finally:
        gc.set_threshold(*before)


def test_a_stored_record_with_a_setting_in_both_places_keeps_what_the_engine_used() -> None:
    """Configs stored before params was kept free of top-level settings: the top-level
    value was the one the engine used, so it stays the one setting."""
    from service.policies import info_from_record, new_info
    from service.schemas import PolicySpec

    record = new_info("p", PolicySpec(**POLICY), 0.0).model_dump(mode="json")
    record["epsilon"] = 0.1
    record["params"] = {**record["params"], "epsilon": 0.3, "reward_range": [0.0, 5.0]}
    info = info_from_record(record)
    assert (info.epsilon, info.reward_range, info.params) == (0.1, (0.0, 1.0), POLICY["params"])
    record["epsilon"] = None  # then params.epsilon was applied
    assert info_from_record(record).epsilon == 0.3


PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "content-type,authorization",
}


@pytest.mark.parametrize("backend", ["embedded"])
async def test_cors_answers_preflights_of_configured_origins_only(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shop = "https://shop.example"
    monkeypatch.setenv("BANDIT_CORS_ORIGINS", f"{shop}, https://admin.example")
    from service.settings import Settings

    assert Settings().cors_origins == [shop, "https://admin.example"]
    monkeypatch.delenv("BANDIT_CORS_ORIGINS")
    async with running(make_settings(cors_origins=[shop])) as (_app, http, _):
        await http.put("/policies/p", json=POLICY)
        r = await http.options("/recommend", headers={"Origin": shop, **PREFLIGHT})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == shop
        assert "authorization" in r.headers["access-control-allow-headers"].lower()
        served = await http.post("/recommend", json=_recommend(), headers={"Origin": shop})
        assert served.status_code == 200 and served.headers["access-control-allow-origin"] == shop
        other = await http.options(
            "/recommend", headers={"Origin": "https://evil.example", **PREFLIGHT}
        )
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    async with running(make_settings()) as (_app, http, _):  # default: off
        r = await http.options("/recommend", headers={"Origin": shop, **PREFLIGHT})
        assert r.status_code == 405 and "access-control-allow-origin" not in r.headers


async def test_a_policy_that_names_no_epsilon_logs_evaluable_propensities(
    make_settings: Any,
) -> None:
    """Default exploration (epsilon 0.05): no served arm is logged with propensity 1, so
    the log supports offline evaluation of other policies; the demo policy too."""
    async with running(make_settings(demo_policy=True)) as (app, http, _):
        assert (await http.get("/policies/demo")).json()["epsilon"] == 0.05
        assert (await http.put("/policies/p", json=POLICY)).json()["epsilon"] == 0.05
        for _ in range(30):
            ev = (await http.post("/recommend", json=_recommend())).json()
            await http.post("/reward", json={"event_id": ev["event_id"], "reward": 1.0})
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
        logged = list(app.state.use_cases.event_log.iter_events("p"))
        assert len(logged) == 30
        # greedy: 0.95 + 0.05/3 (ties split it further); explored: at least 0.05/3
        assert all(0.05 / 3 - 1e-12 <= e.decision.propensity < 1.0 for e in logged)
