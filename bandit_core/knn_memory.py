"""The kNN side of LNUCB-TA (docs/algorithms.md section 2, Algorithm 2): an arm's state
with its memory of recent ``(x, r)`` pairs (:class:`LNUCBTAArmState`), the adaptive
``k`` (:func:`adaptive_k`), and the candidates' memories laid out side by side
(:class:`KnnMemory`) so that every distance and neighbour set of a selection comes from
one pass (:func:`knn_estimates`, ``O(M d)`` for ``M <= K * knn_window`` points).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.linear import LinearArmState

__all__ = ["KnnMemory", "LNUCBTAArmState", "Scratch", "adaptive_k", "arm_k", "knn_estimates"]


@dataclass(kw_only=True)
class LNUCBTAArmState(LinearArmState):
    """One arm's ridge state (:class:`LinearArmState`) plus its kNN memory.

    ``X_mem``: shape ``(m, d)``, ``r_mem``: shape ``(m,)``, the ``m <= knn_window``
    most recent observations, stored as a ring once full (``head`` is the index of the
    oldest point); arrays hold exactly ``m`` rows, so the serialized size grows with
    the points stored, not with the window. ``reward_sq_sum`` sums squared rewards
    (the running variance of Algorithm 2).
    """

    KIND: ClassVar[str] = "lnucb_ta_arm"
    X_mem: np.ndarray
    r_mem: np.ndarray
    head: int = 0
    reward_sq_sum: float = 0.0

    @classmethod
    def prior(cls, d: int, ridge_lambda: float) -> LNUCBTAArmState:
        """The state before any reward: LinUCB's prior and an empty memory."""
        base = LinearArmState.prior(d, ridge_lambda)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(LinearArmState)}
        return cls(**fields, X_mem=np.zeros((0, d)), r_mem=np.zeros(0))

    def remember(self, x: np.ndarray, reward: float, window: int) -> None:
        """Store ``(x, reward)``, dropping the oldest point once ``window`` are held.

        Below the window, ``X_mem`` and ``r_mem`` are views of the first ``m`` rows of
        arrays with rows reserved for later points (:func:`_capacity`), so an append
        writes one row instead of copying the memory.
        """
        m = len(self.r_mem)
        if m < window:
            spare: tuple[int, np.ndarray, np.ndarray] | None = self.__dict__.get("_spare")
            # a copy of this state must not append into the same arrays: they are tied to id(self)
            if spare is None or not (
                spare[0] == id(self)
                and spare[1] is self.X_mem.base
                and spare[2] is self.r_mem.base
                and len(spare[2]) > m
            ):
                X_buf, r_buf = (
                    np.empty((_capacity(m + 1, window), len(x))),
                    np.empty(_capacity(m + 1, window)),
                )
                X_buf[:m], r_buf[:m] = self.X_mem, self.r_mem
                spare = self._spare = (id(self), X_buf, r_buf)
            spare[1][m], spare[2][m] = x, reward
            self.X_mem, self.r_mem = spare[1][: m + 1], spare[2][: m + 1]
            return
        self.X_mem[self.head] = x
        self.r_mem[self.head] = reward
        self.head = (self.head + 1) % window


def adaptive_k(
    states: Sequence[LNUCBTAArmState],
    theta_min: int,
    theta_max: int,
    reward_range: tuple[float, float],
) -> np.ndarray:
    """Algorithm 2, line 5, for each state: ``floor(theta_min + (theta_max - theta_min)
    * Var)``, shape ``(K,)``. ``Var`` is the population variance of the arm's rewards
    rescaled to [0, 1] by ``reward_range`` (0 with fewer than 2 rewards), from the
    running sums, so ``k`` stays inside ``[theta_min, theta_max]``.

    >>> s = LNUCBTAArmState.prior(1, 1.0)
    >>> s.n, s.reward_sum, s.reward_sq_sum = 4, 2.0, 2.0  # rewards 0, 0, 1, 1: Var 0.25
    >>> adaptive_k([s], 1, 9, (0.0, 1.0)).tolist()
    [3]
    """
    return np.array([arm_k(s, theta_min, theta_max, reward_range) for s in states], dtype=np.intp)


