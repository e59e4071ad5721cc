"""The Personalizer adapter's :class:`~service.usecases.learning_settings.LearningModes`:
a loop's learning mode, the apprentice metrics since Apprentice mode was turned on, and
the switch to Online as ``PUT configurations/service`` makes it (docs/personalizer.md,
"Learning modes"; the console's Apprentice page reads it)."""

from __future__ import annotations

from dataclasses import dataclass

from service.personalizer.learning_modes import mode_started
from service.personalizer.loops import Loops
from service.personalizer.settings import APPRENTICE, ONLINE, LoopSettings
from service.usecases.learning_settings import LearningModeView


@dataclass(frozen=True)
class LoopLearningModes:
    """A loop's learning mode over :class:`~service.personalizer.loops.Loops`."""

    loops: Loops

    async def learning_mode(self, policy: str) -> LearningModeView:
        """The mode, when it began and the apprentice metrics
        (``latestApprenticeModeMetrics``) while in Apprentice mode."""
        config = await self.loops.service_configuration(policy)
        info = await self.loops.admin.get_policy(policy)
        mode = config.learning_mode or ONLINE
        since = mode_started(LoopSettings.of(info))
        metrics = config.latest_apprentice_mode_metrics
        if mode != APPRENTICE or metrics is None:
            return LearningModeView(mode=mode, since=since)
        return LearningModeView(
            mode=mode,
            since=since,
            measures_matching=True,
            events=metrics.number_of_events,
            matched=metrics.number_of_imitated_events,
            reward_sum=metrics.sum_of_rewards,
            matched_reward_sum=metrics.sum_of_imitated_rewards,
        )

    async def switch_to_online(self, policy: str) -> LearningModeView:
        """``learningMode: Online`` with every other setting of the service configuration
        kept (so the switch is allowed: docs/personalizer.md)."""
        config = await self.loops.service_configuration(policy)
        online = config.model_copy(update={"learning_mode": ONLINE})
        await self.loops.update_service_configuration(policy, online)
        return await self.learning_mode(policy)
