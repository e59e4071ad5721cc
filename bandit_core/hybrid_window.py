"""A sliding window for hybrid LinUCB with per-arm parts (docs/algorithms.md section
10.3, "Hybrid model with per-arm parts").

Given ``window`` (and ``context_dim > 0``) the model is SW-LinUCB's ridge (section 10.2)
over the stacked rows ``phi = [z, 0, ..., x, ..., 0]`` of Li et al.'s hybrid model
(Algorithm 2), restricted to the policy's last ``window`` rewards, whichever arms they
came with. Every reward is numbered by the policy's update count ``s`` (1, 2, ...); after
``S`` rewards the window holds those with ``s > S - window``. The blocks are kept as sums
over the window's rows:

* the ``"shared"`` part, a :class:`~bandit_core.forgetting.WindowArmState` over ``z``
  whose clock is ``S``: ``A_0 = lambda*I + sum z z^T``, ``b_0 = sum r z`` over exactly the
  window's rows (the oldest row leaves as each new one enters);
* each arm's part, a :class:`HybridWindowArmState`: ``A_a = lambda*I + sum x x^T``,
  ``B_a = sum x z^T``, ``b_a = sum r x`` over the arm's rows it holds, each row with its
  number ``s``.

An update writes only its arm's part and ``"shared"``, so another arm's rows leave the
window without its part being written: a read (:func:`window_fit`) subtracts them on
copies (or sums the arm's live rows anew, whichever is fewer rows), and the arm's next
update drops them. An arm's live rows have distinct numbers in ``(S - window, S]``, so a
part holds at most ``window`` rows: ``8 * (window * (d + k + 2) + d^2 + d k + d)`` bytes
(:func:`hybrid_window_memory_bytes`). As for discounting, the shared part holds the raw
sums, not Algorithm 2's Schur complement, and the joint fit (10.5) is formed at each read
from every arm's part: ``O(N (d^3 + d^2 k + d k^2) + k^3)`` for ``N`` arms, plus
``O(w (d^2 + d k))`` for the ``w`` rows that left the window since their arms' last
update (at most ``window``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.forgetting import WindowArmState
from bandit_core.hybrid_forgetting import HybridFit, fit_blocks
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite


@dataclass
class HybridWindowArmState(ArrayState):
    """One arm's blocks of the windowed hybrid ridge (see the module docstring): ``A``
    (``A_a``, ``d x d``), ``B`` (``B_a``, ``d x k``) and ``b`` (``b_a``) over the rows it
    holds. Row ``i`` of ``xs``, ``zs`` and ``rewards`` is held when ``seqs[i] > 0``, the
    policy's update number of the reward (0: a free slot, all zeros). ``n`` counts the
    arm's rewards, ``reward_sum`` sums them; ``since_rebuild`` counts updates since the
    sums were last formed anew from the rows."""

    KIND: ClassVar[str] = "hybrid_window_arm"
    A: np.ndarray
    B: np.ndarray
    b: np.ndarray
    xs: np.ndarray
    zs: np.ndarray
    rewards: np.ndarray
    seqs: np.ndarray
    n: int = 0
    reward_sum: float = 0.0
    since_rebuild: int = 0

    @classmethod
    def empty(cls, d: int, k: int, window: int, ridge_lambda: float) -> HybridWindowArmState:
        """The part before any reward: ``A = lambda*I``, ``B = 0``, ``b = 0``, no rows."""
        return cls(
            A=np.eye(d) * ridge_lambda,
            B=np.zeros((d, k)),
            b=np.zeros(d),
            xs=np.zeros((window, d)),
            zs=np.zeros((window, k)),
            rewards=np.zeros(window),
            seqs=np.zeros(window),
        )

    def add_row(
        self, z: np.ndarray, x: np.ndarray, reward: float, seq: int, ridge_lambda: float
    ) -> None:
        """Add the arm's reward ``reward`` of the row ``[z, x]``, the policy's ``seq``-th,
        dropping the rows that left the window (numbered ``seq - window`` or below);
        refused whole (:class:`InvalidInputError`) if a sum overflows."""
        window = len(self.seqs)
        gone = (self.seqs > 0) & (self.seqs <= seq - window)
        A, B, b = self._without(gone)
        A += np.multiply.outer(x, x)
        B += np.multiply.outer(x, z)
        b += reward * x
        if not (all_finite(A) and all_finite(B) and all_finite(b)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and reward {reward} overflow the ridge statistics"
            )
        xs, zs, rewards, seqs = self._writable_rows()
        seqs[gone] = 0.0
        xs[gone], zs[gone], rewards[gone] = 0.0, 0.0, 0.0
        # the live rows are numbered in (seq - window, seq): at most window - 1, a slot is free
        i = int(np.argmin(seqs))
        xs[i], zs[i], rewards[i], seqs[i] = x, z, reward, seq
        self.n += 1
        self.reward_sum += reward
        self.since_rebuild += 1
        if self.since_rebuild >= window:  # bound the drift of the running sums
            A, B, b = self._summed(seqs > 0, ridge_lambda)
            self.since_rebuild = 0
        self.A, self.B, self.b = A, B, b

    def live_blocks(
        self, latest: int, window: int, ridge_lambda: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(A_a, b_a, B_a)`` over the rows still in the window after the policy's
        ``latest``-th reward (numbered above ``latest - window``); the part does not
        change. The rows that left are subtracted, or the live ones summed anew when
        they are fewer."""
        held = self.seqs > 0
        live = held & (self.seqs > latest - window)
        gone = held & ~live
        n_gone = int(gone.sum())
        if not n_gone:
            return self.A, self.b, self.B
        A, B, b = self._summed(live, ridge_lambda) if live.sum() < n_gone else self._without(gone)
        return A, b, B

    def _without(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """New ``(A, B, b)`` without the held rows masked by ``rows``."""
        xs, zs = self.xs[rows], self.zs[rows]
        return self.A - xs.T @ xs, self.B - xs.T @ zs, self.b - xs.T @ self.rewards[rows]

    def _summed(
        self, rows: np.ndarray, ridge_lambda: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """New ``(A, B, b)`` summed from the rows masked by ``rows`` and the prior."""
        xs, zs = self.xs[rows], self.zs[rows]
        A = ridge_lambda * np.eye(xs.shape[1]) + xs.T @ xs
        return A, xs.T @ zs, xs.T @ self.rewards[rows]

    def _writable_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``xs``, ``zs``, ``rewards`` and ``seqs``, copied first if they are read-only
        views (a part read from bytes)."""
        if not self.xs.flags.writeable:
            rows = (self.xs, self.zs, self.rewards, self.seqs)
            self.xs, self.zs, self.rewards, self.seqs = map(np.copy, rows)
        return self.xs, self.zs, self.rewards, self.seqs


def window_fit(
    shared: WindowArmState,
    arms: Sequence[HybridWindowArmState],
    window: int,
    ridge_lambda: float,
) -> HybridFit:
    """The hybrid ridge (10.5) over the policy's last ``window`` rewards: ``shared``'s
    sums (exactly the window's) and each arm's over its rows still in the window after
    ``shared.n`` rewards (:meth:`HybridWindowArmState.live_blocks`); no part changes.
    Unweighted, so :func:`~bandit_core.hybrid_forgetting.fit_blocks` gets the blocks as
    their own ``V~`` and the width is LinUCB's ``sqrt(phi^T V^-1 phi)``."""
    k = len(shared.b)
    d = len(arms[0].b) if arms else 0
    blocks = [a.live_blocks(shared.n, window, ridge_lambda) for a in arms]
    A = np.array([blk[0] for blk in blocks], dtype=np.float64).reshape(-1, d, d)
    b = np.array([blk[1] for blk in blocks], dtype=np.float64).reshape(-1, d)
    B = np.array([blk[2] for blk in blocks], dtype=np.float64).reshape(-1, d, k)
    return fit_blocks((shared.A, shared.b, shared.A), (A, b, B), (A, B))


def hybrid_window_memory_bytes(d: int, k: int, window: int) -> int:
    """Bytes of float64 arrays one :class:`HybridWindowArmState` holds (``d`` context
    features, ``k`` shared ones): ``8 * (window * (d + k + 2) + d^2 + d k + d)``."""
    return 8 * (window * (d + k + 2) + d * d + d * k + d)
