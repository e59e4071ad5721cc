"""The featurizer's intermediate and output forms (:mod:`bandit_core.features`): one
feature object parsed and hashed (:class:`HashedFeatures`), a request's actions so hashed
and joined (:class:`HashedActions`), and a request's vectors (:class:`FeatureBatch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bandit_core.sparse_rows import SparseRows

__all__ = ["FeatureBatch", "HashedActions", "HashedFeatures"]


@dataclass(frozen=True)
class FeatureBatch:
    """One request, featurized (:meth:`Featurizer.featurize`).

    ``context``: the context's vector, shape (dim,) when the config's output is dense,
    else a one-row :class:`SparseRows`. ``actions``: one vector per action, shape
    (K, dim) or a K-row :class:`SparseRows`.
    """

    context: np.ndarray | SparseRows
    actions: np.ndarray | SparseRows


@dataclass(frozen=True)
class HashedFeatures:
    """One feature object's features, parsed and hashed (:meth:`Featurizer.hash_features`):
    the 32-bit hashes (uint32) and values (float64) in walk order, and each feature's
    namespace. Independent of ``bits`` and of the interactions."""

    hashes: np.ndarray
    values: np.ndarray
    namespaces: tuple[str, ...]


@dataclass(frozen=True)
class HashedActions:
    """The K actions of a request as :meth:`Featurizer.featurize_hashed` reads them: their
    :class:`HashedFeatures` one after the other (``features``), ``counts[k]`` (int64,
    shape (K,)) of them action ``k``'s. A caller may keep the joined form of a list of
    actions that recurs (a catalog sent whole) and skip joining it again.

    >>> h = HashedFeatures(np.uint32([7]), np.ones(1), ("item",))
    >>> joined = HashedActions.join([h, h])
    >>> len(joined), joined.counts.tolist(), joined.features.namespaces
    (2, [1, 1], ('item', 'item'))
    """

    features: HashedFeatures
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.counts)

    @classmethod
    def join(cls, actions: Sequence[HashedFeatures]) -> HashedActions:
        """The actions' features joined in order (a non-empty list)."""
        return cls(
            HashedFeatures(
                np.concatenate([a.hashes for a in actions]),
                np.concatenate([a.values for a in actions]),
                tuple(ns for a in actions for ns in a.namespaces),
            ),
            np.array([len(a.values) for a in actions], dtype=np.int64),
        )
