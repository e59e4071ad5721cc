"""Forgetting for hybrid LinUCB with per-arm parts (docs/algorithms.md section 10.3,
"Hybrid model with per-arm parts").

Li et al.'s hybrid model is one ridge regression over the stacked row
``phi = [z, 0, ..., x, ..., 0]`` (the shared features ``z``, then the context ``x`` in
the block of the arm played). Given ``gamma`` or ``half_life_seconds`` it becomes
D-LinUCB's weighted ridge (10.1) over those rows, every observation weighted by
``w = gamma^(T - t_s)`` on the policy's one clock (every reward of the policy, or wall
time). Its blocks are kept as sums, each part relative to its own clock:

* the ``"shared"`` part, a :class:`~bandit_core.forgetting.DiscountedArmState` over
  ``z``: ``A_0 = lambda*I + sum w z z^T``, ``A~_0`` (``w^2``), ``b_0 = sum w r z``;
* each arm's part, a :class:`HybridDiscountedArmState`: ``A_a``, ``A~_a``, ``b_a`` over
  ``x`` as a discounted arm's, and ``B_a = sum w x z^T``, ``B~_a = sum w^2 x z^T``.

Every block decays by (10.2) when its part is written (``B`` by ``g``, ``B~`` by
``g^2``), and is decayed to the time ``T`` of a read without being changed, so an arm
nobody pulled decays as the policy's clock moves on. Unlike Algorithm 2, the shared part
holds the raw sums, not the Schur complement: the complement of decayed arms is not the
decayed complement, so :func:`joint_fit` forms it at each read from every arm's part,
``O(N (d^3 + d^2 k + d k^2) + k^3)`` for ``N`` arms.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.forgetting import DiscountedArmState, clock_factors
from bandit_core.validation import all_finite


@dataclass(kw_only=True)
class HybridDiscountedArmState(DiscountedArmState):
    """One arm's blocks of the weighted hybrid ridge at its ``clock`` (see the module
    docstring): a discounted arm's ``V = A_a``, ``V_tilde = A~_a``, ``b = b_a`` over the
    context, plus ``B = sum w x z^T`` and ``B_tilde = sum w^2 x z^T`` (``d x k``)."""

    KIND: ClassVar[str] = "hybrid_discounted_arm"
    B: np.ndarray
    B_tilde: np.ndarray

    @classmethod
    def empty(cls, d: int, k: int, ridge_lambda: float) -> HybridDiscountedArmState:
        """The part before any reward: the prior ``lambda*I``, ``B = B~ = 0``."""
        prior = DiscountedArmState.prior(d, ridge_lambda)
        return cls(**vars(prior), B=np.zeros((d, k)), B_tilde=np.zeros((d, k)))

    def add_row(
        self,
        z: np.ndarray,
        x: np.ndarray,
        reward: float,
        at: float,
        log_decay: float,
        ridge_lambda: float,
    ) -> None:
        """Add the arm's observation ``([z, x], reward)`` made at clock ``at`` (as
        :meth:`DiscountedArmState.add`, with ``B`` and ``B~`` decayed alongside)."""
        g, w, _ = clock_factors(self.clock, at, log_decay)
        xz = np.multiply.outer(x, z)
        B = g * self.B + w * xz
        B_tilde = (g * g) * self.B_tilde + (w * w) * xz
        if not (all_finite(B) and all_finite(B_tilde)):
            raise InvalidInputError(
                f"x with max |x| = {np.abs(x).max()} overflows the ridge statistics"
            )
        self.add(x, reward, at, log_decay, ridge_lambda)  # refuses before any change too
        self.B, self.B_tilde = B, B_tilde


@dataclass(frozen=True)
class HybridFit:
    """The weighted hybrid ridge at one time: ``beta`` (``k``), each arm's ``theta_a``
    (``theta``, ``(N, d)``), and what the widths (10.6) need (see :func:`joint_fit`)."""

    beta: np.ndarray
    theta: np.ndarray
    S_inv: np.ndarray  # (k, k): the inverse of the Schur complement S
    A_inv: np.ndarray  # (N, d, d)
    A_inv_B: np.ndarray  # (N, d, k)
    A_tilde: np.ndarray  # (N, d, d), decayed
    B_tilde: np.ndarray  # (N, d, k), decayed
    C: np.ndarray  # (k, k): A~_0 + sum_a M_a

    def terms(
        self, index: np.ndarray, Z: np.ndarray, X: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(phi^T theta, sqrt(phi^T V^-1 V~ V^-1 phi))`` (10.1) of each candidate row
        ``phi = [Z[i], X[i] in the block of arm index[i]]``, by (10.6); the arm's own
        ``u_0^T M_a u_0`` is ``v^T A~_a v - 2 t . v`` with ``v = A_a^-1 B_a u_0``,
        ``t = B~_a u_0``."""
        A_inv_B, A_tilde = self.A_inv_B[index], self.A_tilde[index]
        mean = Z @ self.beta + np.einsum("ij,ij->i", X, self.theta[index])
        u0 = (Z - np.einsum("idk,id->ik", A_inv_B, X)) @ self.S_inv
        v = np.einsum("idk,ik->id", A_inv_B, u0)
        t = np.einsum("idk,ik->id", self.B_tilde[index], u0)
        ua = np.einsum("ide,ie->id", self.A_inv[index], X) - v
        quad = np.einsum("ij,ij->i", u0 @ self.C, u0)
        quad -= np.einsum("id,ide,ie->i", v, A_tilde, v) - 2.0 * np.einsum("id,id->i", t, v)
        quad += 2.0 * np.einsum("id,id->i", ua, t)
        quad += np.einsum("id,ide,ie->i", ua, A_tilde, ua)
        return mean, np.sqrt(np.maximum(quad, 0.0, out=quad), out=quad)


