"""Simulated bandit problems with known ground truth (docs/algorithms.md section 6).

An :class:`Environment` yields, each round, the candidates' feature rows ``X`` (K, d)
and their expected rewards ``mu`` (K,). :func:`simulate_run` lets a policy choose, draws
a Bernoulli reward with mean ``mu[chosen]``, updates the policy and records the
cumulative reward and the cumulative (pseudo-)regret ``sum_t max(mu_t) - mu_t[chosen]``.

Environments:

* :class:`SyntheticEnvironment` -- ``x_a`` uniform on the unit sphere in R^d, a unit
  ``theta``; ``link="linear"``: ``mu_a = (1 + x_a . theta) / 2`` (a linear model with
  known ``theta* = theta / 2`` after the offset); ``link="nonlinear"``:
  ``mu_a = (x_a . theta)^2``, symmetric in the sign of ``x_a . theta`` so no linear
  model fits it;
* :class:`ClassificationEnvironment` -- a classification data set as a bandit (Zhang et
  al. 2021, as in the LNUCB-TA paper's Table 2): each class an arm, reward 1 for the
  true class, rows shuffled with the run's RNG, every arm's x the row itself (per-arm
  models).

>>> import numpy as np, bandit_core
>>> env = SyntheticEnvironment.random(n_arms=3, d=4, link="linear", rng=np.random.default_rng(0))
>>> res = simulate(lambda s: bandit_core.make_policy("linucb", d=4, seed=s), env, rounds=50, seeds=[0, 1])
>>> res.regret_curves.shape, bool((np.diff(res.regret_curves, axis=1) >= 0).all())
((2, 50), True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from bandit_core.datasets import ClassificationData
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation.summary import Spread
from bandit_core.policy import Policy
from bandit_core.validation import check_int


class Environment(Protocol):
    """A bandit problem with known expected rewards."""

    @property
    def arm_ids(self) -> tuple[str, ...]: ...

    @property
    def d(self) -> int: ...

    def rounds(self, n: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``n`` rounds of ``(X, mu)``: X of shape (K, d), mu of shape (K,) in [0, 1]."""
        ...


