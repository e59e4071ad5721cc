"""Feature importance of a linear policy: which input columns move its scores most
(docs/features.md "Feature importance").

A linear policy scores a candidate row ``x`` by ``w^T x`` plus a confidence width.
Feature ``i``'s share of that score, measured against the average row, is the linear
SHAP value (Lundberg and Lee 2017, linear model with independent features)

    phi_i(x) = w_i (x_i - mean_i)

so the average amount by which feature ``i`` moves a score over some traffic is

    importance_i = E_t |phi_i(x_t)| = |w_i| * E_t |x_{t,i} - mean_i|

the weight's magnitude times the feature's mean absolute deviation in that traffic. A
feature that never varies (the bias column, or one absent from the traffic) moves no
score, however large its weight; a large weight on a rare feature counts by how often
the feature shows. For a one-hot feature present in a share ``p`` of the rows the
deviation is ``2 p (1 - p)``.

Per-arm models (LinUCB) keep one weight vector per arm; ``|w_i|`` is then the mean of
``|w_{a,i}|`` over the arms weighted by the rewards each learned from (the score of the
arm that serves, on average). Without traffic the ranking falls back to ``|w_i|``
(as if every feature varied by 1).

Policies expose their weights through :meth:`BasePolicy.feature_weights
<bandit_core.policy.BasePolicy.feature_weights>` (``None`` for policies that are not
linear in their input); :func:`feature_importance` ranks the columns.

>>> import numpy as np, bandit_core
>>> p = bandit_core.make_policy("hybrid_linucb", d=3, alpha=0.0)
>>> for _ in range(20):  # column 0 pays, column 1 does not, column 2 is a bias
...     p.update("a", np.array([1.0, 0.0, 1.0]), 1.0)
...     p.update("b", np.array([0.0, 1.0, 1.0]), 0.0)
>>> ranked = feature_importance(p.feature_weights(), np.array([[1.0, 0, 1], [0, 1.0, 1]]))
>>> ranked.columns.tolist(), ranked.deviation.tolist()
([0, 1, 2], [0.5, 0.5, 0.0])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.features import SparseRows

__all__ = [
    "ColumnImportance",
    "FeatureWeights",
    "column_statistics",
    "feature_importance",
    "stack_rows",
]


@dataclass(frozen=True)
class FeatureWeights:
    """The linear weights of a policy over its input columns.

    ``columns`` (m,) int64, strictly increasing: the columns of ``X`` that may carry a
    weight (every other column's weight is 0). ``weights`` (r, m): one row per weight
    vector (one for a shared model, one per arm for a per-arm model).
    ``rewards`` (r,): the rewards each row learned from, how much it counts.
    """

    columns: np.ndarray
    weights: np.ndarray
    rewards: np.ndarray

    def __post_init__(self) -> None:
        m = self.columns.shape
        r = self.rewards.shape
        if len(m) != 1 or len(r) != 1 or self.weights.shape != (r[0], m[0]):
            raise InvalidInputError(
                f"feature weights need columns (m,), weights (r, m) and rewards (r,), but got "
                f"{self.columns.shape}, {self.weights.shape} and {self.rewards.shape}"
            )
        if m[0] > 1 and not (np.diff(self.columns) > 0).all():
            raise InvalidInputError("feature weight columns must be strictly increasing")

    def _row_shares(self) -> np.ndarray:
        total = float(self.rewards.sum())
        if total > 0:
            return self.rewards / total
        return np.full(len(self.rewards), 1 / max(len(self.rewards), 1))

    def mean_abs(self) -> np.ndarray:
        """``|w_i|`` per column: the mean of ``|w_{r,i}|`` over rows weighted by their
        rewards (uniform when no row learned from any; 0 without rows)."""
        result: np.ndarray = self._row_shares() @ np.abs(self.weights)
        return result

    def mean(self) -> np.ndarray:
        """The signed weight per column, averaged over rows as :meth:`mean_abs` does."""
        result: np.ndarray = self._row_shares() @ self.weights
        return result


@dataclass(frozen=True)
class ColumnImportance:
    """Columns ranked by descending ``importance`` (ties by column), arrays aligned:
    ``weight``, the signed weight (averaged over arms for a per-arm model);
    ``importance``, ``mean |w_i| * deviation``; ``mean`` and ``deviation``, the feature's
    mean and mean absolute deviation over the rows given (0 and 1 without rows);
    ``n_rows``, how many rows those are."""

    columns: np.ndarray
    weight: np.ndarray
    importance: np.ndarray
    mean: np.ndarray
    deviation: np.ndarray
    n_rows: int

    def top(self, n: int) -> ColumnImportance:
        """The first ``n`` columns."""
        return ColumnImportance(
            self.columns[:n],
            self.weight[:n],
            self.importance[:n],
            self.mean[:n],
            self.deviation[:n],
            self.n_rows,
        )


def stack_rows(blocks: Sequence[np.ndarray | SparseRows], dim: int) -> SparseRows:
    """The rows of ``blocks`` (dense ``(n_i, dim)`` arrays or :class:`SparseRows` of
    ``dim`` columns), one after the other, as one :class:`SparseRows`: the traffic of
    many requests in the memory of its nonzeros.

    >>> stack_rows([np.array([[0.0, 2.0]]), SparseRows.from_dense(np.array([[3.0, 0.0]]))], 2).to_dense()
    array([[0., 2.],
           [3., 0.]])
    """
    sparse = [
        b if isinstance(b, SparseRows) else SparseRows.from_dense(np.asarray(b, dtype=np.float64))
        for b in blocks
    ]
    if any(b.dim != dim for b in sparse):
        raise InvalidInputError(f"every block of rows must have {dim} columns")
    counts = [np.diff(b.indptr) for b in sparse]
    indptr = np.zeros(sum(len(c) for c in counts) + 1, dtype=np.int64)
    if counts:
        np.cumsum(np.concatenate(counts), out=indptr[1:])
    return SparseRows(
        indptr=indptr,
        indices=np.concatenate([b.indices for b in sparse])
        if sparse
        else np.zeros(0, dtype=np.int64),
        values=np.concatenate([b.values for b in sparse]) if sparse else np.zeros(0),
        dim=dim,
    )


def column_statistics(
    columns: np.ndarray, rows: np.ndarray | SparseRows
) -> tuple[np.ndarray, np.ndarray]:
    """``(mean_i, E|x_i - mean_i|)`` at ``columns`` over ``rows`` (dense ``(n, d)`` or
    :class:`SparseRows`; the same numbers either way). A sparse column holds 0 in the
    rows where it has no entry, which contribute ``|mean_i|`` each to the deviation."""
    columns = np.asarray(columns, dtype=np.int64)
    if isinstance(rows, SparseRows):
        n = rows.n_rows
        if n == 0:
            return np.zeros(len(columns)), np.zeros(len(columns))
        at = np.searchsorted(columns, rows.indices)
        inside = at < len(columns)
        inside[inside] = columns[at[inside]] == rows.indices[inside]
        at, values = at[inside], rows.values[inside]
        mean = np.bincount(at, weights=values, minlength=len(columns)) / n
        present = np.bincount(at, minlength=len(columns))
        spread = np.bincount(at, weights=np.abs(values - mean[at]), minlength=len(columns))
        return mean, (spread + (n - present) * np.abs(mean)) / n
    X = np.asarray(rows, dtype=np.float64)
    if X.ndim != 2:
        raise InvalidInputError(f"rows must be a 2-d array, but got shape {X.shape}")
    if len(X) == 0:
        return np.zeros(len(columns)), np.zeros(len(columns))
    sub = X[:, columns]
    mean = sub.mean(axis=0)
    return mean, np.abs(sub - mean).mean(axis=0)


def feature_importance(
    weights: FeatureWeights, rows: np.ndarray | SparseRows | None = None
) -> ColumnImportance:
    """Rank the columns of ``weights`` by ``importance_i = |w_i| * E_t|x_{t,i} - mean_i|``
    over ``rows`` (the mean absolute linear SHAP value, module docstring), or by
    ``|w_i|`` alone when ``rows`` is None. ``rows``: the candidate rows of recent
    traffic, dense ``(n, d)`` or :class:`SparseRows`, ``d`` covering every column."""
    columns = weights.columns
    if rows is None:
        mean, deviation, n_rows = np.zeros(len(columns)), np.ones(len(columns)), 0
    else:
        d = rows.dim if isinstance(rows, SparseRows) else np.shape(rows)[-1]
        if len(columns) and columns[-1] >= d:
            raise InvalidInputError(
                f"rows have {d} columns, but the weights reach column {columns[-1]}"
            )
        mean, deviation = column_statistics(columns, rows)
        n_rows = rows.n_rows if isinstance(rows, SparseRows) else len(rows)
    importance = weights.mean_abs() * deviation
    order = np.lexsort((columns, -importance))
    return ColumnImportance(
        columns=columns[order],
        weight=weights.mean()[order],
        importance=importance[order],
        mean=mean[order],
        deviation=deviation[order],
        n_rows=n_rows,
    )
