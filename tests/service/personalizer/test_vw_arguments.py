"""The learning-policy string (``service.personalizer.vw_arguments``): every option of
the table does what the table says (honoured, no effect and named in the ``Warning``
header, refused by name), its spellings parse alike, and the string read back is the
string written."""

from __future__ import annotations

from typing import Any

import pytest

from service.errors import InvalidRequest
from service.personalizer.loop_policy import (
    DEFAULT_LOOP_SPEC,
    cb_type_in,
    cb_type_of,
    parse_vw_arguments,
    vw_arguments,
)
from service.personalizer.vw_arguments import HONOURED, NO_EFFECT, OPTIONS, REFUSED
from service.schemas import PolicyInfo
from tests.service.conftest import running

pytestmark = pytest.mark.anyio
BASE = "/loops/shop/personalizer/v1.1-preview.3"


def _refused(arguments: str) -> str:
    with pytest.raises(InvalidRequest) as caught:
        parse_vw_arguments(arguments)
    assert caught.value.loc == ["body", "arguments"]
    return caught.value.message


def test_epsilon_sets_the_exploration_in_every_spelling() -> None:
    for arguments in ("--epsilon 0.05", "--epsilon=0.05", "--cb_explore_adf --epsilon 0.05"):
        assert parse_vw_arguments(arguments)[0]["epsilon"] == 0.05
    assert "epsilon" not in parse_vw_arguments("--cb_explore_adf")[0]  # the loop's stays
    assert "--epsilon must lie in [0, 1]" in _refused("--epsilon 1.5")
    assert "--epsilon must be a number" in _refused("--epsilon lots")
    assert "--epsilon needs a value" in _refused("--epsilon")


def test_quadratic_and_interactions_pair_namespaces_by_their_first_letter() -> None:
    for arguments in ("-q ua", "-qua", "--quadratic ua", "--quadratic=ua", "--interactions ua"):
        features = parse_vw_arguments(arguments)[0]["features"]
        assert features["interactions"] == [["u*", "a*"]], arguments
    both = parse_vw_arguments("-q :: --interactions u:")[0]["features"]["interactions"]
    assert both == [["*", "*"], ["u*", "*"]]  # they add up; ':' is any namespace
    assert parse_vw_arguments("--epsilon 0.1")[0]["features"]["interactions"] == []
    assert "--interactions takes two or more namespace letters" in _refused("--interactions u")
    assert "-q takes two namespace letters" in _refused("-q u")


def test_cubic_and_longer_interactions_are_featurizer_terms() -> None:
    """Three or more letters make one term whose letters match context and action
    namespaces alike; ``--cubic abc`` is ``--interactions abc``; pairs stay pairs."""
    cubic = parse_vw_arguments("-q ui --cubic ud: --cubic=ud: --interactions uda:")[0]
    assert cubic["features"]["interactions"] == [["u*", "i*"]]
    assert cubic["features"]["interaction_terms"] == [["u*", "d*", "*"], ["u*", "d*", "a*", "*"]]
    for spelling in ("--cubic udi", "--interactions udi"):
        features = parse_vw_arguments(spelling)[0]["features"]
        assert (features["interactions"], features["interaction_terms"]) == (
            [],
            [["u*", "d*", "i*"]],
        )
    assert "interaction_terms" not in parse_vw_arguments("-q ::")[0]["features"]
    assert "--cubic takes three namespace letters" in _refused("--cubic ud")
    assert "--cubic takes three namespace letters" in _refused("--cubic udia")
    assert "--interactions takes two or more" in _refused("--interactions " + "u" * 9)


@pytest.mark.parametrize("option", ["--ignore", "--keep", "--ignore_linear"])
def test_namespace_rules_take_one_namespace_per_letter(option: str) -> None:
    key = option.removeprefix("--")
    for arguments in (f"{option} ud", f"{option}=ud", f"{option} u {option} d {option} u"):
        features = parse_vw_arguments(f"-q :: {arguments}")[0]["features"]
        assert features[key] == ["u*", "d*"], arguments  # they add up, each letter once
    assert parse_vw_arguments(f"{option} :")[0]["features"][key] == ["*"]
    assert key not in parse_vw_arguments("-q ::")[0]["features"]
    assert f"{option} needs a value" in _refused(option)
    assert f"{option} takes namespace letters" in _refused(f"{option}=")


