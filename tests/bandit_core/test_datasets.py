"""Loaders of bandit_core.datasets: the news format, JSON Lines logs, classification CSV."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from bandit_core.datasets import (
    BanditLog,
    JsonlLog,
    LoggedEvent,
    LogSource,
    load_classification_csv,
    load_jsonl,
    load_news,
    news_dataset_path,
)
from bandit_core.errors import InvalidInputError

NEWS = news_dataset_path()


def test_news_columns_map_to_arm_features() -> None:
    log = load_news(NEWS)
    raw = np.loadtxt(NEWS, dtype=np.int64, max_rows=50)
    assert len(log) == 10_000 and log.features.shape == (10_000, 10, 10) and log.d == 10
    assert log.arm_ids == tuple(str(a) for a in range(10))
    for a in range(10):
        np.testing.assert_array_equal(log.features[:50, a], raw[:, 2 + 10 * a : 12 + 10 * a])
    np.testing.assert_array_equal(log.action[:50], raw[:, 0])
    np.testing.assert_array_equal(log.reward[:50], raw[:, 1])
    np.testing.assert_allclose(log.pscore, 0.1)
    first = next(iter(log))
    assert first.chosen == str(raw[0, 0]) and first.reward == raw[0, 1]


def test_the_packaged_news_data_set_is_the_default_and_reads_like_its_plain_text(
    tmp_path: Path,
) -> None:
    assert NEWS.name == "news_dataset.txt.gz" and NEWS.is_file()
    plain = tmp_path / "news_dataset.txt"
    with gzip.open(NEWS, "rb") as fh:
        plain.write_bytes(fh.read())
    default, from_text = load_news(), load_news(plain)
    np.testing.assert_array_equal(default.features, from_text.features)
    np.testing.assert_array_equal(default.action, from_text.action)
    np.testing.assert_array_equal(default.reward, from_text.reward)
    assert int(default.reward.sum()) == 1039  # the clicks of the 10,000 events, as shipped


def test_jsonl_log_reads_gzip(tmp_path: Path) -> None:
    line = {
        "candidates": [{"id": "a", "features": [1.0]}, {"id": "b", "features": [2.0]}],
        "arm_id": "b",
        "reward": 1,
    }
    path = tmp_path / "log.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    (event,) = JsonlLog(path)
    assert event.chosen == "b" and event.reward == 1.0 and event.X.tolist() == [[1.0], [2.0]]


def test_a_gz_file_that_is_not_gzip_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "news.txt.gz"
    path.write_text("0 1 2\n")
    with pytest.raises(InvalidInputError, match="not the news format"):
        load_news(path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1 0 " + "0 " * 99 + "\n", "102 integers a line, but got 101"),
        ("1 2 " + "0 " * 100 + "\n", "click"),
        ("x 0 " + "0 " * 100 + "\n", "not the news format"),
        ("11 0 " + "0 " * 100 + "\n", "action must index the 10 arms"),
    ],
)
def test_news_rejects_malformed_files(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        load_news(path)


def _event(chosen: str = "b", **extra: object) -> dict:
    return {
        "candidates": [{"id": "a", "features": [1.0, 0.0]}, {"id": "b", "features": [0.0, 1.0]}],
        "context": [0.5],
        "arm_id": chosen,
        "reward": 1.0,
        **extra,
    }


def test_jsonl_events_concatenate_context_and_arm_features(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    lines = [_event("b", propensity=0.25, user_id="u"), _event("a", propensity=0.75)]
    path.write_text("\n".join(json.dumps(e) for e in lines) + "\n\n")
    events = list(JsonlLog(path))
    assert [e.chosen for e in events] == ["b", "a"]
    np.testing.assert_array_equal(events[0].X, [[0.5, 1.0, 0.0], [0.5, 0.0, 1.0]])
    assert events[0].pscore == 0.25 and events[0].user_id == "u"
    log = load_jsonl(path)
    assert log.features.shape == (2, 2, 3)
    np.testing.assert_array_equal(log.action, [1, 0])
    np.testing.assert_array_equal(log.pscore, [0.25, 0.75])


def test_jsonl_propensity_is_optional(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(_event()) + "\n")
    assert load_jsonl(path).pscore is None


@pytest.mark.parametrize(
    ("event", "match"),
    [
        ({"candidates": [], "arm_id": "a"}, r"log.jsonl:1: an event needs the key 'reward'"),
        (_event("z"), "arm_id must be one of the candidates"),
        (_event(propensity=0.0), r"pscore must be in \(0, 1\]"),
        (
            {**_event(), "candidates": [{"id": "a", "features": [1]}, {"id": "b"}]},
            "every candidate or none",
        ),
        (
            {"candidates": [{"id": "a"}, {"id": "b"}], "arm_id": "a", "reward": 1},
            "needs a context or arm features",
        ),
        (
            {
                **_event(),
                "candidates": [{"id": "a", "features": [1]}, {"id": "a", "features": [2]}],
                "arm_id": "a",
            },
            "must be unique",
        ),
    ],
)
def test_jsonl_rejects_bad_events_with_line_numbers(
    tmp_path: Path, event: dict, match: str
) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(event) + "\n")
    with pytest.raises(InvalidInputError, match=match):
        list(JsonlLog(path))


def test_from_events_needs_one_candidate_set() -> None:
    a = LoggedEvent.build(["a", "b"], "a", 1.0, context=[1.0])
    b = LoggedEvent.build(["a", "c"], "a", 1.0, context=[1.0])
    with pytest.raises(InvalidInputError, match="every event must have the candidates"):
        BanditLog.from_events([a, b])
    c = LoggedEvent.build(["a", "b"], "a", 1.0, context=[1.0], pscore=0.5)
    with pytest.raises(InvalidInputError, match="pscore must be given for every event or none"):
        BanditLog.from_events([c, a])


def test_sources_satisfy_the_log_source_protocol(tmp_path: Path) -> None:
    event = LoggedEvent.build(["a", "b"], "a", 1.0, context=[1.0])
    assert isinstance([event], LogSource)
    assert isinstance(BanditLog.from_events([event]), LogSource)
    assert isinstance(JsonlLog(tmp_path / "x.jsonl"), LogSource)


def _write_csv(path: Path) -> None:
    path.write_text("f1,species,f2\n3,setosa,4\n0,virginica,2\n1,setosa,1\n0,versicolor,0\n")


def test_classification_csv_scales_rows_and_indexes_classes(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    _write_csv(path)
    data = load_classification_csv(path, "species")
    assert data.classes == ("setosa", "versicolor", "virginica")
    np.testing.assert_array_equal(data.labels, [0, 2, 0, 1])
    np.testing.assert_allclose(data.X[0], [0.6, 0.8])
    np.testing.assert_allclose(np.linalg.norm(data.X[:3], axis=1), 1.0)
    np.testing.assert_array_equal(data.X[3], [0.0, 0.0])  # a zero row stays zero


def test_classification_shuffle_is_seeded_and_keeps_rows_with_labels(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    _write_csv(path)
    data = load_classification_csv(path, "species")
    s1 = data.shuffled(np.random.default_rng(3))
    s2 = data.shuffled(np.random.default_rng(3))
    np.testing.assert_array_equal(s1.X, s2.X)
    pairs = {(tuple(x), int(y)) for x, y in zip(data.X, data.labels)}
    assert {(tuple(x), int(y)) for x, y in zip(s1.X, s1.labels)} == pairs


@pytest.mark.parametrize(
    ("text", "label", "match"),
    [
        ("f1,y\n1,a\n", "label", "label column 'label' not in the header"),
        ("f1,y\nabc,a\n", "y", "column 'f1' must be numeric, but row 2 holds 'abc'"),
        ("f1,y\n1,a,3\n", "y", "row 2 has 3 fields"),
        ("f1,y\n", "y", "no rows"),
        ("y\na\n", "y", "at least one feature column"),
        ("f1,y\ninf,a\n", "y", "finite"),
    ],
)
def test_classification_csv_rejects_bad_files(
    tmp_path: Path, text: str, label: str, match: str
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        load_classification_csv(path, label)
