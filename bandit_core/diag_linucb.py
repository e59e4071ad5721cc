"""Diagonal LinUCB: a shared model for large hashed spaces (docs/algorithms.md section 8).

A full shared matrix (:mod:`bandit_core.hybrid_linucb` with ``context_dim = 0``) costs
``k^2`` memory and ``k^2`` per update: fine to a few hundred features, not for the
``2^12`` to ``2^20`` buckets of a hashed space. This model keeps one precision per
feature instead, the diagonal of ``A = lambda*I + sum z z^T``, the standard
approximation for large sparse models (Chapelle and Li 2011, "An empirical evaluation
of Thompson sampling", display ads: a joint fit of the weights with a diagonal
posterior precision; Zhou et al. 2020, NeuralUCB's diagonal ``Z``). Every candidate's
row ``z`` (action features, context x action interactions, bias: the featurizer's
``actions`` vectors) is read as its nonzeros only:

    A_ii = lambda + sum_t z_{t,i}^2                              (both fits)
    score = z^T w + alpha * sqrt(sum_i z_i^2 / A_ii)

and the weights ``w`` by ``fit``:

* ``"joint"`` (default; docs/algorithms.md equation 8.3): the ridge update ``w += A^-1 z (r - z^T w) / (1 + z^T A^-1 z)``
  (recursive least squares by Sherman-Morrison) with ``A^-1`` replaced by the diagonal
  ``D^-1`` before the update: ``w_i += z_i (r - z^T w) / (D_ii (1 + sum_j z_j^2 /
  D_jj))``. The weights share the residual, as a joint fit's do; the denominator keeps
  the prediction from overshooting the reward however many features a row has.
* ``"per_feature"``: each feature's own ridge estimate, ``w_i = b_i / A_ii`` with
  ``b_i = sum_t r_t z_{t,i}``: a closed form, but features that appear together each
  claim the whole reward (``w_i`` is a marginal estimate, not a share of a joint fit).

The update of the served row writes the entries of its nonzeros and no other. Decision
and update cost grow with the nonzeros (and the log of the entries touched so far),
not with ``d``. When rows never share a feature (one-hot rows) ``A`` is diagonal and
both fits are the full matrix's ridge solution exactly.

The policy takes :class:`~bandit_core.features.SparseRows` (``SPARSE_ROWS``; a dense
``X`` is turned into sparse rows after the same checks, with identical decisions). The
only state part is ``"shared"`` (:class:`DiagSharedState`), which holds the touched
entries alone, so its size grows with the features seen, not with ``d``. Arms carry no
state: any arm id may be served and rewarded (:class:`SharedModelPolicy`). Exploration
is the UCB width (``alpha``) and/or the epsilon floor with its propensities
(docs/algorithms.md section 5, in :class:`BasePolicy`).

>>> import numpy as np
>>> from bandit_core.features import SparseRows
>>> p = DiagLinUCB(DiagLinUCBConfig(d=2**20 + 1, alpha=0.0))
>>> rows = SparseRows(indptr=np.array([0, 2, 4]), indices=np.array([7, 2**20, 9, 2**20]),
...                   values=np.ones(4), dim=2**20 + 1)
>>> p.update("seen", rows.one_row(0), 1.0)
>>> p.select(["new-1", "new-2"], rows).arm_id  # never seen, scored by bucket 7's weight
'new-1'
>>> p.part_names(), len(p.shared_state.index)
(['shared'], 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal, NamedTuple

import numpy as np

from bandit_core.errors import InvalidInputError, StateFormatError
from bandit_core.features import SparseRows
from bandit_core.importance import FeatureWeights
from bandit_core.policy import PolicyConfig, SelectContext
from bandit_core.shared_model import SharedModelPolicy
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite, check_choice, check_real

FITS = ("joint", "per_feature")


@dataclass(frozen=True)
class DiagLinUCBConfig(PolicyConfig):
    """Diagonal LinUCB hyperparameters: ``ridge_lambda``, the prior precision of every
    feature (``A_ii`` before any reward), and ``fit``, how the weights follow the
    rewards (``"joint"`` or ``"per_feature"``, module docstring); ``d`` is the row
    length, e.g. the featurizer's ``2**bits + 1``."""

    ridge_lambda: float = 1.0
    fit: Literal["joint", "per_feature"] = "joint"

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "ridge_lambda",
            check_real(self.ridge_lambda, "ridge_lambda", low=0.0, low_open=True),
        )
        object.__setattr__(self, "fit", check_choice(self.fit, "fit", FITS))


