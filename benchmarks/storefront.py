"""Click rate on a simulated storefront, before and after its catalog is replaced.

Runs, on :class:`bandit_core.storefront.Storefront` (JSON shoppers and items, closed-form
click rates, every item replaced by one with a new id at ``--replace-at``), over several
seeds:

* the shared model: ``hybrid_linucb`` with no per-arm part over each action's featurized
  vector (context, item, every context x item interaction; dense, ``--bits``), with
  epsilon-greedy at 20 % (Personalizer's default) and with the UCB width (``--alpha``);
* per-arm ``linucb`` over the featurized context alone (``--context-bits``, no
  interactions), each item its own arm, with the same two explorations;
* ``random``.

Each seed's storefront draws (catalogs, shoppers, offers) are the same for every policy.
Writes run ``--label`` of ``benchmarks/results/storefront.json`` (per seed, per window: click rate and expected
click rate of the chosen item and of the best offered one) and the figure
``docs/img/storefront.png`` (``storefront_<label>.png`` for a label other than ``latest``), and prints the table of docs/features.md ("Simulated storefront").

    python -m benchmarks.storefront                     # the numbers of docs/features.md
    python -m benchmarks.storefront --seeds 2 --rounds 2000 --replace-at 1000 --label quick
    python -m benchmarks.storefront --contender "shared hybrid_linucb, epsilon" --fold-every 100 --label fold100
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument, figure_path, write_json

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Contender:
    """A policy of the comparison: ``shared`` says which rows it scores."""

    label: str
    algorithm: str
    shared: bool
    params: dict[str, Any]


def contenders(alpha: float) -> list[Contender]:
    """The compared policies: shared and per-arm, each with epsilon-greedy at 20 % and with
    the UCB width ``alpha``, and random."""
    eps = {"alpha": 0.0, "epsilon": 0.2}
    ucb = {"alpha": alpha}
    return [
        Contender("shared hybrid_linucb, epsilon-greedy 20%", "hybrid_linucb", True, eps),
        Contender(f"shared hybrid_linucb, UCB alpha {alpha:g}", "hybrid_linucb", True, ucb),
        Contender("per-arm linucb, epsilon-greedy 20%", "linucb", False, eps),
        Contender(f"per-arm linucb, UCB alpha {alpha:g}", "linucb", False, ucb),
        Contender("random", "random", False, {}),
    ]


def window_means(values: np.ndarray, window: int) -> np.ndarray:
    """Means of ``values`` over consecutive windows of ``window`` rounds (the last may be shorter)."""
    return np.array([values[i : i + window].mean() for i in range(0, len(values), window)])


def phases(rounds: int, replace_at: int, span: int) -> dict[str, tuple[int, int]]:
    """The table's round ranges ``[start, end)``: the ``span`` rounds before the
    replacement, the first ``span`` after it, and the last ``span``."""
    return {
        "before": (replace_at - span, replace_at),
        "after": (replace_at, replace_at + span),
        "end": (rounds - span, rounds),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Click rate per window against rounds, mean over seeds with a +-1 std band; the
    oracle (expected click rate of the best offered item) dotted; the replacement marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window, replace_at = result["window"], result["replace_at"]
    fig, ax = plt.subplots(figsize=(12, 5))
    for label, runs in result["contenders"].items():
        curves = np.array([r["click_rate_per_window"] for r in runs])
        x = window * (np.arange(curves.shape[1]) + 0.5)
        mean, std = curves.mean(axis=0), curves.std(axis=0, ddof=1) if len(curves) > 1 else 0.0
        style = (
            "--" if label.startswith("per-arm") else ("-" if label.startswith("shared") else ":")
        )
        (line,) = ax.plot(x, mean, style, label=label, linewidth=1.5)
        ax.fill_between(x, mean - std, mean + std, alpha=0.15, color=line.get_color())
    oracle = np.array([r["best_mu_per_window"] for r in next(iter(result["contenders"].values()))])
    ax.plot(
        x, oracle.mean(axis=0), ":", color="black", label="oracle (best offered item, expected)"
    )
    ax.axvline(replace_at, color="red", alpha=0.6)
    ax.text(
        replace_at,
        ax.get_ylim()[1] * 0.97,
        " catalog replaced (new ids)",
        color="red",
        va="top",
        fontsize=9,
    )
    ax.set_xlabel("round")
    ax.set_ylabel(f"click rate per window of {window} rounds")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    c = result["storefront"]
    ax.set_title(
        f"Simulated storefront: {c['catalog_size']} items, {c['offered']} offered per round; "
        f"mean of {len(result['seeds'])} seeds, band +-1 std",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    """Markdown table: click rate per phase, mean +- std over seeds, and the share of the
    lift over random kept in the first rounds after the replacement."""
    names = list(result["phases"])
    rows = result["summary"]
    head = (
        "| policy | "
        + " | ".join(f"{n} {result['phases'][n]}" for n in names)
        + " | lift over random kept after |"
    )
    out = [head, "|" + "---|" * (len(names) + 2)]
    for label, s in rows.items():
        cells = [f"{s[n]['mean']:.3f} +- {s[n]['std']:.3f}" for n in names]
        kept = s.get("lift_kept")
        out.append(
            f"| {label} | " + " | ".join(cells) + f" | {'' if kept is None else f'{kept:.0%}'} |"
        )
    oracle = result["oracle"]
    out.append(
        "| oracle (expected, best offered) | "
        + " | ".join(f"{oracle[n]:.3f}" for n in names)
        + " | |"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (default %(default)s)")
    parser.add_argument(
        "--rounds", type=int, default=6000, help="rounds per run (default %(default)s)"
    )
    parser.add_argument(
        "--replace-at",
        type=int,
        default=3000,
        help="round at which every item is replaced by a new id (default %(default)s)",
    )
    parser.add_argument(
        "--catalog-size", type=int, default=100, help="items in a catalog (default %(default)s)"
    )
    parser.add_argument(
        "--offered", type=int, default=10, help="items offered per round (default %(default)s)"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=250,
        help="rounds per point of the curves (default %(default)s)",
    )
    parser.add_argument(
        "--span",
        type=int,
        default=500,
        help="rounds of each phase of the table (default %(default)s)",
    )
    parser.add_argument(
        "--bits",
        type=int,
        default=8,
        help="hash bits of the shared model's featurizer (default %(default)s)",
    )
    parser.add_argument(
        "--context-bits",
        type=int,
        default=6,
        help="hash bits of the per-arm models' context featurizer (default %(default)s)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.5,
        help="UCB width of the UCB contenders (default %(default)s)",
    )
    parser.add_argument(
        "--fold-every",
        type=int,
        default=1,
        help="learn the clicks in batches of this many rounds, as a fold does (a 1 s fold at "
        "R rewards a second: R); 1: each click at once (default %(default)s)",
    )
    parser.add_argument(
        "--contender",
        action="append",
        default=None,
        help="run only the contenders whose label starts with this (repeatable; random is "
        "always run, as the table's lift is over it)",
    )
    add_label_argument(parser, "storefront", figure=True)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    args = parser.parse_args(argv)
    if not 0 < args.span <= min(args.replace_at, args.rounds - args.replace_at):
        parser.error("--span must fit before and after --replace-at")

    from tqdm import tqdm

    import bandit_core
    from bandit_core.features import Featurizer, FeaturizerConfig
    from bandit_core.storefront import Storefront, context_rows, run_storefront, shared_rows

    shop = Storefront(catalog_size=args.catalog_size, offered=args.offered)
    shared = Featurizer(FeaturizerConfig(bits=args.bits, output="dense"))
    per_arm = Featurizer(FeaturizerConfig(bits=args.context_bits, interactions=(), output="dense"))
    seeds = list(range(args.seeds))
    spans = phases(args.rounds, args.replace_at, args.span)
    runs: dict[str, list[dict[str, Any]]] = {}
    todo = [
        c
        for c in contenders(args.alpha)
        if args.contender is None
        or c.algorithm == "random"
        or any(c.label.startswith(p) for p in args.contender)
    ]
    with tqdm(
        total=len(todo) * len(seeds) * args.rounds,
        unit="round",
        disable=args.no_progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
        for c in todo:
            featurizer = shared if c.shared else per_arm
            encode = shared_rows(featurizer) if c.shared else context_rows(featurizer)
            for seed in seeds:
                bar.set_description(f"{c.label}, seed {seed}")
                policy = bandit_core.make_policy(
                    c.algorithm, d=featurizer.config.dim, seed=seed, **c.params
                )
                run = run_storefront(
                    policy,
                    encode,
                    shop,
                    args.rounds,
                    args.replace_at,
                    np.random.default_rng(seed),
                    progress=bar.update,
                    fold_every=args.fold_every,
                )
                runs.setdefault(c.label, []).append(
                    {
                        "seed": seed,
                        "regret": run.regret,
                        "click_rate": {
                            n: float(run.clicks[a:b].mean()) for n, (a, b) in spans.items()
                        },
                        "expected_click_rate": {
                            n: float(run.chosen_mu[a:b].mean()) for n, (a, b) in spans.items()
                        },
                        "oracle": {
                            n: float(run.best_mu[a:b].mean()) for n, (a, b) in spans.items()
                        },
                        "click_rate_per_window": window_means(run.clicks, args.window).tolist(),
                        "expected_click_rate_per_window": window_means(
                            run.chosen_mu, args.window
                        ).tolist(),
                        "best_mu_per_window": window_means(run.best_mu, args.window).tolist(),
                    }
                )

    def spread(label: str, phase: str) -> dict[str, float]:
        v = np.array([r["click_rate"][phase] for r in runs[label]])
        return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0}

    summary: dict[str, dict[str, Any]] = {}
    for label in runs:
        summary[label] = {n: spread(label, n) for n in spans}
    for label, s in summary.items():
        if label != "random":
            lift_before = s["before"]["mean"] - summary["random"]["before"]["mean"]
            lift_after = s["after"]["mean"] - summary["random"]["after"]["mean"]
            s["lift_kept"] = lift_after / lift_before if lift_before > 0 else None
    first = runs["random"]
    result = {
        "storefront": {
            "catalog_size": shop.catalog_size,
            "offered": shop.offered,
            "quality_sd": shop.quality_sd,
        },
        "shared_featurizer": shared.config.to_dict(),
        "per_arm_featurizer": per_arm.config.to_dict(),
        "rounds": args.rounds,
        "replace_at": args.replace_at,
        "fold_every": args.fold_every,
        "window": args.window,
        "seeds": seeds,
        "phases": {n: list(r) for n, r in spans.items()},
        "oracle": {n: float(np.mean([r["oracle"][n] for r in first])) for n in spans},
        "summary": summary,
        "contenders": runs,
    }
    write_json("storefront", result, args.label)
    plot(result, figure_path("storefront", args.label))
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
