"""Russac et al.'s abrupt-change experiment (docs/algorithms.md section 10.4).

The setting of "Weighted Linear Bandits for Non-Stationary Environments" (NeurIPS 2019,
Figure 1; the authors' notebook ``Experiments/exp_ABRUPT_ENV_NEW.ipynb``): ``d = 2``,
``K = 50`` actions drawn each round uniformly in ``[-1, 1]^2`` (scaled onto the unit disc
when outside it), reward ``a^T theta_t + N(0, 1)``, ``T = 6000`` rounds; ``theta`` is
``(1, 0)``, then ``(-1, 0)`` from round 1001, ``(0, 1)`` from 2001 and ``(0, -1)`` from
3001 (``B_T = 4 + sqrt 2``). ``lambda = 0.1``, ``delta = 0.01``, ``S = 1``, and their
tuning ``gamma = 1 - (B_T / (d T))^(2/3)`` and window ``tau = (d T / B_T)^(2/3)``.

Contenders: LinUCB, D-LinUCB, SW-LinUCB, and LinUCB restarted at the true change points
(the oracle), each holding the one parameter every action shares and scored with the
confidence radius ``beta_t`` of its paper (the registered policies score ``alpha``
times the same widths with a fixed ``alpha``). All runs advance together as stacked
arrays (:class:`BatchedLearner`); the first ``--check-rounds`` rounds of run 0 are
replayed through the engine's states of the registered policies
(:class:`bandit_core.linear.LinearArmState`,
:class:`bandit_core.forgetting.DiscountedArmState`,
:class:`bandit_core.forgetting.WindowArmState`: :class:`Learner`) and the rounds in
which they choose the same actions are reported. Dynamic regret:
``sum_t max_a a^T theta_t - a_t^T theta_t``.

Run: ``python -m benchmarks.drift_abrupt [--seeds 100]``; prints the final regret of
each (mean and the 5 % / 95 % quantiles over the runs), writes
``benchmarks/results/drift_abrupt.json`` and the figure ``docs/img/drift_abrupt.png``.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

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


def confidence_radius(name: str, t: int) -> float:
    """``beta_t`` of learner ``name`` after ``t`` updates (since its last restart)."""
    if name == "D-LinUCB":  # Russac et al., Theorem 1
        return _radius((1 - GAMMA ** (2 * t)) / (D * LAMBDA * (1 - GAMMA**2)))
    if name == "SW-LinUCB":  # the window holds min(t, tau) observations
        return _radius(min(t, WINDOW) / (D * LAMBDA))
    return _radius(t / (D * LAMBDA))  # Abbasi-Yadkori et al. 2011


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
        return confidence_radius(self.name, self.t)

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


class BatchedLearner:
    """The same learner for ``runs`` independent runs at once, as stacked numpy arrays:
    ``V``, ``V_tilde`` (equal but for D-LinUCB) and ``b`` per run, updated by the
    recursions of docs/algorithms.md sections 1, 10.1 and 10.2; the width matrix is
    ``V^-1 V_tilde V^-1`` (``V^-1`` when they are equal)."""

    def __init__(self, name: str, runs: int) -> None:
        self.name, self.runs = name, runs
        self.reset()

    def reset(self) -> None:
        runs = self.runs
        self.t = 0
        self.V = np.broadcast_to(LAMBDA * np.eye(D), (runs, D, D)).copy()
        self.V_tilde = self.V.copy()
        self.b = np.zeros((runs, D))
        self.rows = np.zeros(
            (runs, WINDOW, D)
        )  # SW-LinUCB's window (a ring: the oldest is replaced)
        self.rewards = np.zeros((runs, WINDOW))
        self._refresh()

    def _refresh(self) -> None:
        V_inv = np.linalg.inv(self.V)
        self.theta = np.einsum("rde,re->rd", V_inv, self.b)
        self.width_matrix = V_inv @ self.V_tilde @ V_inv if self.name == "D-LinUCB" else V_inv

    def radius(self) -> float:
        return confidence_radius(self.name, self.t)

    def choose(self, A: np.ndarray) -> np.ndarray:
        """The UCB argmax of each run over its actions ``A (runs, K, d)``."""
        width = np.sqrt(np.einsum("rkd,rde,rke->rk", A, self.width_matrix, A))
        return np.argmax(np.einsum("rkd,rd->rk", A, self.theta) + self.radius() * width, axis=1)

    def learn(self, a: np.ndarray, reward: np.ndarray) -> None:
        self.t += 1
        xx = a[:, :, None] * a[:, None, :]
        eye = LAMBDA * np.eye(D)
        if self.name == "D-LinUCB":
            self.V = GAMMA * self.V + (1 - GAMMA) * eye + xx
            self.V_tilde = GAMMA**2 * self.V_tilde + (1 - GAMMA**2) * eye + xx
            self.b = GAMMA * self.b + reward[:, None] * a
        else:
            self.V = self.V + xx
            self.b = self.b + reward[:, None] * a
            if self.name == "SW-LinUCB":
                slot = (self.t - 1) % WINDOW
                if self.t > WINDOW:
                    old, old_r = self.rows[:, slot], self.rewards[:, slot]
                    self.V = self.V - old[:, :, None] * old[:, None, :]
                    self.b = self.b - old_r[:, None] * old
                self.rows[:, slot], self.rewards[:, slot] = a, reward
            self.V_tilde = self.V
        self._refresh()


def run(runs: int, seed: int = 0, check_rounds: int = 0) -> tuple[dict[str, np.ndarray], int]:
    """Cumulative dynamic regret ``(runs, T)`` of every contender, all runs at once; the
    actions and noise of a run are the same for every contender. The choices of the first
    ``check_rounds`` rounds of run 0 are replayed through the engine's own states
    (:class:`Learner`); returns the regret and the number of those rounds in which the
    engine chose the same action."""
    env = np.random.default_rng(seed)
    learners = {name: BatchedLearner(name, runs) for name in NAMES}
    regret = {name: np.zeros((runs, T)) for name in NAMES}
    theta = np.array(THETAS[0][1])
    history: list[tuple[np.ndarray, float, dict[str, int]]] = []
    every = np.arange(runs)
    for t in range(T):
        for start, value in THETAS:
            if t == start:
                theta = np.array(value)
                if t:
                    learners["LinUCB-oracle"].reset()
        A = env.uniform(-1.0, 1.0, size=(runs, K, D))
        norms = np.linalg.norm(A, axis=2)
        A = np.where((norms > 1)[..., None], A / norms[..., None], A)
        means = A @ theta
        noise = env.normal(0.0, SIGMA, size=runs)
        chosen = {}
        for name, learner in learners.items():
            i = learner.choose(A)
            chosen[name] = int(i[0])
            regret[name][:, t] = means.max(axis=1) - means[every, i]
            learner.learn(A[every, i], means[every, i] + noise)
        if t < check_rounds:
            history.append((A[0], float(noise[0]), chosen))
    return {name: np.cumsum(r, axis=1) for name, r in regret.items()}, _engine_agreement(history)


def _engine_agreement(history: list[tuple[np.ndarray, float, dict[str, int]]]) -> int:
    """Rounds of ``history`` (run 0's actions, noise and batched choices) in which every
    engine-state learner chose what the batched one did."""
    learners = {name: Learner(name) for name in NAMES}
    rng = np.random.default_rng(0)  # tie-breaks only: continuous actions never tie
    agree = 0
    theta = np.array(THETAS[0][1])
    for t, (A, noise, chosen) in enumerate(history):
        for start, value in THETAS:
            if t == start:
                theta = np.array(value)
                if t:
                    learners["LinUCB-oracle"].reset()
        same = True
        for name, learner in learners.items():
            i = learner.choose(A, rng)
            same &= i == chosen[name]
            learner.learn(A[chosen[name]], float(A[chosen[name]] @ theta + noise))
        agree += same
    return agree


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
        "--seeds", type=int, default=100, help="independent runs (default %(default)s)"
    )
    parser.add_argument(
        "--check-rounds",
        type=int,
        default=1200,
        help="rounds of run 0 replayed through the engine's states (default %(default)s)",
    )
    add_label_argument(parser, "drift_abrupt", figure=True)
    args = parser.parse_args()
    started = time.perf_counter()
    curves, agreement = run(args.seeds, check_rounds=args.check_rounds)
    print(
        f"engine states chose as the batched learners in {agreement} of {args.check_rounds} rounds of run 0"
    )
    summary: dict[str, dict[str, Any]] = {}
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
            "engine_agreement": {"rounds": args.check_rounds, "same_choices": agreement},
            "seconds": round(time.perf_counter() - started, 1),
            "results": summary,
            "final_over_oracle": ratios,
            "figure": str(path.relative_to(path.parents[2])),
        },
        args.label,
    )


if __name__ == "__main__":
    main()
