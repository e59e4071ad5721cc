"""Learning replays over an event log's day partitions (docs/offline.md, "Learning
replays over partitions"): a replay or an evaluation's candidate fed the days one after
the other, as each Ray actor is, gives the result of the whole log bit for bit, and an
actor restarted mid-run and sent its last checkpoint ends where an undisturbed one
ends; leave-one-feature-out importance over the days equals the whole range's. Here on the local engine and in process; ``test_ray_engine`` runs the same on a
real cluster."""

from __future__ import annotations

import gzip
import itertools
import math
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bandit_core.datasets import news_dataset_path
from service.api.app import LEARNING_SETTINGS
from service.cli.log_sources import LogSpec, load_log, partitions
from service.cli.replay import ReplayStream, Run, replay_one, streamed_replays
from service.policies import info_from_record
from service.schemas import PolicySpec
from service.schemas.evaluations import EvaluationPolicy
from service.storage.sql_log import SqlEventLog
from service.usecases.evaluation_streams import DecisionQuery, candidate_streams, ungrouped
from service.usecases.evaluations import (
    Candidate,
    LogArrays,
    candidate_periods,
    grid_candidates_of,
    plan,
)
from service.usecases.importance import scores_over_days, scores_over_log_in_worker
from service.usecases.offline_engine import OfflineEngine, StreamActor
from tests.service.test_estimate_partitions import respaced_copy, storefront_log

EVENTS = 300
LOCAL = OfflineEngine()