@pytest.mark.parametrize(
    "written",
    [
        "--cb_explore_adf --epsilon 0.2 -q :: --ignore d",
        "--cb_explore_adf --epsilon 0.2 -q ui --keep ui",
        "--cb_explore_adf --epsilon 0.2 -q ui --ignore_linear u:",
        "--cb_explore_adf --epsilon 0.2 --ignore ab --keep c --ignore_linear d",
        "--cb_explore_adf --epsilon 0.2 -q ui --interactions udi --interactions ::ui",
    ],
)
def test_namespace_rules_are_written_back_as_they_read(written: str) -> None:
    """A loop whose engine has namespace rules is described by VW arguments that parse
    back to the same engine."""
    changes, _ = parse_vw_arguments(written)
    spec = DEFAULT_LOOP_SPEC.model_copy(update=changes)
    info = PolicyInfo(
        name="shop", revision="", created_at=0.0, updated_at=0.0, reset_at=0.0, **spec.model_dump()
    )
    assert vw_arguments(info) == written


def test_bit_precision_is_the_featurizers_hash_bits() -> None:
    for arguments in ("-b 10", "-b10", "--bit_precision 10", "--bit_precision=10"):
        assert parse_vw_arguments(arguments)[0]["features"]["bits"] == 10
    assert parse_vw_arguments("-q ::")[0]["features"]["bits"] == DEFAULT_LOOP_SPEC.features["bits"]  # type: ignore[index]
    assert "-b/--bit_precision must lie in [1, 12]" in _refused("-b 18")
    assert "must be an integer" in _refused("-b many")


def test_random_seed_is_the_models_seed() -> None:
    params = parse_vw_arguments("--random_seed 7")[0]["params"]
    assert params == {**DEFAULT_LOOP_SPEC.params, "seed": 7}
    assert "--random_seed must be an integer" in _refused("--random_seed x")


def test_half_life_seconds_makes_the_shared_model_forget() -> None:
    for arguments in ("--half_life_seconds 86400", "--half_life_seconds=86400"):
        params = parse_vw_arguments(arguments)[0]["params"]
        assert params == {**DEFAULT_LOOP_SPEC.params, "half_life_seconds": 86400.0}
    assert "half_life_seconds" not in parse_vw_arguments("-q ::")[0]["params"]
    assert "--half_life_seconds must be positive and finite" in _refused("--half_life_seconds 0")
    assert "--half_life_seconds must be positive and finite" in _refused("--half_life_seconds inf")
    assert "--half_life_seconds must be a number" in _refused("--half_life_seconds day")


@pytest.mark.parametrize("half_life", [86400.0, 90.5])
def test_a_half_life_is_written_back_as_it_reads(half_life: float) -> None:
    """A loop whose engine is the default shared model with a half-life is described by
    VW arguments (not its JSON spec) that parse back to the same engine."""
    params = {**DEFAULT_LOOP_SPEC.params, "half_life_seconds": half_life}
    spec = DEFAULT_LOOP_SPEC.model_copy(update={"params": params})
    info = PolicyInfo(
        name="shop", revision="", created_at=0.0, updated_at=0.0, reset_at=0.0, **spec.model_dump()
    )
    written = vw_arguments(info)
    assert (
        written.startswith("--cb_explore_adf") and f"--half_life_seconds {half_life:g}" in written
    )
    assert parse_vw_arguments(written)[0]["params"] == params


def test_cb_type_is_read_and_written_back_but_leaves_the_engine_alone() -> None:
    """``--cb_type`` names the estimator of the loop's evaluations (its effect there:
    tests/service/personalizer/test_evaluations.py); it changes nothing of the engine."""
    plain = parse_vw_arguments("--cb_explore_adf -q ::")[0]
    for cb_type in ("ips", "dr", "mtr"):
        arguments = f"--cb_explore_adf -q :: --cb_type {cb_type}"
        assert parse_vw_arguments(arguments) == (plain, [])
        assert cb_type_in(arguments) == cb_type
    assert cb_type_in("--cb_explore_adf") == "ips"
    assert "--cb_type must be one of ips, dr, mtr, but got 'dm'" in _refused("--cb_type dm")
    # a loop whose epsilon changed since its string was written: arguments that make it,
    # the cb_type kept
    written = {"policyArguments": "--cb_explore_adf --epsilon 0.1 --cb_type dr", "cbType": "dr"}
    spec = DEFAULT_LOOP_SPEC.model_copy(update={"epsilon": 0.3, "personalizer": written})
    info = PolicyInfo(
        name="shop", revision="", created_at=0.0, updated_at=0.0, reset_at=0.0, **spec.model_dump()
    )
    assert cb_type_of(info) == "dr"
    assert vw_arguments(info) == "--cb_explore_adf --epsilon 0.3 -q :: --cb_type dr"


