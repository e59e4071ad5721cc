"""How the cost of one LinUCB decision grows with K and with d.

Two sweeps, each point an interleaved comparison of the engine's LinUCB (public
``select`` + ``update``) with the numpy floor (:class:`benchmarks.reference.NumpyLinUCBFloor`):
K in 10 .. 10,000 at d = 32, and d in 8 .. 256 at K = 50. Writes
``benchmarks/results/scaling.json`` and the plot ``docs/img/scaling.png``; each point also
records the bytes of ``A^-1`` one decision reads (``8 K d^2``), the quantity that decides
where the curves bend (docs/performance.md).

    python -m benchmarks.scaling
    python -m benchmarks.scaling --ks 10,100,1000 --ds 8,32,128 --rounds 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmarks._harness import add_label_argument, figure_path

K_SWEEP = (10, 30, 100, 300, 1000, 3000, 10000)
D_SWEEP = (8, 16, 32, 64, 128, 256)
K_FIXED, D_FIXED = 50, 32


def measure(K: int, d: int, rounds: int, slice_s: float) -> dict[str, Any]:
    """One point: engine LinUCB and the floor at (K, d), interleaved."""
    from benchmarks import _harness as h
    from benchmarks.engine import engine_runner, floor_runner
    from benchmarks.reference import Workload

    pool = Workload.make(K, d)
    runners = {
        "engine linucb": engine_runner("linucb", K, d, pool, {}),
        "numpy floor": floor_runner(K, d, pool),
    }
    before = h.load()
    m = h.interleave(runners, rounds=rounds, slice_s=slice_s)
    engine, floor = m["engine linucb"], m["numpy floor"]
    return {
        "K": K,
        "d": d,
        "A_inv_bytes_per_decision": 8 * K * d * d,
        "engine_cpu": engine.cpu_median,
        "engine_wall": engine.wall_median,
        "floor_cpu": floor.cpu_median,
        "floor_wall": floor.wall_median,
        "engine_over_floor_cpu": h.ratio(engine, floor),
        "load_before": before,
        "load_after": h.load(),
    }


def plot(
    k_rows: list[dict[str, Any]],
    d_rows: list[dict[str, Any]],
    path: Path,
    overlay: tuple[str, dict[str, Any]] | None = None,
) -> None:
    """Two log-log panels (K sweep, d sweep); ``overlay`` adds ``(label, results JSON)``
    of another run's engine curve (e.g. the engine with a proposed change)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, rows, key, label in (
        (axes[0], k_rows, "K", f"K candidates (d = {D_FIXED})"),
        (axes[1], d_rows, "d", f"d features (K = {K_FIXED})"),
    ):
        xs = [r[key] for r in rows]
        ax.loglog(xs, [r["engine_cpu"] for r in rows], "o-", label="engine LinUCB")
        ax.loglog(xs, [r["floor_cpu"] for r in rows], "s--", label="numpy floor")
        if overlay is not None:
            other = overlay[1]["k_sweep" if key == "K" else "d_sweep"]
            ax.loglog(
                [r[key] for r in other], [r["engine_cpu"] for r in other], "D-", label=overlay[0]
            )
        ax.set_xlabel(label)
        ax.set_ylabel("decisions / s (CPU time)")
        ax.grid(True, which="both", alpha=0.3)
        twin = ax.twinx()
        twin.semilogx(
            xs,
            [r["engine_over_floor_cpu"] for r in rows],
            "^:",
            color="gray",
            label="engine / floor",
        )
        twin.set_ylim(0, 1.2)
        twin.set_ylabel("engine / floor", color="gray")
        for r in rows:  # where A^-1 of all candidates outgrows the 2 MiB L2 of one core
            if r["A_inv_bytes_per_decision"] > 2 * 2**20:
                ax.axvline(r[key], color="red", alpha=0.25)
                ax.text(r[key], ax.get_ylim()[0] * 1.5, " A^-1 > L2", color="red", fontsize=8)
                break
        lines = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
        ax.legend(lines, [ln.get_label() for ln in lines], fontsize=8, loc="lower left")
    fig.suptitle(
        "One LinUCB decision (select over K, then one update); 2-core shared VM, CPU-time rates"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default=",".join(map(str, K_SWEEP)), help="K values at d = 32")
    parser.add_argument("--ds", default=",".join(map(str, D_SWEEP)), help="d values at K = 50")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--slice", type=float, default=0.1, help="seconds per contender per round")
    parser.add_argument(
        "--engine-path", default="", help="import bandit_core from this checkout instead"
    )
    add_label_argument(parser, "scaling", figure=True)
    parser.add_argument(
        "--overlay", default="", help="label of another run in results/scaling.json to draw beside"
    )
    parser.add_argument("--overlay-label", default="engine, other run")
    parser.add_argument(
        "--replot", action="store_true", help="only redraw run --label from results/scaling.json"
    )
    args = parser.parse_args(argv)
    if args.engine_path:
        sys.path.insert(0, str(Path(args.engine_path).resolve()))

    from benchmarks import _harness as h

    png = figure_path("scaling", args.label)
    overlay = (args.overlay_label, h.read_run("scaling", args.overlay)) if args.overlay else None
    if args.replot:
        done = h.read_run("scaling", args.label)
        plot(done["k_sweep"], done["d_sweep"], png, overlay)
        print(f"wrote {png.relative_to(h.ROOT)}")
        return 0
    k_rows = [measure(int(K), D_FIXED, args.rounds, args.slice) for K in args.ks.split(",")]
    d_rows = [measure(K_FIXED, int(d), args.rounds, args.slice) for d in args.ds.split(",")]
    cols = [
        "K",
        "d",
        "A_inv_bytes_per_decision",
        "engine_cpu",
        "floor_cpu",
        "engine_over_floor_cpu",
        "engine_wall",
    ]
    for title, rows in (("K sweep", k_rows), ("d sweep", d_rows)):
        print(f"\n{title}")
        print(
            h.table([{**r, "load": r["load_before"]["loadavg"][0]} for r in rows], [*cols, "load"])
        )
    plot(k_rows, d_rows, png, overlay)
    path = h.write_json(
        "scaling",
        {
            "rounds": args.rounds,
            "slice_s": args.slice,
            "k_sweep": k_rows,
            "d_sweep": d_rows,
            "plot": str(png.relative_to(h.ROOT)),
        },
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)} and {png.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
