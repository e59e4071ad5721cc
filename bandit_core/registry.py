"""Names of the policies and the one place that maps a name to its implementation."""

from __future__ import annotations

from typing import Any

from bandit_core.baselines import EpsilonGreedy, RandomPolicy
from bandit_core.diag_linucb import DiagLinUCB
from bandit_core.errors import ConfigError, StateFormatError
from bandit_core.forgetting import DiscountedLinUCB, SlidingWindowLinUCB
from bandit_core.guardrailed_linucb import GuardrailedLinUCB
from bandit_core.hare import HARE
from bandit_core.hybrid_linucb import HybridLinUCB
from bandit_core.linucb import LinUCB
from bandit_core.lnucb_ta import LNUCBTA
from bandit_core.policy import AnyPolicy
from bandit_core.state import unpack

POLICIES: dict[str, type[AnyPolicy]] = {
    cls.NAME: cls
    for cls in (
        LinUCB,
        HybridLinUCB,
        DiagLinUCB,
        LNUCBTA,
        GuardrailedLinUCB,
        HARE,
        RandomPolicy,
        EpsilonGreedy,
        DiscountedLinUCB,
        SlidingWindowLinUCB,
    )
}


def policy_class(name: str) -> type[AnyPolicy]:
    """The policy class registered under ``name``."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r}; expected one of {sorted(POLICIES)}") from None


def make_policy(name: str, d: int, **params: Any) -> AnyPolicy:
    """Build the policy ``name`` for feature vectors of length ``d``.

    ``params`` are the fields of that policy's config dataclass (``alpha``,
    ``epsilon``, ``seed``, ...); an unknown parameter raises :class:`ConfigError`.

    >>> make_policy("linucb", d=4, alpha=0.5).config.alpha
    0.5
    >>> make_policy("linucb", d=4, alpah=0.5)
    Traceback (most recent call last):
    ...
    bandit_core.errors.ConfigError: unknown parameter 'alpah' for linucb; expected some of ['alpha', 'd', 'epsilon', 'refactor_every', 'reward_range', 'ridge_lambda', 'seed']
    """
    cls = policy_class(name)
    fields = set(cls.CONFIG.__dataclass_fields__)
    for key in params:
        if key not in fields:
            raise ConfigError(
                f"unknown parameter {key!r} for {name}; expected some of {sorted(fields)}"
            )
    try:
        config = cls.CONFIG(d=d, **params)
    except TypeError as exc:
        raise ConfigError(f"invalid parameters for {name}: {exc}") from exc
    return cls(config)


def policy_from_bytes(data: bytes) -> AnyPolicy:
    """Rebuild any registered policy from its :meth:`BasePolicy.to_bytes` output."""
    _, meta, _ = unpack(data, "policy")
    algorithm = meta.get("algorithm")
    if not isinstance(algorithm, str) or algorithm not in POLICIES:
        raise StateFormatError(f"the policy state names the unknown algorithm {algorithm!r}")
    return POLICIES[algorithm].from_bytes(data)
