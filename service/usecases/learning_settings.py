"""The seam through which an API family gives the core its reading of a policy's learning
settings: what an offline evaluation calls the policy's own setting and how it writes
settings as text, how a written setting becomes a policy spec, and which logged
decisions the policy learned from (a rebuild replays only those); and, as
:data:`ApplySetting`, how a setting becomes the policy's.

The core use cases (:mod:`service.usecases.evaluations`, ``evaluation_jobs``,
``rebuild``) take a :class:`LearningSettings`; the app's lifespan and the CLI pass the
one the service is wired with (docs/architecture.md, "The Personalizer adapter"). The
use cases never name the family that implements it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
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
