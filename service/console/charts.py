"""The console's charts as SVG geometry computed on the server (docs/console.md,
"Charts"): the templates draw the polylines and polygons given here, no script and no
chart library in the browser."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from service.usecases.activity import PolicyActivity

WIDTH = 720
HEIGHT = 240
MARGIN_LEFT = 56
MARGIN_RIGHT = 16
MARGIN_TOP = 12
MARGIN_BOTTOM = 28
COLOURS = ("#1f6feb", "#d1242f", "#1a7f37", "#9a6700", "#8250df", "#0a7b83", "#bf3989")
MOST_ARMS_DRAWN = len(COLOURS)


@dataclass(frozen=True)
class Marker:
    """A point of a series with the value it shows, how many records it stands for
    (``count``) and its tooltip (``title``); ``whisker``: the heights of its interval's
    ends, when it has one (drawn as a line, seen where a band is one bucket wide)."""

    x: float
    y: float
    value: float
    count: int
    title: str
    whisker: tuple[float, float] | None = None


@dataclass(frozen=True)
class Series:
    """A polyline through ``markers`` and, when ``band`` is set, its interval band (the
    polygon's points)."""

    name: str
    colour: str
    points: str
    markers: list[Marker] = field(default_factory=list)
    band: str | None = None


@dataclass(frozen=True)
class Rule:
    """A vertical line at ``x`` marking an event at time ``at`` (a drift detection)."""

    x: float
    at: float
    title: str


@dataclass(frozen=True)
class Chart:
    """An SVG chart: series as polylines (each with its interval band, if any), the
    axes' ticks as (position, label), and vertical rules marking events."""

    width: int
    height: int
    series: list[Series]
    y_ticks: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]
    rules: list[Rule] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not any(s.markers for s in self.series)


class _Scale:
    def __init__(self, since: float, until: float, low: float, high: float) -> None:
        if high <= low:
            low, high = low - 0.5, high + 0.5
        self.since, self.until, self.low, self.high = since, until, low, high

    def x(self, t: float) -> float:
        inner = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
        return round(MARGIN_LEFT + inner * (t - self.since) / (self.until - self.since), 1)

    def y(self, v: float) -> float:
        inner = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
        return round(MARGIN_TOP + inner * (self.high - v) / (self.high - self.low), 1)

    def y_ticks(self) -> list[tuple[float, str]]:
        steps = 4
        values = [self.low + (self.high - self.low) * i / steps for i in range(steps + 1)]
        return [(self.y(v), f"{v:.3g}") for v in values]

    def x_ticks(self) -> list[tuple[float, str]]:
        steps = 4
        times = [self.since + (self.until - self.since) * i / steps for i in range(steps + 1)]
        return [(self.x(t), time.strftime("%H:%M", time.gmtime(t))) for t in times]


def reward_chart(activity: PolicyActivity, drift_at: list[float]) -> Chart:
    """The mean reward of each bucket at the bucket's middle and the IPS estimates of
    the baseline's and of uniform random's reward, each with its 95% interval as a band,
    and a rule at each time of ``drift_at``, the drift detections (docs/console.md,
    "Reward over time", "Baseline and random")."""
    lines = [
        ("policy", COLOURS[0], activity.points),
        ("baseline (IPS)", COLOURS[2], activity.baseline),
        ("random (IPS)", COLOURS[3], activity.random),
    ]
    every = [p for _, _, points in lines for p in points]
    low = min((p.low for p in every), default=0.0)
    high = max((p.high for p in every), default=1.0)
    scale = _Scale(activity.since, activity.until, low, high)
    half = activity.bucket_seconds / 2
    series = []
    for name, colour, points in lines:
        # each point's x and the heights of its mean, low and high
        at = [
            (scale.x(p.start + half), scale.y(p.mean), scale.y(p.low), scale.y(p.high))
            for p in points
        ]
        markers = [
            Marker(
                x,
                y,
                p.mean,
                p.rewards,
                f"{name}: {p.mean:.4f} [{p.low:.4f}, {p.high:.4f}], {p.rewards} rewards",
                (y_low, y_high),
            )
            for p, (x, y, y_low, y_high) in zip(points, at, strict=True)
        ]
        upper = [f"{x},{y_high}" for x, _, _, y_high in at]
        lower = [f"{x},{y_low}" for x, _, y_low, _ in reversed(at)]
        line = " ".join(f"{m.x},{m.y}" for m in markers)
        series.append(Series(name, colour, line, markers, " ".join(upper + lower) or None))
    return Chart(
        WIDTH,
        HEIGHT,
        series,
        scale.y_ticks(),
        scale.x_ticks(),
        [
            Rule(scale.x(t), t, time.strftime("drift detected %H:%M:%S UTC", time.gmtime(t)))
            for t in drift_at
        ],
    )


def latency_chart(activity: PolicyActivity) -> Chart:
    """The p50 and p99 decision latency (ms) of each bucket at the bucket's middle, from
    the event log's latency histogram (docs/console.md, "Decision latency")."""
    points = activity.latency
    scale = _Scale(
        activity.since, activity.until, 0.0, max((p.p99_ms for p in points), default=1.0)
    )
    half = activity.bucket_seconds / 2
    series = []
    for colour, (name, of) in zip(
        COLOURS, (("p50", lambda p: p.p50_ms), ("p99", lambda p: p.p99_ms)), strict=False
    ):
        markers = [
            Marker(
                scale.x(p.start + half),
                scale.y(of(p)),
                of(p),
                p.decisions,
                f"{name} {of(p):.3g} ms of {p.decisions} decisions",
            )
            for p in points
        ]
        series.append(Series(name, colour, " ".join(f"{m.x},{m.y}" for m in markers), markers))
    return Chart(WIDTH, HEIGHT, series, scale.y_ticks(), scale.x_ticks())


