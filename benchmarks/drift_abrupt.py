"""Russac et al.'s abrupt-change experiment (docs/algorithms.md section 10.4).

The setting of "Weighted Linear Bandits for Non-Stationary Environments" (NeurIPS 2019,
Figure 1; the authors' notebook ``Experiments/exp_ABRUPT_ENV_NEW.ipynb``): ``d = 2``,
``K = 50`` actions drawn each round uniformly in ``[-1, 1]^2`` (scaled onto the unit disc
when outside it), reward ``a^T theta_t + N(0, 1)``, ``T = 6000`` rounds; ``theta`` is
``(1, 0)``, then ``(-1, 0)`` from round 1001, ``(0, 1)`` from 2001 and ``(0, -1)`` from
3001 (``B_T = 4 + sqrt 2``). ``lambda = 0.1``, ``delta = 0.01``, ``S = 1``, and their
tuning ``gamma = 1 - (B_T / (d T))^(2/3)`` and window ``tau = (d T / B_T)^(2/3)``.

Contenders: LinUCB, D-LinUCB, SW-LinUCB, and LinUCB restarted at the true change points
(the oracle). Each is the engine's state of its registered policy
(:class:`bandit_core.linear.LinearArmState`, :class:`bandit_core.forgetting.DiscountedArmState`,
:class:`bandit_core.forgetting.WindowArmState`) holding the one parameter every action
shares, scored with the confidence radius ``beta_t`` of its paper (the registered
policies score ``alpha`` times the same widths with a fixed ``alpha``). Dynamic regret:
``sum_t max_a a^T theta_t - a_t^T theta_t``.

Run: ``python -m benchmarks.drift_abrupt [--seeds 100]``; prints the final regret of
each (mean and the 5 % / 95 % quantiles over seeds), writes
``benchmarks/results/drift_abrupt.json`` and the figure ``docs/img/drift_abrupt.png``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from bandit_core.forgetting import DiscountedArmState, WindowArmState
from bandit_core.linear import LinearArmState
from benchmarks._harness import add_label_argument, figure_path, write_json

D, K, T = 2, 50, 6000
LAMBDA, DELTA, S, SIGMA = 0.1, 0.01, 1.0, 1.0
THETAS = [
    (0, (1.0, 0.0)),
    (1000, (-1.0, 0.0)),
    (2000, (0.0, 1.0)),
    (3000, (0.0, -1.0)),
]  # from round index
B_T = 4 + math.sqrt(2)
GAMMA = 1 - (B_T / (D * T)) ** (2 / 3)
TAU = (D * T / B_T) ** (2 / 3)
WINDOW = round(TAU)
CHANGES = [start for start, _ in THETAS[1:]]
QUANTILES = (5, 95)


def _radius(log_term: float) -> float:
    """``sqrt(lambda) S + sigma sqrt(2 log(1/delta) + d log(1 + log_term))``."""
    return math.sqrt(LAMBDA) * S + SIGMA * math.sqrt(
        2 * math.log(1 / DELTA) + D * math.log(1 + log_term)
    )


class Learner:
    """One contender: a state of the engine over the shared parameter and its radius."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.reset()

    def reset(self) -> None:
        self.t = 0  # updates since the (re)start
        if self.name == "D-LinUCB":
            self.state: object = DiscountedArmState.prior(D, LAMBDA)
        elif self.name == "SW-LinUCB":
            self.state = WindowArmState.prior(D, LAMBDA, WINDOW)
        else:
            self.state = LinearArmState.prior(D, LAMBDA)

    def radius(self) -> float:
        t = self.t
        if self.name == "D-LinUCB":  # Russac et al., Theorem 1
            return _radius((1 - GAMMA ** (2 * t)) / (D * LAMBDA * (1 - GAMMA**2)))
        if self.name == "SW-LinUCB":  # the window holds min(t, tau) observations
            return _radius(min(t, WINDOW) / (D * LAMBDA))
        return _radius(t / (D * LAMBDA))  # Abbasi-Yadkori et al. 2011

    def choose(self, A: np.ndarray, rng: np.random.Generator) -> int:
        s = self.state
        matrix = s.width_matrix if isinstance(s, DiscountedArmState) else s.A_inv  # type: ignore[attr-defined]
        width = np.sqrt(np.einsum("kd,de,ke->k", A, matrix, A))
        ucb = A @ s.theta + self.radius() * width  # type: ignore[attr-defined]
        best = np.flatnonzero(ucb == ucb.max())
        return int(best[0] if len(best) == 1 else rng.choice(best))

    def learn(self, a: np.ndarray, reward: float) -> None:
        self.t += 1
        s = self.state
        if isinstance(s, DiscountedArmState):
            s.add(a, reward, float(self.t), math.log(GAMMA), LAMBDA)
        elif isinstance(s, WindowArmState):
            s.add(a, reward, float(self.t), LAMBDA, None)
        else:
            s.add(a, reward, reward, refactor_every=1000)  # type: ignore[attr-defined]


