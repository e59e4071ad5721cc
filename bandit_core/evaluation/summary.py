"""Mean and spread of one figure over seeds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bandit_core.errors import InvalidInputError


@dataclass(frozen=True)
class Spread:
    """``mean``, sample standard deviation ``std`` (ddof = 1; 0 for one value), ``min``,
    ``max`` and count ``n`` of a figure measured once per seed.

    >>> Spread.of([1.0, 2.0, 3.0])
    Spread(mean=2.0, std=1.0, min=1.0, max=3.0, n=3)
    """

    mean: float
    std: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Spread:
        """Summarise ``values`` (shape (n,), n >= 1)."""
        v = np.asarray(values, dtype=np.float64)
        if v.ndim != 1 or v.size == 0:
            raise InvalidInputError(f"values must be a non-empty vector, but got shape {v.shape}")
        std = float(v.std(ddof=1)) if v.size > 1 else 0.0
        return cls(
            mean=float(v.mean()), std=std, min=float(v.min()), max=float(v.max()), n=int(v.size)
        )
