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

With ``window_seconds`` (section 10.3, "Window in seconds with per-arm parts") every
part, ``"shared"`` included (its rows ``z`` as ``xs``, ``k = 0``), is a
:class:`TimedWindowState`: each row also has its reward's time, the ``now`` of the
update. At a read at ``t`` the window holds the rewards numbered ``s > S - window`` and
timed after ``max(t, latest time) - window_seconds``; an update drops the rows out of it
from its arm's part and ``"shared"``. A read (:meth:`WindowFits.fit_timed`) takes a
part's sums while none of its rows left, else its sums less the rows that left.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.forgetting import WindowArmState
from bandit_core.hybrid_forgetting import HybridFit, fit_blocks
from bandit_core.parts import ARM_PREFIX, SHARED_PART
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
        self,
        z: np.ndarray,
        x: np.ndarray,
        reward: float,
        seq: int,
        ridge_lambda: float,
        at: float = 0.0,
        since: float = -math.inf,
    ) -> None:
        """Add the arm's reward ``reward`` of the row ``[z, x]``, the policy's ``seq``-th,
        made at ``at``, dropping the rows that left the window (:meth:`gone_rows` at
        ``seq - window`` and ``since``); the row itself enters only if ``at > since``.
        Refused whole (:class:`InvalidInputError`) if a sum overflows."""
        window = len(self.seqs)
        gone = self.gone_rows(seq - window, since)
        # new arrays below: the part is unchanged
        A, b, B = self.live_blocks(seq - window, since)
        young = at > since
        if young:
            A = A + np.multiply.outer(x, x)
            b = b + reward * x
            B = B + np.multiply.outer(x, z)
        if not (all_finite(A) and all_finite(B) and all_finite(b)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and reward {reward} overflow the ridge statistics"
            )
        for array in self._writable_rows():
            array[gone] = 0.0
        if young:
            # the live rows are numbered in (seq - window, seq): at most window - 1, a slot is free
            self._place(int(np.argmin(self.seqs)), z, x, reward, seq, at)
        self.n += 1
        self.reward_sum += reward
        self.since_rebuild += 1
        if self.since_rebuild >= window:  # bound the drift of the running sums
            A, b, B = self._summed(self.seqs > 0, ridge_lambda)
            self.since_rebuild = 0
        self.A, self.b, self.B = A, b, B

    def gone_rows(self, cutoff: int, since: float = -math.inf) -> np.ndarray:
        """Mask of the rows held that are out of the window when it holds the rewards
        numbered above ``cutoff`` (``since`` is for :class:`TimedWindowState`)."""
        return (self.seqs > 0) & (self.seqs <= cutoff)

    def live_rows(self, cutoff: int, since: float = -math.inf) -> np.ndarray:
        """Mask of the rows still in the window at ``cutoff`` and ``since``
        (:meth:`gone_rows`)."""
        live: np.ndarray = (self.seqs > 0) & ~self.gone_rows(cutoff, since)
        return live

    def live_blocks(self, cutoff: int, since: float = -math.inf) -> Blocks:
        """``(A_a, b_a, B_a)`` over the rows still in the window at ``cutoff`` and
        ``since`` (:meth:`gone_rows`): the part's sums less the rows that left, in the
        order of their numbers (:meth:`without`); the part does not change."""
        gone = np.flatnonzero(self.gone_rows(cutoff, since))
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

    def _place(
        self, i: int, z: np.ndarray, x: np.ndarray, reward: float, seq: int, at: float
    ) -> None:
        """Write the row ``[z, x]`` with its reward and number into slot ``i``."""
        self.xs[i], self.zs[i], self.rewards[i], self.seqs[i] = x, z, reward, seq

    def _writable_rows(self) -> tuple[np.ndarray, ...]:
        """The arrays of the rows (``xs``, ``zs``, ``rewards``, ``seqs``), copied first
        if they are read-only views (a part read from bytes)."""
        if not self.xs.flags.writeable:
            rows = (self.xs, self.zs, self.rewards, self.seqs)
            self.xs, self.zs, self.rewards, self.seqs = map(np.copy, rows)
        return self.xs, self.zs, self.rewards, self.seqs