NAMES = ["LinUCB", "D-LinUCB", "SW-LinUCB", "LinUCB-oracle"]


def actions(rng: np.random.Generator) -> np.ndarray:
    """K actions uniform in ``[-1, 1]^d``, those outside the unit disc scaled onto it."""
    A = rng.uniform(-1.0, 1.0, size=(K, D))
    norms = np.linalg.norm(A, axis=1)
    A[norms > 1] /= norms[norms > 1, None]
    return A


def run_seed(seed: int, on_round: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """Cumulative dynamic regret of every contender over one seed's rounds; the actions
    and noise are the same for all (one environment stream, one choice stream each)."""
    env = np.random.default_rng([seed, 0])
    learners = {name: Learner(name) for name in NAMES}
    rngs = {name: np.random.default_rng([seed, 1 + i]) for i, name in enumerate(NAMES)}
    regret = {name: np.zeros(T) for name in NAMES}
    theta = np.array(THETAS[0][1])
    for t in range(T):
        for start, value in THETAS:
            if t == start:
                theta = np.array(value)
                if t:
                    learners["LinUCB-oracle"].reset()
        A = actions(env)
        means = A @ theta
        noise = env.normal(0.0, SIGMA)
        for name, learner in learners.items():
            i = learner.choose(A, rngs[name])
            regret[name][t] = means.max() - means[i]
            learner.learn(A[i], float(means[i] + noise))
    return {name: np.cumsum(r) for name, r in regret.items()}


def plot(curves: dict[str, np.ndarray], n_seeds: int, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    rounds = np.arange(1, T + 1)
    for name in NAMES:
        c = curves[name]
        low, high = np.percentile(c, QUANTILES, axis=0)
        (line,) = ax.plot(rounds, c.mean(axis=0), label=name)
        ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2)
    for change in CHANGES:
        ax.axvline(change + 1, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("round t")
    ax.set_ylabel("cumulative dynamic regret")
    ax.set_title(
        f"Abrupt changes, d={D}, K={K}: mean and {QUANTILES[0]}-{QUANTILES[1]} % band over {n_seeds} seeds"
    )
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=int, default=100, help="number of seeds (default %(default)s)"
    )
    add_label_argument(parser, "drift_abrupt", figure=True)
    args = parser.parse_args()
    started = time.perf_counter()
    runs = [run_seed(seed) for seed in range(args.seeds)]
    curves = {name: np.stack([r[name] for r in runs]) for name in NAMES}
    summary = {}
    for name in NAMES:
        final = curves[name][:, -1]
        low, high = np.percentile(final, QUANTILES)
        summary[name] = {
            "final_mean": round(float(final.mean()), 2),
            f"final_q{QUANTILES[0]}": round(float(low), 2),
            f"final_q{QUANTILES[1]}": round(float(high), 2),
            "mean_at_changes": [
                round(float(curves[name][:, c - 1].mean()), 2) for c in [*CHANGES, T]
            ],
        }
        print(f"{name:14s} final regret {final.mean():8.1f}  [{low:7.1f}, {high:7.1f}]")
    oracle = summary["LinUCB-oracle"]["final_mean"]
    ratios = {name: round(summary[name]["final_mean"] / oracle, 2) for name in NAMES}
    print("final regret / oracle's:", ratios)
    path = figure_path("drift_abrupt", args.label)
    plot(curves, args.seeds, path)
    write_json(
        "drift_abrupt",
        {
            "setting": {
                "d": D,
                "K": K,
                "T": T,
                "lambda": LAMBDA,
                "delta": DELTA,
                "S": S,
                "sigma": SIGMA,
                "gamma": GAMMA,
                "window": WINDOW,
                "changes_at_round": [c + 1 for c in CHANGES],
            },
            "seeds": args.seeds,
            "seconds": round(time.perf_counter() - started, 1),
            "results": summary,
            "final_over_oracle": ratios,
            "figure": str(path.relative_to(path.parents[2])),
        },
        args.label,
    )


if __name__ == "__main__":
    main()
