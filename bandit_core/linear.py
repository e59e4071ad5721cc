"""Per-arm ridge regression shared by LinUCB, LNUCB-TA and guardrailed LinUCB.

One arm keeps ``A = lambda*I + sum x x^T``, its inverse, ``b = sum target * x`` and
``theta = A^-1 b`` (ALGORITHMS.md section 1; HARE derivations section 1). The inverse
is updated by Sherman-Morrison in O(d^2),

    A^-1 <- A^-1 - (A^-1 x)(A^-1 x)^T / (1 + x^T A^-1 x),

and re-derived from ``A`` through its Cholesky factor every ``refactor_every`` updates
so floating-point drift stays bounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.state import ArrayState


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
        A = self.A + np.outer(x, x)
        A_inv = self.A_inv.copy()
        sherman_morrison(A_inv, x)
        b = self.b + target * x
        if not (np.isfinite(A).all() and np.isfinite(A_inv).all() and np.isfinite(b).all()):
            # Checked before any field changes, so the state is never left half-updated.
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} and target {target} overflow the ridge statistics"
            )
        self.A, self.A_inv, self.b = A, A_inv, b
        self.n += 1
        self.reward_sum += reward
        self.since_refactor += 1
        if self.since_refactor >= refactor_every:
            self.refactor()
        self.theta = self.A_inv @ self.b

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
    Ax = np.matmul(A_inv, x[..., None])[..., 0]
    A_inv -= Ax[..., :, None] * Ax[..., None, :] / (1.0 + (x * Ax).sum(-1))[..., None, None]


def cholesky_inverse(A: np.ndarray) -> np.ndarray:
    """``A^-1`` of symmetric positive definite ``A`` (shape ``(..., d, d)``) through its
    Cholesky factor: ``A = L L^T``, ``A^-1 = L^-T L^-1``."""
    L_inv = np.linalg.solve(np.linalg.cholesky(A), np.broadcast_to(np.eye(A.shape[-1]), A.shape))
    return np.swapaxes(L_inv, -1, -2) @ L_inv


def linear_ucb_terms(states: Sequence[LinearArmState], X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Batched ``(x_a^T theta_a, sqrt(x_a^T A_a^-1 x_a))`` for all K candidates.

    ``X`` has shape ``(K, d)``; both results have shape ``(K,)``. One stacked matmul,
    no Python loop over the arithmetic.
    """
    theta = np.stack([s.theta for s in states])
    A_inv = np.stack([s.A_inv for s in states])
    mean = np.einsum("kd,kd->k", X, theta)
    A_inv_x = np.matmul(A_inv, X[:, :, None])[:, :, 0]
    width = np.sqrt(np.maximum(np.einsum("kd,kd->k", X, A_inv_x), 0.0))
    return mean, width
