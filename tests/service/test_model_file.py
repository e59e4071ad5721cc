"""A policy's model as one file (``/policies/{name}/model``, service/usecases/models.py)
through the real app on the embedded default and on Redis + PostgreSQL: the file holds
every state part (arms, shared, users), imports into another policy as the same model,
and a bad file is refused naming the problem with nothing changed."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

import bandit_core
from bandit_core.state import pack, unpack
from service.policies import load_policies_file
from service.settings import Settings
from tests.service.conftest import API_KEY, running, wait_for
from tests.service.test_api import EXAMPLE_POLICIES

pytestmark = pytest.mark.anyio

HARE = {"algorithm": "hare", "dimension": 3, "arms": ["a", "b", "c"], "reward_wait_seconds": 600}
IMPORTING = {
    "algorithm": "guardrailed_linucb",
    "guardrails": [{"type": "import", "path": "subprocess:Popen", "params": {"args": "true"}}],
}
LINUCB = {
    "algorithm": "linucb",
    "dimension": 3,
    "params": {"alpha": 0.5},
    "arms": ["a", "b"],
    "reward_wait_seconds": 600,
}


async def _train(http: Any, policy: str, rounds: int, dim: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for i in range(rounds):
        context = rng.normal(size=dim).round(3).tolist()
        body = {"policy": policy, "context": context, "user_id": f"u{i % 3}"}
        dec = (await http.post("/recommend", json=body)).json()
        reward = float(dec["arm_id"] == "a")
        r = await http.post("/reward", json={"event_id": dec["event_id"], "reward": reward})
        assert r.status_code == 200, r.text


def _engine(data: bytes) -> bytes:
    """The engine state inside a model file."""
    _, _, arrays = unpack(data, "bandit_model")
    return arrays["engine"].tobytes()


async def _decisions(http: Any, policy: str, dim: int) -> list[tuple[str, list[float]]]:
    rng = np.random.default_rng(99)
    out = []
    for i in range(10):
        context = rng.normal(size=dim).round(3).tolist()
        body = {"policy": policy, "context": context, "user_id": f"u{i % 3}"}
        dec = (await http.post("/recommend", json=body)).json()
        out.append((dec["arm_id"], [r["score"] for r in dec["ranking"]]))
    return out


async def test_the_model_file_holds_every_part_and_imports_as_the_same_model(
    make_settings: Any,
) -> None:
    settings: Settings = make_settings()
    async with running(settings) as (app, http, typed):
        assert (await http.put("/policies/src", json=HARE)).status_code == 200
        other = {**HARE, "params": {"key_dim": 4}}  # the import brings the model's params
        assert (await http.put("/policies/dst", json=other)).status_code == 200
        await _train(http, "src", 60, 3, seed=1)
        exported = await http.get("/policies/src/model")
        assert exported.status_code == 200
        assert exported.headers["content-type"] == "application/octet-stream"
        _, meta, _ = unpack(exported.content, "bandit_model")
        assert meta["format"] == 1 and meta["engine_fields"]["algorithm"] == "hare"
        engine = bandit_core.policy_from_bytes(_engine(exported.content))
        # every part: the three arms, the shared projections and the three users' parts
        assert sorted(engine.part_names()) == sorted(
            ["arm:a", "arm:b", "arm:c", "shared", "user:u0", "user:u1", "user:u2"]
        )
        imported = await http.put(
            "/policies/dst/model",
            content=exported.content,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert imported.status_code == 200, imported.text
        assert imported.json()["params"] == {}  # the model's engine fields
        again = await typed.export_model("dst")
        assert _engine(again) == _engine(exported.content)
        # a fresh process's view of both (caches dropped): the same decisions
        app.state.use_cases.cache.forget("src")
        await http.put("/policies/src/model", content=exported.content)
        assert await _decisions(http, "src", 3) == await _decisions(http, "dst", 3)
        props = await typed.model_properties("dst")
        assert props.created_at == (await typed.get_policy("dst")).reset_at
        assert props.modified_at >= props.created_at


async def test_a_bad_model_file_is_refused_naming_the_problem_and_changes_nothing(
    make_settings: Any,
) -> None:
    settings: Settings = make_settings()
    async with running(settings) as (_app, http, typed):
        assert (await http.put("/policies/p", json=LINUCB)).status_code == 200
        await _train(http, "p", 30, 3, seed=2)
        good = await typed.export_model("p")
        before = (await typed.get_policy("p")).revision
        _, meta, arrays = unpack(good, "bandit_model")
        flipped = bytearray(good)
        flipped[-5] ^= 0xFF
        other_engine = bandit_core.make_policy("linucb", d=5, alpha=0.5).to_bytes()
        bad = {
            b"not a model": "must start with the magic",
            bytes(flipped): "checksum",
            good[:-10]: "checksum",
            pack("policy", meta, arrays): "expected a 'bandit_model' state",
            pack("bandit_model", {**meta, "format": 7}, arrays): "format 7",
            pack(
                "bandit_model",
                {**meta, "engine_fields": {**meta["engine_fields"], "dimension": -1}},
                arrays,
            ): "engine_fields.dimension",
            pack(
                "bandit_model",
                meta,
                {"engine": np.frombuffer(other_engine, np.uint8)},
            ): "'d': 5",
            pack("bandit_model", meta, {"engine": np.zeros(8, np.uint8)}): "engine state",
            pack(  # server-side code: refused before the spec builds anything
                "bandit_model",
                {**meta, "engine_fields": {**meta["engine_fields"], **IMPORTING}},
                arrays,
            ): "guardrails of type 'import' load server-side code",
        }
        for data, named in bad.items():
            r = await http.put("/policies/p/model", content=data)
            assert r.status_code == 422, r.text
            message = r.json()["detail"][0]["msg"]
            assert message.startswith("body is not a usable model file: ") and named in message
        assert (await typed.get_policy("p")).revision == before
        assert _engine(await typed.export_model("p")) == _engine(good)
        assert (await http.get("/policies/nope/model")).status_code == 404
        # reset: a fresh model of the same config, created now
        reset = await http.delete("/policies/p/model")
        assert reset.status_code == 200 and reset.json()["algorithm"] == "linucb"
        fresh = bandit_core.policy_from_bytes(_engine(await typed.export_model("p")))
        assert fresh.part_names() == []


async def test_model_properties_follow_the_rewards(make_settings: Any) -> None:
    settings: Settings = make_settings()
    async with running(settings) as (app, http, typed):
        info = await typed.put_policy("p", LINUCB)
        props = await typed.model_properties("p")
        assert props.created_at == props.modified_at == info.reset_at
        await _train(http, "p", 5, 3, seed=3)
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("p")[1] == 5)
        later = await typed.model_properties("p")
        assert later.created_at == info.reset_at and later.modified_at > info.reset_at


@pytest.mark.parametrize("backend", ["embedded"])
async def test_an_imported_model_survives_a_rebuild_from_the_log(make_settings: Any) -> None:
    """The embedded default rebuilds its state from the log at start: from the imported
    model, with the rewards learned after the import on top."""
    settings: Settings = make_settings()
    async with running(settings) as (app, http, typed):
        await typed.put_policy("p", LINUCB)
        await typed.put_policy("q", LINUCB)
        await _train(http, "p", 40, 3, seed=4)
        await typed.import_model("q", await typed.export_model("p"))
        await _train(http, "q", 10, 3, seed=5)  # learned on top of the import
        log = app.state.use_cases.event_log
        await wait_for(lambda: log.count("q")[1] == 10)
        before = bandit_core.policy_from_bytes(_engine(await typed.export_model("q")))
    async with running(settings) as (_app, _http, typed):
        after = bandit_core.policy_from_bytes(_engine(await typed.export_model("q")))
    assert before.policy_stats() == after.policy_stats()
    assert sum(after.arm_stats(a).rewarded for a in after.arm_ids) == 50
    for arm in ("a", "b"):
        np.testing.assert_allclose(after.arm_state(arm).theta, before.arm_state(arm).theta)


@pytest.mark.parametrize("backend", ["embedded"])
async def test_model_files_have_their_own_body_limit(make_settings: Any) -> None:
    """A model file may exceed the JSON body limit (the default loop's is 1.06 MB) but
    not ``max_model_bytes``; other routes keep ``max_body_bytes``."""
    settings: Settings = make_settings(max_body_bytes=500, max_model_bytes=100_000)
    async with running(settings) as (_app, http, typed):
        await typed.put_policy("p", LINUCB)
        model = await typed.export_model("p")
        assert 500 < len(model) < 100_000
        assert (await http.put("/policies/p/model", content=model)).status_code == 200
        too_big = await http.put("/policies/p/model", content=model + b"\0" * 100_000)
        assert too_big.status_code == 413 and "100000 bytes" in too_big.text
        assert (await http.put("/policies/p/snapshot", content=b" " * 1000)).status_code == 413


async def test_an_import_whose_settings_differ_is_refused_and_the_guardrail_holds(
    make_settings: Any,
) -> None:
    """The documented example's ``home`` (LinUCB over 6 features) exported and imported
    into ``drinks`` (guardrailed LinUCB over age and score, no beer under 18): a 409
    naming each difference, nothing changed, and a minor is never served beer; asked
    explicitly (``replace_settings``), the import replaces the settings; Personalizer's
    ``PUT model`` replaces them as Personalizer did."""
    specs = load_policies_file(EXAMPLE_POLICIES)
    async with running(make_settings()) as (_app, http, typed):
        for name in ("home", "drinks"):
            await typed.put_policy(name, specs[name].model_dump())
        await _train(http, "home", 20, 6, seed=6)
        rng = np.random.default_rng(7)
        for _ in range(40):  # beer pays with adults, so the model would pick it
            context = {"age": float(rng.integers(18, 70)), "score": float(rng.random())}
            dec = (
                await http.post("/recommend", json={"policy": "drinks", "context": context})
            ).json()
            reward = {"event_id": dec["event_id"], "reward": float(dec["arm_id"] == "beer")}
            assert (await http.post("/reward", json=reward)).status_code == 200
        home_model = await typed.export_model("home")
        before = await typed.get_policy("drinks")
        drinks_model = await typed.export_model("drinks")

        refused = await http.put("/policies/drinks/model", content=home_model)
        assert refused.status_code == 409, refused.text
        guardrails = json.dumps(specs["drinks"].guardrails, sort_keys=True)
        assert refused.json()["detail"] == (
            "the model file does not fit policy 'drinks': "
            'algorithm: the policy\'s "guardrailed_linucb", the file\'s "linucb"; '
            "dimension: the policy's 2, the file's 6; "
            f"guardrails: the policy's {guardrails}, the file's none; "
            "safe_arm: the policy's \"water\", the file's none; "
            "import it with replace_settings=true (bandit model import --replace-settings) "
            "to give the policy the file's settings"
        )
        assert await typed.get_policy("drinks") == before
        assert _engine(await typed.export_model("drinks")) == _engine(drinks_model)
        for _ in range(50):
            minor = {"age": float(rng.integers(0, 18)), "score": float(rng.random())}
            dec = (
                await http.post("/recommend", json={"policy": "drinks", "context": minor})
            ).json()
            assert dec["arm_id"] != "beer"

        replaced = await typed.import_model("drinks", home_model, replace_settings=True)
        assert (replaced.algorithm, replaced.dimension, replaced.guardrails) == ("linucb", 6, None)
        assert _engine(await typed.export_model("drinks")) == _engine(home_model)
        loop = await http.put(
            "/loops/home/personalizer/v1.0/model",
            content=drinks_model,
            headers={"Ocp-Apim-Subscription-Key": API_KEY},
        )
        assert loop.status_code == 204, loop.text
        assert (await typed.get_policy("home")).algorithm == "guardrailed_linucb"


async def test_a_snapshot_of_another_algorithm_or_dimension_is_refused_naming_both(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (_app, http, typed):
        await typed.put_policy("p", LINUCB)
        other = bandit_core.make_policy("epsilon_greedy", d=5).to_bytes()
        body = {"data": base64.b64encode(other).decode()}
        refused = await http.put("/policies/p/snapshot", json=body)
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["msg"] == (
            "snapshot does not fit policy 'p': "
            'algorithm: the policy\'s "linucb", the snapshot\'s "epsilon_greedy"; '
            "dimension: the policy's 3, the snapshot's 5"
        )
