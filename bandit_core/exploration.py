"""Raising a policy's exploration for a while (docs/algorithms.md section 10.5,
"Response to a detection").

Every policy names the knob of its config that sets how much it explores,
``EXPLORATION_KNOB``: ``alpha`` (the weight of the confidence width) for the UCB models,
``epsilon`` (the share of uniformly random choices) for the baselines, whose scores have
no width. Within :func:`exploring`, the policy's selections run with that knob at least
at the given level; nothing in its state changes, so the block leaves no trace in
:meth:`~bandit_core.policy.BasePolicy.to_bytes`.

>>> import numpy as np, bandit_core
>>> p = bandit_core.make_policy("linucb", d=1, alpha=0.5)
>>> with exploring(p, 3.0):
...     p.select(["a"], np.array([[1.0]])).scores[0]  # 0 + 3 * sqrt(1 / lambda)
np.float64(3.0)
>>> p.config.alpha
0.5
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bandit_core.policy import AnyPolicy
from bandit_core.validation import check_real


@contextmanager
def exploring(policy: AnyPolicy, level: float | None) -> Iterator[None]:
    """Within the block, ``policy`` selects with its exploration knob
    (``EXPLORATION_KNOB``) raised to ``level`` (never lowered: a knob already above
    ``level`` keeps its value); ``None`` leaves the policy as it is. ``level`` is checked
    as the knob is (``epsilon`` at most 1)."""
    if level is None:
        yield
        return
    knob = policy.EXPLORATION_KNOB
    level = check_real(level, f"exploration level of {knob}", low=0.0)
    before = policy.config
    if getattr(before, knob) >= level:
        yield
        return
    raised: dict[str, Any] = {knob: level}
    policy.config = dataclasses.replace(before, **raised)
    try:
        yield
    finally:
        policy.config = before
