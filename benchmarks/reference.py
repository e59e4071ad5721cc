"""Workloads and the reference implementations the engine is measured against.

Nothing here is part of the product. Two kinds of reference:

* :class:`NumpyLinUCBFloor` -- the *floor*: the least a LinUCB can do per decision in
  numpy (one batched matmul to score all K arms, one Sherman-Morrison update, state
  kept as contiguous ``(K, d, d)`` / ``(K, d)`` arrays, no validation, no ranking, no
  propensities, no state parts). The engine cannot be faster than this; the goal is
  at least 0.7x of it.
* :class:`LoopLinUCB` and :class:`LoopLNUCBTA` -- the *straightforward per-arm-loop
  implementations*, written the way tutorials and the paper's pseudo-code (Li et al.
  2010 Algorithm 1; LNUCB-TA Algorithms 1-3) read: a Python loop over arms, a fresh
  ``np.linalg.inv(A)`` per arm per step, a kNN memory held as a Python list. They are
  the baseline of the replay-throughput benchmark (the goal: at least 50x faster).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NEWS_ARMS = 10
NEWS_DIM = 10


@dataclass
class Workload:
    """A pool of ``n`` synthetic requests over ``K`` arms with ``d`` features each.

    ``X`` has shape ``(n, K, d)`` (rows of unit expected norm), ``R`` shape ``(n, K)``:
    the 0/1 reward each arm would get, drawn from ``sigmoid(x . theta_a)`` with a hidden
    ``theta`` per arm. Benchmarks cycle through the pool.
    """

    X: np.ndarray
    R: np.ndarray

    @classmethod
    def make(cls, K: int, d: int, *, max_floats: int = 4_000_000, seed: int = 0) -> Workload:
        """A pool of between 2 and 64 requests, at most about ``max_floats`` features."""
        n = int(np.clip(max_floats // (K * d), 2, 64))
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, K, d)) / np.sqrt(d)
        theta = rng.normal(size=(K, d))
        p = 1.0 / (1.0 + np.exp(-np.einsum("nkd,kd->nk", X, theta)))
        return cls(X=X, R=(rng.random((n, K)) < p).astype(np.float64))


class NumpyLinUCBFloor:
    """Minimal disjoint LinUCB over ``K`` fixed arms (the benchmark floor).

    State: ``A_inv (K, d, d)``, ``b (K, d)``, ``theta (K, d)``; scoring is
    ``x_a . theta_a + alpha sqrt(x_a^T A_a^-1 x_a)`` for all arms from one batched
    matmul; the update reuses ``A_a^-1 x`` from the scoring step (Sherman-Morrison).

    >>> floor = NumpyLinUCBFloor(K=3, d=2, alpha=1.0)
    >>> a = floor.step(np.eye(3, 2), np.ones(3))
    >>> bool(np.allclose(floor.A_inv[a], np.linalg.inv(np.eye(2) + np.outer(np.eye(3, 2)[a], np.eye(3, 2)[a]))))
    True
    """

    def __init__(self, K: int, d: int, alpha: float = 1.0, ridge_lambda: float = 1.0) -> None:
        self.alpha = alpha
        self.A_inv = np.tile(np.eye(d) / ridge_lambda, (K, 1, 1))
        self.b = np.zeros((K, d))
        self.theta = np.zeros((K, d))

    def step(self, X: np.ndarray, rewards: np.ndarray) -> int:
        """Choose an arm for candidates ``X`` (shape ``(K, d)``), learn ``rewards[arm]``."""
        A_inv_x = np.matmul(self.A_inv, X[:, :, None])[:, :, 0]
        ucb = (X * self.theta).sum(1) + self.alpha * np.sqrt((X * A_inv_x).sum(1))
        a = int(np.argmax(ucb))
        x, Ax = X[a], A_inv_x[a]
        self.A_inv[a] -= np.outer(Ax, Ax) / (1.0 + x @ Ax)
        self.b[a] += rewards[a] * x
        self.theta[a] = self.A_inv[a] @ self.b[a]
        return a


class LoopLinUCB:
    """Straightforward disjoint LinUCB: per arm ``A, b``; every step, for every arm,
    ``A^-1 = inv(A)``, ``theta = A^-1 b`` and the UCB (Li et al. 2010, Algorithm 1).
    Ties go to the lowest index (``np.argmax``)."""

    def __init__(self, K: int, d: int, alpha: float, ridge_lambda: float = 1.0) -> None:
        self.alpha = alpha
        self.A = [np.eye(d) * ridge_lambda for _ in range(K)]
        self.b = [np.zeros(d) for _ in range(K)]

    def ucb(self, a: int, x: np.ndarray) -> float:
        A_inv = np.linalg.inv(self.A[a])
        theta = A_inv @ self.b[a]
        return float(theta @ x + self.alpha * np.sqrt(x @ A_inv @ x))

    def choose(self, X: np.ndarray) -> int:
        """Index of the arm with the highest UCB; ``X`` has shape ``(K, d)``."""
        return int(np.argmax([self.ucb(a, X[a]) for a in range(len(self.A))]))

    def learn(self, a: int, x: np.ndarray, reward: float) -> None:
        self.A[a] += np.outer(x, x)
        self.b[a] += reward * x


class LoopLNUCBTA(LoopLinUCB):
    """Straightforward LNUCB-TA (docs/algorithms.md section 2; paper Algorithms 1-3).

    ``ucb_a = x^T mu_a + f_a(x) + alpha_a sqrt(x^T A_a^-1 x)`` with the linear part of
    :class:`LoopLinUCB` (raw-reward target), ``f_a`` the mean reward of the ``k_a``
    nearest points in arm ``a``'s unbounded memory (a Python list; ``k_a = floor(theta_min
    + (theta_max - theta_min) Var(rewards_a))``, 0 if the memory holds fewer than ``k_a``
    points) and ``alpha_a = alpha_0 / (N_a + 1) (kappa g + (1 - kappa) n_a)``, ``g`` the
    mean of the arms' mean rewards.
    """

    def __init__(
        self,
        K: int,
        d: int,
        alpha: float,
        theta_min: int = 1,
        theta_max: int = 5,
        kappa: float = 0.5,
    ) -> None:
        super().__init__(K, d, alpha)
        self.theta_min, self.theta_max, self.kappa = theta_min, theta_max, kappa
        self.memory_x: list[list[np.ndarray]] = [[] for _ in range(K)]
        self.memory_r: list[list[float]] = [[] for _ in range(K)]

    def knn(self, a: int, x: np.ndarray) -> float:
        rewards = self.memory_r[a]
        var = float(np.var(rewards)) if len(rewards) >= 2 else 0.0
        k = int(np.floor(self.theta_min + (self.theta_max - self.theta_min) * var))
        if len(rewards) < k or k == 0:
            return 0.0
        dist = np.linalg.norm(np.array(self.memory_x[a]) - x, axis=1)
        return float(np.mean(np.array(rewards)[np.argsort(dist)[:k]]))

    def ucb(self, a: int, x: np.ndarray) -> float:
        A_inv = np.linalg.inv(self.A[a])
        theta = A_inv @ self.b[a]
        means = [float(np.mean(r)) if r else 0.0 for r in self.memory_r]
        g = sum(means) / len(means)
        alpha_a = max(
            0.0,
            self.alpha
            / (len(self.memory_r[a]) + 1)
            * (self.kappa * g + (1 - self.kappa) * means[a]),
        )
        return float(theta @ x + self.knn(a, x) + alpha_a * np.sqrt(x @ A_inv @ x))

    def learn(self, a: int, x: np.ndarray, reward: float) -> None:
        super().learn(a, x, reward)
        self.memory_x[a].append(x.copy())
        self.memory_r[a].append(reward)


def news_path(repo: Path) -> Path:
    """``<repo>/bandit_core/data/news_dataset.txt.gz``, the news data set the package ships
    (found from the checkout, so an ``--engine-path`` engine replays the same file)."""
    return repo.resolve() / "bandit_core" / "data" / "news_dataset.txt.gz"


def load_news(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The news data set as ``(arms (n,), rewards (n,), X (n, 10, 10))`` (docs/algorithms.md section 6)."""
    raw = np.loadtxt(path, dtype=np.float64)
    return raw[:, 0].astype(np.intp), raw[:, 1], raw[:, 2:].reshape(-1, NEWS_ARMS, NEWS_DIM)


def synthetic_log(
    n_events: int, *, K: int = NEWS_ARMS, d: int = NEWS_DIM, chunk: int = 10_000, seed: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A uniformly-random-policy log of ``n_events`` events in chunks of ``(arms, rewards, X)``.

    Rewards are Bernoulli of ``sigmoid(x . theta_arm - 1)`` with a hidden ``theta`` per
    arm, so a learning policy has something to find. Generated chunk by chunk so 10^6
    events never sit in memory at once (800 MB at K = d = 10).
    """
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(K, d))
    done = 0
    while done < n_events:
        m = min(chunk, n_events - done)
        X = rng.normal(size=(m, K, d)) / np.sqrt(d)
        arms = rng.integers(0, K, size=m)
        logit = np.einsum("md,md->m", X[np.arange(m), arms], theta[arms]) - 1.0
        rewards = (rng.random(m) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float64)
        yield arms, rewards, X
        done += m