@dataclass
class DiagSharedState(ArrayState):
    """The features rewarded so far, touched entries only: ``index`` (m,) int64,
    strictly increasing columns; ``sum_sq`` (m,), ``sum_t z_{t,i}^2``, and ``w`` (m,),
    the weights, at those columns (``A_ii = lambda + sum_sq``; an untouched column has
    ``A_ii = lambda`` and ``w_i = 0``). ``n`` and ``reward_sum`` count every reward
    learned from."""

    KIND: ClassVar[str] = "diag_shared"
    index: np.ndarray
    sum_sq: np.ndarray
    w: np.ndarray
    n: int = 0
    reward_sum: float = 0.0

    def __post_init__(self) -> None:
        m = self.index.shape
        if (
            len(m) != 1
            or self.sum_sq.shape != m
            or self.w.shape != m
            or self.index.dtype.kind not in "iu"
        ):
            raise StateFormatError(f"{self.KIND!r} state needs index, sum_sq and w of one length m")
        if m[0] > 1 and not (np.diff(self.index) > 0).all():
            raise StateFormatError(f"{self.KIND!r} state index must be strictly increasing")

    @classmethod
    def prior(cls) -> DiagSharedState:
        """No feature touched yet."""
        return cls(index=np.zeros(0, dtype=np.int64), sum_sq=np.zeros(0), w=np.zeros(0))

    def lookup(self, columns: np.ndarray) -> Entries:
        """The entries at ``columns`` (an int array; sums 0 where untouched): a binary
        search per column, O(len(columns) log m)."""
        index = self.index
        at = np.searchsorted(index, columns)
        found = np.zeros(len(columns), dtype=bool)
        inside = at < len(index)
        found[inside] = index[at[inside]] == columns[inside]
        sum_sq, w = np.zeros(len(columns)), np.zeros(len(columns))
        sum_sq[found] = self.sum_sq[at[found]]
        w[found] = self.w[at[found]]
        return Entries(at, found, sum_sq, w)


class Entries(NamedTuple):
    """What :meth:`DiagSharedState.lookup` found for some columns: ``at``, where each is
    or would be inserted in ``index``; ``found``, whether it is there; its ``sum_sq`` and
    ``w`` (0 where not found)."""

    at: np.ndarray
    found: np.ndarray
    sum_sq: np.ndarray
    w: np.ndarray


class DiagLinUCB(SharedModelPolicy[DiagSharedState, DiagSharedState, None]):
    """LinUCB with a per-feature (diagonal) precision over sparse rows; arms keep no
    state. See the module docstring."""

    NAME: ClassVar[str] = "diag_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = DiagLinUCBConfig
    ARM_STATE = None  # no per-arm part: an "arm:<id>" part is refused on import
    SHARED_STATE = DiagSharedState
    SPARSE_ROWS: ClassVar[bool] = True
    config: DiagLinUCBConfig

    def _new_arm_state(self) -> DiagSharedState:
        raise NotImplementedError(
            "diag_linucb keeps no per-arm state"
        )  # SharedModelPolicy never asks

    def _new_shared_state(self) -> DiagSharedState:
        return DiagSharedState.prior()

    def weights(self, columns: np.ndarray) -> np.ndarray:
        """The weights ``w_i`` at ``columns`` (0 where no reward touched the column)."""
        return self._shared.lookup(np.asarray(columns, dtype=np.int64)).w

    def precisions(self, columns: np.ndarray) -> np.ndarray:
        """The diagonal precisions ``A_ii = lambda + sum_t z_{t,i}^2`` at ``columns``."""
        entries = self._shared.lookup(np.asarray(columns, dtype=np.int64))
        return self.config.ridge_lambda + entries.sum_sq

    def feature_weights(self) -> FeatureWeights:
        """The weights ``w`` at the columns a reward touched (every other weight is 0),
        one row counted by every reward."""
        shared = self._shared
        return FeatureWeights(
            shared.index.copy(), shared.w[None, :].copy(), np.array([float(shared.n)])
        )

    def arm_weights(self, arm_id: str) -> FeatureWeights:
        """The shared weights ``w`` (:meth:`feature_weights`): every arm's mean is
        ``z_a^T w`` over its own row (docs/algorithms.md section 8)."""
        self._known_arm(arm_id)
        return self.feature_weights()

    def _score(
        self, arm_ids: list[str], states: list[DiagSharedState], X: SparseRows, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray]:
        K = X.n_rows
        _, _, sum_sq, w = self._shared.lookup(X.indices)
        precision = self.config.ridge_lambda + sum_sq
        z = X.values
        row = np.repeat(np.arange(K), np.diff(X.indptr))
        # Sums in row order over each row's entries: the same entries in the same order
        # give the same bits, whether X came sparse or dense.
        mean = np.bincount(row, weights=z * w, minlength=K)
        width = np.sqrt(np.bincount(row, weights=z * z / precision, minlength=K))
        return mean + self.config.alpha * width, width

    def _update(
        self, arm_id: str, state: object, x: SparseRows, reward: float, ctx: SelectContext
    ) -> None:
        # state is None: diag_linucb keeps no per-arm part
        shared = self._shared
        keep = x.values != 0.0
        columns, z = x.indices[keep], x.values[keep]
        at, found, old_sq, w = shared.lookup(columns)
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            before = self.config.ridge_lambda + old_sq  # D_ii
            new_sq = old_sq + z * z
            if self.config.fit == "joint":  # w += D^-1 z (r - z'w) / (1 + z'D^-1 z)
                step = z / before
                w = w + step * ((reward - z @ w) / (1.0 + z @ step))
            else:  # w_i = b_i / A_ii: b_i = w_i D_ii grows by r z_i
                w = (w * before + reward * z) / (self.config.ridge_lambda + new_sq)
        if not (all_finite(new_sq) and all_finite(w)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(z).max()} overflows the per-feature sums"
            )
        if (
            not found.all()
        ):  # first reward on these columns: insert them in order (moves the later entries)
            new = ~found
            shared.index = np.insert(shared.index, at[new], columns[new])
            shared.sum_sq = np.insert(shared.sum_sq, at[new], 0.0)
            shared.w = np.insert(shared.w, at[new], 0.0)
            at = np.searchsorted(shared.index, columns)
        shared.sum_sq[at] = new_sq  # only the touched entries
        shared.w[at] = w
        shared.n += 1
        shared.reward_sum += reward