@dataclass(kw_only=True)
class TimedWindowState(HybridWindowArmState):
    """A part of the window in seconds (``window_seconds``; module docstring): the rows
    of :class:`HybridWindowArmState`, each also with its reward's time ``times[i]``; a
    row is out of the window once its number is ``seq - window`` or below or its time
    ``since`` or earlier. ``clock`` is the latest time of the part's rewards. An arm's
    part holds rows ``[z, x]``; ``"shared"`` holds rows ``z`` as its ``xs`` (``k = 0``)."""

    KIND: ClassVar[str] = "hybrid_timed_window"
    times: np.ndarray
    clock: float = 0.0

    @classmethod
    def empty(cls, d: int, k: int, window: int, ridge_lambda: float) -> TimedWindowState:
        """The part before any reward: ``A = lambda*I``, ``B = 0``, ``b = 0``, no rows."""
        rows = vars(HybridWindowArmState.empty(d, k, window, ridge_lambda))
        return cls(**rows, times=np.zeros(window))

    def next_clock(self, at: float) -> float:
        """The clock after a reward at ``at``: the latest time seen (``at`` for the first)."""
        return at if self.n == 0 else max(self.clock, at)

    def add_row(
        self,
        z: np.ndarray,
        x: np.ndarray,
        reward: float,
        seq: int,
        ridge_lambda: float,
        at: float = 0.0,
        since: float = -math.inf,
    ) -> None:
        """:meth:`HybridWindowArmState.add_row`, then the clock moves to :meth:`next_clock`."""
        clock = self.next_clock(at)
        super().add_row(z, x, reward, seq, ridge_lambda, at, since)
        self.clock = clock

    def gone_rows(self, cutoff: int, since: float = -math.inf) -> np.ndarray:
        """Mask of the rows held that are numbered ``cutoff`` or below or timed
        ``since`` or earlier."""
        return (self.seqs > 0) & ((self.seqs <= cutoff) | (self.times <= since))

    def _place(
        self, i: int, z: np.ndarray, x: np.ndarray, reward: float, seq: int, at: float
    ) -> None:
        super()._place(i, z, x, reward, seq, at)
        self.times[i] = at

    def _writable_rows(self) -> tuple[np.ndarray, ...]:
        if not self.times.flags.writeable:
            self.times = self.times.copy()
        return (*super()._writable_rows(), self.times)


@dataclass
class _KeptBlocks:
    """An arm's live blocks at ``cutoff`` (the window in updates), valid while its part is ``state`` with ``n``
    rewards; ``leaving`` lists its live rows' indices, the oldest last."""

    state: HybridWindowArmState
    n: int
    cutoff: int
    leaving: list[int]
    blocks: Blocks


@dataclass
class _KeptTimed:
    """A part's live blocks at ``cutoff`` and ``since`` (the window in seconds), valid
    while it is ``state`` with ``n`` rewards and no live row leaves: the cutoffs stay
    below ``next_seq`` and ``next_time``, the first number and time that would."""

    state: TimedWindowState
    n: int
    cutoff: int
    since: float
    next_seq: float
    next_time: float
    blocks: Blocks


