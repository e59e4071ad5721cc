"""The pure translations of the Personalizer loops: ISO 8601 durations and Vowpal Wabbit
argument strings (service/personalizer/loops.py)."""

from __future__ import annotations

import pytest

from service.errors import InvalidRequest
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC, parse_vw_arguments, vw_arguments
from service.personalizer.loops import parse_duration
from service.policies import new_info
from service.timeparse import format_duration


@pytest.mark.parametrize(
    ("text", "seconds"), [("PT10M", 600.0), ("PT1H30M", 5400.0), ("P1D", 86400.0), ("PT0.5S", 0.5)]
)
def test_durations_round_trip(text: str, seconds: float) -> None:
    assert parse_duration(text, "rewardWaitTime") == seconds
    assert parse_duration(format_duration(seconds), "rewardWaitTime") == seconds


@pytest.mark.parametrize("text", ["10 minutes", "P1M", "P1Y", ""])
def test_bad_durations_name_the_field(text: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_duration(text, "rewardWaitTime")
    assert caught.value.loc == ["body", "rewardWaitTime"]


def test_vw_arguments_map_epsilon_and_interactions_and_ignore_learning_rates() -> None:
    changes, ignored = parse_vw_arguments(
        "--cb_explore_adf --epsilon 0.1 -q ua --quadratic :: --dsjson --cb_type ips -l 0.5 --power_t 0"
    )
    assert changes["epsilon"] == 0.1
    assert changes["features"]["interactions"] == [["u*", "a*"], ["*", "*"]]
    assert ignored == ["--dsjson", "-l 0.5", "--power_t 0"]
    assert parse_vw_arguments("--cb_explore_adf")[0]["features"]["interactions"] == []


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ("--bag 5", "--bag"),
        ("--epsilon", "--epsilon"),
        ("--epsilon 2", "--epsilon"),
        ("-q abc", "-q"),
        ("'", "parse"),
    ],
)
def test_unsupported_vw_arguments_are_refused_by_name(arguments: str, named: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_vw_arguments(arguments)
    assert named in caught.value.message


def test_the_default_loop_renders_as_vw_arguments_and_other_policies_as_json() -> None:
    info = new_info("personalizer", DEFAULT_LOOP_SPEC, 0.0)
    assert vw_arguments(info) == "--cb_explore_adf --epsilon 0.2 -q ::"
    changes, _ = parse_vw_arguments("--cb_explore_adf --epsilon 0.3 -q ua")
    spec = DEFAULT_LOOP_SPEC.model_validate({**DEFAULT_LOOP_SPEC.model_dump(), **changes})
    assert vw_arguments(new_info("p", spec, 0.0)) == "--cb_explore_adf --epsilon 0.3 -q ua"
    linucb = DEFAULT_LOOP_SPEC.model_validate(
        {"algorithm": "linucb", "dimension": 2, "params": {"alpha": 1.0}}
    )
    assert vw_arguments(new_info("p", linucb, 0.0)).startswith('{"algorithm":"linucb"')