def test_the_adf_flags_name_the_shared_model() -> None:
    for flag in ("--cb_explore_adf", "--ccb_explore_adf"):
        changes, ignored = parse_vw_arguments(f"{flag} --epsilon 0.1")
        assert (changes["epsilon"], ignored) == (0.1, [])
    assert "takes no value" in _refused("--cb_explore_adf=1")


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o.kind == NO_EFFECT], ids=lambda o: o.names[0]
)
def test_options_with_no_effect_are_accepted_and_listed(option: Any) -> None:
    for name in option.names:
        written = f"{name} 0.5" if option.takes_value else name
        changes, ignored = parse_vw_arguments(f"--cb_explore_adf {written} --epsilon 0.3")
        assert ignored == [written]
        assert changes["epsilon"] == 0.3


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o.kind == REFUSED], ids=lambda o: o.names[0]
)
def test_refused_options_are_named_with_the_reason(option: Any) -> None:
    for name in option.names:
        message = _refused(f"--cb_explore_adf {name} 3" if option.takes_value else name)
        assert f"{name} is not supported: {option.meaning}" in message


def test_unknown_options_are_refused_by_name() -> None:
    assert "'--nn' is not supported" in _refused("--nn 3")
    assert "do not parse" in _refused("'")


def test_every_option_is_in_one_of_the_three_kinds() -> None:
    assert {o.kind for o in OPTIONS} == {HONOURED, NO_EFFECT, REFUSED}
    names = [name for o in OPTIONS for name in o.names]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("backend", ["embedded"])