def share_chart(activity: PolicyActivity) -> Chart:
    """Each of the most chosen arms' share of the decisions of each bucket (0 to 1)."""
    totals: dict[float, int] = {}
    for counts in activity.arm_decisions.values():
        for start, count in counts.items():
            totals[start] = totals.get(start, 0) + count
    scale = _Scale(activity.since, activity.until, 0.0, 1.0)
    half = activity.bucket_seconds / 2
    series = []
    for colour, arm in zip(COLOURS, activity.selection_share(), strict=False):
        counts = activity.arm_decisions[arm]
        markers = [
            Marker(
                scale.x(start + half),
                scale.y(counts.get(start, 0) / total),
                counts.get(start, 0) / total,
                counts.get(start, 0),
                f"{arm}: {counts.get(start, 0)} of {total}",
            )
            for start, total in sorted(totals.items())
        ]
        series.append(Series(arm, colour, " ".join(f"{m.x},{m.y}" for m in markers), markers))
    return Chart(WIDTH, HEIGHT, series, scale.y_ticks(), scale.x_ticks())


INTERVAL_LABEL_WIDTH = 200
INTERVAL_ROW_HEIGHT = 44
ESTIMATOR_COLOURS = {"IPS": COLOURS[0], "SNIPS": COLOURS[1]}


@dataclass(frozen=True)
class IntervalMark:
    """One estimate drawn as a dot at ``x`` with a whisker from ``x_low`` to ``x_high``:
    ``value`` and its 95% interval ``[low, high]``."""

    candidate: str
    estimator: str
    colour: str
    y: float
    x: float
    x_low: float
    x_high: float
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class IntervalChart:
    """Estimates with intervals, one row per candidate (``rows``: the label's position
    and text), a mark per estimator in each row."""

    width: int
    height: int
    left: int
    marks: list[IntervalMark]
    rows: list[tuple[float, str]]
    x_ticks: list[tuple[float, str]]


def interval_chart(
    estimates: list[tuple[str, dict[str, tuple[float, float, float]]]],
) -> IntervalChart:
    """``estimates``: each candidate's name and, by estimator (``IPS``, ``SNIPS``), its
    value and 95% interval ``(value, low, high)``; drawn on one value axis."""
    bounds = [b for _, by in estimates for v in by.values() for b in v]
    low, high = min(bounds, default=0.0), max(bounds, default=1.0)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    inner = WIDTH - INTERVAL_LABEL_WIDTH - MARGIN_RIGHT

    def x(v: float) -> float:
        return round(INTERVAL_LABEL_WIDTH + inner * (v - low) / (high - low), 1)

    marks, rows = [], []
    for i, (candidate, by_estimator) in enumerate(estimates):
        top = MARGIN_TOP + i * INTERVAL_ROW_HEIGHT
        rows.append((top + INTERVAL_ROW_HEIGHT / 2, candidate))
        for j, (estimator, (value, lo, hi)) in enumerate(by_estimator.items()):
            y = top + INTERVAL_ROW_HEIGHT * (j + 1) / (len(by_estimator) + 1)
            colour = ESTIMATOR_COLOURS.get(estimator, COLOURS[-1])
            marks.append(
                IntervalMark(candidate, estimator, colour, y, x(value), x(lo), x(hi), value, lo, hi)
            )
    steps = 4
    ticks = [low + (high - low) * i / steps for i in range(steps + 1)]
    height = MARGIN_TOP + len(estimates) * INTERVAL_ROW_HEIGHT + MARGIN_BOTTOM
    return IntervalChart(
        WIDTH, height, INTERVAL_LABEL_WIDTH, marks, rows, [(x(t), f"{t:.3g}") for t in ticks]
    )


BAR_HEIGHT = 22
BAR_VALUE_WIDTH = 48  # room for the value written after the longest bar


@dataclass(frozen=True)
class Bar:
    """One ranked value: its label, the bar's width and row, and whether it is flagged."""

    label: str
    value: float
    y: float
    width: float
    flagged: bool


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    left: int
    bars: list[Bar]


def bar_chart(items: list[tuple[str, float, bool]]) -> BarChart:
    """Horizontal bars of ``items`` (label, value in [0, 1], flagged) in the given order,
    a value of 1 across the whole plot."""
    inner = WIDTH - INTERVAL_LABEL_WIDTH - MARGIN_RIGHT - BAR_VALUE_WIDTH
    bars = [
        Bar(
            label,
            value,
            MARGIN_TOP + i * BAR_HEIGHT,
            round(inner * min(max(value, 0.0), 1.0), 1),
            flagged,
        )
        for i, (label, value, flagged) in enumerate(items)
    ]
    height = MARGIN_TOP + len(bars) * BAR_HEIGHT + MARGIN_BOTTOM
    return BarChart(WIDTH, height, INTERVAL_LABEL_WIDTH, bars)
