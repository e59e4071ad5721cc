"""JSON features through the real app (docs/features.md "Serving JSON features"): a
policy declaring a featurizer, /recommend with JSON context and candidates new on every
request, rewards on the shared model, the raw JSON in the event log, 422s naming the
request's fields with nothing written."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import orjson
import pytest

import bandit_core
from bandit_core import policy_from_bytes
from bandit_core.errors import InvalidFeatureError, InvalidInputError
from bandit_core.features import Featurizer, FeaturizerConfig
from bandit_core.featurized import featurized_rows
from service.api.app import LEARNING_SETTINGS
from service.policies import build_policy
from service.schemas import PolicySpec
from service.storage.memory_store import InProcessStateStore
from service.storage.offline_source import EventLogSource
from service.usecases.json_features import CachedFeaturizer, request_loc
from service.usecases.rebuild import rebuild_policy
from tests.service.conftest import running

pytestmark = pytest.mark.anyio

FEATURES = {"bits": 6, "interactions": [["*", "*"]]}
SHARED = {"algorithm": "hybrid_linucb", "features": FEATURES, "params": {"alpha": 0.0}}
CONTEXT = {"user": {"segment": "a", "tenureYears": 2}, "device": {"type": "mobile"}}


def items(tag: str, n: int = 3) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{tag}-{k}",
            "features": [{"item": {"category": ("food", "books", "toys")[k % 3], "price": 5 + k}}],
        }
        for k in range(n)
    ]


async def _counts(app: Any, policy: str) -> tuple[int, int]:
    use_cases = app.state.use_cases
    await asyncio.to_thread(use_cases.sink.flush, 5.0)
    return await asyncio.to_thread(use_cases.event_log.count, policy)


async def test_a_policy_with_features_derives_its_dimension_and_validates_them(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (_, http, _typed):
        r = await http.put("/policies/s", json=SHARED)
        assert r.status_code == 200, r.text
        assert r.json()["dimension"] == 65 and r.json()["features"]["output"] == "dense"
        hybrid = {**SHARED, "params": {"context_dim": 65}}
        assert (await http.put("/policies/h", json=hybrid)).json()["dimension"] == 130
        bad = [
            ({**SHARED, "features": {"bits": 40}}, ["body", "features"], "bits"),
            ({**SHARED, "features": {"bitz": 4}}, ["body", "features"], "bitz"),
            (
                {**SHARED, "features": {"interactions": "user"}},
                ["body", "features"],
                "interactions",
            ),
            ({**SHARED, "dimension": 9}, ["body"], "dimension must be 65"),
            ({**SHARED, "params": {"context_dim": 3}}, ["body"], "context_dim must be 0 or"),
            ({**SHARED, "features": {"bits": 12}}, ["body"], "at most 4096"),
            ({"algorithm": "linucb"}, ["body"], "dimension is required"),
        ]
        for spec, loc, words in bad:
            r = await http.put("/policies/bad", json=spec)
            assert r.status_code == 422, (spec, r.text)
            detail = r.json()["detail"][0]
            assert detail["loc"] == loc and words in detail["msg"], (spec, detail)
        assert (await http.get("/policies/bad")).status_code == 404


async def test_new_candidates_every_request_learn_one_shared_model(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, typed):
        assert (await http.put("/policies/s", json=SHARED)).status_code == 200
        for round_ in range(4):
            arms = items(f"r{round_}")
            r = await http.post(
                "/recommend", json={"policy": "s", "context": CONTEXT, "arms": arms}
            )
            assert r.status_code == 200, r.text
            dec = r.json()
            assert {a["arm_id"] for a in dec["ranking"]} == {a["id"] for a in arms}
            rr = await http.post("/reward", json={"event_id": dec["event_id"], "reward": 1.0})
            assert rr.status_code == 200 and rr.json()["applied"], rr.text
        stats = (await http.get("/policies/s/stats")).json()
        assert (
            stats["policy_stats"]["rewarded"] == 4.0 and stats["policy_stats"]["reward_sum"] == 4.0
        )
        assert stats["arms"] == {} or all(a["rewarded"] == 0 for a in stats["arms"].values())
        # the typed client sends the same shapes
        typed_dec = await typed.recommend("s", CONTEXT, items("typed"))
        assert typed_dec.arm_id.startswith("typed-")
        # the log holds the JSON as sent, context and every candidate's features
        await _counts(app, "s")
        log = app.state.use_cases.event_log
        logged = list(log.iter_events("s"))
        assert logged[0].decision.context == CONTEXT
        assert [c["features"] for c in logged[0].decision.candidates] == [
            a["features"] for a in items("r0")
        ]
        # and a rebuild featurizes it again into the live model
        live = (await http.get("/policies/s/snapshot")).json()["data"]
        store = InProcessStateStore()
        await rebuild_policy(log, store, "s", learning=LEARNING_SETTINGS)
        rebuilt = (await store.read("s", ["shared"], {}))["shared"].data
        live_model = policy_from_bytes(base64.b64decode(live))
        model = policy_from_bytes(base64.b64decode(live))
        model.import_parts({"shared": rebuilt})
        np.testing.assert_allclose(model.beta, live_model.beta, rtol=1e-12, atol=1e-15)
        assert (
            model.policy_stats()["rewarded"] == 4.0
        )  # the typed client's decision was not rewarded


async def test_the_log_keeps_each_candidates_features_whether_cached_or_not(
    make_settings: Any,
) -> None:
    """The log's candidates hold the features sent (their canonical JSON: keys sorted)
    on a first sight, on a cache hit, and for features with a null (never cached)."""
    with_null = {"id": "n", "features": {"item": {"category": "food", "gone": None}}}
    unsorted = {"id": "u", "features": {"item": {"price": 3, "category": "toys"}, "a": {"b": 1}}}
    pages = [items("p"), items("p"), [with_null, unsorted], [unsorted, with_null]]
    async with running(make_settings()) as (app, http, _typed):
        assert (await http.put("/policies/s", json=SHARED)).status_code == 200
        for arms in pages:
            r = await http.post(
                "/recommend", json={"policy": "s", "context": CONTEXT, "arms": arms}
            )
            assert r.status_code == 200, r.text
        await _counts(app, "s")
        logged = list(app.state.use_cases.event_log.iter_events("s"))
        assert [[(c["id"], c["features"]) for c in e.decision.candidates] for e in logged] == [
            [(a["id"], a["features"]) for a in arms] for arms in pages
        ]


async def test_diag_linucb_at_bits_16_serves_and_learns_sparse_rows(make_settings: Any) -> None:
    """A large hashed space (2^16 buckets): the request's rows stay sparse, the pending
    event keeps the served row's nonzeros, the reward updates exactly those entries of
    the shared part, and a rebuild from the log gives the live state bit for bit."""
    spec = {"algorithm": "diag_linucb", "features": {"bits": 16}, "params": {"alpha": 0.5}}
    async with running(make_settings()) as (app, http, _typed):
        r = await http.put("/policies/big", json=spec)
        assert r.status_code == 200, r.text
        assert r.json()["dimension"] == 2**16 + 1 and r.json()["features"]["output"] == "sparse"
        big20 = {**spec, "features": {"bits": 20}}
        assert (await http.put("/policies/big20", json=big20)).json()["dimension"] == 2**20 + 1
        served_rows = []
        for round_ in range(3):
            arms = items(f"r{round_}", 5)
            r = await http.post(
                "/recommend", json={"policy": "big", "context": CONTEXT, "arms": arms}
            )
            assert r.status_code == 200, r.text
            event_id, arm_id = r.json()["event_id"], r.json()["arm_id"]
            store = app.state.use_cases.store
            stored = (await store.read("big", [f"event:{event_id}"], {}))[f"event:{event_id}"].data
            x = orjson.loads(stored)["x"]
            assert x["dim"] == 2**16 + 1 and 0 < len(x["indices"]) == len(x["values"]) < 200
            served = next(a for a in arms if a["id"] == arm_id)
            rows = featurized_rows(
                Featurizer(FeaturizerConfig(bits=16)),
                build_policy(PolicySpec(**spec)),
                CONTEXT,
                [served["features"]],
            )
            assert x["indices"] == rows.indices.tolist() and x["values"] == rows.values.tolist()
            served_rows.append(rows)
            rr = await http.post("/reward", json={"event_id": event_id, "reward": 1.0})
            assert rr.status_code == 200 and rr.json()["applied"], rr.text
        # concurrent decisions (coalesced into one batched select) keep sparse rows too
        answers = await asyncio.gather(
            *(
                http.post(
                    "/recommend",
                    json={"policy": "big", "context": CONTEXT, "arms": items(f"c{k}", 5)},
                )
                for k in range(4)
            )
        )
        for r in answers:
            assert r.status_code == 200, r.text
            key = f"event:{r.json()['event_id']}"
            x = orjson.loads((await app.state.use_cases.store.read("big", [key], {}))[key].data)[
                "x"
            ]
            assert x["dim"] == 2**16 + 1 and len(x["indices"]) == len(x["values"]) > 0
        snapshot = (await http.get("/policies/big/snapshot")).json()["data"]
        live = policy_from_bytes(base64.b64decode(snapshot))
        touched = np.unique(np.concatenate([rows.indices for rows in served_rows]))
        assert live.shared_state.index.tolist() == touched.tolist()
        assert live.policy_stats()["rewarded"] == 3.0
        await _counts(app, "big")
        rebuilt = InProcessStateStore()
        await rebuild_policy(
            app.state.use_cases.event_log, rebuilt, "big", learning=LEARNING_SETTINGS
        )
        assert (await rebuilt.read("big", ["shared"], {}))["shared"].data == live.export_parts(
            ["shared"]
        )["shared"]
        bad = [
            ({**spec, "features": {"bits": 16, "output": "dense"}}, "sparse output"),
            ({"algorithm": "hybrid_linucb", "features": {"bits": 12}}, "at most 4096"),
            ({"algorithm": "diag_linucb", "dimension": 5000}, "at most 4096 for float vectors"),
        ]
        for body, words in bad:
            r = await http.put("/policies/bad", json=body)
            assert r.status_code == 422 and words in r.json()["detail"][0]["msg"], (body, r.text)


async def test_float_vectors_and_json_do_not_mix(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _typed):
        assert (await http.put("/policies/s", json=SHARED)).status_code == 200
        vec = {"algorithm": "linucb", "dimension": 2, "arms": ["a", "b"]}
        assert (await http.put("/policies/v", json=vec)).status_code == 200
        before = await _counts(app, "s"), await _counts(app, "v")
        cases = [
            ({"policy": "s", "context": [1.0, 2.0], "arms": items("x")}, ["body", "context"]),
            (
                {"policy": "s", "context": CONTEXT, "arms": [{"id": "a", "features": [1.0]}]},
                ["body", "arms", 0, "features"],
            ),
            ({"policy": "v", "context": CONTEXT}, ["body", "context"]),
            (
                {
                    "policy": "v",
                    "context": [1.0],
                    "arms": [{"id": "a", "features": {"item": {"c": "x"}}}],
                },
                ["body", "arms", 0, "features"],
            ),
        ]
        for body, loc in cases:
            r = await http.post("/recommend", json=body)
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == loc, r.text
        assert (await _counts(app, "s"), await _counts(app, "v")) == before


def test_featurizer_errors_name_the_request_fields() -> None:
    arm_index = [0, 2, 5, None]  # arms 1, 3, 4 excluded; the last candidate is registered
    assert request_loc(("actions", 2, "item", "tags", 2), arm_index) == [
        "body",
        "arms",
        5,
        "features",
        "item",
        "tags",
        2,
    ]
    assert request_loc(("context", 0, "user", "age"), arm_index) == [
        "body",
        "context",
        0,
        "user",
        "age",
    ]
    assert request_loc(("actions", 3, "item"), arm_index) == ["body", "arms"]
    assert request_loc(("actions",), arm_index) == ["body", "arms"]


def test_cached_actions_give_the_rows_of_uncached_ones_bit_for_bit() -> None:
    spec = PolicySpec(**SHARED)
    policy = build_policy(spec)
    cached = CachedFeaturizer(FeaturizerConfig.from_dict(spec.features), max_size=2)
    plain = Featurizer(FeaturizerConfig.from_dict(spec.features))
    catalogs = [[a["features"] for a in items(t, 4)] for t in ("a", "b", "a", "a")]
    catalogs.append([{"item": {"category": "food", "note": None}}, {"item": {"price": 1}}])
    for actions in catalogs:
        entries = [
            cached.hashed_action(a, k, list(range(len(actions)))) for k, a in enumerate(actions)
        ]
        hashed = [h for h, _ in entries]
        assert [orjson.loads(orjson.dumps(logged)) for _, logged in entries] == actions
        np.testing.assert_array_equal(
            featurized_rows(cached.featurizer, policy, CONTEXT, hashed),
            featurized_rows(plain, policy, CONTEXT, actions),
        )
    assert len(cached) == 2  # bounded; the object with a null was not cached


def test_a_candidate_list_seen_before_is_one_lookup_with_the_same_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = PolicySpec(**SHARED)
    cached = CachedFeaturizer(FeaturizerConfig.from_dict(spec.features))
    plain = CachedFeaturizer(FeaturizerConfig.from_dict(spec.features))
    catalog = [a["features"] for a in items("a", 4)]
    with_null = [*catalog, {"item": {"category": "food", "note": None}}]
    index = list(range(5))
    calls: list[int] = []
    per_action = CachedFeaturizer.hashed_action

    def counted(self: CachedFeaturizer, features: Any, k: int, arms: Any) -> Any:
        calls.append(k)
        return per_action(self, features, k, arms)

    monkeypatch.setattr(CachedFeaturizer, "hashed_action", counted)
    for actions in (catalog, with_null):
        for _ in range(2):
            joined, logged = cached.hashed_actions(actions, index)
            expected = [per_action(plain, a, k, index) for k, a in enumerate(actions)]
            assert [orjson.dumps(f) for f in logged] == [orjson.dumps(f) for _, f in expected]
            h = joined.features
            np.testing.assert_array_equal(h.hashes, np.concatenate([e.hashes for e, _ in expected]))
            np.testing.assert_array_equal(h.values, np.concatenate([e.values for e, _ in expected]))
            assert h.namespaces == tuple(ns for e, _ in expected for ns in e.namespaces)
            assert joined.counts.tolist() == [len(e.values) for e, _ in expected]
    # the catalog's items were looked up once; the list with a null item, every time
    assert calls == [0, 1, 2, 3] + [0, 1, 2, 3, 4] * 2
    bad = [*catalog, {"item": {"price": "x" * 2000}}]
    for _ in range(2):  # a list with a bad item is never kept: the same 422 each time
        with pytest.raises(InvalidFeatureError) as exc:
            cached.hashed_actions(bad, index)
        assert exc.value.loc[:2] == ("actions", 4)


async def test_a_logged_json_stream_replays_under_another_featurizer(make_settings: Any) -> None:
    """The log keeps the JSON as sent: the offline source featurizes it under any
    config (here more bits and no interactions, for a per-arm model)."""
    async with running(make_settings()) as (app, http, _typed):
        assert (await http.put("/policies/s", json=SHARED)).status_code == 200
        for round_ in range(3):
            dec = (
                await http.post(
                    "/recommend",
                    json={"policy": "s", "context": CONTEXT, "arms": items(f"r{round_}")},
                )
            ).json()
            await http.post("/reward", json={"event_id": dec["event_id"], "reward": 0.5})
        await _counts(app, "s")
        log = app.state.use_cases.event_log
        with pytest.raises(InvalidInputError, match="logged JSON features"):
            list(EventLogSource(log, "s"))
        other = Featurizer(FeaturizerConfig(bits=7, interactions=[]))
        target = bandit_core.make_policy("linucb", d=other.config.dim)
        events = list(
            EventLogSource(log, "s", featurize=lambda c, a: featurized_rows(other, target, c, a))
        )
        assert len(events) == 3 and all(e.X.shape == (3, other.config.dim) for e in events)
        np.testing.assert_array_equal(events[0].X[0], other.featurize_context(CONTEXT))
