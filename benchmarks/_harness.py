"""Shared measurement machinery of the benchmark scripts.

The machine these numbers come from is small and shared (2 cores, several other busy
processes), so absolute rates drift from one minute to the next. Every script therefore
compares contenders *in the same run*: :func:`interleave` runs them in short slices, in
a fresh random order each round, and ratios are taken round by round (both contenders
measured seconds apart) before the median over rounds is kept. Each slice records wall
time and the process's CPU time; CPU time excludes the time the scheduler gave to other
processes, so CPU-time ratios are the steadier of the two.

BLAS is pinned to one thread before numpy is imported (see :mod:`benchmarks`), so CPU
time equals the time of the one thread doing the work.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

Runner = Callable[[int], None]
"""A contender: ``run(n)`` performs ``n`` units of work (decisions, events)."""


@dataclass
class Measurement:
    """Per-round rates (units per second) of one contender, wall and CPU time."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def wall_median(self) -> float:
        return statistics.median(self.wall)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu)


def _calibrate(run: Runner, target_s: float, max_n: int) -> int:
    """Units of work that take about ``target_s`` seconds (at least 1)."""
    n = 1
    while True:
        t0 = time.perf_counter()
        run(n)
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or n >= max_n:
            return max(1, min(max_n, int(n * target_s / max(dt, 1e-9))))
        n *= 4


def interleave(
    contenders: Mapping[str, Runner],
    *,
    rounds: int = 9,
    slice_s: float = 0.05,
    max_n: int = 1_000_000,
    seed: int = 0,
) -> dict[str, Measurement]:
    """Measure every contender ``rounds`` times, in a shuffled order each round.

    Each contender first runs a calibration (which also warms it up), then each
    round runs it for about ``slice_s`` seconds. Returns per-round rates.
    """
    sizes = {name: _calibrate(run, slice_s, max_n) for name, run in contenders.items()}
    out = {name: Measurement() for name in contenders}
    order = list(contenders)
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            n = sizes[name]
            w0, c0 = time.perf_counter(), time.process_time()
            contenders[name](n)
            w1, c1 = time.perf_counter(), time.process_time()
            out[name].wall.append(n / max(w1 - w0, 1e-9))
            out[name].cpu.append(n / max(c1 - c0, 1e-9))
    return out


def ratio(a: Measurement, b: Measurement, clock: str = "cpu") -> float:
    """Median over rounds of ``rate(a) / rate(b)`` (both measured in the same round)."""
    ra, rb = getattr(a, clock), getattr(b, clock)
    return statistics.median(x / y for x, y in zip(ra, rb))


def load() -> dict[str, Any]:
    """1/5/15-minute load averages and the moment they were read."""
    one, five, fifteen = os.getloadavg()
    return {"loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)], "utc": _utc()}


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def machine() -> dict[str, Any]:
    """What the numbers were measured on: CPU, cores, Python, numpy, BLAS, engine commit."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    import bandit_core

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "bandit_core": str(Path(bandit_core.__file__).parent),
        "commit": commit,
    }


LATEST = "latest"


def read_run(benchmark: str, label: str = LATEST) -> dict[str, Any]:
    """Run ``label`` of ``benchmarks/results/<benchmark>.json``."""
    return json.loads((RESULTS / f"{benchmark}.json").read_text())["runs"][label]


def write_json(benchmark: str, payload: Mapping[str, Any], label: str = LATEST) -> Path:
    """Record ``payload`` plus machine facts as run ``label`` of
    ``benchmarks/results/<benchmark>.json``.

    One file per benchmark: ``{"benchmark": name, "runs": {label: run, ...}}``. A run
    replaces the earlier run of the same label and keeps the others, so the before and
    after of a change sit side by side under their labels (``--label before``)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{benchmark}.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else {}
    runs[label] = {
        "command": " ".join([Path(sys.executable).name, *sys.orig_argv[1:]]),
        "machine": machine(),
        **payload,
    }
    path.write_text(json.dumps({"benchmark": benchmark, "runs": runs}, indent=2) + "\n")
    return path


def add_label_argument(
    parser: argparse.ArgumentParser, benchmark: str, figure: bool = False
) -> None:
    """``--label``: the run of ``benchmarks/results/<benchmark>.json`` a script writes
    (see :func:`write_json`); with ``figure``, also the name of its plot
    (:func:`figure_path`)."""
    text = (
        f"label of this run in results/{benchmark}.json; a run replaces the one of the same label"
    )
    if figure:
        text += f"; the plot is docs/img/{benchmark}.png for {LATEST}, docs/img/{benchmark}_<label>.png otherwise"
    parser.add_argument("--label", default=LATEST, help=text + " (default %(default)s)")


def figure_path(benchmark: str, label: str) -> Path:
    """``docs/img/<benchmark>.png`` for the latest run, ``<benchmark>_<label>.png`` otherwise."""
    return (
        ROOT
        / "docs"
        / "img"
        / (f"{benchmark}.png" if label == LATEST else f"{benchmark}_{label}.png")
    )


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Plain-text table (also valid Markdown) of ``rows`` restricted to ``columns``."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return "" if v is None else str(v)

    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
        for i, c in enumerate(columns)
    ]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(v.rjust(w) for v, w in zip(row, widths)) + " |" for row in cells]
    return "\n".join(lines)
