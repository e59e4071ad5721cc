"""Rows of long vectors in compressed sparse row form, numpy only: the featurizer's
sparse output and the input of a policy with ``SPARSE_ROWS`` (docs/algorithms.md
section 7).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SparseRows"]


@dataclass(frozen=True)
class SparseRows:
    """Rows of ``dim``-long vectors in compressed sparse row form (numpy only).

    Row ``i`` has ``values[indptr[i]:indptr[i+1]]`` at columns
    ``indices[indptr[i]:indptr[i+1]]``, strictly increasing within a row; no stored value
    is 0. Shapes: ``indptr`` (n_rows + 1,) int64, ``indices`` and ``values`` (nnz,) int64
    and float64.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dim: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.dim)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, values)`` of row ``i``."""
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return self.indices[lo:hi], self.values[lo:hi]

    def one_row(self, i: int) -> SparseRows:
        """Row ``i`` alone, as a one-row :class:`SparseRows` (the ``x`` a sparse-rows
        policy's ``update`` takes for the served candidate)."""
        indices, values = self.row(i)
        return SparseRows(np.array([0, len(indices)]), indices, values, self.dim)

    @classmethod
    def from_dense(cls, X: np.ndarray) -> SparseRows:
        """The nonzero entries of the 2-d float64 array ``X``, row by row, columns
        increasing (the inverse of :meth:`to_dense`).

        >>> SparseRows.from_dense(np.array([[0.0, 2.0], [0.0, 0.0]])).indptr.tolist()
        [0, 1, 1]
        """
        rows, columns = np.nonzero(X)
        indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
        return cls(
            indptr=indptr, indices=columns.astype(np.int64), values=X[rows, columns], dim=X.shape[1]
        )

    def to_dense(self) -> np.ndarray:
        """The rows as a dense float64 array of shape (n_rows, dim)."""
        out = np.zeros((self.n_rows, self.dim))
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.indptr))
        out[rows, self.indices] = self.values
        return out
