"""A policy's ``drift_response`` (docs/algorithms.md section 10.5, "Response to a
detection"): after its detector finds a change, the policy explores at the set level
for the set time, then at its own setting again; a bad setting is a 422 naming the
field. The clock of the decisions and rewards is the test's."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import running

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0  # Unix time
BOOST_SECONDS = 100.0
# a detector that sees the fall from ten rewards of 1 to rewards of 0 within a few zeros
QUICK_DETECTOR = {"delta": 0.0, "threshold": 3.0, "min_samples": 5}
# one arm whose every row is [1], no epsilon: the score is LinUCB's closed form
LINUCB = {
    "algorithm": "linucb",
    "dimension": 1,
    "arms": ["a"],
    "epsilon": 0.0,
    "params": {"alpha": 0.5},
    "reward_wait_seconds": 3600,
    "drift_detection": QUICK_DETECTOR,
}


def _set_clock(app: Any, at: list[float]) -> None:
    """The decisions and rewards of ``app`` read the time from ``at[0]``."""
    use_cases = app.state.use_cases
    for case in (use_cases.recommender, use_cases.rewards):
        case.clock = lambda: at[0]


async def _decide(http: Any, name: str) -> dict[str, Any]:
    r = await http.post("/recommend", json={"policy": name, "context": [1.0]})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _reward(http: Any, event_id: str, reward: float) -> None:
    r = await http.post("/reward", json={"event_id": event_id, "reward": reward})
    assert r.status_code == 200 and r.json()["applied"], r.text


def _samples(text: str, policy: str) -> dict[str, float]:
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("policy") == policy
        and s.name in ("bandit_drift_detections_total", "bandit_exploration_boost_until_seconds")
    }


async def _fall(http: Any, name: str) -> None:
    """Ten rewards of 1, then ten of 0: the detector fires once, within the zeros."""
    for reward in [1.0] * 10 + [0.0] * 10:
        await _reward(http, (await _decide(http, name))["event_id"], reward)


async def test_alpha_is_raised_for_the_set_time_after_a_detection(make_settings: Any) -> None:
    """LinUCB with ``alpha = 0.5`` on one arm whose every row is ``[1]``: after ``n``
    rewards summing to ``s`` its mean is ``s / (1 + n)`` and its width ``(1 + n)^-1/2``;
    within ``BOOST_SECONDS`` of the detection the score is ``mean + 4 * width``, from
    then on ``mean + 0.5 * width``."""
    name = f"boosted-{uuid.uuid4().hex[:8]}"  # metrics are per process
    spec = {**LINUCB, "drift_response": {"exploration": 4.0, "seconds": BOOST_SECONDS}}
    async with running(make_settings()) as (app, http, _):
        r = await http.put(f"/policies/{name}", json=spec)
        assert r.status_code == 200, r.text
        assert r.json()["drift_response"] == {"exploration": 4.0, "seconds": BOOST_SECONDS}
        now = [T0]
        _set_clock(app, now)
        await _fall(http, name)
        samples = _samples((await http.get("/metrics")).text, name)
        assert samples["bandit_drift_detections_total"] == 1.0
        assert samples["bandit_exploration_boost_until_seconds"] == T0 + BOOST_SECONDS
        mean, width = 10 / 21, 1 / math.sqrt(21)  # 20 rewards, 10 of them 1
        for at, alpha in ((T0, 4.0), (T0 + BOOST_SECONDS - 1.0, 4.0), (T0 + BOOST_SECONDS, 0.5)):
            now[0] = at
            (ranked,) = (await _decide(http, name))["ranking"]
            assert ranked["width"] == pytest.approx(width, rel=1e-12)
            assert ranked["score"] == pytest.approx(mean + alpha * width, rel=1e-12), at
        # the boost changed no setting: the policy reads back as it was put
        assert (await http.get(f"/policies/{name}")).json()["params"]["alpha"] == 0.5


async def test_a_policy_without_a_response_keeps_its_exploration(make_settings: Any) -> None:
    name = f"steady-{uuid.uuid4().hex[:8]}"
    async with running(make_settings()) as (app, http, _):
        assert (await http.put(f"/policies/{name}", json=LINUCB)).status_code == 200
        _set_clock(app, [T0])
        await _fall(http, name)
        samples = _samples((await http.get("/metrics")).text, name)
        assert samples["bandit_drift_detections_total"] == 1.0
        assert "bandit_exploration_boost_until_seconds" not in samples
        (ranked,) = (await _decide(http, name))["ranking"]
        assert ranked["score"] == pytest.approx(10 / 21 + 0.5 / math.sqrt(21), rel=1e-12)


async def test_epsilon_is_the_knob_of_epsilon_greedy(make_settings: Any) -> None:
    """epsilon_greedy at ``epsilon = 0.1`` raised to 0.8: the served arm's propensity
    is ``1 - eps + eps / 2`` (greedy) or ``eps / 2`` (explored) of two arms."""
    name = f"greedy-{uuid.uuid4().hex[:8]}"
    spec = {
        "algorithm": "epsilon_greedy",
        "dimension": 1,
        "arms": ["a", "b"],
        "epsilon": 0.1,
        "reward_wait_seconds": 3600,
        "drift_detection": QUICK_DETECTOR,
        "drift_response": {"exploration": 0.8, "seconds": BOOST_SECONDS},
    }
    async with running(make_settings()) as (app, http, _):
        assert (await http.put(f"/policies/{name}", json=spec)).status_code == 200
        now = [T0]
        _set_clock(app, now)
        await _fall(http, name)
        for at, epsilon in ((T0 + 1.0, 0.8), (T0 + BOOST_SECONDS, 0.1)):
            now[0] = at
            propensity = (await _decide(http, name))["ranking"][0]["propensity"]
            assert propensity in (
                pytest.approx(1 - epsilon / 2, rel=1e-12),
                pytest.approx(epsilon / 2, rel=1e-12),
            ), (at, propensity)


@pytest.mark.parametrize(
    "algorithm, response, field",
    [
        ("linucb", {"exploration": -1.0, "seconds": 60}, "exploration"),
        ("linucb", {"exploration": 1.0, "seconds": 0}, "seconds"),
        ("linucb", {"exploration": 1.0}, "seconds"),
        ("linucb", {"exploration": 1.0, "seconds": 60, "secs": 1}, "secs"),
        ("epsilon_greedy", {"exploration": 2.0, "seconds": 60}, "drift_response.exploration"),
    ],
)
async def test_a_bad_response_is_a_422_naming_the_field(
    make_settings: Any, algorithm: str, response: dict[str, Any], field: str
) -> None:
    spec = {"algorithm": algorithm, "dimension": 1, "drift_response": response}
    async with running(make_settings()) as (_app, http, _):
        r = await http.put("/policies/bad", json=spec)
        assert r.status_code == 422, r.text
        assert "drift_response" in r.text and field in r.text, r.text
        assert (await http.get("/policies/bad")).status_code == 404
