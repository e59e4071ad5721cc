"""The shared steps of a shared model (docs/algorithms.md section 8): one ``"shared"``
part scores any candidate from its features (hybrid LinUCB, diagonal LinUCB).

When its ``_keeps_arm_parts()`` is False (the default) arms carry no state: any arm id
may be served or rewarded without registration, the hooks get ``None`` as an arm's
state, the only state part is ``"shared"`` and :meth:`~BasePolicy.policy_stats` holds
the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

from bandit_core.errors import UnknownArmError
from bandit_core.parts import SHARED_PART, ArmStats, ArmT, RewardCounts, SharedT, UserT
from bandit_core.policy import BasePolicy, PolicyConfig
from bandit_core.validation import check_arm_ids


class SharedModelPolicy(BasePolicy[ArmT, SharedT, UserT]):
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

    def _arm_for_select(self, arm_id: str) -> ArmT:
        if not self._arm_free:
            return super()._arm_for_select(arm_id)
        return self._known_arm(arm_id)

    def _known_arm(self, arm_id: str) -> ArmT:
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
        shared = cast(
            RewardCounts, self._shared
        )  # a shared model's "shared" part counts its rewards
        return {"rewarded": float(shared.n), "reward_sum": float(shared.reward_sum)}
