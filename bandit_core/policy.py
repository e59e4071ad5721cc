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
    ``_NO_EXTRAS``: ``_decision_extras`` is not overridden. ``_STATELESS_SELECT``: a
    plain choice and the default ``_finish_select`` (``select_batch`` batches). ``_BATCHED``: a plain
    choice, the default ``_finish_select`` and a ``_score_batch``; only then does
    ``select_until`` score rows in batches. ``_SELECT_ROWS`` (set by hand): rows per
    ``_score_batch`` call, ``None`` for all at once.

Sparse rows
    ``SPARSE_ROWS`` (set by hand, default False) says the policy takes sparse rows, for
    feature spaces where a dense ``X`` cannot exist (``d = 2**20 + 1`` hashed buckets:
    :mod:`bandit_core.diag_linucb`): ``select`` and ``update`` then take
    :class:`~bandit_core.features.SparseRows` or dense rows, checked and turned into
    sparse rows in the shared step (:func:`bandit_core.selection.sparse_matrix`), and
    ``_score`` and ``_update`` always receive ``SparseRows``. Such a policy has no
    ``_score_batch``: ``select_until`` loops over ``select``.

Shared models
    :class:`~bandit_core.shared_model.SharedModelPolicy` holds the steps of a policy whose
    ``"shared"`` part scores any candidate from its features (hybrid LinUCB, diagonal
    LinUCB), with or without per-arm parts.

Select, update, select_until, select_batch
    :meth:`~BasePolicy.select` checks its inputs, cold-starts unseen arms, calls
    ``_score``, breaks ties uniformly (one random key per candidate), applies the
    guardrail hooks and the epsilon floor and logs the propensities (docs/algorithms.md
    section 5). :meth:`~BasePolicy.update` checks ``x`` and the reward and calls
    ``_update``. ``select_until`` (a loop of selections that stops at a target arm) and
    ``select_batch`` (selections made one after another, bit for bit, scored together
    when selecting changes no state) are :mod:`bandit_core.batch_selection`;
    ``update_batch`` (m rewards at once) is :mod:`bandit_core.batch_updates`.

Cache rules
    The score caches and who may write an arm's arrays: :mod:`bandit_core.parts`.

State parts
    State is split into parts (``"arm:<id>"``, ``"shared"``, ``"user:<id>"``) that a
    store loads and saves one by one (:mod:`bandit_core.parts`): ``parts_for_select``
    and ``parts_for_update`` name the parts a call reads and writes,
    ``Decision.state_changed`` the parts a selection itself changed.
    :meth:`BasePolicy.to_bytes` holds the config, the RNG state, the retired arms and
    every part; :func:`bandit_core.registry.policy_from_bytes` rebuilds any registered
    policy from it.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeAlias, cast, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.batch_selection import BatchRows, BatchSelection, SelectRequest, Selects
from bandit_core.batch_updates import BatchUpdates
from bandit_core.errors import ConfigError, StateFormatError
from bandit_core.features import SparseRows
from bandit_core.importance import FeatureWeights
from bandit_core.parts import (
    ARM_PREFIX,
    SHARED_PART,
    USER_PREFIX,
    ArmStats,
    ArmT,
    ArmTable,
    PolicyRecord,
    RewardCounts,
    SharedT,
    UserT,
    pack_policy,
    unpack_policy,
)
from bandit_core.selection import (
    Decision,
    Ranking,
    best_score,
    non_finite_score_error,
    sparse_matrix,
    sparse_vector,
)
from bandit_core.validation import (
    check_arm_ids,
    check_int,
    check_matrix,
    check_real,
    check_reward,
    check_true,
    check_vector,
    is_real,
)

