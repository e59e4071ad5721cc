"""Per-arm ridge regression shared by LinUCB, LNUCB-TA and guardrailed LinUCB.

One arm keeps ``A = lambda*I + sum x x^T``, its inverse, ``b = sum target * x`` and
``theta = A^-1 b`` (docs/algorithms.md section 1). The inverse
is updated by Sherman-Morrison in O(d^2),

    A^-1 <- A^-1 - (A^-1 x)(A^-1 x)^T / (1 + x^T A^-1 x),

and re-derived from ``A`` through its Cholesky factor every ``refactor_every`` updates
so floating-point drift stays bounded.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

import numpy as np
from scipy.linalg import lapack

from bandit_core.errors import InvalidInputError
from bandit_core.state import ArrayState
from bandit_core.validation import all_finite


@dataclass
class LinearArmState(ArrayState):
    """Ridge statistics of one arm; arrays have shapes ``A, A_inv: (d, d)``, ``b, theta: (d,)``.

    ``n`` counts rewards applied, ``reward_sum`` sums them, ``since_refactor`` counts
    Sherman-Morrison steps since ``A_inv`` was last re-derived from ``A``.
    """

    KIND: ClassVar[str] = "linear_arm"
    A: np.ndarray
    A_inv: np.ndarray
    b: np.ndarray
    theta: np.ndarray
    n: int = 0
    reward_sum: float = 0.0
    since_refactor: int = 0

    @classmethod
    def prior(cls, d: int, ridge_lambda: float) -> LinearArmState:
        """The state before any reward: ``A = lambda*I``, ``b = 0``."""
        return cls(
            A=np.eye(d) * ridge_lambda,
            A_inv=np.eye(d) / ridge_lambda,
            b=np.zeros(d),
            theta=np.zeros(d),
        )

    def add(self, x: np.ndarray, target: float, reward: float, refactor_every: int) -> None:
        """Add one observation: ``A += x x^T``, ``b += target * x`` (Sherman-Morrison on A^-1).

        ``target`` is what the ridge fits (the reward, or a residual for LNUCB-TA's eq. 18
        option); ``reward`` feeds the arm's reward counters.

        >>> s = LinearArmState.prior(2, 1.0)
        >>> s.add(np.array([1.0, 2.0]), 1.0, 1.0, refactor_every=1000)
        >>> bool(np.allclose(s.A_inv, np.linalg.inv(s.A)))
        True
        """
        # The three new arrays are rows of one buffer, so one all_finite pass checks them
        # all; it runs before any field changes, so the state is never left half-updated.
        # Positional outputs and in-place operators keep numpy's per-call work small;
        # dividing by -(1 + x^T A^-1 x), then adding A^-1, gives the bits of A^-1 - term
        # exactly (IEEE division is sign-symmetric and a - t is a + (-t)).
        d = len(x)
        new = np.empty((2 * d + 1, d))
        A, A_inv, b = new[:d], new[d:-1], new[-1]
        np.multiply(x[:, None], x, A)
        A += self.A
        Ax = self.A_inv.dot(x)
        np.multiply(Ax[:, None], Ax, A_inv)
        A_inv /= -(1.0 + x.dot(Ax))
        A_inv += self.A_inv
        np.multiply(x, target, b)
        b += self.b
        if not all_finite(new):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and target {target} overflow the ridge statistics"
            )
        self.commit(A, A_inv, b, reward, refactor_every)

    def add_batch(
        self, X: np.ndarray, targets: np.ndarray, rewards: np.ndarray, refactor_every: int
    ) -> None:
        """Add ``m`` observations, the rows of ``X`` (m, d), at once: ``A += X^T X``, ``b +=
        X^T targets`` and the inverse of the new ``A`` by Woodbury while ``m`` is below
        ``d / 2`` (O(m d^2)), else from its Cholesky factor (O(d^3), the cheaper there);
        the same as :meth:`add` of each row in any order, to rounding
        (docs/algorithms.md section 8.1). ``rewards`` feed the counters. Nothing changes
        when a new array is not finite.

        >>> s, t = LinearArmState.prior(2, 1.0), LinearArmState.prior(2, 1.0)
        >>> X = np.array([[1.0, 2.0], [0.5, -1.0]]); r = np.array([1.0, 0.0])
        >>> s.add_batch(X, r, r, refactor_every=1000)
        >>> for x, y in zip(X, r): t.add(x, y, y, refactor_every=1000)
        >>> bool(np.allclose(s.A_inv, t.A_inv, atol=1e-12) and np.allclose(s.theta, t.theta))
        True
        """
        m, d = X.shape
        if m == 0:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            A = self.A + X.T @ X
            b = self.b + X.T @ targets
            woodbury = 2 * m < d
            if woodbury:
                # (A + X'X)^-1 = A^-1 - A^-1 X' (I + X A^-1 X')^-1 X A^-1
                XP = X @ self.A_inv
                inner = np.eye(m) + XP @ X.T
                A_inv = self.A_inv - XP.T @ np.linalg.solve(inner, XP)
        if not (all_finite(A) and all_finite(b) and (not woodbury or all_finite(A_inv))):
            raise InvalidInputError(
                f"rows with max |x| = {np.abs(X).max()} overflow the ridge statistics"
            )
        self.A, self.b = A, b
        self.n += m
        self.reward_sum += float(np.sum(rewards))
        self.since_refactor += m
        if woodbury and self.since_refactor < refactor_every:
            self.A_inv = A_inv
        else:
            self.refactor()
        self.theta = self.A_inv.dot(self.b)

    def commit(
        self, A: np.ndarray, A_inv: np.ndarray, b: np.ndarray, reward: float, refactor_every: int
    ) -> None:
        """Take the checked ``A``, ``A^-1`` and ``b`` of one more observation: count its
        reward, re-derive ``A^-1`` when ``refactor_every`` updates have passed, and set
        ``theta = A^-1 b``."""
        self.A, self.A_inv, self.b = A, A_inv, b
        self.n += 1
        self.reward_sum += reward
        self.since_refactor += 1
        if self.since_refactor >= refactor_every:
            self.refactor()
        self.theta = self.A_inv.dot(self.b)

    def refactor(self) -> None:
        """Re-derive ``A^-1`` from ``A``: ``A = L L^T``, ``A^-1 = L^-T L^-1``."""
        self.A_inv = cholesky_inverse(self.A)
        self.since_refactor = 0


def sherman_morrison(A_inv: np.ndarray, x: np.ndarray) -> None:
    """In place ``A^-1 <- (A + x x^T)^-1`` by Sherman-Morrison, O(d^2).

    ``A_inv`` has shape ``(..., d, d)`` and ``x`` shape ``(..., d)``: a stack of
    matrices is updated at once (HARE keeps one per head).

    >>> A = np.eye(2) * 2.0; A_inv = np.linalg.inv(A); x = np.array([1.0, 3.0])
    >>> sherman_morrison(A_inv, x)
    >>> bool(np.allclose(A_inv, np.linalg.inv(A + np.outer(x, x))))
    True
    """
    A_inv -= sherman_morrison_term(A_inv, x)


def sherman_morrison_term(A_inv: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The rank-one term ``(A^-1 x)(A^-1 x)^T / (1 + x^T A^-1 x)`` that
    :func:`sherman_morrison` subtracts; shapes as there, result shaped like ``A_inv``."""
    Ax = np.matmul(A_inv, x[..., None])[..., 0]
    result: np.ndarray = (
        Ax[..., :, None] * Ax[..., None, :] / (1.0 + (x * Ax).sum(-1))[..., None, None]
    )
    return result


