"""The seam through which an API family gives the core its reading of a policy's learning
settings: what an offline evaluation calls the policy's own setting and how it writes
settings as text, how a written setting becomes a policy spec, and which logged
decisions the policy learned from (a rebuild replays only those); as
:data:`ApplySetting`, how a setting becomes the policy's; and, as
:class:`LearningModes`, the policy's learning mode (Apprentice) and the switch to Online.

The core use cases (:mod:`service.usecases.evaluations`, ``evaluation_jobs``,
``rebuild``) take a :class:`LearningSettings`; the app's lifespan and the CLI pass the
one the service is wired with (docs/architecture.md, "The Personalizer adapter"). The
use cases never name the family that implements it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from service.schemas import PolicyInfo, PolicySpec


class LearningSettings(Protocol):
    """A policy's learning settings as an API family reads and writes them."""

    def online_name(self, info: PolicyInfo) -> str:
        """The name of the policy's own learning setting (an evaluation's ``Online``)."""
        ...

    def arguments(self, spec: PolicySpec) -> str:
        """``spec``'s learning settings as the family writes them (an evaluation shows
        each setting so)."""
        ...

    def spec_from_arguments(self, loop: PolicySpec, arguments: str) -> PolicySpec:
        """The policy spec ``arguments`` describe for a policy whose spec is ``loop``;
        raises :class:`~service.errors.InvalidRequest` or pydantic's ``ValidationError``
        for arguments it cannot read."""
        ...

    def explorable(self, loop: PolicySpec) -> bool:
        """Whether offline experimentation's grid of settings maps onto ``loop``'s."""
        ...

    def estimator(self, info: PolicyInfo) -> str:
        """The estimator the policy's evaluations report and rank settings by, one of
        :data:`bandit_core.evaluation.ESTIMATORS` (docs/offline.md, "Evaluations")."""
        ...

    def learns_at(self, info: PolicyInfo, when: float) -> bool:
        """Whether the policy learns from the rewards of a decision made at unix time
        ``when`` (a rebuild replays only those)."""
        ...

    def auto_optimization(self, info: PolicyInfo) -> tuple[float, float] | None:
        """``(period seconds, start unix time)`` of the policy's Auto-Optimize schedule
        (:mod:`service.usecases.auto_optimize`); None when it asks for none."""
        ...


ApplySetting = Callable[[str, str, str], Awaitable[str]]
"""``apply(policy, name, arguments)``: make the setting ``arguments``, named ``name``, the
policy's; returns the arguments now in force (an evaluation's setting applied)."""


@dataclass(frozen=True)
class LearningModeView:
    """A policy's learning mode as its API family keeps it: ``mode`` (``Online``, or a
    mode that serves a baseline instead of the model, such as ``Apprentice``), ``since``
    when the policy entered it (None: since its creation), and, for a mode that
    measures it, how often the model's own choice matched the baseline over the events
    whose rewards were applied since then (``events``, ``matched`` and the rewards of
    each)."""

    mode: str
    since: float | None
    measures_matching: bool = False
    events: int = 0
    matched: int = 0
    reward_sum: float = 0.0
    matched_reward_sum: float = 0.0


class LearningModes(Protocol):
    """How the console reads a policy's learning mode and switches it to Online
    (docs/console.md, "Apprentice"): the API family's, wired in the app as
    ``app.state.learning_modes``."""

    async def learning_mode(self, policy: str) -> LearningModeView:
        """The policy's learning mode (404 for an unknown policy)."""
        ...

    async def switch_to_online(self, policy: str) -> LearningModeView:
        """Serve and learn from the model's own choices from now on; the mode after."""
        ...