def arm_k(
    state: LNUCBTAArmState, theta_min: int, theta_max: int, reward_range: tuple[float, float]
) -> int:
    """:func:`adaptive_k` of one state, in Python floats: an update changes one arm's ``k``."""
    n, var = state.n, 0.0
    if n >= 2:
        mean = state.reward_sum / n
        var = max(state.reward_sq_sum / n - mean * mean, 0.0)
    var /= (reward_range[1] - reward_range[0]) ** 2
    return min(max(math.floor(theta_min + (theta_max - theta_min) * var), theta_min), theta_max)


class Scratch:
    """Work arrays reused from call to call: a fresh ``(M, d)`` array per selection costs
    more in page faults than the arithmetic done in it (measured ~4x at M = 1000, d = 32)."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """A float64 array of ``shape`` with arbitrary contents, backed by the buffer
        ``name`` (grown by half again when too small)."""
        need = math.prod(shape)
        buf = self._arrays.get(name)
        if buf is None or len(buf) < need:
            buf = self._arrays[name] = np.empty(need + need // 2)
        return buf[:need].reshape(shape)


# A ring row before the ring's head was written after every row from the head on: its
# recency rank is -(row + _NEWER), the others' -row, so the newest point ranks lowest.
_NEWER = 1 << 40
# Points (distance, rank) of a batch scored at once, B * C: larger batches go in chunks.
_BATCH_POINTS = 1 << 20
# Floats of differences x - point computed at once (1 MB: they stay in cache).
_SPAN_FLOATS = 1 << 17


def _capacity(points: int, window: int | None) -> int:
    """Rows :class:`KnnMemory` gives a memory of ``points`` points that outgrew its
    rows: an eighth more (plus 4, at most ``window``), so appends rarely move the
    layout, while the rows reserved, which every search scans, stay few; just the
    points without a window (a one-off search)."""
    if window is None:
        return max(points, 1)
    return min(window, points + points // 8 + 4)


def _ranks(rows: np.ndarray, head: int | np.ndarray) -> np.ndarray:
    """Recency ranks of ring rows ``rows`` with the oldest point at ``head`` (lower is newer)."""
    result: np.ndarray = -(rows + _NEWER * (rows < head)).astype(np.float64)
    return result


def _rows(points: np.ndarray) -> np.ndarray:
    """The rows of points ``distance^2 + i * rank`` in their candidates' segments."""
    rows: np.ndarray = np.negative(points.imag).astype(np.intp)
    rows &= _NEWER - 1
    return rows


