"""The steps of a selection that need no policy state: a selection's :class:`Decision`,
whose ranking and propensities (docs/algorithms.md section 5) are computed from its
:class:`RankingPlan` when first read, the input checks of sparse rows and
``select_until`` targets, and the error for a non-finite score.

>>> import numpy as np
>>> r = Ranking(["a", "b", "c"], np.array([0.1, 0.9, 0.5]), None, np.zeros(3), None, None, 1, None, 1, 3, 0.3)
>>> r.ranking(), np.round(r.ranked_propensities(), 2).tolist()
(('b', 'c', 'a'), [0.8, 0.1, 0.1])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import BanditError, InvalidInputError, ModelError
from bandit_core.features import SparseRows
from bandit_core.validation import check_matrix, check_sparse_rows, check_vector

if TYPE_CHECKING:
    from bandit_core.policy import GuardrailOutcome


class RankingPlan(Protocol):
    """Where a :class:`Decision` takes its candidates in serving
    order from, when they are first read: a selection's :class:`Ranking`, or a
    :class:`FixedRanking`."""

    def ranking(self) -> tuple[str, ...]:
        """Every candidate id: the served arm first, then the other eligible arms by
        descending score, then the blocked arms."""
        ...

    def ranked_scores(self) -> np.ndarray:
        """The candidates' scores in the order of :meth:`ranking`."""
        ...

    def ranked_widths(self) -> np.ndarray | None:
        """Their confidence widths in that order (None: the algorithm has none)."""
        ...

    def ranked_propensities(self) -> np.ndarray:
        """The probability of serving each candidate, in that order."""
        ...


@dataclass(frozen=True)
class FixedRanking:
    """A :class:`RankingPlan` given in full (a decision a caller builds, such as a
    serving mode's baseline decision)."""

    ids: tuple[str, ...]
    scores: np.ndarray
    widths: np.ndarray | None
    propensities: np.ndarray

    def ranking(self) -> tuple[str, ...]:
        return self.ids

    def ranked_scores(self) -> np.ndarray:
        return self.scores

    def ranked_widths(self) -> np.ndarray | None:
        return self.widths

    def ranked_propensities(self) -> np.ndarray:
        return self.propensities


@dataclass(frozen=True, eq=False)
class Decision:
    """The outcome of :meth:`Policy.select <bandit_core.policy.Policy.select>`.

    ``ranking`` holds every candidate id, the served arm first, then the other eligible
    arms by descending score, then blocked arms. ``scores``, ``widths`` (confidence
    width, ``None`` for algorithms without one) and ``propensities`` are arrays of
    shape ``(K,)`` aligned with ``ranking``: ``propensities[i]`` is the probability
    that ``ranking[i]`` is served, ``(1 - eps) * 1[argmax] / #tied + eps / K_eligible``.
    Those four are computed from ``plan`` when first read, then kept (most callers read
    only ``arm_id``; docs/performance.md, "Engine"): a selection's :class:`Ranking`, or
    a :class:`FixedRanking` a caller builds. A decision equals only itself (its arrays
    have no single truth value to compare by).
    ``state_changed`` names the state parts the selection itself changed and a store
    must save (guardrail counters, LNUCB-TA's arm count and its cold-started arms, HARE's
    cluster assignments; not the prior of a cold-started arm, which any process
    recreates identically);
    ``extras`` holds algorithm-specific arrays (e.g. HARE's attention).
    """

    arm_id: str
    explored: bool
    plan: RankingPlan = field(repr=False)
    guardrail: GuardrailOutcome | None = None
    state_changed: tuple[str, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)

    @cached_property
    def ranking(self) -> tuple[str, ...]:
        return self.plan.ranking()

    @cached_property
    def scores(self) -> np.ndarray:
        return self.plan.ranked_scores()

    @cached_property
    def widths(self) -> np.ndarray | None:
        return self.plan.ranked_widths()

    @cached_property
    def propensities(self) -> np.ndarray:
        return self.plan.ranked_propensities()

    @property
    def propensity(self) -> float:
        """Probability with which the served arm was chosen."""
        return float(self.propensities[0])


