"""Discounting for the diagonal shared model (docs/algorithms.md section 10.3, "Diagonal model").

``diag_linucb`` with ``gamma`` or ``half_life_seconds`` keeps D-LinUCB's weighted sums
(section 10.1) feature by feature: with ``w_s = gamma^(t - t_s)`` the weight at time
``t`` of the reward observed at ``t_s``,

    V_ii = lambda + sum_s w_s z_si^2,   V~_ii = lambda + sum_s w_s^2 z_si^2,   b_i = sum_s w_s r_s z_si
    score = sum_i z_i b_i / V_ii + alpha * sqrt(sum_i z_i^2 V~_ii / V_ii^2)      (10.4)

the per-feature fit (``w_i = b_i / V_ii``) and the diagonal of (10.1)'s width. The
model's point is that an update touches a row's nonzeros only, so the decay is lazy:
the part stores each sum at a reference time ``ref`` (``m1_i = e^(-c ref) sum_s
e^(c t_s) z_si^2`` with ``c = -ln gamma``, likewise ``m2`` at ``2c`` and ``b`` at
``c``), a read at ``t`` multiplies them by one scalar ``e^(-c (t - ref))`` (its
square for ``m2``), and an observation at ``t_s`` adds its terms times
``e^(c (t_s - ref))``. When that factor would pass ``e^MAX_EXPONENT`` the part moves
``ref`` to its clock, rescaling every stored entry once (``O(m)``, every
``MAX_EXPONENT / c`` clock units: 10,000 updates at ``gamma = 0.99``), so no
``gamma^-t`` overflows at any horizon. A late reward (``t_s`` before the clock) enters
with the weight of its age like any other. Two clocks as in section 10.1: the policy's
update count (``gamma``) or seconds (``half_life_seconds``, the ``now`` of
:func:`bandit_core.clock.clock_at`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.errors import InvalidInputError, StateFormatError
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite

#: The largest exponent ``c (t_s - ref)`` of a stored entry's scale before ``ref`` moves on
#: (``m2`` holds its square, e^200 < 1e87: the squares an overflow check sums stay finite).
MAX_EXPONENT = 100.0


def check_entries(kind: str, index: np.ndarray, **entries: np.ndarray) -> None:
    """Refuse (:class:`StateFormatError`) a per-feature state whose ``index`` is not a
    strictly increasing int vector or whose ``entries`` are not vectors of its length."""
    m = index.shape
    if len(m) != 1 or any(a.shape != m for a in entries.values()) or index.dtype.kind not in "iu":
        raise StateFormatError(
            f"{kind!r} state needs index, {' and '.join(entries)} of one length m"
        )
    if m[0] > 1 and not (np.diff(index) > 0).all():
        raise StateFormatError(f"{kind!r} state index must be strictly increasing")


@dataclass
class DiagDiscountedState(ArrayState):
    """The discounted per-feature sums at the columns rewarded so far (module docstring):
    ``index`` (m,) int64, strictly increasing; ``m1``, ``m2`` and ``b`` (m,) the sums of
    ``z^2``, ``z^2`` and ``r z`` weighted by ``w``, ``w^2`` and ``w``, stored at time
    ``ref``; ``clock`` the latest observation time; ``n`` and ``reward_sum`` count every
    reward learned from (undiscounted)."""

    KIND: ClassVar[str] = "diag_discounted"
    index: np.ndarray
    m1: np.ndarray
    m2: np.ndarray
    b: np.ndarray
    ref: float = 0.0
    clock: float = 0.0
    n: int = 0
    reward_sum: float = 0.0

    def __post_init__(self) -> None:
        check_entries(self.KIND, self.index, m1=self.m1, m2=self.m2, b=self.b)

    @classmethod
    def prior(cls) -> DiagDiscountedState:
        """No feature touched yet."""
        empty = np.zeros(0)
        return cls(index=np.zeros(0, dtype=np.int64), m1=empty, m2=empty.copy(), b=empty.copy())

    def read_time(self, now: float | None) -> float:
        """The time a read at ``now`` sees the part at: ``now``, or the part's clock when
        ``now`` is None or earlier."""
        return self.clock if now is None or now < self.clock else now

    def sums(self, columns: np.ndarray, at: float, decay: float) -> tuple[np.ndarray, ...]:
        """``(sum w z^2, sum w^2 z^2, sum w r z)`` at ``columns`` as of time ``at``
        (0 where no reward touched the column), with ``w = e^(-decay (at - t_s))``."""
        index = self.index
        pos = np.minimum(np.searchsorted(index, columns), max(len(index) - 1, 0))
        found = index[pos] == columns if len(index) else np.zeros(len(columns), dtype=bool)
        scale = math.exp(-decay * (at - self.ref))
        out = [np.zeros(len(columns)) for _ in range(3)]
        for o, stored, s in zip(out, (self.m1, self.m2, self.b), (scale, scale * scale, scale)):
            o[found] = s * stored[pos[found]]
        return tuple(out)

    def add(
        self, columns: np.ndarray, z: np.ndarray, reward: float, at: float, decay: float
    ) -> None:
        """Add the observation (nonzeros ``z`` at ``columns``, strictly increasing;
        ``reward``) made at ``at``, with ``decay = -ln gamma`` per clock unit. The arrays
        are replaced, never written in place (a state read from bytes holds read-only
        views), and only once every new entry is checked finite."""
        clock, ref = (max(self.clock, at), self.ref) if self.n else (at, at)
        m1, m2, b = self.m1, self.m2, self.b
        if decay * (clock - ref) > MAX_EXPONENT:  # move ref on: one rescale
            shrink = math.exp(-decay * (clock - ref))
            m1, m2, b, ref = m1 * shrink, m2 * (shrink * shrink), b * shrink, clock
        index = self.index
        new = np.setdiff1d(columns, index, assume_unique=True)
        if new.size:
            where = np.searchsorted(index, new)
            index = np.insert(index, where, new)
            m1, m2, b = (np.insert(a, where, 0.0) for a in (m1, m2, b))
        elif m1 is self.m1:
            m1, m2, b = m1.copy(), m2.copy(), b.copy()
        pos = np.searchsorted(index, columns)
        grow = math.exp(decay * (at - ref))  # the observation's weight at ref
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused below
            zz = z * z
            m1[pos] += grow * zz
            m2[pos] += (grow * grow) * zz
            b[pos] += (grow * reward) * z
        if not (all_finite(m1[pos]) and all_finite(m2[pos]) and all_finite(b[pos])):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(z).max()} and reward {reward} overflow the per-feature sums"
            )
        self.index, self.m1, self.m2, self.b, self.ref, self.clock = index, m1, m2, b, ref, clock
        self.n += 1
        self.reward_sum += reward
