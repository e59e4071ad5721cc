"""HARE on a synthetic clustered population (docs/algorithms.md section 4, checks a and b).

Environment: ``n_users`` users, each with a fixed unit context ``x_u`` (length d_x) and
an id; ``C`` clusters of items whose embeddings are a unit cluster centre plus small
noise (``spread``), renormalised. Mean reward ``mu(u, i) = (x_u^T M + m0^T) v_i`` with
``M`` of rank ``rank`` (realisable by HARE's ``q . k`` when ``d_k > rank``), observed
with Gaussian noise (``noise``). Every round a uniformly random user arrives and all
items are candidates. The generator rejects draws where, for some user, the item of
highest ``mu`` is not inside the cluster of highest mean ``mu`` (docs/algorithms.md section 4.5,
assumption 4, cluster regularity: otherwise the two-level rule has a structural gap and
regret is linear whatever is learned) or where some cluster is nobody's favourite (the
population must have distinct preferences); ``continuous=True`` instead draws a fresh random
context every round with no user ids, where that gap remains (reported, not asserted).

Run: ``python -m benchmarks.hare_regret [--T 100000] [--seeds 0 1 2] [--out FILE]``;
prints a table of cumulative regret at T = 10^3, 10^4, 10^5, the log-log slope of
R(T) over [10^3, T] for HARE (alpha 1), attention without UCB (alpha 0) and uniform
random, and writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass

import numpy as np

from bandit_core import BasePolicy, make_policy


@dataclass
class ClusteredEnv:
    """Arrays of one synthetic environment: ``contexts (n_users, d_x)``, ``items (N, d_item)``,
    ``clusters (N,)``, ``M (d_x, d_item)``, ``m0 (d_item,)``."""

    contexts: np.ndarray
    items: np.ndarray
    clusters: np.ndarray
    M: np.ndarray
    m0: np.ndarray
    noise: float

    def means(self, x: np.ndarray) -> np.ndarray:
        """Mean reward of every item for context ``x``, shape ``(N,)``."""
        return (x @ self.M + self.m0) @ self.items.T

    def rows(self, x: np.ndarray) -> np.ndarray:
        """The policy's input rows ``concat(x, v_i)``, shape ``(N, d_x + d_item)``."""
        return np.hstack([np.broadcast_to(x, (len(self.items), len(x))), self.items])


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def make_env(
    seed: int,
    n_users: int = 8,
    n_clusters: int = 4,
    per_cluster: int = 5,
    d_x: int = 4,
    d_item: int = 6,
    rank: int = 2,
    spread: float = 0.15,
    noise: float = 0.1,
) -> ClusteredEnv:
    """Draw environments from ``default_rng(seed)`` until cluster regularity holds for
    every user and the users' preferences are distinct: every cluster is the best
    cluster of some user (see the module docstring)."""
    rng = np.random.default_rng(seed)
    clusters = np.repeat(np.arange(n_clusters), per_cluster)
    while True:
        centres = _unit(rng.standard_normal((n_clusters, d_item)))
        items = _unit(centres[clusters] + spread * rng.standard_normal((len(clusters), d_item)))
        M = rng.standard_normal((d_x, rank)) @ rng.standard_normal((rank, d_item)) / math.sqrt(rank)
        env = ClusteredEnv(
            _unit(rng.standard_normal((n_users, d_x))),
            items,
            clusters,
            M,
            0.5 * rng.standard_normal(d_item),
            noise,
        )
        mu = env.means(env.contexts)
        cluster_mean = np.stack([mu[:, clusters == j].mean(1) for j in range(n_clusters)], 1)
        best = cluster_mean.argmax(1)
        if (clusters[mu.argmax(1)] == best).all() and len(set(best)) == n_clusters:
            return env


def hare_policy(env: ClusteredEnv, alpha: float, seed: int, **params: float) -> BasePolicy:
    """HARE for ``env`` (k-means clusters, d_k = 4, squared loss, rewards in [-5, 5])."""
    d_x = env.contexts.shape[1]
    return make_policy(
        "hare",
        d=d_x + env.items.shape[1],
        context_dim=d_x,
        alpha=alpha,
        key_dim=4,
        n_clusters=int(env.clusters.max()) + 1,
        seed=seed,
        reward_range=(-5.0, 5.0),
        **params,
    )


