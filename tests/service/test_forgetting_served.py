"""Policies that forget by wall-clock time, served (docs/algorithms.md section 10.3):
``/recommend`` scores every arm as of the decision's time, ``/reward`` adds the
observation at the time of the decision it rewards, and the rebuild from the event log
replays the same times, so ``half_life_seconds`` and ``window_seconds`` work through
the API. Scores are checked against the closed forms of sections 10.1 and 10.2."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
import pytest
import redis

from bandit_core import clock_at, make_policy, policy_from_bytes
from bandit_core.evaluation.replay import replay
from service.storage.offline_source import EventLogSource
from tests.service.conftest import running

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0  # Unix time
HALF_LIFE = 60.0


def _policy(algorithm: str, dimension: int = 1, **params: Any) -> dict[str, Any]:
    """One arm "a" whose every row is the context of ``dimension`` ones; ``alpha = 0``
    and the prior ``lambda = 1``, so its score is :func:`_score_of_ones`."""
    return {
        "algorithm": algorithm,
        "dimension": dimension,
        "arms": ["a"],
        "params": {"alpha": 0.0, **params},
        "reward_wait_seconds": 3600,
    }


def _set_clock(app: Any, at: list[float]) -> None:
    """The decisions and rewards of ``app`` read the time from ``at[0]``."""
    use_cases = app.state.use_cases
    for case in (use_cases.recommender, use_cases.rewards):
        case.clock = lambda: at[0]


def _score_of_ones(b: float, w: float, ones: int) -> float:
    """The weighted ridge's mean on rows of ``ones`` ones, every one with the weights
    summing to ``w`` and the weighted rewards to ``b``: ``1^T (I + w 1 1^T)^-1 1 b``."""
    return ones * b / (1.0 + ones * w)


async def _decide(http: Any, ones: int = 1) -> tuple[str, float]:
    """A decision of policy "p" on the context of ``ones`` ones: its event id and the
    score of "a"."""
    r = await http.post("/recommend", json={"policy": "p", "context": [1.0] * ones})
    assert r.status_code == 200, r.text
    body = r.json()
    return body["event_id"], body["ranking"][0]["score"]


async def _reward(http: Any, event_id: str, reward: float) -> None:
    r = await http.post("/reward", json={"event_id": event_id, "reward": reward})
    assert r.status_code == 200 and r.json()["applied"], r.text


async def _half_life_story(http: Any, now: list[float], ones: int = 1) -> None:
    """Ten rewards of 1 at ``T0``, then decisions and rewards one and two half-lives
    later, on rows of ``ones`` ones, each score checked against
    :func:`_score_of_ones` with ``w = sum 2^-(age / half-life)`` and ``b = sum w r``
    (``b / (1 + w)`` on one feature)."""
    for _ in range(10):
        event_id, _ = await _decide(http, ones)
        await _reward(http, event_id, 1.0)
    _, fresh = await _decide(http, ones)
    assert fresh == pytest.approx(_score_of_ones(10, 10, ones), rel=1e-12)
    late_event, _ = await _decide(http, ones)  # decided at T0, rewarded two half-lives later
    now[0] = T0 + HALF_LIFE  # w = 10 / 2, b = 10 / 2
    event_id, aged = await _decide(http, ones)
    assert aged == pytest.approx(_score_of_ones(5, 5, ones), rel=1e-12)
    await _reward(http, event_id, 0.0)  # at weight 1: w = 6, b = 5
    _, after_zero = await _decide(http, ones)
    assert after_zero == pytest.approx(_score_of_ones(5, 6, ones), rel=1e-12)
    now[0] = T0 + 2 * HALF_LIFE
    await _reward(http, late_event, 1.0)  # decided a half-life before the arm's clock: w = 1/2
    # scored at T0 + 2h: w = (6 + 1/2) / 2 = 3.25, b = (5 + 1/2) / 2 = 2.75
    _, latest = await _decide(http, ones)
    assert latest == pytest.approx(_score_of_ones(2.75, 3.25, ones), rel=1e-12)


@pytest.mark.parametrize(
    "algorithm, params, ones",
    [
        ("discounted_linucb", {}, 1),
        ("hybrid_linucb", {}, 1),
        ("diag_linucb", {}, 1),
        ("hybrid_linucb", {"context_dim": 1}, 2),
    ],
)
async def test_a_half_life_policy_forgets_by_the_time_of_its_decisions(
    make_settings: Any, algorithm: str, params: dict[str, Any], ones: int
) -> None:
    """The per-arm model, the shared one and the diagonal one: with one feature and one
    arm all three are the same weighted ridge. The hybrid model with per-arm parts on
    the row ``[z, x] = [1, 1]`` of its one arm is that ridge over two features."""
    async with running(make_settings()) as (app, http, _):
        spec = _policy(algorithm, ones, half_life_seconds=HALF_LIFE, **params)
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        now = [T0]
        _set_clock(app, now)
        await _half_life_story(http, now, ones)


async def test_a_window_in_seconds_drops_the_rewards_older_than_it(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        spec = _policy("sliding_window_linucb", window=100, window_seconds=30.0)
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        now = [T0]
        _set_clock(app, now)
        for t, reward in ((T0, 1.0), (T0 + 20.0, 0.0)):
            now[0] = t
            for _ in range(5):
                event_id, _ = await _decide(http)
                await _reward(http, event_id, reward)
        _, both = await _decide(http)  # all ten in the window: A = 11, b = 5
        assert both == pytest.approx(5 / 11, rel=1e-12)
        now[0] = T0 + 40.0  # the five ones are 40 s old, the zeros 20 s
        _, young_only = await _decide(http)
        assert young_only == 0.0


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_the_rebuild_from_the_log_replays_the_decision_times(make_settings: Any) -> None:
    """After the state store is wiped, the policy rebuilt from the event log at start
    holds the state the live one had: every reward at its decision's time."""
    settings = make_settings()
    async with running(settings) as (app, http, _):
        spec = _policy("discounted_linucb", half_life_seconds=HALF_LIFE)
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        now = [T0]
        _set_clock(app, now)
        await _half_life_story(http, now)
        live = policy_from_bytes(
            base64.b64decode((await http.get("/policies/p/snapshot")).json()["data"])
        )
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
    redis.Redis.from_url(settings.redis_url).flushdb()
    async with running(settings) as (_, http, _):
        rebuilt = policy_from_bytes(
            base64.b64decode((await http.get("/policies/p/snapshot")).json()["data"])
        )
    ours, theirs = rebuilt.arm_state("a"), live.arm_state("a")
    assert ours.clock == theirs.clock == T0 + HALF_LIFE  # the latest decision rewarded
    assert ours.n == theirs.n == 12
    for field in ("V", "V_tilde", "b", "theta"):
        assert getattr(ours, field) == pytest.approx(getattr(theirs, field), rel=1e-12)