__all__ = [
    "ARM_PREFIX",
    "SHARED_PART",
    "USER_PREFIX",
    "AnyPolicy",
    "ArmStats",
    "BasePolicy",
    "Decision",
    "GuardrailOutcome",
    "Policy",
    "PolicyConfig",
    "SelectContext",
    "SelectRequest",
]


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
            isinstance(rr, (tuple, list))
            and len(rr) == 2
            and all(is_real(v) and math.isfinite(v) for v in rr)
            and rr[0] < rr[1],
            f"reward_range must be [low, high] with finite low < high, but got {self.reward_range!r}",
        )
        object.__setattr__(self, "reward_range", (float(rr[0]), float(rr[1])))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the configuration (inverse of ``type(config)(**dict)``)."""
        plain: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))
        return plain


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
class SelectContext:
    """Request-level inputs an algorithm may use beyond the candidates' features.
    Frozen: calls without a user or features share one instance."""

    user_id: str | None = None
    features: Mapping[str, float] | None = None


@runtime_checkable
class Policy(Selects, Protocol):
    """What every policy offers (``select``: :class:`~bandit_core.batch_selection.Selects`);
    see the module docstring for an example."""

    config: PolicyConfig

    def select_until(
        self,
        arm_ids: Sequence[str],
        X_batch: BatchRows,
        targets: ArrayLike,
        *,
        user_id: str | None = None,
    ) -> int: ...

    def update(
        self, arm_id: str, x: ArrayLike | SparseRows, reward: float, *, user_id: str | None = None
    ) -> None: ...

    def to_bytes(self) -> bytes: ...

    @classmethod
    def from_bytes(cls, data: bytes) -> Self: ...


class BasePolicy(BatchSelection, BatchUpdates, ArmTable[ArmT, SharedT, UserT]):
    """Shared steps of every policy; subclasses set the class attributes and implement
    the algorithm hooks (the extension contract is the module docstring).

    Generic over the classes of its state parts, ``BasePolicy[ArmT, SharedT, UserT]``
    (:mod:`bandit_core.parts`): the hooks receive the algorithm's own state types.
    ``FEATURE_LAYOUT`` says how the policy reads
    featurized JSON (:mod:`bandit_core.featurized`): ``"context"`` (default, every row
    the hashed context), ``"actions_context"`` (``[z_a, x]``, shared models) or
    ``"context_item"`` (``[x, v_a]``, HARE).
    """

    CONFIG: ClassVar[type[PolicyConfig]] = PolicyConfig
    FEATURE_LAYOUT: ClassVar[str] = "context"
    # the config field that sets how much the policy explores (bandit_core.exploration)
    EXPLORATION_KNOB: ClassVar[str] = "alpha"

    # Set per class from the hooks it overrides (module docstring, "Class flags").
    _PLAIN_CHOICE: ClassVar[bool] = True
    _NO_EXTRAS: ClassVar[bool] = True
    _BATCHED: ClassVar[bool] = False
    _STATELESS_SELECT: ClassVar[bool] = True
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
            raise ConfigError(
                f"{self.NAME} needs a {self.CONFIG.__name__}, but got {type(config).__name__}"
            )
        self.config = config
        self._rng = np.random.default_rng(config.seed)
        super().__init__()  # the state parts; a shared prior may draw from the RNG (HARE)
        self._checked_ids: list[str] | None = None  # the last candidate list select checked
        self._no_context = SelectContext()  # the context of calls without user or features

    # ---- algorithm hooks -------------------------------------------------------------
    @abc.abstractmethod
    def _score(
        self, arm_ids: list[str], states: list[ArmT], X: Any, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Return ``(scores, widths)``, each of shape ``(K,)`` (widths may be None)."""

    def _score_batch(
        self, arm_ids: list[str], states: list[ArmT], X_batch: np.ndarray, ctx: SelectContext
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
    def _update(self, arm_id: str, state: ArmT, x: Any, reward: float, ctx: SelectContext) -> None:
        """Apply one reward to ``state`` (and shared/user state) in place."""

    def _filter(
        self,
        arm_ids: list[str],
        X: Any,
        scores: np.ndarray,
        widths: np.ndarray | None,
        order: np.ndarray,
        ctx: SelectContext,
    ) -> tuple[np.ndarray, GuardrailOutcome | None, tuple[str, ...]]:
        """Return ``(eligible mask, outcome, parts changed)``; ``order`` ranks candidates
        by score with ties broken at random. Without guardrails every arm is eligible."""
        return np.ones(len(arm_ids), dtype=bool), None, ()

    def _arm_stats_extras(self, arm_id: str, state: ArmT) -> dict[str, float]:
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
        X: Any,
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
        rows = (
            sparse_matrix(X, K, self.config.d)
            if self.SPARSE_ROWS
            else check_matrix(X, K, self.config.d)
        )
        return ids, rows, self._context(user_id, features)

    def _context(self, user_id: str | None, features: Mapping[str, float] | None) -> SelectContext:
        """The context of a call; calls without a user or features share one."""
        if user_id is None and features is None:
            return self._no_context
        return SelectContext(user_id=user_id, features=features)

    def _states_for_select(self, ids: list[str]) -> tuple[list[ArmT], tuple[str, ...]]:
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
        changed: tuple[str, ...]
        if self._PLAIN_CHOICE:
            # No guardrails and the default choice: the full order is left to the Ranking.
            order, eligible, outcome, changed, n_eligible = None, None, None, (), K
            greedy, n_tied, tied = best_score(scores, listed, keys)
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
        plan = Ranking(
            ids, scores, widths, keys, order, eligible, served, tied, n_tied, n_eligible, epsilon
        )
        decision = Decision(
            arm_id=ids[served],
            explored=explored,
            plan=plan,
            guardrail=outcome,
            state_changed=(self._parts_changed_by_new_arms(created) if created else ()) + changed,
            extras={} if self._NO_EXTRAS else self._decision_extras(ids, plan.ranked(), ctx),
        )
        return self._finish_select(decision)

    def _finish_select(self, decision: Decision) -> Decision:
        """Last step of :meth:`select`: record what serving ``decision`` changes in the
        state (guardrail counters, HARE cluster assignments); by default nothing."""
        return decision

    def _decision_extras(
        self, arm_ids: list[str], ranked: np.ndarray, ctx: SelectContext
    ) -> Mapping[str, Any]:
        return {}

    def update(
        self, arm_id: str, x: ArrayLike | SparseRows, reward: float, *, user_id: str | None = None
    ) -> None:
        """Learn from ``reward`` observed after serving ``arm_id`` with feature vector ``x``
        (a one-row :class:`~bandit_core.features.SparseRows` for a policy with ``SPARSE_ROWS``).

        ``arm_id`` must be known (seen by :meth:`select` or added with :meth:`add_arm`).
        """
        state = self._known_arm(arm_id)
        row = (
            sparse_vector(x, self.config.d) if self.SPARSE_ROWS else check_vector(x, self.config.d)
        )
        reward = check_reward(reward, self.config.reward_range)
        updated = self._updated_arms
        if updated is not None:
            updated.add(arm_id)
        self._update(arm_id, state, row, reward, self._context(user_id, None))

    def feature_weights(self) -> FeatureWeights | None:
        """The weights the policy's score puts on each input column, for
        :func:`bandit_core.importance.feature_importance`; ``None`` (the default) for a
        policy whose score is not linear in its input."""
        return None

    def arm_weights(self, arm_id: str) -> FeatureWeights | None:
        """The weights ``w`` of the mean of ``arm_id``'s score over its input row ``x``,
        one row: the mean is ``sum_j w_j x_j``, so ``w_j x_j`` is column ``j``'s
        contribution to it (docs/algorithms.md sections 1 and 8); ``None`` (the default)
        for a policy whose score is not linear in its input. An arm the policy does not
        know raises :class:`UnknownArmError`."""
        return None

    def arm_stats(self, arm_id: str) -> ArmStats:
        """Learning counters of one arm (``rewarded``, ``reward_sum``, extras)."""
        state = self._known_arm(arm_id)
        counts = cast(RewardCounts, state)  # every arm state counts its rewards (n, reward_sum)
        return ArmStats(
            rewarded=int(counts.n),
            reward_sum=float(counts.reward_sum),
            extras=self._arm_stats_extras(arm_id, state),
        )

    def policy_stats(self) -> dict[str, float]:
        """Policy-level statistics (e.g. delta_G for guardrailed policies)."""
        return {}

    @property
    def rng_state(self) -> Mapping[str, Any]:
        """The RNG's bit-generator state, as :meth:`to_bytes` stores it; assigning one
        makes later draws those of the policy it came from."""
        return self._rng.bit_generator.state

    @rng_state.setter
    def rng_state(self, state: Mapping[str, Any]) -> None:
        self._rng.bit_generator.state = state

    # ---- whole-policy serialization ----------------------------------------------------------
    def to_bytes(self) -> bytes:
        """Serialize config, RNG state, retired arms and every part (:func:`bandit_core.parts.pack_policy`)."""
        record = PolicyRecord(
            config=self.config.to_dict(),
            rng=self._rng.bit_generator.state,
            retired=sorted(self._retired),
            parts=self.export_parts(self.part_names()),
        )
        return pack_policy(self.NAME, record)

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Rebuild a policy from :meth:`to_bytes`; later decisions are bit-identical."""
        record = unpack_policy(data, cls.NAME)
        try:
            policy = cls(cls.CONFIG(**record.config))
        except (TypeError, ConfigError) as exc:  # an unknown or missing field, or a bad value
            raise StateFormatError(
                f"the policy state's config does not fit {cls.NAME}: {exc}"
            ) from None
        try:
            policy._rng.bit_generator.state = record.rng
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise StateFormatError(
                f"the policy state's rng is not a {type(policy._rng.bit_generator).__name__} state: {exc!r}"
            ) from None
        policy.import_parts(record.parts)
        policy._retired = set(record.retired)
        return policy


AnyPolicy: TypeAlias = BasePolicy[Any, Any, Any]
"""A policy of any algorithm, for code that calls only the public API."""