async def test_the_string_read_back_is_the_string_written(make_settings: Any) -> None:
    async with running(make_settings()) as (_, http, _):
        put = await http.put("/policies/shop", json=DEFAULT_LOOP_SPEC.model_dump())
        assert put.status_code == 200, put.text
        written = "--cb_explore_adf  --epsilon=0.1 -qua -b 6 --random_seed 3 --power_t 0 --quiet"
        answer = await http.put(
            f"{BASE}/configurations/policy", json={"name": "tuned", "arguments": written}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["arguments"] == written
        assert answer.headers["Warning"] == '299 - "ignored VW arguments: --power_t 0 --quiet"'
        assert (await http.get(f"{BASE}/configurations/policy")).json() == {
            "name": "tuned",
            "arguments": written,
        }
        spec = (await http.get("/policies/shop")).json()
        assert spec["epsilon"] == 0.1
        assert (spec["features"]["bits"], spec["features"]["interactions"]) == (6, [["u*", "a*"]])
        assert spec["params"]["seed"] == 3
        # the loop ranks under them
        rank = await http.post(
            f"{BASE}/rank",
            json={
                "contextFeatures": [{"user": {"tier": "gold"}}],
                "actions": [{"id": "a", "features": [{"item": {"kind": "tea"}}]}],
            },
        )
        assert rank.status_code == 201, rank.text
        # once the exploration changes elsewhere, the string says what the loop is
        config = (await http.get(f"{BASE}/configurations/service")).json()
        config.pop("latestApprenticeModeMetrics", None)
        config["explorationPercentage"] = 0.3
        assert (await http.put(f"{BASE}/configurations/service", json=config)).status_code == 200
        now = (await http.get(f"{BASE}/configurations/policy")).json()["arguments"]
        assert now == "--cb_explore_adf --epsilon 0.3 -q ua -b 6 --random_seed 3"
        again, _ = parse_vw_arguments(now)
        assert again["params"] == spec["params"]
        assert again["features"]["bits"] == 6 and again["features"]["interactions"] == [
            ["u*", "a*"]
        ]


async def _learned_ranking(
    http: Any, loop: str, arguments: str
) -> dict[tuple[str, str], list[Any]]:
    """The ranking (id, probability) the new loop ``loop`` under ``arguments`` gives each
    (tier, device) after 160 rounds in which gold users reward tea and silver users coffee.
    The loop learns each reward before its next rank (no ``model_update_interval``), so
    what it learns does not depend on when the periodic folds run."""
    at_once = DEFAULT_LOOP_SPEC.model_copy(update={"model_update_interval": None})
    put = await http.put(f"/policies/{loop}", json=at_once.model_dump())
    assert put.status_code == 200, put.text
    base = BASE.replace("/shop/", f"/{loop}/")
    answer = await http.put(
        f"{base}/configurations/policy", json={"name": "rules", "arguments": arguments}
    )
    assert answer.status_code == 200, answer.text
    actions = [{"id": i, "features": [{"item": {"kind": i}}]} for i in ("tea", "coffee")]
    best = {"gold": "tea", "silver": "coffee"}

    def body(tier: str, device: str) -> dict[str, Any]:
        context = [{"user": {"tier": tier}}, {"device": {"os": device}}]
        return {"contextFeatures": context, "actions": actions}

    for i in range(160):
        tier, device = ("gold", "silver")[i % 2], ("ios", "android")[i // 2 % 2]
        ranked = await http.post(f"{base}/rank", json=body(tier, device))
        assert ranked.status_code == 201, ranked.text
        chosen = ranked.json()["rewardActionId"]
        reward = await http.post(
            f"{base}/events/{ranked.json()['eventId']}/reward",
            json={"value": float(chosen == best[tier])},
        )
        assert reward.status_code == 204, reward.text
    assert (await http.get(f"/policies/{loop}")).json()["model_update_interval"] is None
    rankings = {}
    for tier in best:
        for device in ("ios", "android"):
            ranked = await http.post(f"{base}/rank", json=body(tier, device))
            rankings[tier, device] = ranked.json()["ranking"]
    return rankings


def _greedy(ranking: list[dict[str, Any]]) -> str:
    return str(max(ranking, key=lambda r: r["probability"])["id"])


@pytest.mark.parametrize("backend", ["embedded"])
async def test_loops_under_namespace_rules_rank_and_learn_what_they_read(
    make_settings: Any,
) -> None:
    async with running(make_settings()) as (_, http, _):
        # the user's namespace ignored: the loop cannot tell the tiers apart
        blind = await _learned_ranking(
            http, "blind", "--cb_explore_adf --epsilon 0.2 -q :: --ignore u"
        )
        assert blind["gold", "ios"] == blind["silver", "ios"]
        # its own features dropped, its interactions kept: the loop learns each tier's drink
        crossed = await _learned_ranking(
            http, "crossed", "--cb_explore_adf --epsilon 0.2 -q :: --ignore_linear u"
        )
        assert [_greedy(crossed[t, "ios"]) for t in ("gold", "silver")] == ["tea", "coffee"]
        # only user and item read: the device makes no difference, the tier does
        kept = await _learned_ranking(
            http, "kept", "--cb_explore_adf --epsilon 0.2 -q :: --keep ui"
        )
        assert kept["gold", "ios"] == kept["gold", "android"]
        assert [_greedy(kept[t, "android"]) for t in ("gold", "silver")] == ["tea", "coffee"]
        spec = (await http.get("/policies/kept")).json()
        assert spec["features"]["keep"] == ["u*", "i*"]


@pytest.mark.parametrize("backend", ["embedded"])
async def test_a_loop_under_cubic_ranks_and_learns_through_the_personalizer_routes(
    make_settings: Any,
) -> None:
    """No pair at all: only the user x device x item term can tell the tiers apart, and
    the loop learns each tier's drink on both devices."""
    async with running(make_settings()) as (_, http, _):
        written = "--cb_explore_adf --epsilon 0.2 --cubic udi"
        cubic = await _learned_ranking(http, "cubic", written)
        for device in ("ios", "android"):
            assert [_greedy(cubic[t, device]) for t in ("gold", "silver")] == ["tea", "coffee"]
        spec = (await http.get("/policies/cubic")).json()
        assert spec["features"]["interaction_terms"] == [["u*", "d*", "i*"]]
        base = BASE.replace("/shop/", "/cubic/")
        read = (await http.get(f"{base}/configurations/policy")).json()
        assert read == {"name": "rules", "arguments": written}
