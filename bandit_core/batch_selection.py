"""Selections made together: :meth:`~BatchSelection.select_batch` (the decisions of
a list of selections, bit for bit those of one :meth:`select
<bandit_core.policy.BasePolicy.select>` after another) and
:meth:`~BatchSelection.select_until` (selections that stop at a target arm, for the
replay), with the batched scoring they share.

:class:`BatchSelection` is a base of :class:`~bandit_core.policy.BasePolicy`; its
methods run on the selection steps a policy has (:class:`SelectionSteps`). They batch
only what gives the same decisions, state and RNG as the one-by-one loop: scoring
through ``_score_batch`` when selecting changes no state (``_STATELESS_SELECT``,
``_BATCHED``), and the tie-break draws of ``select_until`` rewound to the matched
selection (module docstring of :mod:`bandit_core.policy`; docs/performance.md section 7).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import BanditError
from bandit_core.features import SparseRows
from bandit_core.selection import check_targets
from bandit_core.validation import all_finite, check_arm_ids

if TYPE_CHECKING:
    from bandit_core.policy import Decision, PolicyConfig, SelectContext

BatchRows = np.ndarray | Sequence[ArrayLike]
"""``B`` feature matrices of shape ``(K, d)``, as an array ``(B, K, d)`` or a sequence."""

PendingSelect = tuple[int, list[str], Any, "SelectContext", list[Any], tuple[str, ...]]
"""A checked selection :meth:`BatchSelection.select_batch` has yet to score and decide:
its index, candidate ids, rows, context, states and cold-started arms."""


@dataclass(frozen=True)
class SelectRequest:
    """The arguments of one ``select`` call, for
    :meth:`BatchSelection.select_batch`."""

    arm_ids: Sequence[str]
    X: ArrayLike | SparseRows
    user_id: str | None = None
    features: Mapping[str, float] | None = None
    explore: bool = True


class Selects(Protocol):
    """One selection, ``select``: the signature :class:`~bandit_core.policy.Policy` and
    :class:`SelectionSteps` share (documented on :meth:`bandit_core.policy.BasePolicy.select`)."""

    def select(
        self,
        arm_ids: Sequence[str],
        X: ArrayLike | SparseRows,
        *,
        user_id: str | None = None,
        features: Mapping[str, float] | None = None,
        explore: bool = True,
    ) -> Decision: ...


class SelectionSteps(Selects, Protocol):
    """The steps of one selection that :class:`BatchSelection` composes; every
    :class:`~bandit_core.policy.BasePolicy` has them (documented there)."""

    SPARSE_ROWS: ClassVar[bool]
    _BATCHED: ClassVar[bool]
    _STATELESS_SELECT: ClassVar[bool]
    _SELECT_ROWS: ClassVar[int | None]
    config: PolicyConfig
    _rng: np.random.Generator
    _retired: set[str]

    @property
    def _arms(self) -> Mapping[str, Any]: ...
    def _context(
        self, user_id: str | None, features: Mapping[str, float] | None
    ) -> SelectContext: ...
    def _select_input(
        self,
        arm_ids: Sequence[str],
        X: ArrayLike | SparseRows,
        user_id: str | None,
        features: Mapping[str, float] | None,
    ) -> tuple[list[str], Any, SelectContext]: ...
    def _states_for_select(self, ids: list[str]) -> tuple[list[Any], tuple[str, ...]]: ...
    def _arm_for_select(self, arm_id: str) -> Any: ...
    def _parts_changed_by_new_arms(self, arm_ids: tuple[str, ...]) -> tuple[str, ...]: ...
    def _score(
        self, arm_ids: list[str], states: list[Any], X: Any, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray | None]: ...
    def _score_batch(
        self, arm_ids: list[str], states: list[Any], X_batch: np.ndarray, ctx: SelectContext
    ) -> tuple[np.ndarray, np.ndarray | None] | None: ...
    def _decide(
        self,
        ids: list[str],
        X: Any,
        scores: np.ndarray,
        widths: np.ndarray | None,
        explore: bool,
        created: tuple[str, ...],
        ctx: SelectContext,
    ) -> Decision: ...
    def cold_start_changes_state(self, arm_ids: Sequence[str]) -> bool: ...
    def _select_or_error(self, request: SelectRequest) -> Decision | BanditError: ...
    def _finish_batch(
        self,
        requests: Sequence[SelectRequest],
        pending: list[PendingSelect],
        out: dict[int, Decision | BanditError],
    ) -> None: ...
    def _batch_input(self, ids: list[str], X_batch: BatchRows) -> np.ndarray | None: ...
    def _checked_batch_scores(
        self, ids: list[str], X: np.ndarray, user_id: str | None
    ) -> np.ndarray | None: ...


class BatchSelection:
    """``select_batch``, ``select_until`` and ``batch_scores`` of every policy."""

    # Rows select_until scores per _score_batch call: about one match's worth on a log
    # of ~10 arms, so few rows past the match are scored in vain. None: all at once, for
    # a policy whose _score_batch keeps the terms of rows it scores again (LNUCB-TA).
    _SELECT_ROWS: ClassVar[int | None] = 16

    @property
    def batches_selections(self: SelectionSteps) -> bool:
        """Whether :meth:`select_batch` makes its selections together (one scoring call
        per candidate list when the policy has batched scoring) rather than one
        :meth:`select` after another: true when a selection changes no state but by cold
        starts (no guardrail filter, the default choice and ``_finish_select``)."""
        return self._STATELESS_SELECT

    def select_batch(
        self: SelectionSteps, requests: Sequence[SelectRequest]
    ) -> list[Decision | BanditError]:
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
        if not self._STATELESS_SELECT:
            return [self._select_or_error(request) for request in requests]
        out: dict[int, Decision | BanditError] = {}
        pending: list[PendingSelect] = []
        for i, request in enumerate(requests):
            try:
                ids, X, ctx = self._select_input(
                    request.arm_ids, request.X, request.user_id, request.features
                )
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
        return [out[i] for i in range(len(requests))]

    def cold_start_changes_state(self: SelectionSteps, arm_ids: Sequence[str]) -> bool:
        """Whether a selection over ``arm_ids`` would cold-start arms in a way that
        changes other state a store must save (LNUCB-TA counts its arms); only such
        selections of a policy that :attr:`batches_selections` list parts in
        ``Decision.state_changed``."""
        unseen = tuple(a for a in arm_ids if a not in self._arms)
        return bool(unseen) and bool(self._parts_changed_by_new_arms(unseen))

    def _select_or_error(self: SelectionSteps, request: SelectRequest) -> Decision | BanditError:
        try:
            return self.select(
                request.arm_ids,
                request.X,
                user_id=request.user_id,
                features=request.features,
                explore=request.explore,
            )
        except BanditError as exc:
            return exc

    def _finish_batch(
        self: SelectionSteps,
        requests: Sequence[SelectRequest],
        pending: list[PendingSelect],
        out: dict[int, Decision | BanditError],
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
                batch = self._score_batch(
                    ids, states, np.stack([pending[n][2] for n in members]), ctx
                )
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
        self: SelectionSteps,
        arm_ids: Sequence[str],
        X_batch: BatchRows,
        targets: ArrayLike,
        *,
        user_id: str | None = None,
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
        n_events, targets = check_targets(X_batch, targets, len(ids))
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
                greedy = np.where(scores == scores.max(axis=1, keepdims=True), keys, -1.0).argmax(
                    axis=1
                )
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

    def _batch_input(self: SelectionSteps, ids: list[str], X_batch: BatchRows) -> np.ndarray | None:
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

    def _checked_batch_scores(
        self: SelectionSteps, ids: list[str], X: np.ndarray, user_id: str | None
    ) -> np.ndarray | None:
        """``_score_batch`` of rows :meth:`_batch_input` accepted, after the cold start the
        first selection would make, or ``None`` when :meth:`select_until` must loop
        (non-finite scores)."""
        try:
            states = list(map(self._arms.__getitem__, ids))
        except KeyError:
            states = [self._arm_for_select(a) for a in ids]
        scored = self._score_batch(ids, states, X, self._context(user_id, None))
        return scored[0] if scored is not None and all_finite(scored[0]) else None

    def batch_scores(
        self: SelectionSteps,
        arm_ids: Sequence[str],
        X_batch: BatchRows,
        *,
        user_id: str | None = None,
    ) -> np.ndarray | None:
        """The scores :meth:`select_until` computes at once for the rows of ``X_batch``,
        shape ``(B, K)``, each row bit-identical to the scores :meth:`select` gives for
        that row; ``None`` when select_until would loop over :meth:`select` instead (no
        batched scoring, exploration, guardrails, input select rejects, non-finite
        scores). Unseen arms are cold-started, as the first selection would."""
        ids = check_arm_ids(arm_ids)
        X = self._batch_input(ids, X_batch)
        return None if X is None else self._checked_batch_scores(ids, X, user_id)