@pytest.mark.parametrize(
    "algorithm, params, ones",
    [
        ("discounted_linucb", {"half_life_seconds": HALF_LIFE}, 1),
        ("hybrid_linucb", {"half_life_seconds": HALF_LIFE}, 1),
        ("hybrid_linucb", {"half_life_seconds": HALF_LIFE, "context_dim": 1}, 2),
    ],
)
async def test_replaying_the_log_at_its_decision_times_gives_the_state_the_service_built(
    make_settings: Any, algorithm: str, params: dict[str, Any], ones: int
) -> None:
    """The offline replay runs a policy with a wall clock at each logged decision's
    time (docs/algorithms.md section 10.3): on one arm every logged event matches, so the
    replayed policy learns every reward, at the time the service learned it."""
    async with running(make_settings()) as (app, http, _):
        spec = _policy(algorithm, ones, **params)
        assert (await http.put("/policies/p", json=spec)).status_code == 200
        now = [T0]
        _set_clock(app, now)
        await _half_life_story(http, now, ones)
        live = policy_from_bytes(
            base64.b64decode((await http.get("/policies/p/snapshot")).json()["data"])
        )
        use_cases = app.state.use_cases
        await asyncio.to_thread(use_cases.sink.flush, 5.0)
        replayed = make_policy(algorithm, d=ones, alpha=0.0, **params)
        result = await asyncio.to_thread(replay, replayed, EventLogSource(use_cases.event_log, "p"))
    assert result.matched == 12  # the rewarded decisions of the story
    for ours, theirs in zip(_parts(replayed), _parts(live), strict=True):
        assert ours.clock == theirs.clock == T0 + HALF_LIFE
        for field in ("V", "V_tilde", "b", "theta"):
            np.testing.assert_allclose(getattr(ours, field), getattr(theirs, field), rtol=1e-9)


def _parts(policy: Any) -> list[Any]:
    """The parts that learned: arm "a"'s, the shared model's, or both (the hybrid model
    with per-arm parts)."""
    parts = [policy.arm_state("a")] if "arm:a" in policy.part_names() else []
    return parts + ([policy.shared_state] if "shared" in policy.part_names() else [])