@dataclass(frozen=True)
class SyntheticEnvironment:
    """Fresh unit-sphere features each round; expected reward through ``link`` (module
    docstring). ``theta`` (d,) has unit norm."""

    theta: np.ndarray
    n_arms: int
    link: Literal["linear", "nonlinear"] = "linear"

    def __post_init__(self) -> None:
        if self.theta.ndim != 1 or not np.isclose(np.linalg.norm(self.theta), 1.0):
            raise InvalidInputError(
                f"theta must be a unit vector, but got shape {self.theta.shape}"
            )
        if self.n_arms < 2:
            raise InvalidInputError(f"n_arms must be >= 2, but got {self.n_arms}")
        if self.link not in ("linear", "nonlinear"):
            raise InvalidInputError(f"link must be 'linear' or 'nonlinear', but got {self.link!r}")

    @classmethod
    def random(
        cls, n_arms: int, d: int, link: Literal["linear", "nonlinear"], rng: np.random.Generator
    ) -> SyntheticEnvironment:
        """An environment with ``theta`` drawn uniformly on the unit sphere from ``rng``."""
        if d < 1:
            raise InvalidInputError(f"d must be >= 1, but got {d}")
        return cls(theta=_unit(rng.standard_normal(d)), n_arms=n_arms, link=link)

    @property
    def arm_ids(self) -> tuple[str, ...]:
        return tuple(str(a) for a in range(self.n_arms))

    @property
    def d(self) -> int:
        return int(self.theta.size)

    def rounds(self, n: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for _ in range(n):
            X = _unit(rng.standard_normal((self.n_arms, self.d)))
            s = X @ self.theta
            yield X, (1.0 + s) / 2.0 if self.link == "linear" else s * s


@dataclass(frozen=True)
class ClassificationEnvironment:
    """A classification data set as a bandit; passes over the rows in a fresh random
    order each epoch."""

    data: ClassificationData

    def __post_init__(self) -> None:
        if len(self.data.classes) < 2:
            raise InvalidInputError(
                f"a classification bandit needs >= 2 classes, but got {len(self.data.classes)}"
            )

    @property
    def arm_ids(self) -> tuple[str, ...]:
        return self.data.classes

    @property
    def d(self) -> int:
        return int(self.data.X.shape[1])

    def rounds(self, n: int, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        k = len(self.data.classes)
        eye = np.eye(k)
        done = 0
        while done < n:
            epoch = self.data.shuffled(rng)
            for x, label in zip(epoch.X[: n - done], epoch.labels[: n - done], strict=True):
                yield np.broadcast_to(x, (k, x.size)), eye[label]
                done += 1


def _unit(v: np.ndarray) -> np.ndarray:
    result: np.ndarray = v / np.linalg.norm(v, axis=-1, keepdims=True)
    return result


@dataclass(frozen=True)
class SimulationRun:
    """One seed: ``reward_curve`` and ``regret_curve`` (shape (rounds,)) are cumulative."""

    seed: int
    reward_curve: np.ndarray
    regret_curve: np.ndarray
    seconds: float

    @property
    def cumulative_reward(self) -> float:
        return float(self.reward_curve[-1]) if self.reward_curve.size else 0.0

    @property
    def cumulative_regret(self) -> float:
        return float(self.regret_curve[-1]) if self.regret_curve.size else 0.0


def simulate_run(
    policy: Policy,
    env: Environment,
    rounds: int,
    rng: np.random.Generator,
    *,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> SimulationRun:
    """Run ``policy`` for ``rounds`` rounds of ``env``; ``rng`` draws contexts and rewards."""
    rounds = check_int(rounds, "rounds", low=1, error=InvalidInputError)
    start = time.perf_counter()
    ids = env.arm_ids
    index = {a: i for i, a in enumerate(ids)}
    rewards = np.empty(rounds)
    regrets = np.empty(rounds)
    for t, (X, mu) in enumerate(env.rounds(rounds, rng)):
        a = index[policy.select(ids, X).arm_id]
        reward = float(rng.random() < mu[a])
        policy.update(ids[a], X[a], reward)
        rewards[t] = reward
        regrets[t] = mu.max() - mu[a]
        if progress is not None:
            progress(1)
    return SimulationRun(
        seed=seed,
        reward_curve=np.cumsum(rewards),
        regret_curve=np.cumsum(regrets),
        seconds=time.perf_counter() - start,
    )


@dataclass(frozen=True)
class SimulationResult:
    """Runs of one policy configuration over several seeds."""

    runs: tuple[SimulationRun, ...]

    @property
    def reward_curves(self) -> np.ndarray:
        """Cumulative reward curves, shape (seeds, rounds)."""
        return np.stack([r.reward_curve for r in self.runs])

    @property
    def regret_curves(self) -> np.ndarray:
        """Cumulative regret curves, shape (seeds, rounds)."""
        return np.stack([r.regret_curve for r in self.runs])

    @property
    def cumulative_reward(self) -> Spread:
        return Spread.of([r.cumulative_reward for r in self.runs])

    @property
    def cumulative_regret(self) -> Spread:
        return Spread.of([r.cumulative_regret for r in self.runs])


def simulate(
    make_policy: Callable[[int], Policy],
    env: Environment,
    rounds: int,
    seeds: Sequence[int],
    *,
    progress: Callable[[int], None] | None = None,
) -> SimulationResult:
    """Run a fresh ``make_policy(seed)`` per seed; the environment's draws come from
    ``numpy.random.default_rng([seed, 2])``, a stream distinct from the policy's."""
    if not seeds:
        raise InvalidInputError("seeds must hold at least one seed, but got none")
    runs = tuple(
        simulate_run(
            make_policy(s), env, rounds, np.random.default_rng([s, 2]), seed=s, progress=progress
        )
        for s in seeds
    )
    return SimulationResult(runs=runs)
