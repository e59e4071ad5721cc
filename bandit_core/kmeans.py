"""Seeded k-means (k-means++ seeding, then Lloyd iterations) for HARE's item clusters.

HARE (docs/algorithms.md section 4) assigns each item to one of ``C`` clusters when the
clusters are not given; this is the small, deterministic-given-the-RNG k-means it uses.

>>> import numpy as np
>>> pts = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0]])
>>> centroids, labels = kmeans(pts, 2, np.random.default_rng(0))
>>> bool(labels[0] == labels[1] != labels[2] == labels[3])
True
"""

from __future__ import annotations

import numpy as np

from bandit_core.errors import InvalidInputError


def nearest(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Index of the nearest centroid (Euclidean) for each point.

    ``points``: ``(n, d)``; ``centroids``: ``(k, d)``; returns ``(n,)`` int64.
    """
    sq = (points**2).sum(1)[:, None] - 2.0 * points @ centroids.T + (centroids**2).sum(1)[None, :]
    result: np.ndarray = np.argmin(sq, axis=1)
    return result


def kmeans(
    points: np.ndarray, k: int, rng: np.random.Generator, n_init: int = 10, max_iter: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Cluster ``points`` (shape ``(n, d)``) into ``k`` clusters.

    ``n_init`` runs, each k-means++ seeding (Arthur and Vassilvitskii, 2007) drawn from
    ``rng`` then Lloyd iterations until the labels stop changing or ``max_iter``; the run
    of least within-cluster sum of squares wins (one run can merge two true clusters).
    ``k`` must not exceed the number of distinct points. Returns
    ``(centroids (k, d), labels (n,))``; an emptied cluster keeps its previous centroid.
    """
    n_distinct = len(np.unique(points, axis=0))
    if not 1 <= k <= n_distinct:
        raise InvalidInputError(
            f"k must be in [1, {n_distinct}] (the distinct points), but got {k}"
        )
    runs = [_lloyd(points, k, rng, max_iter) for _ in range(n_init)]
    return min(runs, key=lambda run: float(((points - run[0][run[1]]) ** 2).sum()))


def _lloyd(
    points: np.ndarray, k: int, rng: np.random.Generator, max_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    centroids = np.empty((k, points.shape[1]))
    centroids[0] = points[rng.integers(len(points))]
    sq_dist = ((points - centroids[0]) ** 2).sum(1)
    for j in range(1, k):
        total = sq_dist.sum()
        # Distinct points whose squared distances underflow to 0 (subnormal gaps) leave
        # no D^2 weight: fall back to a uniform draw.
        centroids[j] = points[rng.choice(len(points), p=sq_dist / total if total > 0 else None)]
        sq_dist = np.minimum(sq_dist, ((points - centroids[j]) ** 2).sum(1))
    labels = nearest(points, centroids)
    for _ in range(max_iter):
        counts = np.bincount(labels, minlength=k)
        sums = np.zeros_like(centroids)
        np.add.at(sums, labels, points)
        filled = counts > 0
        centroids[filled] = sums[filled] / counts[filled, None]
        new_labels = nearest(points, centroids)
        if np.array_equal(new_labels, labels):
            break
        labels = new_labels
    return centroids, labels