async def test_a_window_in_seconds_with_per_arm_parts_scores_the_rewards_in_it(
    make_settings: Any,
) -> None:
    """``window_seconds = 30`` with per-arm parts, served (docs/algorithms.md section
    10.3): each arm scores as Algorithm 2 (no forgetting) fed only the rewards whose
    decision is younger than 30 s: a reward sent 40 s after its decision counts at the
    decision's time, so it is already out of the window."""
    spec = {**_policy("hybrid_linucb", 2, context_dim=1, window_seconds=30.0), "arms": ["a", "b"]}
    early = [("a", 1.0), ("a", 1.0), ("b", 0.0)]  # decided and rewarded at T0
    late = [("b", 1.0), ("a", 0.0)]  # decided and rewarded at T0 + 20
    held = ("b", 1.0)  # decided at T0, rewarded at T0 + 40

    def fresh(rewards: list[tuple[str, float]]) -> Any:
        engine = make_policy("hybrid_linucb", d=2, context_dim=1, alpha=0.0)
        engine.add_arm("a")
        engine.add_arm("b")
        for arm, reward in rewards:
            engine.update(arm, [1.0, 1.0], reward)
        return engine

    async def decide(http: Any, arm: str) -> tuple[str, float]:
        body = {"policy": "p", "context": [1.0, 1.0], "arms": [{"id": arm}]}
        r = await http.post("/recommend", json=body)
        assert r.status_code == 200, r.text
        return r.json()["event_id"], r.json()["ranking"][0]["score"]

    async def check(http: Any, engine: Any) -> None:
        for arm in ("a", "b"):
            _, score = await decide(http, arm)
            want = engine.select([arm], [[1.0, 1.0]]).scores[0]
            assert score == pytest.approx(want, rel=1e-9, abs=1e-12)

    async with running(make_settings()) as (app, http, _):
        assert (await http.put("/policies/p", json=spec)).status_code == 200, spec
        now = [T0]
        _set_clock(app, now)
        held_event, _ = await decide(http, held[0])
        for t, story in ((T0, early), (T0 + 20.0, late)):
            now[0] = t
            for arm, reward in story:
                event_id, _ = await decide(http, arm)
                await _reward(http, event_id, reward)
        await check(http, fresh(early + late))  # all five in the window
        now[0] = T0 + 40.0  # the early ones are 40 s old
        await _reward(http, held_event, held[1])
        await check(http, fresh(late))
        # counted at its reward's time it would have changed the fit
        counted = fresh([*late, held]).select(["b"], [[1.0, 1.0]]).scores[0]
        assert counted != pytest.approx(fresh(late).select(["b"], [[1.0, 1.0]]).scores[0])


async def test_a_hybrid_window_with_per_arm_parts_scores_the_last_rewards(
    make_settings: Any,
) -> None:
    """``window = 3`` with per-arm parts, served: after six rewards over two arms each
    arm's score is that of Algorithm 2 (no forgetting) fed only the last three, and not
    that of the model fed all six (docs/algorithms.md section 10.3)."""
    spec = {**_policy("hybrid_linucb", 2, context_dim=1, window=3), "arms": ["a", "b"]}
    story = [("a", 1.0), ("a", 1.0), ("b", 0.0), ("b", 1.0), ("a", 0.0), ("b", 0.0)]
    fresh, whole = (make_policy("hybrid_linucb", d=2, context_dim=1, alpha=0.0) for _ in "fw")
    for engine, rewards in ((fresh, story[-3:]), (whole, story)):
        engine.add_arm("a")
        engine.add_arm("b")
        for arm, reward in rewards:
            engine.update(arm, [1.0, 1.0], reward)

    async def decide(http: Any, arm: str) -> tuple[str, float]:
        body = {"policy": "p", "context": [1.0, 1.0], "arms": [{"id": arm}]}
        r = await http.post("/recommend", json=body)
        assert r.status_code == 200, r.text
        return r.json()["event_id"], r.json()["ranking"][0]["score"]

    async with running(make_settings()) as (_, http, _):
        assert (await http.put("/policies/p", json=spec)).status_code == 200, spec
        for arm, reward in story:
            event_id, _ = await decide(http, arm)
            await _reward(http, event_id, reward)
        for arm in ("a", "b"):
            _, score = await decide(http, arm)
            want = fresh.select([arm], [[1.0, 1.0]]).scores[0]
            assert score == pytest.approx(want, rel=1e-9, abs=1e-12)
            assert score != pytest.approx(whole.select([arm], [[1.0, 1.0]]).scores[0])