@pytest.fixture(scope="module")
def days_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The storefront log, its decisions 3 h apart: 38 UTC days."""
    directory = tmp_path_factory.mktemp("streams")
    return respaced_copy(storefront_log(directory, EVENTS), directory / "days.sqlite3", 3 * 3600.0)


def _same(a: Any, b: Any) -> None:
    """Two replay results equal in every field but their times."""
    assert (a.cumulative_reward, a.mean_reward, a.matched, a.events_seen) == (
        b.cumulative_reward,
        b.mean_reward,
        b.matched,
        b.events_seen,
    )
    assert np.array_equal(a.curve, b.curve)


@pytest.mark.parametrize("rejection", [False, True])
@pytest.mark.parametrize("rounds", [None, 7])
def test_replays_over_the_days_equal_the_whole_log(
    days_url: str, rejection: bool, rounds: int | None
) -> None:
    spec = LogSpec(days_url, "eventlog", "shop")
    assert len(partitions(spec)) == 38
    runs = [Run("linucb", {"alpha": 0.5}, 3), Run("hybrid_linucb", {"alpha": 1.0}, 4)]
    streamed = streamed_replays(LOCAL, spec, runs, rounds, rejection, no_progress=True)
    for run, result in zip(runs, streamed, strict=True):
        whole = replay_one(spec, run.policy, run.params, run.seed, rounds, rejection)
        _same(result, whole)
        assert whole.matched > 0
        assert whole.events_seen < EVENTS if rounds else whole.events_seen == EVENTS


def news_files(directory: Path, sizes: Sequence[int]) -> list[str]:
    """The first ``sum(sizes)`` lines of the news data set: in files of ``sizes`` lines
    (in order), then the whole in one file, last."""
    with gzip.open(news_dataset_path(), "rt") as lines:
        head = list(itertools.islice(lines, sum(sizes)))
    paths, start = [], 0
    for i, size in enumerate([*sizes, sum(sizes)]):
        path = directory / f"news{i}.txt"
        path.write_text("".join(head[start : start + size]))
        paths.append(str(path))
        start = (start + size) % sum(sizes)
    return paths


def test_a_log_of_several_files_is_replayed_file_by_file_as_one_log(tmp_path: Path) -> None:
    *files, whole = news_files(tmp_path, [700, 500])
    spec = LogSpec(files[0], "news", files=tuple(files))
    assert partitions(spec) == [LogSpec(f, "news") for f in files]
    assert [e.reward for e in load_log(spec, "linucb", {})[0]] == [
        e.reward for e in load_log(LogSpec(whole, "news"), "linucb", {})[0]
    ]
    runs = [Run("linucb", {"alpha": 0.5}, 3), Run("lnucb_ta", {}, 4)]
    streamed = streamed_replays(LOCAL, spec, runs, None, False, no_progress=True)
    for run, result in zip(runs, streamed, strict=True):
        once = replay_one(LogSpec(whole, "news"), run.policy, run.params, run.seed, None, False)
        _same(result, once)
        assert once.events_seen == 1200 and once.matched > 0


def test_a_restarted_actor_sent_its_checkpoint_ends_where_an_undisturbed_one_ends(
    days_url: str,
) -> None:
    spec = LogSpec(days_url, "eventlog", "shop")
    parts = tuple(partitions(spec))
    _, d = load_log(spec, "linucb", {})
    stream = ReplayStream(parts, "linucb", {"alpha": 0.5}, d, 3, None, None)
    undisturbed = StreamActor(stream)
    for k in range(len(parts)):
        assert undisturbed.advance(k, None) is not None
    first = StreamActor(stream)
    checkpoint = None
    for k in range(10):
        out = first.advance(k, None)
        assert out is not None
        checkpoint = out[1]
    restarted = StreamActor(stream)  # what Ray's restart builds: a fresh actor
    assert restarted.advance(10, None) is None  # the driver must send the checkpoint
    assert restarted.advance(10, checkpoint) is not None
    for k in range(11, len(parts)):
        assert restarted.advance(k, None) is not None
    _same(stream.result(restarted.state), stream.result(undisturbed.state))
    assert stream.result(undisturbed.state).matched > 0
    assert pickle.loads(pickle.dumps(restarted.state)).seen == EVENTS


def evaluation_plan(url: str) -> tuple[list[Candidate], list[PolicySpec]]:
    """The candidates and grid of an evaluation of the storefront's policy at ``url``
    with one custom setting and offline experimentation."""
    event_log = SqlEventLog(url)
    try:
        info = info_from_record(event_log.policies()["shop"])
    finally:
        event_log.close()
    custom = [EvaluationPolicy(name="eps", arguments="--cb_explore_adf --epsilon 0.1")]
    return plan(LEARNING_SETTINGS, info, custom, offline_experimentation=True)


def test_an_evaluations_candidates_over_the_days_equal_the_whole_log(days_url: str) -> None:
    candidates, grid = evaluation_plan(days_url)
    everyone = [*candidates, *grid_candidates_of(grid)]
    query = DecisionQuery(days_url, "shop", -math.inf, math.inf)
    parts = tuple(query.days())
    assert len(parts) == 38
    assert [c.source for c in everyone][:4] == ["Online", "Baseline", "Random", "Custom"]
    decisions = query.load()
    arrays = LogArrays(decisions)
    expected = [candidate_periods(decisions, arrays, c) for c in everyone]
    learning = sum(c.spec is not None for c in everyone)
    for groups in (1, 3, len(everyone)):
        counts: list[int] = []

        def count(_: int, events: int, counts: list[int] = counts) -> None:
            counts.append(events)

        streams = candidate_streams(parts, everyone, groups)
        assert len(streams) == groups
        streamed = LOCAL.stream(streams, done=count)
        # the events replayed: every decision by every learning candidate, none by
        # Baseline and Random (the local engine's count)
        assert sum(counts) == learning * len(decisions)
        assert [events for events, _ in streamed] == [len(decisions)] * groups
        assert ungrouped(streamed) == expected


def test_feature_importance_over_the_days_equals_the_whole_log(days_url: str) -> None:
    event_log = SqlEventLog(days_url)
    try:
        info = info_from_record(event_log.policies()["shop"]).model_dump_json()
    finally:
        event_log.close()
    whole = scores_over_log_in_worker(days_url, info, 0, 4e9)
    over_days = scores_over_days(LOCAL, days_url, info, 0, 4e9)
    assert over_days == whole
    assert whole.events > 0 and len(whole.scores) > 1