class WindowFits:
    """The hybrid ridge (10.5) over a policy's last ``window`` rewards, with each arm's
    live blocks kept between reads: a read subtracts only the rows that left the window
    since the last one (one per reward of the policy), so it costs the joint fit plus
    ``O(N)`` checks; an arm's blocks are formed anew when its part changes."""

    def __init__(self) -> None:
        self._kept: dict[str, _KeptBlocks] = {}
        self._timed: dict[str, _KeptTimed] = {}

    def fit(
        self,
        shared: WindowArmState,
        arms: Mapping[str, HybridWindowArmState],
        window: int,
    ) -> HybridFit:
        """The fit of ``shared`` (its sums are exactly the window's) and ``arms`` (each
        over its rows still in the window after ``shared.n`` rewards), unweighted; no
        part changes."""
        cutoff = shared.n - window
        self._forget_retired(arms)
        blocks = [self._blocks(a, state, cutoff) for a, state in arms.items()]
        return _joint((shared.A, shared.b), blocks)

    def fit_timed(
        self,
        shared: TimedWindowState,
        arms: Mapping[str, TimedWindowState],
        window: int,
        since: float,
    ) -> HybridFit:
        """The fit over the rows of the policy's last ``window`` rewards timed after
        ``since``, of ``shared`` and of ``arms`` (:class:`TimedWindowState` parts); no
        part changes. The rows that left are subtracted from a part's sums
        (:meth:`HybridWindowArmState.live_blocks`) and the result kept while the same
        rows stay live, so a read costs the joint fit plus ``O(N)`` checks and
        ``O(window)`` for each part one of whose rows left since the last."""
        cutoff = shared.n - window
        self._forget_retired(arms)
        A0, b0, _ = self._timed_blocks(SHARED_PART, shared, cutoff, since)
        blocks = [
            self._timed_blocks(ARM_PREFIX + a, state, cutoff, since) for a, state in arms.items()
        ]
        return _joint((A0, b0), blocks)

    def _forget_retired(self, arms: Mapping[str, HybridWindowArmState]) -> None:
        """Drop the kept blocks of arms no longer in ``arms``."""
        known = {ARM_PREFIX + a for a in arms} | {SHARED_PART}
        if self._kept.keys() - known or self._timed.keys() - known:
            self._kept = {a: kept for a, kept in self._kept.items() if a in known}
            self._timed = {a: kept for a, kept in self._timed.items() if a in known}

    def _timed_blocks(self, key: str, state: TimedWindowState, cutoff: int, since: float) -> Blocks:
        """``state``'s blocks over its rows live at ``cutoff`` and ``since``, kept while
        ``cutoff`` and ``since`` stay between those they were formed at and the number
        and time of the first live row to leave (the same rows are live there)."""
        kept = self._timed.get(key)
        if (
            kept is None
            or kept.state is not state
            or kept.n != state.n
            or not kept.cutoff <= cutoff < kept.next_seq
            or not kept.since <= since < kept.next_time
        ):
            live = state.live_rows(cutoff, since)
            next_seq = float(state.seqs[live].min()) if live.any() else math.inf
            next_time = float(state.times[live].min()) if live.any() else math.inf
            blocks = state.live_blocks(cutoff, since)
            kept = _KeptTimed(state, state.n, cutoff, since, next_seq, next_time, blocks)
            self._timed[key] = kept
        return kept.blocks

    def _blocks(self, arm_id: str, state: HybridWindowArmState, cutoff: int) -> Blocks:
        """``arm_id``'s blocks over its rows numbered above ``cutoff``."""
        key = ARM_PREFIX + arm_id
        kept = self._kept.get(key)
        if kept is None or kept.state is not state or kept.n != state.n or cutoff < kept.cutoff:
            live = np.flatnonzero(state.live_rows(cutoff))
            leaving = live[np.argsort(-state.seqs[live])].tolist()
            blocks = state.live_blocks(cutoff)
            self._kept[key] = _KeptBlocks(state, state.n, cutoff, leaving, blocks)
            return blocks
        gone = []
        while kept.leaving and state.seqs[kept.leaving[-1]] <= cutoff:
            gone.append(kept.leaving.pop())
        if gone:
            kept.blocks = state.without(gone, kept.blocks)
        kept.cutoff = cutoff
        return kept.blocks


def _joint(shared: tuple[np.ndarray, np.ndarray], blocks: list[Blocks]) -> HybridFit:
    """The unweighted joint fit of the shared sums ``(A_0, b_0)`` and the arms'
    ``blocks``: :func:`~bandit_core.hybrid_forgetting.fit_blocks` gets the blocks as
    their own ``V~``, so the width is LinUCB's ``sqrt(phi^T V^-1 phi)``."""
    A0, b0 = shared
    k = len(b0)
    d = len(blocks[0][1]) if blocks else 0
    A = np.array([blk[0] for blk in blocks], dtype=np.float64).reshape(-1, d, d)
    b = np.array([blk[1] for blk in blocks], dtype=np.float64).reshape(-1, d)
    B = np.array([blk[2] for blk in blocks], dtype=np.float64).reshape(-1, d, k)
    return fit_blocks((A0, b0, A0), (A, b, B), (A, B))


def hybrid_window_memory_bytes(d: int, k: int, window: int, timed: bool = False) -> int:
    """Bytes of float64 arrays one :class:`HybridWindowArmState` holds (``d`` context
    features, ``k`` shared ones): ``8 * (window * (d + k + 2) + d^2 + d k + d)``, and a
    :class:`TimedWindowState` (``timed``) ``8 * window`` more for the rows' times."""
    return 8 * (window * (d + k + 2 + int(timed)) + d * d + d * k + d)