class KnnMemory:
    """The candidates' kNN memories laid out side by side, for :func:`knn_estimates`.

    Candidate ``i`` owns the rows ``starts[i]`` to ``starts[i] + caps[i]`` of ``mem``
    (shape ``(C, d)``): its ``m_i`` points in the first ``m_i`` rows, in its state's
    ring order, and NaN in the rows reserved for later points, which no search takes.
    ``rank`` (shape ``(C,)``) holds each point's recency rank (:func:`_ranks`), from
    which its row can be read back.

    Built from K states and their ``ks`` (shape ``(K,)``) with no rows to spare (the
    candidates may change before any memory grows); :meth:`write` brings one candidate
    up to date after its state changed, so a select-then-update loop never lays out all
    K memories again: a point appended or written over the oldest costs ``O(d)``, a
    replaced state its own segment, and a segment that outgrows its rows moves the
    layout once, reserving rows for that candidate's later points (:func:`_capacity`).

    Neighbour search, exact and with the documented tie rule, ``O(C)`` per pass for
    ``C`` rows: every point is the complex number ``distance^2 + i * rank``, which
    numpy orders by distance, then rank; pass ``j`` takes from every candidate's
    memory the smallest point not yet taken (segmented minimum, ``np.fmin.reduceat``,
    which skips NaN), i.e. the nearest, the most recent among equally near ones. The
    ``k`` points taken come out ordered by (distance, age).
    """

    def __init__(
        self,
        states: Sequence[LNUCBTAArmState],
        ks: np.ndarray,
        window: int | None = None,
        scratch: Scratch | None = None,
    ) -> None:
        self.window = window
        self.scratch = Scratch() if scratch is None else scratch
        self.states = list(states)
        self.K = len(self.states)
        self.k = np.array(ks, dtype=np.intp)
        self.sizes = np.array([len(s.r_mem) for s in self.states], dtype=np.intp)
        self.heads = [s.head for s in self.states]
        self.stamps = [s.n for s in self.states]
        d = self.states[0].X_mem.shape[1]
        self._side = 0
        self._allocate(np.maximum(self.sizes, 1), d)
        empty = np.full((1, d), np.nan)
        np.concatenate([s.X_mem if len(s.r_mem) else empty for s in self.states], out=self.mem)
        np.concatenate(
            [s.r_mem if len(s.r_mem) else empty[0, :1] for s in self.states], out=self.rewards
        )
        rows = np.arange(len(self.seg)) - self.starts[self.seg]
        self.rank[:] = _ranks(rows, np.array(self.heads)[self.seg])
        self._plan: tuple[np.ndarray, int, np.ndarray | None, np.ndarray | None] | None = None

    def _allocate(self, caps: np.ndarray, d: int) -> None:
        """Arrays for segments of ``caps`` rows, contents arbitrary: work arrays reused
        from one layout to the next, on the side the current layout does not use."""
        self.caps = caps
        self.starts = np.cumsum(caps) - caps
        self.seg = np.repeat(np.arange(self.K), caps)
        rows, self._side = len(self.seg), 1 - self._side
        self.mem = self.scratch.array(f"mem{self._side}", (rows, d))
        self.rewards = self.scratch.array(f"rewards{self._side}", (rows,))
        self.rank = self.scratch.array(f"rank{self._side}", (rows,))

    def _fill(self, i: int, state: LNUCBTAArmState) -> None:
        """Lay out candidate ``i``'s whole memory from ``state``."""
        m, start = len(state.r_mem), int(self.starts[i])
        self.mem[start : start + m] = state.X_mem
        self.mem[start + m : start + self.caps[i]] = np.nan
        self.rewards[start : start + m] = state.r_mem
        self.rank[start : start + m] = _ranks(np.arange(m), state.head)
        self.states[i], self.sizes[i], self.heads[i], self.stamps[i] = state, m, state.head, state.n

    def _grow(self, i: int, points: int) -> None:
        """Reserve rows for ``points`` points and more (:func:`_capacity`) for candidate
        ``i``, moving every segment."""
        caps = self.caps.copy()
        caps[i] = _capacity(points, self.window)
        old_starts, old_seg, mem, rewards, rank = (
            self.starts,
            self.seg,
            self.mem,
            self.rewards,
            self.rank,
        )
        self._allocate(caps, mem.shape[1])
        self.mem.fill(np.nan)
        self.rank.fill(0.0)  # row 0 of each segment for the rows reserved
        to = np.arange(len(old_seg)) + (self.starts - old_starts)[old_seg]
        self.mem[to], self.rewards[to], self.rank[to] = mem, rewards, rank

    def write(self, i: int, state: LNUCBTAArmState, k: int) -> bool:
        """Bring candidate ``i`` up to date with ``state`` (the same object after one
        more :meth:`LNUCBTAArmState.remember`, or any state) and its ``k``; ``True`` if
        that appended one point and left ``k`` as it was (see :meth:`with_newest`)."""
        same_k, size = self.k[i] == k, self.sizes[i]
        self.k[i] = k
        self._plan = None
        if state is self.states[i] and state.n == self.stamps[i] + 1 and self._step(i, state):
            return bool(same_k and self.sizes[i] == size + 1)
        if len(state.r_mem) > self.caps[i]:
            self._grow(i, len(state.r_mem))
        self._fill(i, state)
        return False

    def _step(self, i: int, state: LNUCBTAArmState) -> bool:
        """Write the one point ``state`` remembered since candidate ``i`` was last
        written; ``False`` if its memory did not change that way."""
        m, head = len(state.r_mem), state.head
        size, old_head, start = int(self.sizes[i]), self.heads[i], int(self.starts[i])
        if m == size + 1 and head == old_head == 0:  # appended
            if m > self.caps[i]:
                self._grow(i, m)
                start = int(self.starts[i])
            row = size
            self.rank[start + row] = -row
        elif m == size > 0 and head == (old_head + 1) % m:  # written over the oldest point
            row = old_head
            if head:
                self.rank[start + row] = -(row + _NEWER)
            else:  # the ring wrapped: no row comes before the head any more
                self.rank[start : start + m] = -np.arange(m)
        else:
            return False
        self.mem[start + row] = state.X_mem[row]
        self.rewards[start + row] = state.r_mem[row]
        self.sizes[i], self.heads[i], self.stamps[i] = m, head, state.n
        return True

    def _search_plan(self) -> tuple[np.ndarray, int, np.ndarray | None, np.ndarray | None]:
        """``(valid, kmax, take, k)``: the candidates holding at least ``k`` points, the
        passes they need, and where ``kmax > 1`` (else ``None``) ``take[j, 0, i] = j < k_i``
        and ``k`` as floats."""
        if self._plan is None:
            valid = self.sizes >= self.k
            kmax = int(np.maximum.reduce(self.k, where=valid, initial=0))
            if kmax > 1:
                self._plan = (
                    valid,
                    kmax,
                    (np.arange(kmax)[:, None] < self.k)[:, None],
                    self.k.astype(np.float64),
                )
            else:
                self._plan = (valid, kmax, None, None)
        return self._plan

    def passes(self) -> int:
        """The passes :meth:`search` makes: ``max k`` over the candidates holding at
        least ``k`` points."""
        return self._search_plan()[1]

    def _span(self, candidate: int | None) -> tuple[int, int, np.ndarray]:
        """``(lo, hi, starts)``: the rows of every candidate, or of ``candidate`` alone,
        and where its segments start counted from ``lo``."""
        if candidate is None:
            return 0, len(self.seg), self.starts
        lo = int(self.starts[candidate])
        return lo, lo + int(self.caps[candidate]), self.starts[candidate : candidate + 1] - lo

    def _points(self, X: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """``distance^2 + i * rank`` of the rows ``lo`` to ``hi`` to their candidates'
        rows of ``X`` (shape ``(B, K, d)``), shape ``(B, hi - lo)``, in a work array."""
        B, d = len(X), self.mem.shape[1]
        points = self.scratch.array("points", (B, 2 * (hi - lo))).view(np.complex128)
        points.imag = self.rank[lo:hi]
        # the distances a span of rows at a time, so the differences stay in cache
        span = max(1, _SPAN_FLOATS // (B * d))
        for c0 in range(lo, hi, span):
            c1 = min(c0 + span, hi)
            diff = np.take(
                X,
                self.seg[c0:c1],
                axis=1,
                mode="clip",
                out=self.scratch.array("diff", (B, c1 - c0, d)),
            )
            np.subtract(self.mem[c0:c1], diff, out=diff)
            np.einsum("bmd,bmd->bm", diff, diff, out=points[:, c0 - lo : c1 - lo].real)
        return points

    def search(self, X: np.ndarray, candidate: int | None = None) -> np.ndarray:
        """The neighbours of B sets of the candidates' feature rows, ``X`` of shape
        ``(B, K, d)``: ``found[j, b, i]`` is the ``j``-th nearest point of candidate
        ``i``'s memory to ``X[b, i]`` as ``distance^2 + i * rank`` (NaN once its points
        are used up), for the ``max k`` passes the candidates need; shape
        ``(max k, B, K)``, or ``(max k, B, 1)`` for column ``candidate`` alone
        (bit-identical to that column of the whole). Every row goes through the same
        operations whatever ``B``, so a row of a batch is bit-identical to it alone."""
        kmax = self._search_plan()[1]
        lo, hi, starts = self._span(candidate)
        B = len(X)
        step = max(1, _BATCH_POINTS // (hi - lo))
        if kmax and B > step:
            return np.concatenate(
                [self.search(X[s : s + step], candidate) for s in range(0, B, step)], axis=1
            )
        found = np.empty((kmax, B, len(starts)), dtype=np.complex128)
        if not kmax:
            return found
        points = self._points(X, lo, hi)
        # pass j's point of every candidate; one with no point left gets a row not taken
        for j in range(kmax):
            np.fmin.reduceat(points, starts, axis=1, out=found[j])
            if j + 1 < kmax:  # take them: NaN, which fmin skips
                points[np.arange(B)[:, None], starts + _rows(found[j])] = np.nan
        return found

    def with_newest(self, found: np.ndarray, X: np.ndarray, candidate: int) -> np.ndarray:
        """:meth:`search` of column ``candidate`` after its state appended one point
        with ``k`` unchanged (:meth:`write` returned ``True``), from ``found``, that
        column's search before: the newest point goes in after the nearer points, ahead
        of equally near ones (it is the most recent), and the farthest drops out.
        Bit-identical to searching again, in ``O(B d)`` instead of ``O(B m d)``."""
        row = int(self.starts[candidate] + self.sizes[candidate]) - 1
        new = self._points(X, row, row + 1)
        nearer = found.real < new.real  # true on a prefix of the passes (NaN: false)
        out = np.where(nearer, found, new)
        if len(found) > 1:  # the passes after the new point's hold their predecessors
            out[1:] = np.where(nearer[:-1], out[1:], found[:-1])
        return out

    def estimates(self, X: np.ndarray, weights: str = "uniform") -> np.ndarray:
        """``f_a`` for B sets of the candidates' feature rows: ``X`` of shape ``(B, K, d)``,
        ``X[b, i]`` scored against candidate ``i``'s memory; result shape ``(B, K)``, row
        by row as :meth:`search` finds the neighbours."""
        return self.estimates_from(self.search(X), weights)

    def estimates_from(self, found: np.ndarray, weights: str = "uniform") -> np.ndarray:
        """:meth:`estimates` from the neighbours :meth:`search` found."""
        valid, kmax, take, k = self._search_plan()
        if not kmax:
            return np.zeros(found.shape[1:])
        r = self.rewards[_rows(found) + self.starts]
        if weights == "uniform":
            if take is None:  # k = 1 for every candidate searched: f is the neighbour's reward
                return np.where(valid, r[0], 0.0)
            # weights of 1: the weighted sums are the plain sum and the count k
            return np.where(valid, _sum_taken(r, take) / k, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            dist = np.sqrt(found.real)
            exact = dist == 0.0
            if take is not None:
                exact &= take
            w = np.where(exact.any(axis=0), exact, 1.0 / dist)
            if take is None:
                return np.where(valid, w[0] * r[0] / w[0], 0.0)
            return np.where(valid, _sum_taken(w * r, take) / _sum_taken(w, take), 0.0)


def _sum_taken(v: np.ndarray, take: np.ndarray) -> np.ndarray:
    """``sum_j v[j]`` over the passes ``j`` with ``take[j]``, summed ``v[0] + (v[1] +
    ... )`` as ``np.add.reduce`` sums up to 9 terms, so a sum over a candidate's ``k``
    neighbours does not depend on the other candidates' ``k``."""
    result: np.ndarray = v[0] + np.where(take[1:], v[1:], 0.0).sum(axis=0)
    return result


def knn_estimates(
    states: Sequence[LNUCBTAArmState], X: np.ndarray, ks: np.ndarray, weights: str = "uniform"
) -> np.ndarray:
    """``f_a(x_a)`` of eq. 3 for K candidates in one pass, shape ``(K,)``.

    ``X``: shape ``(K, d)``, row ``i`` scored against ``states[i]``'s memory; ``ks``:
    shape ``(K,)``, each arm's ``k``. ``f`` is the mean reward of the ``k`` stored
    points nearest to ``x`` (Euclidean), 0 when fewer than ``k`` are stored. Ties at the
    ``k``-th distance go to the most recent points. ``weights="distance"`` weights each
    neighbour by ``1/distance``, or uses only the neighbours at distance 0 if any.

    All candidates' memories are laid out side by side (:class:`KnnMemory`): brute
    force, ``O(M d)`` distances and ``max k`` linear-time selection passes for ``M``
    stored points in total.

    >>> s = LNUCBTAArmState.prior(1, 1.0)
    >>> for x, r in [(0.0, 1.0), (1.0, 0.0), (3.0, 1.0)]:
    ...     s.remember(np.array([x]), r, window=10)
    >>> knn_estimates([s, s], np.array([[0.4], [2.9]]), np.array([2, 1])).tolist()
    [0.5, 1.0]
    """
    result: np.ndarray = KnnMemory(states, ks).estimates(X[None], weights)[0]
    return result
