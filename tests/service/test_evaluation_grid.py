"""Offline experimentation's grid (service/usecases/evaluations.py, docs/offline.md
"Evaluations"): besides the settings around the loop's own, its own setting with a
half-life of a day and of a week, each once the evaluated range spans four of them;
the settings build, forget as their half-life says, and are written back as the
learning-policy string Auto-Optimize applies."""

from __future__ import annotations

import pytest

from service.personalizer.learning_settings import LoopLearningSettings
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC, parse_vw_arguments
from service.policies import build_policy, spec_of
from service.schemas import PolicyInfo
from service.usecases.evaluations import GRID, logged_span, plan

DAY = 86400.0
WEEK = 7 * DAY
LEARNING = LoopLearningSettings()


def _loop() -> PolicyInfo:
    return PolicyInfo(
        name="shop",
        revision="1",
        created_at=0.0,
        updated_at=0.0,
        reset_at=0.0,
        **DEFAULT_LOOP_SPEC.model_dump(),
    )


def _half_lives(span: float | None) -> list[float]:
    _, grid = plan(LEARNING, _loop(), [], True, span)
    return [g.params["half_life_seconds"] for g in grid if "half_life_seconds" in g.params]


@pytest.mark.parametrize(
    "span, half_lives",
    [
        (None, []),
        (4 * DAY - 1.0, []),
        (4 * DAY, [DAY]),
        (4 * WEEK - 1.0, [DAY]),
        (4 * WEEK, [DAY, WEEK]),
    ],
)
def test_the_grid_tries_the_half_lives_the_range_spans_four_times(
    span: float | None, half_lives: list[float]
) -> None:
    assert _half_lives(span) == half_lives
    _, grid = plan(LEARNING, _loop(), [], True, span)
    size = len(GRID["epsilon"]) * len(GRID["interactions"]) * len(GRID["ridge_lambda"])
    assert len(grid) == size + len(half_lives)
    assert plan(LEARNING, _loop(), [], False, span)[1] == []  # no grid unless asked


def test_a_half_life_setting_is_the_loops_own_with_it_and_reads_back_from_its_arguments() -> None:
    loop = _loop()
    _, grid = plan(LEARNING, loop, [], True, 4 * WEEK)
    for spec in (g for g in grid if "half_life_seconds" in g.params):
        others = {k: v for k, v in spec.params.items() if k != "half_life_seconds"}
        assert others == loop.params
        assert (spec.epsilon, spec.features) == (loop.epsilon, loop.features)
        policy = build_policy(spec)
        assert policy.uses_wall_clock()  # type: ignore[attr-defined]
        written = LEARNING.arguments(spec)
        assert f"--half_life_seconds {spec.params['half_life_seconds']:g}" in written
        again = LEARNING.spec_from_arguments(spec_of(loop), written)
        assert (again.params, again.epsilon, again.features) == (
            spec.params,
            spec.epsilon,
            spec.features,
        )
        assert parse_vw_arguments(written)[0]["params"] == spec.params


def test_the_span_is_the_part_of_the_range_the_policy_can_have_logged() -> None:
    """Between the policy's creation and now: a range reaching back before the loop
    existed (an evaluation of the whole log) holds only the loop's life."""
    loop = _loop().model_copy(update={"created_at": 1000.0})
    assert logged_span(loop, float("-inf"), float("inf"), 1000.0 + 5 * DAY) == 5 * DAY
    assert logged_span(loop, 2000.0, 3000.0, 1e9) == 1000.0
    assert logged_span(loop, 0.0, 500.0, 1e9) == 0.0  # before its creation
    assert logged_span(loop, 0.0, 1e12, 1500.0) == 500.0  # the future holds no decisions