class Ranking:
    """What a selection knows about one decision, from which its ranking, scores,
    widths and propensities are computed (:meth:`BasePolicy.select
    <bandit_core.policy.BasePolicy.select>`), each when a caller first reads it: a
    :class:`RankingPlan`.

    ``order`` ranks candidates by descending score, ties by descending ``keys``
    (computed here when the selection did not need it); ``eligible`` is ``None`` when no
    arm was blocked; ``tied`` marks the eligible arms sharing the greedy arm's score
    (``None`` when no arm was blocked and that score is the only maximum).
    """

    def __init__(
        self,
        ids: list[str],
        scores: np.ndarray,
        widths: np.ndarray | None,
        keys: np.ndarray,
        order: np.ndarray | None,
        eligible: np.ndarray | None,
        served: int,
        tied: np.ndarray | None,
        n_tied: int,
        n_eligible: int,
        epsilon: float,
    ) -> None:
        self.ids, self.scores, self.widths, self.keys, self.order = ids, scores, widths, keys, order
        self.eligible, self.served, self.tied, self.n_tied = eligible, served, tied, n_tied
        self.n_eligible, self.epsilon = n_eligible, epsilon
        self._ranked: np.ndarray | None = None

    def ranked(self) -> np.ndarray:
        """Candidate indices: the served arm, the other eligible arms by descending score
        (ties by descending key), then the blocked arms (computed once)."""
        if self._ranked is None:
            self._ranked = self._rank()
        return self._ranked

    def _rank(self) -> np.ndarray:
        order = self.order
        if order is None:
            order = self.order = np.lexsort((-self.keys, -self.scores))
        eligible, served = self.eligible, self.served
        if eligible is None:
            if served == order[0]:
                return order  # the usual case: no arm blocked, the best-ranked arm served
            return np.concatenate(([served], order[order != served])).astype(np.intp)
        rest = order[(order != served) & eligible[order]]
        blocked = order[~eligible[order]]
        return np.concatenate(([served], rest, blocked)).astype(np.intp)

    def ranking(self) -> tuple[str, ...]:
        return tuple(map(self.ids.__getitem__, self.ranked().tolist()))

    def ranked_scores(self) -> np.ndarray:
        ranked_scores: np.ndarray = self.scores[self.ranked()]
        return ranked_scores

    def ranked_widths(self) -> np.ndarray | None:
        return None if self.widths is None else self.widths[self.ranked()]

    def ranked_propensities(self) -> np.ndarray:
        """``(1 - eps) * 1[tied] / #tied + eps / K_eligible`` (0 for a blocked arm), in
        the order of :meth:`ranked`."""
        ranked, eps = self.ranked(), self.epsilon
        order = self.order  # set by ranked()
        if self.tied is None and order is not None:
            # No arm blocked and a single best score: only the greedy arm, order[0], gets
            # the greedy share; it is ranked first unless exploration served another arm.
            propensity = np.full(len(self.ids), eps / self.n_eligible)
            propensity[0 if ranked[0] == order[0] else 1] += (1.0 - eps) / self.n_tied
            return propensity
        if self.eligible is None:
            propensity = np.full(len(self.ids), eps / self.n_eligible)
        else:
            propensity = np.where(self.eligible, eps / self.n_eligible, 0.0)
        tied = self.tied
        if tied is None:  # no arm blocked and a single best score
            tied = self.scores == self.scores.max()
        propensity[tied] += (1.0 - eps) / self.n_tied
        in_order: np.ndarray = propensity[ranked]
        return in_order


def best_score(
    scores: np.ndarray, listed: list[float], keys: np.ndarray
) -> tuple[int, int, np.ndarray | None]:
    """``(greedy, n_tied, tied)`` of a selection without guardrails: the greedy arm is the
    best score, the largest tie-break key among ties; ``tied`` marks the arms sharing
    that score, ``None`` when it is the only maximum. ``listed`` is ``scores.tolist()``."""
    greedy = int(scores.argmax())
    n_tied = listed.count(listed[greedy])
    tied = None
    if n_tied > 1:
        tied = scores == scores[greedy]
        greedy = int(np.where(tied, keys, -1.0).argmax())
    return greedy, n_tied, tied


def non_finite_score_error(
    algorithm: str, ids: Sequence[str], X: np.ndarray | SparseRows, scores: np.ndarray
) -> BanditError:
    """The error for the first non-finite entry of ``scores``, blaming whoever caused it.

    The input, :class:`InvalidInputError`, when that candidate's row ``x`` has a squared
    norm ``x . x`` that overflows float64 (an entry above about 1.3e154): every score
    multiplies feature pairs (LinUCB's ``x^T A^-1 x``, HARE's ``q . k``), so such a row
    overflows whatever the state. Otherwise the model, :class:`ModelError`: finite,
    representable features gave a non-finite score, so its state or arithmetic is at fault.
    """
    bad = int(np.argmin(np.isfinite(scores)))
    row = X.row(bad)[1] if isinstance(X, SparseRows) else X[bad]
    with np.errstate(over="ignore"):
        norm_sq = float(row.dot(row))
    if not math.isfinite(norm_sq):
        return InvalidInputError(
            f"X[{bad}] gives the non-finite score {scores[bad]} for arm {ids[bad]!r}; "
            "feature values this large overflow float64"
        )
    return ModelError(
        f"{algorithm} produced the non-finite score {scores[bad]} for arm {ids[bad]!r} from the "
        f"finite features X[{bad}]; the model's state or arithmetic is at fault, not the input"
    )


def sparse_matrix(X: ArrayLike | SparseRows, rows: int, d: int) -> SparseRows:
    """``X`` (a :class:`SparseRows` or a dense ``(rows, d)`` array) as checked sparse rows."""
    if isinstance(X, SparseRows):
        return SparseRows(
            *check_sparse_rows(X.indptr, X.indices, X.values, X.dim, rows, d, "X"), dim=d
        )
    return SparseRows.from_dense(check_matrix(X, rows, d))


def sparse_vector(x: ArrayLike | SparseRows, d: int) -> SparseRows:
    """``x`` (a one-row :class:`SparseRows` or a dense vector of length ``d``) as one
    checked sparse row."""
    if isinstance(x, SparseRows):
        return SparseRows(
            *check_sparse_rows(x.indptr, x.indices, x.values, x.dim, 1, d, "x"), dim=d
        )
    return SparseRows.from_dense(check_vector(x, d)[None, :])


def check_targets(
    X_batch: Sequence[ArrayLike] | np.ndarray, targets: ArrayLike, k: int
) -> tuple[int, np.ndarray]:
    """``(B, targets as an int array)`` after checking ``targets`` holds one candidate
    index in ``[0, K)`` per row of ``X_batch``."""
    t = np.asarray(targets)
    n_events = len(X_batch)
    if t.shape != (n_events,) or (n_events and t.dtype.kind not in "iu"):
        raise InvalidInputError(
            f"targets must be {n_events} candidate indices (one per row of X_batch), "
            f"but got shape {t.shape} and dtype {t.dtype}"
        )
    if n_events and not ((t >= 0).all() and (t < k).all()):
        raise InvalidInputError(f"targets must lie in [0, {k}), but got {t[(t < 0) | (t >= k)][0]}")
    return n_events, t.astype(np.intp, copy=False)
