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
from typing import ClassVar, Literal, NamedTuple, TypeAlias

import numpy as np

from bandit_core.clock import Clocked
from bandit_core.diag_forgetting import DiagDiscountedState, check_entries
from bandit_core.errors import ConfigError, InvalidInputError
from bandit_core.features import SparseRows
from bandit_core.forgetting import DiscountedLinUCBConfig
from bandit_core.importance import FeatureWeights
from bandit_core.parts import SHARED_PART
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
    length, e.g. the featurizer's ``2**bits + 1``. ``gamma`` or ``half_life_seconds``
    discount the sums as D-LinUCB does (:mod:`bandit_core.diag_forgetting`); with them
    the fit is ``"per_feature"`` (the default then; ``"joint"`` is refused)."""

    ridge_lambda: float = 1.0
    fit: Literal["joint", "per_feature"] | None = None
    gamma: float | None = None
    half_life_seconds: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(
            self,
            "ridge_lambda",
            check_real(self.ridge_lambda, "ridge_lambda", low=0.0, low_open=True),
        )
        discounted = self.gamma is not None or self.half_life_seconds is not None
        if discounted:  # checked as discounted_linucb checks them
            clock = DiscountedLinUCBConfig(
                d=1, gamma=self.gamma, half_life_seconds=self.half_life_seconds
            )
            object.__setattr__(self, "gamma", clock.gamma)
            object.__setattr__(self, "half_life_seconds", clock.half_life_seconds)
        fit = check_choice(self.fit or ("per_feature" if discounted else "joint"), "fit", FITS)
        if discounted and fit != "per_feature":
            raise ConfigError(
                "gamma and half_life_seconds discount the per-feature sums, whose weights "
                "are their closed form: fit must be 'per_feature' (the default with "
                f"them), but got {fit!r}"
            )
        object.__setattr__(self, "fit", fit)

    @property
    def decay(self) -> float | None:
        """``-ln gamma`` per clock unit (an update of the policy, or a second with
        ``half_life_seconds``) when the model discounts; None when it does not."""
        if self.gamma is None and self.half_life_seconds is None:
            return None
        return -DiscountedLinUCBConfig(
            d=1, gamma=self.gamma, half_life_seconds=self.half_life_seconds
        ).log_decay


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
        check_entries(self.KIND, self.index, sum_sq=self.sum_sq, w=self.w)

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


# the shared part: the sums, or a discounting model's (bandit_core.diag_forgetting)
DiagPart: TypeAlias = DiagSharedState | DiagDiscountedState


class DiagLinUCB(Clocked, SharedModelPolicy[DiagSharedState, DiagPart, None]):
    """LinUCB with a per-feature (diagonal) precision over sparse rows; arms keep no
    state. See the module docstring; with ``gamma`` or ``half_life_seconds`` the shared
    part is :class:`~bandit_core.diag_forgetting.DiagDiscountedState`."""

    NAME: ClassVar[str] = "diag_linucb"
    CONFIG: ClassVar[type[PolicyConfig]] = DiagLinUCBConfig
    ARM_STATE = None  # no per-arm part: an "arm:<id>" part is refused on import
    SHARED_STATE = DiagSharedState
    SPARSE_ROWS: ClassVar[bool] = True
    config: DiagLinUCBConfig

    def __init__(self, config: PolicyConfig) -> None:
        # the shared prior (made in super().__init__) depends on whether the model discounts
        self._decay = config.decay if isinstance(config, DiagLinUCBConfig) else None
        super().__init__(config)

    def uses_wall_clock(self) -> bool:
        """True with ``half_life_seconds``."""
        return self.config.half_life_seconds is not None

    @property
    def folds_updates(self) -> bool:
        """True with the per-feature fit and no forgetting: a reward adds ``z_i^2`` and
        ``r z_i`` to the sums of its columns, in any order (docs/algorithms.md section
        8.1). The joint fit's update reads the current weights, and a forgetting part
        decays to each row's time: their rewards stay one by one."""
        return self.config.fit == "per_feature" and self._decay is None

    def _decode_part(self, name: str, data: bytes | None) -> ArrayState | None:
        if self._decay is None or data is None or name != SHARED_PART:
            return super()._decode_part(name, data)
        return DiagDiscountedState.from_bytes(data)

    def _new_arm_state(self) -> DiagSharedState:
        raise NotImplementedError(
            "diag_linucb keeps no per-arm state"
        )  # SharedModelPolicy never asks

    def _new_shared_state(self) -> DiagPart:
        if self._decay is not None:
            return DiagDiscountedState.prior()
        return DiagSharedState.prior()

    def _entries(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(precision, variance, w)`` at ``columns``: ``A_ii``, ``1 / A_ii`` and the
        weights; of a discounting model ``V_ii``, ``V~_ii / V_ii^2`` and ``b_i / V_ii`` as
        of ``now`` (docs/algorithms.md (10.4)), its clock outside
        :meth:`~bandit_core.clock.Clocked.at` or before it."""
        shared, lam = self._shared, self.config.ridge_lambda
        if isinstance(shared, DiagDiscountedState):
            assert self._decay is not None  # the only way to a discounted part
            m1, m2, b = shared.sums(columns, shared.read_time(self._now), self._decay)
            precision = lam + m1
            return precision, (lam + m2) / (precision * precision), b / precision
        _, _, sum_sq, w = shared.lookup(columns)
        precision = lam + sum_sq
        return precision, 1.0 / precision, w

    def weights(self, columns: np.ndarray) -> np.ndarray:
        """The weights ``w_i`` at ``columns`` (0 where no reward touched the column)."""
        return self._entries(np.asarray(columns, dtype=np.int64))[2]

    def precisions(self, columns: np.ndarray) -> np.ndarray:
        """The diagonal precisions ``A_ii = lambda + sum_t z_{t,i}^2`` at ``columns``
        (``V_ii = lambda + sum_t w_t z_{t,i}^2`` of a discounting model)."""
        return self._entries(np.asarray(columns, dtype=np.int64))[0]

    def feature_weights(self) -> FeatureWeights:
        """The weights ``w`` at the columns a reward touched (every other weight is 0),
        one row counted by every reward."""
        shared = self._shared
        return FeatureWeights(
            shared.index.copy(), self.weights(shared.index)[None, :], np.array([float(shared.n)])
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
        z = X.values
        _, variance, w = self._entries(X.indices)
        row = np.repeat(np.arange(K), np.diff(X.indptr))
        # Sums in row order over each row's entries: the same entries in the same order
        # give the same bits, whether X came sparse or dense.
        mean = np.bincount(row, weights=z * w, minlength=K)
        width = np.sqrt(np.bincount(row, weights=z * z * variance, minlength=K))
        return mean + self.config.alpha * width, width

    def _update(
        self, arm_id: str, state: object, x: SparseRows, reward: float, ctx: SelectContext
    ) -> None:
        # state is None: diag_linucb keeps no per-arm part
        shared = self._shared
        keep = x.values != 0.0
        columns, z = x.indices[keep], x.values[keep]
        if isinstance(shared, DiagDiscountedState):
            assert self._decay is not None  # the only way to a discounted part
            if not self.uses_wall_clock():  # the policy's update count
                now = shared.n + 1.0
            else:
                now = shared.clock if self._now is None else self._now
            shared.add(columns, z, reward, now, self._decay)
            return
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