def run_regret(
    env: ClusteredEnv, policy: BasePolicy, T: int, seed: int, continuous: bool = False
) -> np.ndarray:
    """Play ``T`` rounds; returns the cumulative pseudo-regret ``R(t)``, shape ``(T,)``."""
    rng = np.random.default_rng(seed + 10_000)
    ids = [f"item{i}" for i in range(len(env.items))]
    regret = np.empty(T)
    for t in range(T):
        if continuous:
            x, user = _unit(rng.standard_normal(env.contexts.shape[1])), None
        else:
            u = int(rng.integers(len(env.contexts)))
            x, user = env.contexts[u], f"user{u}"
        mu = env.means(x)
        X = env.rows(x)
        i = ids.index(policy.select(ids, X, user_id=user).arm_id)
        regret[t] = mu.max() - mu[i]
        reward = float(np.clip(mu[i] + env.noise * rng.standard_normal(), -5.0, 5.0))
        policy.update(ids[i], X[i], reward, user_id=user)
    return np.cumsum(regret)


def loglog_slope(R: np.ndarray, checkpoints: list[int]) -> float:
    """Least-squares slope of ``log R(t)`` on ``log t`` at the given rounds ``t`` (1-based)."""
    t = np.asarray(checkpoints)
    return float(np.polyfit(np.log(t), np.log(R[t - 1]), 1)[0])


def attention_similarity(policy: BasePolicy, env: ClusteredEnv) -> float:
    """Mean pairwise cosine similarity of the users' attention vectors over all items
    (item order; ``explore=False``)."""
    ids = [f"item{i}" for i in range(len(env.items))]
    vecs = []
    for u, x in enumerate(env.contexts):
        dec = policy.select(ids, env.rows(x), user_id=f"user{u}", explore=False)
        pos = {a: k for k, a in enumerate(dec.ranking)}
        vecs.append(dec.extras["attention"][[pos[a] for a in ids]])
    A = _unit(np.array(vecs))
    sim = A @ A.T
    return float(sim[np.triu_indices(len(A), 1)].mean())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--T", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--continuous", action="store_true", help="fresh random context per round")
    parser.add_argument("--out", default="hare_regret.json")
    args = parser.parse_args(argv)
    checkpoints = [c for c in (10**3, 10**4, 10**5) if c < args.T] + [args.T]
    results: dict = {
        "T": args.T,
        "checkpoints": checkpoints,
        "continuous": args.continuous,
        "runs": [],
    }
    print(
        f"{'policy':<14}{'seed':>5}"
        + "".join(f"{'R(' + str(c) + ')':>14}" for c in checkpoints)
        + f"{'slope':>8}{'sim0':>8}{'sim1':>8}{'sec':>7}"
    )
    for seed in args.seeds:
        env = make_env(seed)
        for name, alpha in (("hare", 1.0), ("hare_alpha0", 0.0), ("random", None)):
            if alpha is None:
                policy = make_policy(
                    "random",
                    d=env.rows(env.contexts[0]).shape[1],
                    seed=seed,
                    reward_range=(-5.0, 5.0),
                )
            else:
                policy = hare_policy(env, alpha, seed)
            sim0 = attention_similarity(policy, env) if alpha is not None else float("nan")
            start = time.perf_counter()
            R = run_regret(env, policy, args.T, seed, args.continuous)
            seconds = time.perf_counter() - start
            sim1 = attention_similarity(policy, env) if alpha is not None else float("nan")
            slope = loglog_slope(R, checkpoints)
            row = {
                "policy": name,
                "seed": seed,
                "R": [float(R[c - 1]) for c in checkpoints],
                "slope": slope,
                "similarity_before": sim0,
                "similarity_after": sim1,
                "seconds": seconds,
            }
            results["runs"].append(row)
            print(
                f"{name:<14}{seed:>5}"
                + "".join(f"{r:>14.1f}" for r in row["R"])
                + f"{slope:>8.3f}{sim0:>8.4f}{sim1:>8.4f}{seconds:>7.1f}",
                flush=True,
            )
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=1)
    return results


if __name__ == "__main__":
    main()
