"""What the offline-evaluation commands print and write (docs/offline.md): the progress
bar, the JSON summary of a set of replays, the PNG of cumulative curves (mean over seeds,
band of +-1 standard deviation) and the ``--json`` file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bandit_core.evaluation import SeedReplays, Spread
from service.cli.arguments import CliError


def progress_bar(total: int | None, disable: bool, unit: str) -> Any:
    """A tqdm bar on stderr (``disable``: drawn nowhere)."""
    from tqdm import tqdm

    return tqdm(total=total, disable=disable, unit=unit, file=sys.stderr, dynamic_ncols=True)


def _spread_dict(s: Spread) -> dict[str, float]:
    return {"mean": s.mean, "std": s.std, "min": s.min, "max": s.max}


def replay_summary(runs: SeedReplays) -> dict[str, Any]:
    """The JSON fields of the replays of one policy over its seeds."""
    res = runs.results
    return {
        "cumulative_reward": runs.cumulative_reward.mean,
        "cumulative_reward_std": runs.cumulative_reward.std,
        "mean_reward": runs.mean_reward.mean,
        "matched": float(np.mean([r.matched for r in res])),
        "events_seen": float(np.mean([r.events_seen for r in res])),
        "seconds": runs.seconds.mean,
        "cpu_seconds": runs.cpu_seconds.mean,
        "spread": {
            "cumulative_reward": _spread_dict(runs.cumulative_reward),
            "mean_reward": _spread_dict(runs.mean_reward),
            "seconds": _spread_dict(runs.seconds),
            "cpu_seconds": _spread_dict(runs.cpu_seconds),
        },
        "per_seed": [{"seed": s, **r.to_dict()} for s, r in zip(runs.seeds, res, strict=True)],
        "curve": runs.mean_curve().tolist(),
    }


def protocol(rejection: bool) -> str:
    """The replay protocol's description in a JSON result."""
    return (
        "rejection-sampling replay (Li et al. 2011): matched events accepted with probability p_min/pscore"
        if rejection
        else "strict replay (Li et al. 2011): the policy learns only from events whose logged arm it chose"
    )


Line = tuple[str, np.ndarray, dict[str, Any]]


def plot(path: Path, panels: Sequence[tuple[str, str, Sequence[Line]]], title: str) -> None:
    """Write a PNG with one panel per ``(x label, y label, lines)``, a line being
    ``(label, curves (S, T), matplotlib style)``: the mean over the S seeds with a band of
    +-1 standard deviation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 5), squeeze=False)
    for ax, (xlabel, ylabel, lines) in zip(axes[0], panels, strict=True):
        for label, curves, style in lines:
            curves = np.atleast_2d(curves)
            mean = curves.mean(axis=0)
            std = curves.std(axis=0, ddof=1) if curves.shape[0] > 1 else np.zeros_like(mean)
            t = np.arange(1, mean.size + 1)
            (drawn,) = ax.plot(t, mean, label=label, linewidth=1.4, **style)
            if curves.shape[0] > 1:
                ax.fill_between(t, mean - std, mean + std, alpha=0.15, color=drawn.get_color())
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, format="png", dpi=110)
    except OSError as exc:
        raise CliError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def write_json(path: Path | None, payload: dict[str, Any]) -> None:
    """Write ``payload`` to the ``--json`` file ``path`` (None: nowhere)."""
    if path is None:
        return
    try:
        path.write_text(json.dumps(payload, indent=2) + "\n")
    except OSError as exc:
        raise CliError(f"--json {path}: {exc.strerror or exc}") from None


def format_params(params: dict[str, Any]) -> str:
    """``KEY=VALUE ...`` of a policy's parameters for a summary line."""
    return " ".join(f"{k}={v}" for k, v in params.items()) or "(defaults)"
