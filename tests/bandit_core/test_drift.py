"""Page-Hinkley (docs/algorithms.md section 10.5): no alarm on stationary streams, a
bounded delay after a change, state that round-trips through bytes."""

from __future__ import annotations

import numpy as np
import pytest

from bandit_core.drift import PageHinkley, PageHinkleyConfig, PageHinkleyState
from bandit_core.errors import ConfigError, InvalidInputError

CONFIG = PageHinkleyConfig(delta=0.02, threshold=50.0)
SEEDS = range(10)


def _detections(detector: PageHinkley, values: np.ndarray) -> list[int]:
    return [t for t, v in enumerate(values.tolist()) if detector.update(v)]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_stationary_click_stream_raises_no_alarm(seed: int) -> None:
    clicks = (np.random.default_rng(seed).random(20_000) < 0.5).astype(float)
    assert _detections(PageHinkley(CONFIG), clicks) == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("before", "after"), [(0.5, 0.2), (0.2, 0.5)])
def test_a_change_in_click_rate_is_detected_once_within_its_expected_delay(
    seed: int, before: float, after: float
) -> None:
    """A change of size c = 0.3 moves the excursion by about c - delta = 0.28 per value:
    the delay is about threshold / 0.28 = 179 values; allowed: (0, 400]."""
    rng = np.random.default_rng(seed)
    clicks = np.concatenate([rng.random(5_000) < before, rng.random(3_000) < after]).astype(float)
    hits = _detections(PageHinkley(CONFIG), clicks)
    assert len(hits) == 1 and 0 < hits[0] - 5_000 <= 400


def test_a_constant_stream_never_alarms_and_min_samples_holds_the_first_alarm() -> None:
    detector = PageHinkley(PageHinkleyConfig(delta=0.0, threshold=1.0, min_samples=10))
    assert _detections(detector, np.full(1_000, 0.7)) == []
    detector = PageHinkley(PageHinkleyConfig(delta=0.0, threshold=1.0, min_samples=10))
    # U jumps by 9 - 0.9 = 8.1 at the second value, but no alarm before the tenth value
    assert _detections(detector, np.array([0.0] + [9.0] * 20)) == [9]


def test_the_state_round_trips_and_continues_identically() -> None:
    rng = np.random.default_rng(0)
    values = rng.random(300)
    a = PageHinkley(CONFIG)
    _detections(a, values)
    b = PageHinkley(CONFIG, PageHinkleyState.from_bytes(a.state.to_bytes()))
    more = np.concatenate([rng.random(200) < 0.9, rng.random(500) < 0.1]).astype(float)
    assert _detections(a, more) == _detections(b, more) != []
    assert a.state == b.state and a.excursion == b.excursion


def test_bad_values_and_settings_are_named() -> None:
    with pytest.raises(InvalidInputError, match="value must be a finite number, but got nan"):
        PageHinkley(CONFIG).update(float("nan"))
    with pytest.raises(ConfigError, match="threshold must be a finite number > 0, but got 0"):
        PageHinkleyConfig(threshold=0)