def sherman_morrison_downdate(A_inv: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``(A - sum o o^T)^-1`` over the rows ``o`` of ``rows`` (each one a row of ``A``, so
    ``A`` stays above ``lambda*I``) by reverse Sherman-Morrison steps, O(d^2) each."""
    for o in rows:
        u = A_inv.dot(o)
        A_inv = A_inv + np.multiply.outer(u, u) / (1.0 - o.dot(u))
    return A_inv


def cholesky_inverse(A: np.ndarray) -> np.ndarray:
    """``A^-1`` of symmetric positive definite ``A`` (shape ``(..., d, d)``) through its
    Cholesky factor: ``A = L L^T``, ``A^-1 = L^-T L^-1``.

    One matrix goes to LAPACK directly (``dpotrf``, ``dpotri``): at ``d = 32`` that takes
    under half the time of ``numpy.linalg.inv`` (docs/algorithms.md section 10.1, "Cost").
    Only the upper triangle of ``A`` is read.

    >>> A = np.array([[4.0, 2.0], [2.0, 3.0]])
    >>> bool(np.allclose(cholesky_inverse(A), np.linalg.inv(A)))
    True
    """
    if A.ndim == 2:
        U, info = lapack.dpotrf(A)
        if info == 0:
            U, info = lapack.dpotri(U, overwrite_c=True)
        if info != 0:
            raise np.linalg.LinAlgError(f"the matrix is not positive definite (LAPACK info {info})")
        # dpotri fills the upper triangle; the lower one is zero (dpotrf cleans it)
        inverse: np.ndarray = U + U.T
        inverse.ravel()[:: len(A) + 1] *= 0.5
        return inverse
    L_inv = np.linalg.solve(np.linalg.cholesky(A), np.broadcast_to(np.eye(A.shape[-1]), A.shape))
    return np.swapaxes(L_inv, -1, -2) @ L_inv


def linear_ucb_terms(
    states: Sequence[LinearArmState], X: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Batched ``(x_a^T theta_a, sqrt(x_a^T A_a^-1 x_a))`` for all K candidates.

    ``X`` has shape ``(K, d)``; both results have shape ``(K,)``. One stacked matmul,
    no Python loop over the arithmetic. Policies that score the same candidates again
    and again keep the stacks in a :class:`RidgeStack` instead of re-stacking per call.
    """
    return stacked_ucb_terms(
        np.stack([s.A_inv for s in states]), np.stack([s.theta for s in states]), X
    )


def stacked_ucb_terms(
    A_inv: np.ndarray, theta: np.ndarray, X: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`linear_ucb_terms` from pre-stacked ``A_inv (K, d, d)`` and ``theta (K, d)``.

    ``X`` may also be a batch of shape ``(B, K, d)`` (results ``(B, K)``): every row is
    computed by the same per-candidate matmul and row-wise product sums as a single
    ``(K, d)`` call, so row ``i`` of a batch is bit-identical to ``X[i]`` scored alone.
    """
    X = np.ascontiguousarray(X)
    mean = np.add.reduce(X * theta, axis=-1)
    A_inv_x = np.matmul(A_inv, X[..., None])[..., 0]
    quad = np.add.reduce(X * A_inv_x, axis=-1)
    return mean, np.sqrt(np.maximum(quad, 0.0, out=quad), out=quad)


_UPDATES = operator.attrgetter("n")


class RidgeState(Protocol):
    """What :class:`RidgeStack` reads of an arm's state: its update count ``n`` and its
    ``theta`` (and the matrix field it was told to stack)."""

    n: int
    theta: np.ndarray


RidgeStateT = TypeVar("RidgeStateT", bound=RidgeState)


class RidgeStack(Generic[RidgeStateT]):
    """Contiguous ``A_inv (K, d, d)`` and ``theta (K, d)`` of the last candidate list scored.

    ``matrix`` names the state field stacked as ``A_inv``: the width of a score is
    ``sqrt(x^T M x)`` for that matrix ``M`` (``"A_inv"`` for LinUCB; the discounted
    models of :mod:`bandit_core.forgetting` stack ``V^-1 Ṽ V^-1``).

    Scoring K arms needs their matrices side by side; stacking them anew costs a copy of
    ``K d^2`` floats and K Python steps per decision. This cache keeps the stacks of the
    last candidate list and rewrites only the rows of arms whose state object was
    replaced (cold start, :meth:`~bandit_core.policy.BasePolicy.import_parts`) or whose
    update count ``n`` moved (:meth:`LinearArmState.add` is the only writer of a state's
    arrays); a caller that knows which arms may have changed says so and spares the scan
    of all K states. A different candidate list rebuilds the stacks. Values are copies,
    so the scores are bit-identical to :func:`linear_ucb_terms`.

    >>> stack, s = RidgeStack(), LinearArmState.prior(2, 1.0)
    >>> X = np.array([[1.0, 0.0]])
    >>> stack.ucb_terms(["a"], [s], X) == linear_ucb_terms([s], X)
    True
    >>> s.add(np.array([1.0, 0.0]), 1.0, 1.0, refactor_every=1000)
    >>> [float(v[0]) for v in stack.ucb_terms(["a"], [s], X)] == [float(v[0]) for v in linear_ucb_terms([s], X)]
    True
    """

    def __init__(self, matrix: str = "A_inv") -> None:
        self._matrix = operator.attrgetter(matrix)
        self._ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._states: list[RidgeStateT] = []
        self._stamps: list[int] = []
        self.A_inv = np.zeros((0, 0, 0))
        self.theta = np.zeros((0, 0))

    def sync(
        self,
        arm_ids: list[str],
        states: Sequence[RidgeStateT],
        changed: Collection[str] | None = None,
    ) -> list[int] | None:
        """Bring the stacks up to date with ``states`` (aligned with ``arm_ids``).

        ``changed``, when given, names every arm whose state may differ from the last
        sync (states of other arms are the same objects, unchanged); then only those
        rows are checked. Returns ``None`` when the stacks were rebuilt, else the
        (possibly empty) list of rows rewritten.
        """
        if arm_ids != self._ids:
            self._ids, self._states = list(arm_ids), list(states)
            self._rows = {a: i for i, a in enumerate(self._ids)}
            self._stamps = [s.n for s in states]
            self._rebuild()
            return None
        cached, stamps = self._states, self._stamps
        if changed is not None:
            rows = self._rows
            maybe = [rows[a] for a in changed if a in rows]
            if all(states[i] is cached[i] for i in maybe):
                written = [i for i in maybe if states[i].n != stamps[i]]
                for i in written:
                    stamps[i] = states[i].n
                    self._write(i, states[i])
                return written
        now = list(map(_UPDATES, states))
        if all(map(operator.is_, states, cached)):
            if now == stamps:
                return []
            moved = list(itertools.compress(range(len(now)), map(operator.ne, now, stamps)))
        else:
            moved = [i for i, s in enumerate(states) if s is not cached[i] or now[i] != stamps[i]]
        for i in moved:
            s = cached[i] = states[i]
            stamps[i] = s.n
            self._write(i, s)
        return moved

    def _rebuild(self) -> None:
        self.A_inv = np.stack(list(map(self._matrix, self._states)))
        self.theta = np.stack([s.theta for s in self._states])

    def _write(self, i: int, state: RidgeStateT) -> None:
        self.A_inv[i] = self._matrix(state)
        self.theta[i] = state.theta

    def ucb_terms(
        self,
        arm_ids: list[str],
        states: Sequence[RidgeStateT],
        X: np.ndarray,
        changed: Collection[str] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`linear_ucb_terms` over the cached stacks, after :meth:`sync`."""
        self.sync(arm_ids, states, changed)
        return stacked_ucb_terms(self.A_inv, self.theta, X)
