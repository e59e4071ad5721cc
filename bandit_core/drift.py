"""Page-Hinkley change detection on a stream of rewards (docs/algorithms.md section 10.5).

Page, "Continuous inspection schemes", Biometrika 1954; Hinkley, "Inference about the
change-point from cumulative sum tests", Biometrika 1971; in the streaming form of Gama,
Sebastião and Rodrigues, "On evaluating stream learning algorithms", Machine Learning
2013 (the one River's ``drift.PageHinkley`` implements). With ``x_bar_t`` the mean of
the first ``t`` values and ``delta`` the size of change tolerated,

    U_t = sum_{i <= t} (x_i - x_bar_i - delta)      (rises when the mean rises)
    L_t = sum_{i <= t} (x_i - x_bar_i + delta)      (falls when the mean falls)

a change is detected at ``t`` (after ``min_samples`` values) when
``U_t - min_{i <= t} U_i > threshold`` (the mean went up) or
``max_{i <= t} L_i - L_t > threshold`` (it went down); the statistics then start anew
from the next value. Under no change both excursions drift away from the threshold by
``delta`` per value, so false alarms fall fast with ``delta * threshold / variance``;
after a change of size ``c > delta`` the excursion grows by about ``c - delta`` per
value, so the delay is about ``threshold / (c - delta)`` values.

>>> detector = PageHinkley(PageHinkleyConfig(delta=0.0, threshold=3.0, min_samples=1))
>>> [detector.update(v) for v in (0.0, 0.0, 0.0, 0.0, 4.0, 4.0)]
[False, False, False, False, True, False]
>>> detector.state.detections, detector.state.n  # the fifth value moved U by 4 - 0.8 > 3
(1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bandit_core.errors import InvalidInputError
from bandit_core.state import ArrayState
from bandit_core.validation import check_int, check_real


@dataclass(frozen=True)
class PageHinkleyConfig:
    """``delta``: the change in mean tolerated; ``threshold``: the excursion that signals
    a change; ``min_samples``: values seen before a change may be signalled. The
    defaults are River's (``delta = 0.005``, ``threshold = 50``, ``min_instances = 30``)."""

    delta: float = 0.005
    threshold: float = 50.0
    min_samples: int = 30

    def __post_init__(self) -> None:
        object.__setattr__(self, "delta", check_real(self.delta, "delta", low=0.0))
        object.__setattr__(
            self, "threshold", check_real(self.threshold, "threshold", low=0.0, low_open=True)
        )
        object.__setattr__(self, "min_samples", check_int(self.min_samples, "min_samples", low=1))


@dataclass
class PageHinkleyState(ArrayState):
    """The statistics since the last detection: ``n`` values, their ``mean``, ``rise``
    (``U_t``) and its minimum, ``fall`` (``L_t``) and its maximum; ``detections`` counts
    the changes signalled since the detector started."""

    KIND: ClassVar[str] = "page_hinkley"
    n: int = 0
    mean: float = 0.0
    rise: float = 0.0
    rise_min: float = 0.0
    fall: float = 0.0
    fall_max: float = 0.0
    detections: int = 0


class PageHinkley:
    """A two-sided Page-Hinkley detector over explicit state (see the module docstring)."""

    def __init__(self, config: PageHinkleyConfig, state: PageHinkleyState | None = None) -> None:
        self.config = config
        self.state = PageHinkleyState() if state is None else state

    def update(self, value: float) -> bool:
        """Take one value; return whether a change is detected with it."""
        value = check_real(value, "value", error=InvalidInputError)
        s, delta = self.state, self.config.delta
        s.n += 1
        s.mean += (value - s.mean) / s.n
        s.rise += value - s.mean - delta
        s.rise_min = min(s.rise_min, s.rise)
        s.fall += value - s.mean + delta
        s.fall_max = max(s.fall_max, s.fall)
        if s.n < self.config.min_samples:
            return False
        threshold = self.config.threshold
        if s.rise - s.rise_min > threshold or s.fall_max - s.fall > threshold:
            self.state = PageHinkleyState(detections=s.detections + 1)
            return True
        return False

    @property
    def excursion(self) -> float:
        """The larger of the two excursions now (``U_t - min U``, ``max L - L_t``): how
        close the stream is to a detection, in the units of ``threshold``."""
        s = self.state
        return max(s.rise - s.rise_min, s.fall_max - s.fall)
