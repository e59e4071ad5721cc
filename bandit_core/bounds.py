"""Regret-bound calculators.

Theorem 1, the guardrail theorem (docs/algorithms.md
section 3): guardrailed LinUCB over ``T`` rounds with ``d``-dimensional contexts,
``||x_t|| <= L``, rewards in ``[0, R_max]`` and a guardrail that blocks the optimal arm
with probability at most ``delta_G`` has expected regret

    R(T) <= 2 * alpha * sqrt(2 * T * d * log(1 + T * L^2 / d))    (Step 5, LinUCB term)
          + delta_G * T * R_max                                   (Step 2, guardrail term)

The LinUCB term holds with the confidence width ``alpha`` of the theorem's Lemma 3.1; a
disjoint (per-arm) LinUCB over ``K`` arms is one linear model on block-encoded
features, so its ``d`` is ``K`` times the per-arm dimension.

The theorem's worked example (``d = 128``, ``T = 10^6``, ``delta_G = 0.01``,
``R_max = 100``) reports 458,000: it drops ``R_max`` from the guardrail term (10,000
instead of 1,000,000) and takes ``sqrt(log 10^6)`` as 3.5 instead of 3.717. Computed
from the theorem's own expression:

>>> b = guardrail_regret_bound(d=128, T=10**6, delta_g=0.01, r_max=100)
>>> round(b.linucb_term, 2), b.guardrail_term, round(b.total, 2), round(b.per_round, 4)
(95805.71, 1000000.0, 1095805.71, 1.0958)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from bandit_core.errors import InvalidInputError
from bandit_core.validation import check_int, check_real


@dataclass(frozen=True)
class GuardrailBound:
    """Theorem 1's bound and its parts for the given inputs.

    ``linucb_term = 2*alpha*sqrt(2*T*d*log(1 + T*L^2/d))``,
    ``guardrail_term = delta_g*T*r_max``, ``total`` their sum, ``per_round = total / T``.
    """

    d: int
    T: int
    delta_g: float
    r_max: float
    alpha: float
    L: float
    linucb_term: float
    guardrail_term: float
    total: float
    per_round: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the inputs and figures."""
        return dataclasses.asdict(self)


def guardrail_regret_bound(
    d: int, T: int, delta_g: float, r_max: float, alpha: float = 1.0, L: float = 1.0
) -> GuardrailBound:
    """Theorem 1's regret bound of guardrailed LinUCB (formula in the module docstring).

    ``d``: context dimension (per-arm dimension times ``K`` for disjoint LinUCB);
    ``T``: rounds; ``delta_g``: probability the optimal arm is blocked, in ``[0, 1]``;
    ``r_max``: reward bound (> 0); ``alpha``: confidence width (>= 0); ``L``: bound on
    ``||x||`` (> 0).

    >>> guardrail_regret_bound(d=1, T=1, delta_g=0.0, r_max=1.0).linucb_term == 2 * math.sqrt(2 * math.log(2))
    True
    """
    d = check_int(d, "d", low=1, error=InvalidInputError)
    T = check_int(T, "T", low=1, error=InvalidInputError)
    delta_g = check_real(delta_g, "delta_g", low=0.0, high=1.0, error=InvalidInputError)
    r_max = check_real(r_max, "r_max", low=0.0, low_open=True, error=InvalidInputError)
    alpha = check_real(alpha, "alpha", low=0.0, error=InvalidInputError)
    L = check_real(L, "L", low=0.0, low_open=True, error=InvalidInputError)
    linucb = 2.0 * alpha * math.sqrt(2.0 * T * d * math.log1p(T * L * L / d))
    guardrail = delta_g * T * r_max
    total = linucb + guardrail
    return GuardrailBound(
        d=d,
        T=T,
        delta_g=delta_g,
        r_max=r_max,
        alpha=alpha,
        L=L,
        linucb_term=linucb,
        guardrail_term=guardrail,
        total=total,
        per_round=total / T,
    )


def verify_regret_bound(measured_regret: float, bound: GuardrailBound, slack: float = 1.1) -> bool:
    """Whether ``measured_regret <= slack * bound.total`` (the theorem's
    ``verify_regret_bound`` check, with its 1.1 slack by default).

    >>> verify_regret_bound(100.0, guardrail_regret_bound(d=2, T=100, delta_g=0.0, r_max=1.0))
    False
    """
    measured = check_real(measured_regret, "measured_regret", low=0.0, error=InvalidInputError)
    slack = check_real(slack, "slack", low=1.0, error=InvalidInputError)
    return measured <= slack * bound.total