@pytest.mark.parametrize("backend", ["redis_postgres"])
async def test_a_hybrid_fit_sees_the_arms_another_process_rewarded(make_settings: Any) -> None:
    """Two processes on one store, a policy with no registered arms: arm "b" is decided
    and rewarded only through the second, yet the first one's fit for a request over
    "a" holds "b"'s part (the joint ridge (10.5) reads every arm with a part in the
    store), so both score "a" as the engine fed the same rewards does."""
    settings = make_settings()
    now = [T0]
    spec = {**_policy("hybrid_linucb", 2, context_dim=1, half_life_seconds=HALF_LIFE)}
    del spec["arms"]
    engine = make_policy(
        "hybrid_linucb", d=2, context_dim=1, alpha=0.0, half_life_seconds=HALF_LIFE
    )
    engine.add_arm("a")
    engine.add_arm("b")

    async def decide(http: Any, arm: str) -> tuple[str, float]:
        body = {"policy": "p", "context": [1.0, 1.0], "arms": [{"id": arm}]}
        r = await http.post("/recommend", json=body)
        assert r.status_code == 200, r.text
        return r.json()["event_id"], r.json()["ranking"][0]["score"]

    async with running(settings) as (one, http_one, _), running(settings) as (two, http_two, _):
        assert (await http_one.put("/policies/p", json=spec)).status_code == 200
        _set_clock(one, now)
        _set_clock(two, now)
        event_id, _ = await decide(http_one, "a")  # the first process holds "a", not "b"
        await _reward(http_one, event_id, 1.0)
        with clock_at(engine, T0):
            engine.update("a", [1.0, 1.0], 1.0)
        await decide(http_one, "a")
        for reward in (1.0, 1.0, 0.0):
            event_id, _ = await decide(http_two, "b")
            await _reward(http_two, event_id, reward)
            with clock_at(engine, T0):
                engine.update("b", [1.0, 1.0], reward)
        now[0] = T0 + HALF_LIFE / 2
        with clock_at(engine, now[0]):
            want = engine.select(["a"], [[1.0, 1.0]]).scores[0]
        for http in (http_one, http_two):
            _, score = await decide(http, "a")
            assert score == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("backend", ["redis_postgres"])
@pytest.mark.parametrize(
    "params", [{"window": 3}, {"window": 4, "window_seconds": 30.0}], ids=["window", "seconds"]
)
async def test_a_hybrid_window_with_per_arm_parts_is_rebuilt_from_the_log(
    make_settings: Any, params: dict[str, Any]
) -> None:
    """The per-arm window policies (docs/algorithms.md section 10.3) rebuilt from the
    event log after the state store is wiped hold the parts the live one had and score
    as it did. The story's rewards come in another order than their decisions (one
    is held 40 s) and leave the window by count and by age, so a rebuild that numbered
    the rewards or timed the rows otherwise would differ."""
    settings = make_settings()
    spec = {**_policy("hybrid_linucb", 2, context_dim=1, **params), "arms": ["a", "b"]}
    rows = {"a": [1.0, 0.5], "b": [0.25, 1.0]}
    story = [(T0, "a", 1.0), (T0, "b", 0.0), (T0 + 20.0, "a", 0.0), (T0 + 20.0, "b", 1.0)]

    async def decide(http: Any, arm: str) -> tuple[str, float]:
        body = {"policy": "p", "context": rows[arm], "arms": [{"id": arm}]}
        r = await http.post("/recommend", json=body)
        assert r.status_code == 200, r.text
        return r.json()["event_id"], r.json()["ranking"][0]["score"]

    async def snapshot(http: Any) -> Any:
        r = await http.get("/policies/p/snapshot")
        return policy_from_bytes(base64.b64decode(r.json()["data"]))

    async with running(settings) as (app, http, _):
        assert (await http.put("/policies/p", json=spec)).status_code == 200, spec
        now = [T0]
        _set_clock(app, now)
        held, _ = await decide(http, "b")  # decided at T0, rewarded at T0 + 40
        for t, arm, reward in story:
            now[0] = t
            event_id, _ = await decide(http, arm)
            await _reward(http, event_id, reward)
        now[0] = T0 + 40.0  # the rows of T0 are out of the window in seconds
        await _reward(http, held, 1.0)
        event_id, _ = await decide(http, "a")
        await _reward(http, event_id, 1.0)
        live = await snapshot(http)
        scores = [(await decide(http, arm))[1] for arm in ("a", "b")]
        await asyncio.to_thread(app.state.use_cases.sink.flush, 5.0)
    redis.Redis.from_url(settings.redis_url).flushdb()
    async with running(settings) as (app, http, _):
        _set_clock(app, now)
        rebuilt = await snapshot(http)
        assert [(await decide(http, arm))[1] for arm in ("a", "b")] == pytest.approx(
            scores, rel=1e-9
        )
    assert sorted(rebuilt.part_names()) == sorted(live.part_names())
    for part in ("a", "b", "shared"):
        ours, theirs = (
            vars(p.shared_state if part == "shared" else p.arm_state(part)) for p in (rebuilt, live)
        )
        assert ours.keys() == theirs.keys()
        for field, value in theirs.items():
            np.testing.assert_allclose(ours[field], value, rtol=1e-9, err_msg=f"{part}.{field}")
