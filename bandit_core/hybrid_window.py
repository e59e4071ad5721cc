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
window without its part being written: a read (:meth:`WindowFits.fit`) subtracts them,
one by one in their order, from copies of the arm's sums, keeps the result and at the
next read subtracts only the rows that left since (the same bits as subtracting them all
at once in that order); the arm's next update drops them from its part. An arm's live rows have distinct numbers in ``(S - window, S]``, so
a part holds at most ``window`` rows: ``8 * (window * (d + k + 2) + d^2 + d k + d)``
bytes (:func:`hybrid_window_memory_bytes`). As for discounting, the shared part holds
the raw sums, not Algorithm 2's Schur complement, and the joint fit (10.5) is formed at
each read from every arm's part: ``O(N (d^3 + d^2 k + d k^2) + k^3)`` for ``N`` arms,
plus ``O(d^2 + d k)`` per row that left the window since the last read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.forgetting import WindowArmState
from bandit_core.hybrid_forgetting import HybridFit, fit_blocks
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite

# an arm's blocks (A_a, b_a, B_a)
Blocks: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray]


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
        A, b, B = self.live_blocks(seq - window)  # new arrays below: the part is unchanged
        A = A + np.multiply.outer(x, x)
        b = b + reward * x
        B = B + np.multiply.outer(x, z)
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
            A, b, B = self._summed(seqs > 0, ridge_lambda)
            self.since_rebuild = 0
        self.A, self.b, self.B = A, b, B

    def live_rows(self, cutoff: int) -> np.ndarray:
        """Mask of the rows still in the window when it holds the rewards numbered
        above ``cutoff``."""
        return (self.seqs > 0) & (self.seqs > cutoff)

    def live_blocks(self, cutoff: int) -> Blocks:
        """``(A_a, b_a, B_a)`` over the rows still in the window when it holds the
        rewards numbered above ``cutoff``: the part's sums less the rows that left, in
        their order (:meth:`without`); the part does not change."""
        gone = np.flatnonzero((self.seqs > 0) & (self.seqs <= cutoff))
        return self.without(gone[np.argsort(self.seqs[gone])], (self.A, self.b, self.B))

    def without(self, rows: Iterable[int], blocks: Blocks) -> Blocks:
        """New ``blocks`` ``(A, b, B)`` less the part's rows ``rows`` (indices), one at
        a time in that order: rows taken out in two steps give the bits of one step, so
        a read does not depend on when the previous one was made."""
        A, b, B = blocks
        for i in rows:
            x = self.xs[i]
            A = A - np.multiply.outer(x, x)
            b = b - self.rewards[i] * x
            B = B - np.multiply.outer(x, self.zs[i])
        return A, b, B

    def _summed(self, rows: np.ndarray, ridge_lambda: float) -> Blocks:
        """New ``(A, b, B)`` summed from the rows masked by ``rows`` and the prior."""
        xs, zs = self.xs[rows], self.zs[rows]
        A = ridge_lambda * np.eye(xs.shape[1]) + xs.T @ xs
        return A, xs.T @ self.rewards[rows], xs.T @ zs

    def _writable_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``xs``, ``zs``, ``rewards`` and ``seqs``, copied first if they are read-only
        views (a part read from bytes)."""
        if not self.xs.flags.writeable:
            rows = (self.xs, self.zs, self.rewards, self.seqs)
            self.xs, self.zs, self.rewards, self.seqs = map(np.copy, rows)
        return self.xs, self.zs, self.rewards, self.seqs


@dataclass
class _KeptBlocks:
    """An arm's live blocks at ``cutoff``, valid while its part is ``state`` with ``n``
    rewards; ``leaving`` lists its live rows' indices, the oldest last."""

    state: HybridWindowArmState
    n: int
    cutoff: int
    leaving: list[int]
    blocks: Blocks


class WindowFits:
    """The hybrid ridge (10.5) over a policy's last ``window`` rewards, with each arm's
    live blocks kept between reads: a read subtracts only the rows that left the window
    since the last one (one per reward of the policy), so it costs the joint fit plus
    ``O(N)`` checks; an arm's blocks are formed anew when its part changes."""

    def __init__(self) -> None:
        self._kept: dict[str, _KeptBlocks] = {}

    def fit(
        self,
        shared: WindowArmState,
        arms: Mapping[str, HybridWindowArmState],
        window: int,
    ) -> HybridFit:
        """The fit of ``shared`` (its sums are exactly the window's) and ``arms`` (each
        over its rows still in the window after ``shared.n`` rewards); no part changes.
        Unweighted, so :func:`~bandit_core.hybrid_forgetting.fit_blocks` gets the blocks
        as their own ``V~`` and the width is LinUCB's ``sqrt(phi^T V^-1 phi)``."""
        cutoff = shared.n - window
        if self._kept.keys() - arms.keys():  # retired arms
            self._kept = {a: kept for a, kept in self._kept.items() if a in arms}
        blocks = [self._blocks(a, state, cutoff) for a, state in arms.items()]
        k = len(shared.b)
        d = len(blocks[0][1]) if blocks else 0
        A = np.array([blk[0] for blk in blocks], dtype=np.float64).reshape(-1, d, d)
        b = np.array([blk[1] for blk in blocks], dtype=np.float64).reshape(-1, d)
        B = np.array([blk[2] for blk in blocks], dtype=np.float64).reshape(-1, d, k)
        return fit_blocks((shared.A, shared.b, shared.A), (A, b, B), (A, B))

    def _blocks(self, arm_id: str, state: HybridWindowArmState, cutoff: int) -> Blocks:
        """``arm_id``'s blocks over its rows numbered above ``cutoff``."""
        kept = self._kept.get(arm_id)
        if kept is None or kept.state is not state or kept.n != state.n or cutoff < kept.cutoff:
            live = np.flatnonzero(state.live_rows(cutoff))
            leaving = live[np.argsort(-state.seqs[live])].tolist()
            blocks = state.live_blocks(cutoff)
            self._kept[arm_id] = _KeptBlocks(state, state.n, cutoff, leaving, blocks)
            return blocks
        gone = []
        while kept.leaving and state.seqs[kept.leaving[-1]] <= cutoff:
            gone.append(kept.leaving.pop())
        if gone:
            kept.blocks = state.without(gone, kept.blocks)
        kept.cutoff = cutoff
        return kept.blocks


def hybrid_window_memory_bytes(d: int, k: int, window: int) -> int:
    """Bytes of float64 arrays one :class:`HybridWindowArmState` holds (``d`` context
    features, ``k`` shared ones): ``8 * (window * (d + k + 2) + d^2 + d k + d)``."""
    return 8 * (window * (d + k + 2) + d * d + d * k + d)
