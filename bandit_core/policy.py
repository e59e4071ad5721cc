"""The policy Protocol and the steps every policy shares.

A policy chooses one arm among ``K`` candidates whose feature vectors are the rows of
``X`` (shape ``(K, d)``) and learns from the reward of the arm it served:

>>> import numpy as np, bandit_core
>>> p = bandit_core.make_policy("linucb", d=2, alpha=1.0, seed=0)
>>> dec = p.select(["a", "b"], np.array([[1.0, 0.0], [0.0, 1.0]]))
>>> dec.arm_id in ("a", "b"), dec.ranking[0] == dec.arm_id
(True, True)
>>> p.update(dec.arm_id, np.array([1.0, 0.0]), 1.0)
>>> type(p).from_bytes(p.to_bytes()).to_bytes() == p.to_bytes()
True

The extension contract
======================

An algorithm is a subclass of :class:`BasePolicy` registered in
:mod:`bandit_core.registry` (``docs/adding_an_algorithm.md`` is the checklist).

Class attributes
    ``NAME`` (the registry name, stored in every serialized policy), ``CONFIG`` (a
    frozen :class:`PolicyConfig` subclass whose ``__post_init__`` checks each new field
    with :mod:`bandit_core.validation` and stores it as a Python value), ``ARM_STATE``
    (the :class:`~bandit_core.state.ArrayState` of one arm) and, when the algorithm has
    them, ``SHARED_STATE`` and ``USER_STATE``.

Abstract hooks (the class cannot be instantiated without them)
    ``_new_arm_state()``: an arm's prior, the cold start. ``_score(arm_ids, states, X,
    ctx)``: ``(scores, widths)`` of shape ``(K,)`` (widths may be ``None``).
    ``_update(arm_id, state, x, reward, ctx)``: apply one checked reward in place.

Optional hooks
    ``_new_shared_state``, ``_new_user_state``; ``_filter`` (guardrails: the eligible
    mask), ``_choose`` (the greedy index), ``_finish_select`` (record what serving
    changes), ``_decision_extras``, ``_arm_stats_extras``, ``_parts_changed_by_new_arms``;
    ``_score_batch`` (scores and widths of B selections at once, bit-identical to
    ``_score`` row by row, for :meth:`BasePolicy.select_until` and
    :meth:`BasePolicy.select_batch`).

Class flags (set by ``__init_subclass__`` from the hooks a class overrides; never set
by hand)
    ``_PLAIN_CHOICE``: neither ``_filter`` nor ``_choose`` is overridden, so
    :meth:`~BasePolicy.select` takes the argmax without building the full order.
    ``_NO_EXTRAS``: ``_decision_extras`` is not overridden. ``_BATCHED``: a plain
    choice, the default ``_finish_select`` and a ``_score_batch``; only then does
    ``select_until`` score rows in batches. ``_SELECT_ROWS`` (set by hand): rows per
    ``_score_batch`` call, ``None`` for all at once.

Sparse rows
    ``SPARSE_ROWS`` (set by hand, default False) says the policy takes sparse rows, for
    feature spaces where a dense ``X`` cannot exist (``d = 2**20 + 1`` hashed buckets:
    :mod:`bandit_core.diag_linucb`). :meth:`~BasePolicy.select` then takes ``X`` as a
    :class:`~bandit_core.features.SparseRows` of ``K`` rows of length ``d`` (what the
    featurizer makes) and :meth:`~BasePolicy.update` ``x`` as a one-row ``SparseRows``;
    a dense ``X`` or ``x`` is still accepted, checked as before and turned into sparse
    rows (:meth:`SparseRows.from_dense <bandit_core.features.SparseRows.from_dense>`), so
    both forms of the same rows give the same decisions. Sparse input is checked in the
    shared step (:func:`~bandit_core.validation.check_sparse_rows`: ``dim == d``, ``K``
    rows, columns in ``[0, d)`` strictly increasing within a row, finite values) and
    ``_score`` and ``_update`` always receive ``SparseRows``. Such a policy has no
    ``_score_batch``: ``select_until`` loops over ``select``.

Shared models
    :class:`SharedModelPolicy` holds the steps of a policy whose ``"shared"`` part scores
    any candidate from its features (hybrid LinUCB, diagonal LinUCB). When its
    ``_keeps_arm_parts()`` is False (the default) arms carry no state: any arm id may be
    served or rewarded without registration, the hooks get ``None`` as an arm's state,
    the only state part is ``"shared"`` and :meth:`~BasePolicy.policy_stats` holds the
    counts.

Select, update, select_until, select_batch
    :meth:`~BasePolicy.select` checks its inputs, cold-starts unseen arms, calls
    ``_score``, breaks ties uniformly (one random key per candidate), applies the
    guardrail hooks and the epsilon floor and logs the propensities (docs/algorithms.md
    section 5). :meth:`~BasePolicy.update` checks ``x`` and the reward and calls
    ``_update``. :meth:`~BasePolicy.select_until` equals a loop of selections that
    stops at a target arm, state and RNG included; it only batches when ``_BATCHED``,
    ``epsilon = 0`` and ``select`` would accept every row, else it loops.
    :meth:`~BasePolicy.select_batch` gives the decisions (or errors) of a list of
    selections made one after another, bit for bit, scoring those over the same
    candidates together when selecting changes no state (``_STATELESS_SELECT``:
    :attr:`~BasePolicy.batches_selections`); the service's coalesced ``/recommend``
    is built on it (docs/performance.md section 7).

Cache rules
    Policies over ridge states (LinUCB, hybrid LinUCB, LNUCB-TA) score from stacked copies of the
    candidates' arrays (:class:`bandit_core.linear.RidgeStack`) kept between calls.
    Only the hooks of the owning policy write an arm's arrays, through
    :meth:`LinearArmState.add <bandit_core.linear.LinearArmState.add>`, which bumps the
    update count ``n`` the stack compares; nothing else writes them in place
    (:meth:`~BasePolicy.arm_state` and the other accessors are to read). A stack row
    is rewritten when its arm's state *object* is replaced or its ``n`` moved; the
    whole stack is rebuilt when the candidate list differs. :meth:`~BasePolicy.update`
    records the arm it changed; any change to the arm *table* (cold start,
    :meth:`~BasePolicy.add_arm`, :meth:`~BasePolicy.retire_arm`,
    :meth:`~BasePolicy.import_parts`) calls ``_arm_table_changed``, after which every
    arm counts as changed and the candidate-state lookup is redone. A hook that replaces
    a state object outside these paths must call ``_arm_table_changed`` itself.
    :class:`SelectContext` is frozen: calls without a user or features share one.

State parts
    State is explicit and split into *parts* so a store can load, update and save one
    arm without touching the others: ``"arm:<id>"`` (one arm's model), ``"shared"``
    (state common to all arms, e.g. HARE's projections or guardrail counters) and
    ``"user:<id>"`` (per-user state, HARE). :meth:`BasePolicy.export_parts` and
    :meth:`BasePolicy.import_parts` move parts in and out as bytes;
    :meth:`BasePolicy.parts_for_select` and :meth:`BasePolicy.parts_for_update` name
    the parts a call reads and writes, and ``Decision.state_changed`` the parts a
    selection itself changed. :meth:`BasePolicy.to_bytes` holds the config, the RNG
    state, the retired arms and every part; :func:`bandit_core.registry.policy_from_bytes`
    rebuilds any registered policy from it.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import (
    BanditError,
    ConfigError,
    InvalidInputError,
    ModelError,
    StateFormatError,
    UnknownArmError,
)
from bandit_core.features import SparseRows
from bandit_core.importance import FeatureWeights
from bandit_core.state import ArrayState, pack, unpack
from bandit_core.validation import (
    all_finite,
    check_arm_ids,
    check_int,
    check_matrix,
    check_real,
    check_reward,
    check_sparse_rows,
    check_true,
    check_vector,
    is_real,
)

SHARED_PART = "shared"
ARM_PREFIX = "arm:"
USER_PREFIX = "user:"


@dataclass(frozen=True)
class PolicyConfig:
    """Hyperparameters every policy has; algorithms extend it with their own fields.

    ``d``: length of each candidate's feature vector. ``alpha``: exploration weight of
    the confidence width. ``epsilon``: probability of serving a uniformly random
    eligible arm (docs/algorithms.md section 5). ``seed``: seed of the policy's RNG.
    ``reward_range``: ``[low, high]`` every reward must lie in.
    """

    d: int
    alpha: float = 1.0
    epsilon: float = 0.0
    seed: int | None = 0
    reward_range: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", check_int(self.d, "d", low=1))
        object.__setattr__(self, "alpha", check_real(self.alpha, "alpha", low=0.0))
        object.__setattr__(self, "epsilon", check_real(self.epsilon, "epsilon", low=0.0, high=1.0))
        object.__setattr__(self, "seed", check_int(self.seed, "seed", low=0, allow_none=True))
        rr = self.reward_range
        check_true(
            isinstance(rr, (tuple, list)) and len(rr) == 2 and all(is_real(v) and math.isfinite(v) for v in rr)
            and rr[0] < rr[1],
            f"reward_range must be [low, high] with finite low < high, but got {self.reward_range!r}",
        )
        object.__setattr__(self, "reward_range", (float(rr[0]), float(rr[1])))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the configuration (inverse of ``type(config)(**dict)``)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


@dataclass(frozen=True)
class GuardrailOutcome:
    """What the guardrails did in one decision (docs/algorithms.md section 3.2, assumptions 4 and 5).

    ``blocked`` maps each blocked candidate to the reasons given by the predicates
    that blocked it; ``unconstrained_arm_id`` is the UCB argmax before filtering and
    ``argmax_blocked`` says whether it was blocked (the event counted by delta_G);
    ``safe_arm_served`` says whether no candidate passed and the safe arm was served.
    """

    blocked: Mapping[str, tuple[str, ...]]
    unconstrained_arm_id: str
    argmax_blocked: bool
    safe_arm_served: bool


@dataclass(frozen=True)
class Decision:
    """The outcome of :meth:`Policy.select`.

    ``ranking`` holds every candidate id, the served arm first, then the other eligible
    arms by descending score, then blocked arms. ``scores``, ``widths`` (confidence
    width, ``None`` for algorithms without one) and ``propensities`` are arrays of
    shape ``(K,)`` aligned with ``ranking``: ``propensities[i]`` is the probability
    that ``ranking[i]`` is served, ``(1 - eps) * 1[argmax] / #tied + eps / K_eligible``.
    ``state_changed`` names the state parts the selection itself changed and a store
    must save (guardrail counters, LNUCB-TA's arm count and its cold-started arms, HARE's
    cluster assignments; not the prior of a cold-started arm, which any process
    recreates identically);
    ``extras`` holds algorithm-specific arrays (e.g. HARE's attention).

    A decision returned by :meth:`BasePolicy.select` computes ``ranking``, ``scores``,
    ``widths`` and ``propensities`` when one of them is first read, from arrays the
    selection already holds; the values are those an eager construction would give.
    """

    arm_id: str
    ranking: tuple[str, ...]
    scores: np.ndarray
    widths: np.ndarray | None
    propensities: np.ndarray
    explored: bool
    guardrail: GuardrailOutcome | None = None
    state_changed: tuple[str, ...] = ()
    extras: Mapping[str, Any] = field(default_factory=dict)

    @property
    def propensity(self) -> float:
        """Probability with which the served arm was chosen."""
        return float(self.propensities[0])

    def __getattr__(self, name: str) -> Any:
        # A decision made by select holds its ranking, scores, widths and propensities
        # as a _Ranking until one of them is first read (most callers read only arm_id).
        pending = self.__dict__.get("_pending")
        if pending is None or name not in _Ranking.FIELDS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.__dict__.update(pending.fields())
        return self.__dict__[name]


class _Ranking:
    """What :meth:`BasePolicy.select` knows about one decision, from which the
    :class:`Decision`'s ranking, scores, widths and propensities are computed on demand.

    ``order`` ranks candidates by descending score, ties by descending ``keys`` (computed
    here when select did not need it); ``eligible`` is ``None`` when no arm was blocked;
    ``tied`` marks the eligible arms sharing the greedy arm's score (``None`` when no arm
    was blocked and that score is the only maximum).
    """

    FIELDS = frozenset(("ranking", "scores", "widths", "propensities"))

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

    def ranked(self) -> np.ndarray:
        """Candidate indices: the served arm, the other eligible arms by descending score
        (ties by descending key), then the blocked arms."""
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

    def fields(self) -> dict[str, Any]:
        """The four lazy :class:`Decision` fields."""
        ranked, eps = self.ranked(), self.epsilon
        if self.eligible is None:
            propensity = np.full(len(self.ids), eps / self.n_eligible)
        else:
            propensity = np.where(self.eligible, eps / self.n_eligible, 0.0)
        tied = self.tied
        if tied is None:  # no arm blocked and a single best score
            tied = self.scores == self.scores.max()
        propensity[tied] += (1.0 - eps) / self.n_tied
        return {
            "ranking": tuple(map(self.ids.__getitem__, ranked.tolist())),
            "scores": self.scores[ranked],
            "widths": None if self.widths is None else self.widths[ranked],
            "propensities": propensity[ranked],
        }


@dataclass(frozen=True)
class SelectContext:
    """Request-level inputs an algorithm may use beyond the candidates' features.
    Frozen: calls without a user or features share one instance."""

    user_id: str | None = None
    features: Mapping[str, float] | None = None


@dataclass(frozen=True)
class SelectRequest:
    """The arguments of one :meth:`BasePolicy.select` call, for
    :meth:`BasePolicy.select_batch`."""

    arm_ids: Sequence[str]
    X: ArrayLike | SparseRows
    user_id: str | None = None
    features: Mapping[str, float] | None = None
    explore: bool = True


# A checked selection select_batch has yet to score and decide: its index, candidate
# ids, rows, context, states and cold-started arms.
_PendingSelect = tuple[int, list[str], Any, "SelectContext", list[ArrayState], tuple[str, ...]]


@dataclass
class ArmStats:
    """Learning counters of one arm: rewards applied, their sum and mean, and extras
    (e.g. LNUCB-TA's exploration weight alpha_a)."""

    rewarded: int
    reward_sum: float
    extras: dict[str, float] = field(default_factory=dict)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.rewarded if self.rewarded else 0.0


@runtime_checkable
class Policy(Protocol):
    """What every policy offers; see the module docstring for an example."""

    config: PolicyConfig

    def select(
        self,
        arm_ids: Sequence[str],
        X: ArrayLike | SparseRows,
        *,
        user_id: str | None = None,
        features: Mapping[str, float] | None = None,
        explore: bool = True,
    ) -> Decision: ...

    def select_until(
        self, arm_ids: Sequence[str], X_batch: ArrayLike, targets: ArrayLike, *, user_id: str | None = None
    ) -> int: ...

    def update(self, arm_id: str, x: ArrayLike | SparseRows, reward: float, *, user_id: str | None = None) -> None: ...

    def to_bytes(self) -> bytes: ...

    @classmethod
    def from_bytes(cls, data: bytes) -> Self: ...


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


class BasePolicy(abc.ABC):
    """Shared steps of every policy; subclasses implement the algorithm hooks (the
    extension contract is the module docstring).

    Subclasses set ``NAME`` (the registry name), ``CONFIG`` (their config class) and
    ``ARM_STATE`` (their per-arm :class:`ArrayState` class), and optionally
    ``SHARED_STATE`` and ``USER_STATE``. ``FEATURE_LAYOUT`` says how the policy reads
    featurized JSON (:mod:`bandit_core.featurized`): ``"context"`` (default, every row
    the hashed context), ``"actions_context"`` (``[z_a, x]``, shared models) or
    ``"context_item"`` (``[x, v_a]``, HARE).
    """

    NAME: ClassVar[str] = ""
    CONFIG: ClassVar[type[PolicyConfig]] = PolicyConfig
    ARM_STATE: ClassVar[type[ArrayState] | None]
    SHARED_STATE: ClassVar[type[ArrayState] | None] = None
    USER_STATE: ClassVar[type[ArrayState] | None] = None
    FEATURE_LAYOUT: ClassVar[str] = "context"

    # Set per class from which selection hooks it overrides (__init_subclass__):
    # _PLAIN_CHOICE, no guardrail filter and the default greedy choice; _NO_EXTRAS, no
    # decision extras; _STATELESS_SELECT, a plain choice and the default _finish_select
    # (a selection changes no state but by cold starts: select_batch batches);
    # _BATCHED, that and a _score_batch (select_until may use it, see there).
    _PLAIN_CHOICE: ClassVar[bool] = True
    _NO_EXTRAS: ClassVar[bool] = True
    _BATCHED: ClassVar[bool] = False
    _STATELESS_SELECT: ClassVar[bool] = True
    # Rows select_until scores per _score_batch call: about one match's worth on a log
    # of ~10 arms, so few rows past the match are scored in vain. None: all at once, for
    # a policy whose _score_batch keeps the terms of rows it scores again (LNUCB-TA).
    _SELECT_ROWS: ClassVar[int | None] = 16
    # Set by hand: the policy takes sparse rows (see the module docstring).
    SPARSE_ROWS: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        base = BasePolicy
        cls._PLAIN_CHOICE = cls._filter is base._filter and cls._choose is base._choose
        cls._NO_EXTRAS = cls._decision_extras is base._decision_extras
        cls._STATELESS_SELECT = cls._PLAIN_CHOICE and cls._finish_select is base._finish_select
        cls._BATCHED = cls._STATELESS_SELECT and cls._score_batch is not base._score_batch

    def __init__(self, config: PolicyConfig) -> None:
        if not isinstance(config, self.CONFIG):
            raise ConfigError(f"{self.NAME} needs a {self.CONFIG.__name__}, but got {type(config).__name__}")
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        self._arms: dict[str, ArrayState] = {}
        self._retired: set[str] = set()
        self._users: dict[str, ArrayState] = {}
        self._shared: ArrayState | None = self._new_shared_state()
        self._checked_ids: list[str] | None = None  # the last candidate list select checked
        # Arms whose state update() may have changed since _take_updated last ran; None
        # when the arm table itself changed (cold start, add, retire, part import), so
        # every arm must be treated as changed.
        self._updated_arms: set[str] | None = None
        # The candidate list select looked up last and its states, until the arm table
        # changes.
        self._select_states: tuple[list[str], list[ArrayState]] | None = None
        self._no_context = SelectContext()  # the context of calls without user or features

    # ---- algorithm hooks -------------------------------------------------------------
    @abc.abstractmethod
    def _new_arm_state(self) -> ArrayState:
        """The prior state of an arm never rewarded (the cold start)."""

    def _new_shared_state(self) -> ArrayState | None:
        return None

    def _new_user_state(self) -> ArrayState | None:
        return None

    @abc.abstractmethod
    def _score(
        self, arm_ids: list[str], states: list[ArrayState], X: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return ``(scores, widths)``, each of shape ``(K,)`` (widths may be None)."""

    def _score_batch(
        self, arm_ids: list[str], states: list[ArrayState], X_batch: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray | None] | None:
        """Scores and widths of B selections over the same candidates and context at
        once, each of shape ``(B, K)`` for ``X_batch`` of shape ``(B, K, d)``, row ``i``
        bit-identical to ``_score(..., X_batch[i], ...)``; ``None`` when the policy has no
        batched scoring.

        :meth:`select_until` and :meth:`select_batch` use it only if scoring changes no
        state, so the B selections would all have seen the same state, and only when
        ``_filter``, ``_choose`` and ``_finish_select`` are the defaults (they may change
        state or pick other than the best score).
        """
        return None

    @abc.abstractmethod
    def _update(self, arm_id: str, state: ArrayState, x: np.ndarray, reward: float, ctx: SelectContext) -> None:
        """Apply one reward to ``state`` (and shared/user state) in place."""

    def _filter(
        self,
        arm_ids: list[str],
        X: np.ndarray,
        scores: np.ndarray,
        widths: np.ndarray | None,
        order: np.ndarray,
        ctx: SelectContext,
    ) -> tuple[np.ndarray, GuardrailOutcome | None, tuple[str, ...]]:
        """Return ``(eligible mask, outcome, parts changed)``; ``order`` ranks candidates
        by score with ties broken at random. Without guardrails every arm is eligible."""
        return np.ones(len(arm_ids), dtype=bool), None, ()

    def _arm_stats_extras(self, arm_id: str, state: ArrayState) -> dict[str, float]:
        return {}

    def _parts_changed_by_new_arms(self, arm_ids: tuple[str, ...]) -> tuple[str, ...]:
        """Parts a selection changed by cold-starting ``arm_ids`` that a store must save:
        none by default, as a cold-started arm's prior is a function of the config alone
        (every process, and every later selection, starts it the same way, so the
        decisions are those of a saved prior). A policy whose cold start changes other
        state (LNUCB-TA counts its arms in ``"shared"``) lists the arm parts and that."""
        return ()

    def _choose(
        self,
        arm_ids: list[str],
        X: np.ndarray,
        scores: np.ndarray,
        order: np.ndarray,
        eligible: np.ndarray,
        ctx: SelectContext,
    ) -> int:
        """Index of the greedy choice; by default the best-ranked eligible candidate."""
        return int(order[eligible[order]][0])

    # ---- public API --------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.NAME

    def select(
        self,
        arm_ids: Sequence[str],
        X: ArrayLike | SparseRows,
        *,
        user_id: str | None = None,
        features: Mapping[str, float] | None = None,
        explore: bool = True,
    ) -> Decision:
        """Choose one of ``arm_ids`` given their feature rows ``X`` (shape ``(K, d)``; a
        :class:`~bandit_core.features.SparseRows` for a policy with ``SPARSE_ROWS``).

        Unseen arms start from the algorithm's prior (cold start); retired arms raise
        :class:`UnknownArmError`. With ``explore=False`` the epsilon floor is off for
        this call and the greedy (UCB) choice is served.
        """
        ids, X, ctx = self._select_input(arm_ids, X, user_id, features)
        states, created = self._states_for_select(ids)
        scores, widths = self._score(ids, states, X, ctx)
        return self._decide(ids, X, scores, widths, explore, created, ctx)

    def _select_input(
        self,
        arm_ids: Sequence[str],
        X: ArrayLike | SparseRows,
        user_id: str | None,
        features: Mapping[str, float] | None,
    ) -> tuple[list[str], np.ndarray | SparseRows, SelectContext]:
        """The checked candidate ids, rows and context of one selection."""
        ids = self._checked_ids = check_arm_ids(arm_ids, self._checked_ids)
        K = len(ids)
        X = _sparse_matrix(X, K, self.config.d) if self.SPARSE_ROWS else check_matrix(X, K, self.config.d)
        if user_id is None and features is None:
            ctx = self._no_context
        else:
            ctx = SelectContext(user_id=user_id, features=features)
        return ids, X, ctx

    def _states_for_select(self, ids: list[str]) -> tuple[list[ArrayState], tuple[str, ...]]:
        """The candidates' states, cold-starting unseen arms, and the arms cold-started."""
        created: tuple[str, ...] = ()
        cached = self._select_states
        if cached is not None and cached[0] == ids:
            states = cached[1]
        else:
            try:
                states = list(map(self._arms.__getitem__, ids))
            except KeyError:
                created = tuple(a for a in ids if a not in self._arms)
                states = [self._arm_for_select(a) for a in ids]
            self._select_states = (ids, states)
        return states, created

    def _decide(
        self,
        ids: list[str],
        X: np.ndarray | SparseRows,
        scores: np.ndarray,
        widths: np.ndarray | None,
        explore: bool,
        created: tuple[str, ...],
        ctx: SelectContext,
    ) -> Decision:
        """The decision of one selection from its candidates' scores: the tie-break keys,
        guardrail hooks, exploration and propensities, drawing from the RNG in
        :meth:`select`'s order."""
        K = len(ids)
        listed = scores.tolist()
        if not math.isfinite(sum(listed)) and not np.isfinite(scores).all():
            raise non_finite_score_error(self.NAME, ids, X, scores)
        # Ties are broken uniformly at random: each candidate draws a random key and,
        # among equal scores, the larger key ranks first.
        keys = self._rng.random(K)
        epsilon = self.config.epsilon if explore else 0.0
        if self._PLAIN_CHOICE:
            # No guardrails and the default choice: the greedy arm is the best score,
            # the largest key among ties; the full order (and the tie mask, unless there
            # is a tie to break) is left to the Decision.
            order, eligible, outcome, changed, n_eligible = None, None, None, (), K
            greedy = int(scores.argmax())
            n_tied = listed.count(listed[greedy])
            tied = None
            if n_tied > 1:
                tied = scores == scores[greedy]
                greedy = int(np.where(tied, keys, -1.0).argmax())
        else:
            order = np.lexsort((-keys, -scores))
            eligible, outcome, changed = self._filter(ids, X, scores, widths, order, ctx)
            greedy = self._choose(ids, X, scores, order, eligible, ctx)
            n_eligible = int(np.count_nonzero(eligible))
            tied = scores == scores[greedy]
            if n_eligible < K:
                tied &= eligible
            else:
                eligible = None
            n_tied = int(np.count_nonzero(tied))
        explored = bool(epsilon > 0.0 and self._rng.random() < epsilon)
        if explored:
            candidates = np.arange(K) if eligible is None else np.flatnonzero(eligible)
            served = int(self._rng.choice(candidates))
        else:
            served = greedy
        plan = _Ranking(ids, scores, widths, keys, order, eligible, served, tied, n_tied, n_eligible, epsilon)
        extras = {} if self._NO_EXTRAS else self._decision_extras(ids, plan.ranked(), ctx)
        decision = Decision.__new__(Decision)
        decision.__dict__.update(
            arm_id=ids[served],
            explored=explored,
            guardrail=outcome,
            state_changed=(self._parts_changed_by_new_arms(created) if created else ()) + changed,
            extras=extras,
            _pending=plan,
        )
        return self._finish_select(decision)

    @property
    def batches_selections(self) -> bool:
        """Whether :meth:`select_batch` makes its selections together (one scoring call
        per candidate list when the policy has batched scoring) rather than one
        :meth:`select` after another: true when a selection changes no state but by cold
        starts (no guardrail filter, the default choice and ``_finish_select``)."""
        return self._STATELESS_SELECT

    def select_batch(self, requests: Sequence[SelectRequest]) -> list[Decision | BanditError]:
        """The decisions of ``requests``, each the :class:`Decision` or the
        :class:`BanditError` that ``select`` would give for it when the requests are
        selected one after another in order: same tie-break keys, exploration draws and
        propensities, bit for bit, and the policy's state and RNG left the same (a
        request that fails draws nothing, as in :meth:`select`).

        When :attr:`batches_selections`, the requests are checked and their unseen arms
        cold-started in order, and the requests over the same candidates and context are
        scored in one ``_score_batch`` call (row by row without one): no selection
        changes what another scores, so only the RNG draws need the order, and they are
        made in it. A cold start that changes other state (LNUCB-TA's arm count) first
        finishes the requests before it. Otherwise it is a loop over :meth:`select`.
        """
        out: list[Decision | BanditError | None] = [None] * len(requests)
        if not self._STATELESS_SELECT:
            for i, request in enumerate(requests):
                out[i] = self._select_or_error(request)
            return out  # type: ignore[return-value]
        pending: list[_PendingSelect] = []
        for i, request in enumerate(requests):
            try:
                ids, X, ctx = self._select_input(request.arm_ids, request.X, request.user_id, request.features)
                if self.cold_start_changes_state(ids):
                    self._finish_batch(requests, pending, out)
                    pending = []
                    out[i] = self._select_or_error(request)
                    continue
                states, created = self._states_for_select(ids)
            except BanditError as exc:
                out[i] = exc
                continue
            pending.append((i, ids, X, ctx, states, created))
        self._finish_batch(requests, pending, out)
        return out  # type: ignore[return-value]

    def cold_start_changes_state(self, arm_ids: Sequence[str]) -> bool:
        """Whether a selection over ``arm_ids`` would cold-start arms in a way that
        changes other state a store must save (LNUCB-TA counts its arms); only such
        selections of a policy that :attr:`batches_selections` list parts in
        ``Decision.state_changed``."""
        unseen = tuple(a for a in arm_ids if a not in self._arms)
        return bool(unseen) and bool(self._parts_changed_by_new_arms(unseen))

    def _select_or_error(self, request: SelectRequest) -> Decision | BanditError:
        try:
            return self.select(
                request.arm_ids, request.X, user_id=request.user_id, features=request.features, explore=request.explore
            )
        except BanditError as exc:
            return exc

    def _finish_batch(
        self,
        requests: Sequence[SelectRequest],
        pending: list[_PendingSelect],
        out: list[Decision | BanditError | None],
    ) -> None:
        """Score the checked ``pending`` selections (together by candidate list and
        context when the policy has batched scoring) and decide them in order."""
        groups: dict[tuple[Any, ...], list[int]] = {}
        for n, (_, ids, _, ctx, _, _) in enumerate(pending):
            if self._BATCHED and not self.SPARSE_ROWS:
                features = None if ctx.features is None else tuple(ctx.features.items())
                groups.setdefault((tuple(ids), ctx.user_id, features), []).append(n)
            else:
                groups[(n,)] = [n]
        scored: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        for members in groups.values():
            _, ids, _, ctx, states, _ = pending[members[0]]
            batch = None
            if len(members) > 1:
                batch = self._score_batch(ids, states, np.stack([pending[n][2] for n in members]), ctx)
            for row, n in enumerate(members):
                if batch is None:
                    scored[n] = self._score(ids, states, pending[n][2], pending[n][3])
                else:
                    scored[n] = (batch[0][row], None if batch[1] is None else batch[1][row])
        for n, (i, ids, X, ctx, _, created) in enumerate(pending):
            try:
                out[i] = self._decide(ids, X, *scored[n], requests[i].explore, created, ctx)
            except BanditError as exc:
                out[i] = exc

    def select_until(
        self, arm_ids: Sequence[str], X_batch: ArrayLike, targets: ArrayLike, *, user_id: str | None = None
    ) -> int:
        """Select on consecutive feature matrices until the served arm is the target.

        Equivalent to calling ``select(arm_ids, X_batch[i], user_id=user_id)`` for
        ``i = 0, 1, ...`` and stopping after the first ``i`` whose served arm is
        ``arm_ids[targets[i]]``: returns that ``i``, or ``B`` when none matched, and
        leaves the policy's state and RNG exactly as those calls would. ``X_batch`` has
        shape ``(B, K, d)``, ``targets`` shape ``(B,)`` (candidate indices). A replay
        (:mod:`bandit_core.evaluation.replay`) uses it to skip the unmatched events
        between two updates, during which the policy's state does not change.

        Policies with batched scoring (``_score_batch``) and ``epsilon = 0`` score the
        events ``_SELECT_ROWS`` at a time (all B in one call when ``None``) and draw their
        tie-break keys at once, then rewind the RNG to just after the matched event's
        keys (one ``random(K)`` draw per selection, as :meth:`select` makes). Any input
        :meth:`select` would reject falls back to the one-by-one loop, so the same error
        is raised after the same selections.

        >>> import numpy as np, bandit_core
        >>> p = bandit_core.make_policy("linucb", d=1, alpha=0.0, seed=0)
        >>> p.add_arm("a"); p.add_arm("b")
        >>> p.update("a", [1.0], 1.0)  # "a" now scores 0.5, "b" 0
        >>> p.select_until(["a", "b"], np.ones((3, 2, 1)), [1, 0, 0])
        1
        """
        ids = check_arm_ids(arm_ids)
        n_events, targets = _check_targets(X_batch, targets, len(ids))
        X = self._batch_input(ids, X_batch) if n_events else None
        start = 0
        if X is not None:
            rng = self._rng.bit_generator
            step = self._SELECT_ROWS or n_events
            for start in range(0, n_events, step):
                scores = self._checked_batch_scores(ids, X[start : start + step], user_id)
                if scores is None:
                    break  # the RNG stands where select would draw row start's keys
                before = rng.state
                keys = self._rng.random(scores.shape)
                greedy = np.where(scores == scores.max(axis=1, keepdims=True), keys, -1.0).argmax(axis=1)
                hits = np.flatnonzero(greedy == targets[start : start + step])
                if hits.size:
                    rng.state = before
                    self._rng.random((int(hits[0]) + 1) * len(ids))
                    return start + int(hits[0])
            else:
                return n_events
        for i in range(start, n_events):
            if self.select(ids, X_batch[i], user_id=user_id).arm_id == ids[targets[i]]:
                return i
        return n_events

    def _batch_input(self, ids: list[str], X_batch: ArrayLike) -> np.ndarray | None:
        """``X_batch`` as a float array when :meth:`select_until` may score it in batches:
        a policy with batched scoring, no exploration, and rows :meth:`select` would
        accept; else ``None`` (see there)."""
        if not self._BATCHED or self.config.epsilon != 0.0:
            return None
        try:
            X = np.asarray(X_batch)
        except (TypeError, ValueError):  # e.g. ragged rows: select will say what is wrong
            return None
        if X.dtype.kind not in "biuf" or X.shape[1:] != (len(ids), self.config.d):
            return None
        X = X.astype(np.float64, copy=False)
        if not all_finite(X) or any(a in self._retired for a in ids):
            return None
        return X

    def _checked_batch_scores(self, ids: list[str], X: np.ndarray, user_id: str | None) -> np.ndarray | None:
        """``_score_batch`` of rows :meth:`_batch_input` accepted, after the cold start the
        first selection would make, or ``None`` when :meth:`select_until` must loop
        (non-finite scores)."""
        try:
            states = list(map(self._arms.__getitem__, ids))
        except KeyError:
            states = [self._arm_for_select(a) for a in ids]
        scored = self._score_batch(ids, states, X, SelectContext(user_id=user_id))
        return scored[0] if scored is not None and all_finite(scored[0]) else None

    def _finish_select(self, decision: Decision) -> Decision:
        """Last step of :meth:`select`: record what serving ``decision`` changes in the
        state (guardrail counters, HARE cluster assignments); by default nothing."""
        return decision

    def _decision_extras(self, arm_ids: list[str], ranked: np.ndarray, ctx: SelectContext) -> Mapping[str, Any]:
        return {}

    def update(self, arm_id: str, x: ArrayLike | SparseRows, reward: float, *, user_id: str | None = None) -> None:
        """Learn from ``reward`` observed after serving ``arm_id`` with feature vector ``x``
        (a one-row :class:`~bandit_core.features.SparseRows` for a policy with ``SPARSE_ROWS``).

        ``arm_id`` must be known (seen by :meth:`select` or added with :meth:`add_arm`).
        """
        state = self._known_arm(arm_id)
        x = _sparse_vector(x, self.config.d) if self.SPARSE_ROWS else check_vector(x, self.config.d)
        reward = check_reward(reward, self.config.reward_range)
        updated = self._updated_arms
        if updated is not None:
            updated.add(arm_id)
        ctx = self._no_context if user_id is None else SelectContext(user_id=user_id)
        self._update(arm_id, state, x, reward, ctx)

    def add_arm(self, arm_id: str) -> None:
        """Register ``arm_id`` with the prior state (no-op if known; un-retires it)."""
        check_arm_ids([arm_id])
        self._retired.discard(arm_id)
        if arm_id not in self._arms:
            self._arms[arm_id] = self._new_arm_state()
            self._arm_table_changed()

    def retire_arm(self, arm_id: str) -> None:
        """Forget ``arm_id``'s state; later selections including it raise UnknownArmError."""
        self._known_arm(arm_id)
        del self._arms[arm_id]
        self._retired.add(arm_id)
        self._arm_table_changed()

    def forget_arm(self, arm_id: str) -> None:
        """Drop ``arm_id``'s learned state as :meth:`retire_arm` does (shared totals
        that count it included) without retiring it: a later selection including it
        cold-starts it from the prior, as an arm never seen."""
        self.retire_arm(arm_id)
        self._retired.discard(arm_id)

    @property
    def arm_ids(self) -> tuple[str, ...]:
        """Ids of the arms the policy knows, in insertion order."""
        return tuple(self._arms)

    def feature_weights(self) -> FeatureWeights | None:
        """The weights the policy's score puts on each input column, for
        :func:`bandit_core.importance.feature_importance`; ``None`` (the default) for a
        policy whose score is not linear in its input."""
        return None

    def arm_stats(self, arm_id: str) -> ArmStats:
        """Learning counters of one arm (``rewarded``, ``reward_sum``, extras)."""
        state = self._known_arm(arm_id)
        return ArmStats(
            rewarded=int(state.n),  # type: ignore[attr-defined]
            reward_sum=float(state.reward_sum),  # type: ignore[attr-defined]
            extras=self._arm_stats_extras(arm_id, state),
        )

    def policy_stats(self) -> dict[str, float]:
        """Policy-level statistics (e.g. delta_G for guardrailed policies)."""
        return {}

    def arm_state(self, arm_id: str) -> ArrayState:
        """The state of a known arm, to read: writing it bypasses the score caches (see
        the module docstring); change state through :meth:`update` or :meth:`import_parts`."""
        return self._known_arm(arm_id)

    @property
    def shared_state(self) -> ArrayState | None:
        """The ``shared`` state part (``None`` for policies without one), to read."""
        return self._shared

    def user_state(self, user_id: str) -> ArrayState | None:
        """The state part of ``user_id`` (``None`` if the policy holds none), to read."""
        return self._users.get(user_id)

    @property
    def rng_state(self) -> dict[str, Any]:
        """The RNG's bit-generator state, as :meth:`to_bytes` stores it; assigning one
        makes later draws those of the policy it came from."""
        return self._rng.bit_generator.state

    @rng_state.setter
    def rng_state(self, state: dict[str, Any]) -> None:
        self._rng.bit_generator.state = state

    def batch_scores(self, arm_ids: Sequence[str], X_batch: ArrayLike, *, user_id: str | None = None) -> np.ndarray | None:
        """The scores :meth:`select_until` computes at once for the rows of ``X_batch``,
        shape ``(B, K)``, each row bit-identical to the scores :meth:`select` gives for
        that row; ``None`` when select_until would loop over :meth:`select` instead (no
        batched scoring, exploration, guardrails, input select rejects, non-finite
        scores). Unseen arms are cold-started, as the first selection would."""
        ids = check_arm_ids(arm_ids)
        X = self._batch_input(ids, X_batch)
        return None if X is None else self._checked_batch_scores(ids, X, user_id)

    # ---- state parts ---------------------------------------------------------------------
    def parts_for_select(self, arm_ids: Sequence[str], user_id: str | None = None) -> list[str]:
        """Names of the state parts a selection over ``arm_ids`` reads."""
        names = [ARM_PREFIX + a for a in arm_ids]
        if self.SHARED_STATE is not None:
            names.append(SHARED_PART)
        if self.USER_STATE is not None and user_id is not None:
            names.append(USER_PREFIX + user_id)
        return names

    def parts_for_update(self, arm_id: str, user_id: str | None = None) -> list[str]:
        """Names of the state parts one update of ``arm_id`` reads and writes."""
        return self.parts_for_select([arm_id], user_id)

    def part_names(self) -> list[str]:
        """Names of every state part the policy holds."""
        names = [ARM_PREFIX + a for a in self._arms]
        if self._shared is not None:
            names.append(SHARED_PART)
        names.extend(USER_PREFIX + u for u in self._users)
        return names

    def export_parts(self, names: Sequence[str]) -> dict[str, bytes]:
        """Serialize the named parts; parts the policy does not hold are left out."""
        out: dict[str, bytes] = {}
        for name in names:
            state = self._part(name)
            if state is not None:
                out[name] = state.to_bytes()
        return out

    def import_parts(self, parts: Mapping[str, bytes | None]) -> None:
        """Replace the named parts with the given bytes; ``None`` drops a part."""
        decoded = {name: self._decode_part(name, data) for name, data in parts.items()}
        self._arm_table_changed()
        for name, state in decoded.items():
            kind, key = self._split(name)
            if kind == "shared":
                self._shared = state if state is not None else self._new_shared_state()
                continue
            table = self._arms if kind == "arm" else self._users
            if state is None:
                table.pop(key, None)
            else:
                table[key] = state
                if kind == "arm":
                    self._retired.discard(key)

    def _decode_part(self, name: str, data: bytes | None) -> ArrayState | None:
        kind, _ = self._split(name)
        if data is None:
            return None
        cls = {"arm": self.ARM_STATE, "shared": self.SHARED_STATE, "user": self.USER_STATE}[kind]
        if cls is None:
            raise StateFormatError(f"{self.NAME} has no {kind!r} state part, but got {name!r}")
        return cls.from_bytes(data)

    def _split(self, name: str) -> tuple[str, str]:
        if name == SHARED_PART:
            return "shared", ""
        for prefix in (ARM_PREFIX, USER_PREFIX):
            if name.startswith(prefix) and len(name) > len(prefix):
                return prefix[:-1], name[len(prefix) :]
        raise StateFormatError(f"state part names are 'arm:<id>', 'user:<id>' or 'shared', but got {name!r}")

    def _part(self, name: str) -> ArrayState | None:
        kind, key = self._split(name)
        if kind == "shared":
            return self._shared
        return (self._arms if kind == "arm" else self._users).get(key)

    # ---- whole-policy serialization ----------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialize config, RNG state, retired arms and every part (``state.pack`` layout)."""
        parts = self.export_parts(self.part_names())
        meta = {
            "algorithm": self.NAME,
            "config": self.config.to_dict(),
            "rng": self._rng.bit_generator.state,
            "retired": sorted(self._retired),
            "parts": list(parts),
        }
        return pack("policy", meta, {f"p{i}": np.frombuffer(b, np.uint8) for i, b in enumerate(parts.values())})

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Rebuild a policy from :meth:`to_bytes`; later decisions are bit-identical."""
        _, meta, arrays = unpack(data, "policy")
        if meta.get("algorithm") != cls.NAME:
            raise StateFormatError(f"expected a {cls.NAME!r} policy, but got {meta.get('algorithm')!r}")
        config, rng, retired, parts = (meta.get(k) for k in ("config", "rng", "retired", "parts"))
        if not (isinstance(config, dict) and isinstance(rng, dict)):
            raise StateFormatError("a policy state needs a dict 'config' and a dict 'rng'")
        for key, names in (("retired", retired), ("parts", parts)):
            if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
                raise StateFormatError(f"a policy state's {key!r} must be a list of strs, but got {names!r}")
        expected = {f"p{i}" for i in range(len(parts))}
        if set(arrays) != expected or any(a.dtype != np.uint8 or a.ndim != 1 for a in arrays.values()):
            raise StateFormatError(f"a policy state needs the uint8 arrays {sorted(expected)}, but got {sorted(arrays)}")
        try:
            policy = cls(cls.CONFIG(**config))
        except (TypeError, ConfigError) as exc:  # an unknown or missing field, or a bad value
            raise StateFormatError(f"the policy state's config does not fit {cls.NAME}: {exc}") from None
        try:
            policy._rng.bit_generator.state = rng
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise StateFormatError(f"the policy state's rng is not a {type(policy._rng.bit_generator).__name__} state: {exc!r}") from None
        policy.import_parts({name: arrays[f"p{i}"].tobytes() for i, name in enumerate(parts)})
        policy._retired = set(retired)
        return policy

    # ---- helpers -------------------------------------------------------------------------
    def _arm_for_select(self, arm_id: str) -> ArrayState:
        state = self._arms.get(arm_id)
        if state is None:
            if arm_id in self._retired:
                raise UnknownArmError(f"arm {arm_id!r} was retired; add it again before serving it")
            state = self._arms[arm_id] = self._new_arm_state()
            self._arm_table_changed()
        return state

    def _arm_table_changed(self) -> None:
        """Record that arms were added, removed or given new state objects."""
        self._updated_arms = None
        self._select_states = None

    def _take_updated(self) -> set[str] | None:
        """The arms :meth:`update` may have changed since the last call (``None``:
        possibly any arm, and the arm table too); starts a new record."""
        updated, self._updated_arms = self._updated_arms, set()
        return updated

    def _known_arm(self, arm_id: str) -> ArrayState:
        state = self._arms.get(arm_id)
        if state is None:
            why = "was retired" if arm_id in self._retired else "is not known to this policy"
            raise UnknownArmError(f"arm {arm_id!r} {why}")
        return state

    def _user_state(self, user_id: str | None, create: bool) -> ArrayState | None:
        if user_id is None or self.USER_STATE is None:
            return None
        state = self._users.get(user_id)
        if state is None and create:
            state = self._users[user_id] = self._new_user_state()  # type: ignore[assignment]
        return state


class SharedModelPolicy(BasePolicy):
    """Shared steps of a shared model (docs/algorithms.md section 8): a ``"shared"``
    part scores any candidate from its features, so an item never seen gets the score
    its features earned on other items.

    Without per-arm parts (:meth:`_keeps_arm_parts` False, the default) an arm id is
    only a label: selecting or rewarding a new id creates no part, retiring one only
    records it so it is no longer served, the only state part is ``"shared"`` and its
    ``n`` and ``reward_sum`` are the counts of :meth:`policy_stats`.
    """

    FEATURE_LAYOUT: ClassVar[str] = "actions_context"

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__(config)
        self._arm_free = not self._keeps_arm_parts()

    def _keeps_arm_parts(self) -> bool:
        """Whether arms carry a state part of their own (by default they do not)."""
        return False

    def _arm_for_select(self, arm_id: str) -> ArrayState:
        if not self._arm_free:
            return super()._arm_for_select(arm_id)
        return self._known_arm(arm_id)

    def _known_arm(self, arm_id: str) -> ArrayState:
        if not self._arm_free:
            return super()._known_arm(arm_id)
        if arm_id in self._retired:
            raise UnknownArmError(f"arm {arm_id!r} was retired; add it again before serving it")
        return None  # type: ignore[return-value]  # no arm state: the hooks get None

    def parts_for_select(self, arm_ids: Sequence[str], user_id: str | None = None) -> list[str]:
        """Names of the parts a selection reads: the arms' parts and ``"shared"``; only
        ``"shared"`` without per-arm parts."""
        return [SHARED_PART] if self._arm_free else super().parts_for_select(arm_ids, user_id)

    def add_arm(self, arm_id: str) -> None:
        """Register ``arm_id`` (see :meth:`BasePolicy.add_arm`); without per-arm parts it
        only un-retires the id, as every id may be served."""
        if not self._arm_free:
            return super().add_arm(arm_id)
        check_arm_ids([arm_id])
        self._retired.discard(arm_id)
        self._arm_table_changed()

    def retire_arm(self, arm_id: str) -> None:
        """Stop serving ``arm_id`` (see :meth:`BasePolicy.retire_arm`); without per-arm
        parts there is no state to forget, only the id to refuse."""
        if not self._arm_free:
            return super().retire_arm(arm_id)
        self._known_arm(check_arm_ids([arm_id])[0])
        self._retired.add(arm_id)
        self._arm_table_changed()

    def arm_stats(self, arm_id: str) -> ArmStats:
        """Learning counters of ``arm_id``; without per-arm parts no arm keeps counters
        (they read 0) and :meth:`policy_stats` holds the totals."""
        if not self._arm_free:
            return super().arm_stats(arm_id)
        self._known_arm(arm_id)
        return ArmStats(rewarded=0, reward_sum=0.0)

    def policy_stats(self) -> dict[str, float]:
        """``rewarded`` and ``reward_sum``: every reward the shared part learned from."""
        shared = self._shared
        return {"rewarded": float(shared.n), "reward_sum": float(shared.reward_sum)}  # type: ignore[union-attr]


def _sparse_matrix(X: ArrayLike | SparseRows, rows: int, d: int) -> SparseRows:
    """``X`` (a :class:`SparseRows` or a dense ``(rows, d)`` array) as checked sparse rows."""
    if isinstance(X, SparseRows):
        return SparseRows(*check_sparse_rows(X.indptr, X.indices, X.values, X.dim, rows, d, "X"), dim=d)
    return SparseRows.from_dense(check_matrix(X, rows, d))


def _sparse_vector(x: ArrayLike | SparseRows, d: int) -> SparseRows:
    """``x`` (a one-row :class:`SparseRows` or a dense vector of length ``d``) as one
    checked sparse row."""
    if isinstance(x, SparseRows):
        return SparseRows(*check_sparse_rows(x.indptr, x.indices, x.values, x.dim, 1, d, "x"), dim=d)
    return SparseRows.from_dense(check_vector(x, d)[None, :])


def _check_targets(X_batch: ArrayLike, targets: ArrayLike, k: int) -> tuple[int, np.ndarray]:
    """``(B, targets as an int array)`` after checking ``targets`` holds one candidate
    index in ``[0, K)`` per row of ``X_batch``."""
    t = np.asarray(targets)
    n_events = len(X_batch)  # type: ignore[arg-type]
    if t.shape != (n_events,) or (n_events and t.dtype.kind not in "iu"):
        raise InvalidInputError(
            f"targets must be {n_events} candidate indices (one per row of X_batch), "
            f"but got shape {t.shape} and dtype {t.dtype}"
        )
    if n_events and not ((t >= 0).all() and (t < k).all()):
        raise InvalidInputError(f"targets must lie in [0, {k}), but got {t[(t < 0) | (t >= k)][0]}")
    return n_events, t.astype(np.intp, copy=False)