def joint_fit(
    shared: DiscountedArmState,
    arms: Sequence[HybridDiscountedArmState],
    at: float,
    log_decay: float,
    ridge_lambda: float,
) -> HybridFit:
    """The weighted hybrid ridge of ``shared`` and ``arms`` with every block decayed
    (10.2) to the time ``at`` (:func:`fit_blocks`); the parts do not change. With
    ``S = A_0 - sum_a B_a^T A_a^-1 B_a``, ``beta = S^-1 (b_0 - sum_a B_a^T A_a^-1 b_a)``
    and ``theta_a = A_a^-1 (b_a - B_a beta)`` (10.5)."""
    k = len(shared.b)
    g0 = math.exp(log_decay * max(at - shared.clock, 0.0))
    A0 = g0 * shared.V + (1.0 - g0) * ridge_lambda * np.eye(k)
    A0_tilde = g0 * g0 * shared.V_tilde + (1.0 - g0 * g0) * ridge_lambda * np.eye(k)
    b0 = g0 * shared.b
    d = len(arms[0].b) if arms else 0
    clocks = np.array([a.clock for a in arms])
    g = np.exp(log_decay * np.maximum(at - clocks, 0.0))[:, None, None]
    eye = np.eye(d)
    A = g * _stacked(arms, "V", (d, d)) + (1.0 - g) * ridge_lambda * eye
    A_tilde = g * g * _stacked(arms, "V_tilde", (d, d)) + (1.0 - g * g) * ridge_lambda * eye
    b = g[:, :, 0] * _stacked(arms, "b", (d,))
    B = g * _stacked(arms, "B", (d, k))
    B_tilde = g * g * _stacked(arms, "B_tilde", (d, k))
    return fit_blocks((A0, b0, A0_tilde), (A, b, B), (A_tilde, B_tilde))


def fit_blocks(
    shared: tuple[np.ndarray, np.ndarray, np.ndarray],
    arms: tuple[np.ndarray, np.ndarray, np.ndarray],
    tilde: tuple[np.ndarray, np.ndarray],
) -> HybridFit:
    """The hybrid ridge (10.5) of the blocks ``shared = (A_0, b_0, A~_0)`` (``k x k``,
    ``k``, ``k x k``), ``arms = (A, b, B)`` stacked over the ``N`` arms (``(N, d, d)``,
    ``(N, d)``, ``(N, d, k)``) and their ``tilde = (A~, B~)``, the blocks of ``V~``
    (the blocks themselves for an unweighted ridge, whose width is then
    ``sqrt(phi^T V^-1 phi)``). The sums over arms are one product of the arms' blocks
    stacked as ``(N d, k)`` matrices."""
    (A0, b0, A0_tilde), (A, b, B), (A_tilde, B_tilde) = shared, arms, tilde
    k = len(b0)
    A_inv = np.linalg.inv(A)
    A_inv_B = A_inv @ B
    A_inv_b = np.einsum("nde,ne->nd", A_inv, b)
    B_rows, A_inv_B_rows = B.reshape(-1, k), A_inv_B.reshape(-1, k)
    S_inv = np.linalg.inv(A0 - B_rows.T @ A_inv_B_rows)
    beta = S_inv @ (b0 - B_rows.T @ A_inv_b.reshape(-1))
    theta = A_inv_b - A_inv_B @ beta
    cross = B_tilde.reshape(-1, k).T @ A_inv_B_rows
    C = A0_tilde + A_inv_B_rows.T @ (A_tilde @ A_inv_B).reshape(-1, k) - cross - cross.T
    return HybridFit(beta, theta, S_inv, A_inv, A_inv_B, A_tilde, B_tilde, C)


def _stacked(
    arms: Sequence[HybridDiscountedArmState], field: str, shape: tuple[int, ...]
) -> np.ndarray:
    """``field`` of every arm stacked, shape ``(N, *shape)`` (``N`` may be 0)."""
    return np.array([getattr(a, field) for a in arms], dtype=np.float64).reshape(-1, *shape)
