"""Forgetting for the shared model (docs/algorithms.md section 10.3, "Shared models").

``hybrid_linucb`` with ``context_dim = 0`` scores every candidate by one ridge part over
its features ``z`` (section 8). Given one of the forgetting options, that part forgets
as the disjoint models' arms do (sections 10.1 and 10.2), with the policy's clock (every
reward of the policy on the per-update clock; the ``now`` of
:func:`bandit_core.clock.clock_at` on wall-clock time):

* ``gamma`` or ``half_life_seconds``: the part is a
  :class:`~bandit_core.forgetting.DiscountedArmState` (D-LinUCB's weighted ridge, scored
  with the ``V^-1 V~ V^-1`` width of (10.1), and as of ``now`` by (10.2a));
* ``window`` and/or ``window_seconds``: the part is a
  :class:`~bandit_core.forgetting.WindowArmState` (SW-LinUCB's ridge over the last
  ``window`` rewards, younger than ``window_seconds`` when given).

The part is exact as the disjoint ones are: after any sequence of (timed) updates it
equals the weighted (or windowed) ridge recomputed from scratch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from bandit_core.errors import ConfigError
from bandit_core.forgetting import (
    DiscountedArmState,
    DiscountedLinUCBConfig,
    SlidingWindowLinUCBConfig,
    WindowArmState,
    decayed_terms,
    eigen_rows,
)

ForgettingState: TypeAlias = DiscountedArmState | WindowArmState
FORGETTING_OPTIONS = ("gamma", "half_life_seconds", "window", "window_seconds")


@dataclass(frozen=True)
class ForgettingOptions:
    """The forgetting options of a shared model's config, checked: ``gamma`` or
    ``half_life_seconds`` (discounting), or ``window`` and/or ``window_seconds`` (a
    window), never one of each; all None: no forgetting."""

    gamma: float | None = None
    half_life_seconds: float | None = None
    window: int | None = None
    window_seconds: float | None = None

    def checked(self, ridge_lambda: float) -> ForgettingOptions:
        """The options with each value checked as the disjoint models check it (a
        :class:`ConfigError` naming the field)."""
        discount = self.gamma is not None or self.half_life_seconds is not None
        window = self.window is not None or self.window_seconds is not None
        if discount and window:
            raise ConfigError(
                "give gamma or half_life_seconds (discounting) or window / window_seconds "
                f"(a window), not both, but got {self}"
            )
        if discount:
            config = DiscountedLinUCBConfig(
                d=1,
                ridge_lambda=ridge_lambda,
                gamma=self.gamma,
                half_life_seconds=self.half_life_seconds,
            )
            return ForgettingOptions(gamma=config.gamma, half_life_seconds=config.half_life_seconds)
        if window:
            windowed = SlidingWindowLinUCBConfig(
                d=1,
                ridge_lambda=ridge_lambda,
                window=1000 if self.window is None else self.window,
                window_seconds=self.window_seconds,
            )
            return ForgettingOptions(window=windowed.window, window_seconds=windowed.window_seconds)
        return self

    @property
    def forgets(self) -> bool:
        """Whether the model forgets."""
        return any(getattr(self, name) is not None for name in FORGETTING_OPTIONS)


class SharedForgetting:
    """The steps of a forgetting shared part (see the module docstring): its prior,
    its update at a clock reading, and the mean and width of candidates as of ``now``."""

    def __init__(self, options: ForgettingOptions, ridge_lambda: float) -> None:
        self.options = options
        self.ridge_lambda = ridge_lambda
        self.discounted = options.window is None
        self.log_decay = 0.0  # ln gamma per clock unit, for a discounted part
        if options.half_life_seconds is not None:
            self.log_decay = -math.log(2.0) / options.half_life_seconds
        elif options.gamma is not None:
            self.log_decay = math.log(options.gamma)
        self.wall_clock = (
            options.half_life_seconds is not None or options.window_seconds is not None
        )
        self._eigen: tuple[DiscountedArmState, int, np.ndarray] | None = None

    @property
    def state_class(self) -> type[ForgettingState]:
        """The class of the part."""
        return DiscountedArmState if self.discounted else WindowArmState

    def prior(self, dim: int) -> ForgettingState:
        """The part before any reward (``lambda * I``, nothing in it)."""
        if self.discounted:
            return DiscountedArmState.prior(dim, self.ridge_lambda)
        assert self.options.window is not None  # checked: a window model has one
        return WindowArmState.prior(dim, self.ridge_lambda, self.options.window)

    def observation_time(self, state: ForgettingState, now: float | None) -> float:
        """The clock reading of a reward observed at ``now`` entering ``state``: on the
        per-update clock the part's next update count; on wall-clock time ``now`` (the
        part's clock without a time)."""
        if not self.wall_clock:
            return state.n + 1.0
        return state.clock if now is None else now

    def add(self, state: ForgettingState, z: np.ndarray, reward: float, now: float | None) -> None:
        """Add the reward ``reward`` of features ``z`` observed at ``now``
        (:meth:`observation_time`)."""
        at = self.observation_time(state, now)
        if isinstance(state, DiscountedArmState):
            state.add(z, reward, at, self.log_decay, self.ridge_lambda)
        else:
            state.add(z, reward, at, self.ridge_lambda, self.options.window_seconds)

    def terms(
        self, state: ForgettingState, Z: np.ndarray, now: float | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(z^T theta, width)`` of each row of ``Z`` as of ``now`` (the part's own
        clock when None or earlier); the part does not change."""
        if isinstance(state, DiscountedArmState):
            if self.wall_clock and now is not None and now > state.clock and state.n > 0:
                factors = np.full(len(Z), np.exp(self.log_decay * (now - state.clock)))
                rows = self._eigen_rows(state)
                eigen = np.broadcast_to(rows, (len(Z), *rows.shape))  # one part for every row
                return decayed_terms(eigen, Z, factors, self.ridge_lambda)
            matrix = state.width_matrix
        else:
            seconds = self.options.window_seconds
            if (
                seconds is not None
                and now is not None
                and state.size
                and state.times[: state.size].min() <= now - seconds
            ):  # rows aged out since the last update: the ridge over the live ones
                A, b = state.live_ridge(now, seconds, self.ridge_lambda)
                solved = np.linalg.solve(A, Z.T).T
                quad = np.einsum("ij,ij->i", solved, Z)
                return solved @ b, np.sqrt(np.maximum(quad, 0.0, out=quad), out=quad)
            matrix = state.A_inv
        quad = np.einsum("ij,ij->i", Z @ matrix, Z)
        return Z @ state.theta, np.sqrt(np.maximum(quad, 0.0, out=quad), out=quad)

    def _eigen_rows(self, state: DiscountedArmState) -> np.ndarray:
        """:func:`~bandit_core.forgetting.eigen_rows` of ``state``, kept until it changes."""
        kept = self._eigen
        if kept is None or kept[0] is not state or kept[1] != state.n:
            kept = self._eigen = (state, state.n, eigen_rows(state))
        return kept[2]
