"""Rewards learned in batches: ``update_batch`` of every policy (docs/algorithms.md
section 8.1, "Folding rewards in batches").

:meth:`BatchUpdates.update_batch` learns ``m`` rewards in one call. Its default is a
loop over ``update`` in the order given, so the state after it is the state of those
updates one by one, bit for bit. A policy whose updates commute and write only its
``"shared"`` part says so with :attr:`BatchUpdates.folds_updates` (the shared models
without per-arm parts: :class:`~bandit_core.shared_model.SharedModelPolicy`); a store
may then keep the rewards aside as they come and *fold* them into the model in batches
(the service's ``model_update_interval``), and such a policy folds a batch as one
rank-``m`` update (:meth:`~bandit_core.linear.LinearArmState.add_batch` for hybrid
LinUCB), equal to the updates one by one in any order to rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from numpy.typing import ArrayLike

from bandit_core.errors import InvalidInputError
from bandit_core.features import SparseRows


class Updates(Protocol):
    """One update, ``update``: what :meth:`BatchUpdates.update_batch` loops over
    (documented on :meth:`bandit_core.policy.BasePolicy.update`)."""

    def update(
        self, arm_id: str, x: ArrayLike | SparseRows, reward: float, *, user_id: str | None = None
    ) -> None: ...


class BatchUpdates:
    """``update_batch`` and ``folds_updates`` of every policy."""

    @property
    def folds_updates(self) -> bool:
        """Whether every update writes only the ``"shared"`` part and updates commute
        (the order of a batch's rewards changes nothing but rounding), so rewards may
        be kept aside and folded in batches with :meth:`update_batch`; False by default."""
        return False

    def update_batch(
        self: Updates,
        arm_ids: Sequence[str],
        rows: Sequence[ArrayLike | SparseRows],
        rewards: Sequence[float],
    ) -> None:
        """Learn ``rewards[i]`` of serving ``arm_ids[i]`` with the row ``rows[i]`` for
        every ``i``, as ``update`` does for each, in order (a policy with
        :attr:`folds_updates` may apply them together: equal to rounding). A bad row
        or reward raises before any state changes only when the policy applies the
        batch together; by default the updates before it stay applied."""
        if not len(arm_ids) == len(rows) == len(rewards):
            raise InvalidInputError(
                f"update_batch needs as many rows and rewards as arm ids, but got "
                f"{len(arm_ids)} arm ids, {len(rows)} rows and {len(rewards)} rewards"
            )
        for arm_id, x, reward in zip(arm_ids, rows, rewards, strict=True):
            self.update(arm_id, x, reward)
