"""Off-policy estimates as sums that add across partitions of a log (docs/offline.md,
"Estimates over partitions"): IPS, SNIPS and DR of a fixed target (docs/algorithms.md
section 6), their bootstrap intervals and the support diagnostic. Each partition of the
evaluated events is reduced on its own to an :class:`EstimateSums`; adding the partitions'
sums, in any order, gives the sums of the single pass over all events.

* Every scalar sum is an :class:`ExactSum`: the sum held exactly as non-overlapping float
  partials (Shewchuk 1997, the algorithm of ``math.fsum``), so the order in which events
  and partitions are added never changes a bit of IPS, SNIPS, the support or the logged
  mean reward, nor of any resample's sums.
* The bootstrap is Poisson (Hanley and MacGibbon 2006): resample ``b`` gives event ``i``
  the weight ``c_bi ~ Poisson(1)``, drawn from a generator keyed by ``(key, i //
  BOOTSTRAP_BLOCK)``, ``i`` the event's index among the evaluated events, so a partition
  draws its own events' weights. Resample ``b``'s estimate is ``sum_i c_bi num_i / sum_i
  c_bi den_i`` and the interval the percentile one of :func:`~bandit_core.evaluation.estimate`.
* DR's cross-fitted ridge reward model needs, per time-ordered fold and arm, ``sum x x^T``
  and ``sum r x`` over the served rows (:class:`RidgeSums`), added over the partitions
  before any DR term is computed. These are matrix sums in floating point: their last
  bits, and so DR's (about 1e-16 relative), depend on where the partitions cut.

>>> ExactSum.of([1e16, 1.0, -1e16]).value, (ExactSum.of([0.1]) + ExactSum.of([0.2])).value
(1.0, 0.30000000000000004)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from bandit_core.errors import InvalidInputError
from bandit_core.evaluation.estimators import EstimateResult, SupportDiagnostic, UnsupportedLogError

BOOTSTRAP_BLOCK = 4096
"""Events per bootstrap generator: event ``i``'s weights come from generator ``i // BOOTSTRAP_BLOCK``."""


def _partials(values: list[float]) -> tuple[float, ...]:
    """Floats whose exact sum is the exact sum of ``values``, largest first: each one the
    correctly rounded remainder of what the ones before it leave (``math.fsum``)."""
    partials: list[float] = []
    while (rest := math.fsum(values + [-p for p in partials])) != 0.0:
        partials.append(rest)
    return tuple(partials)


@dataclass(frozen=True)
class ExactSum:
    """A sum of floats held exactly; :attr:`value` is it correctly rounded."""

    partials: tuple[float, ...] = ()

    @classmethod
    def of(cls, values: Iterable[float] | np.ndarray) -> ExactSum:
        """The exact sum of ``values`` (finite floats)."""
        return cls(_partials(np.asarray(values, dtype=np.float64).ravel().tolist()))

    def __add__(self, other: ExactSum) -> ExactSum:
        return ExactSum(_partials([*self.partials, *other.partials]))

    @property
    def value(self) -> float:
        """The sum, correctly rounded to a float."""
        return math.fsum(self.partials)


def bootstrap_weights(key: int, first_index: int, count: int, n_bootstrap: int) -> np.ndarray:
    """Poisson(1) weights (n_bootstrap, count) of the events ``first_index ..
    first_index + count - 1`` (module docstring); the same events get the same weights
    whatever slice asks for them."""
    out = np.empty((n_bootstrap, count))
    end = first_index + count
    for block in range(first_index // BOOTSTRAP_BLOCK, (end - 1) // BOOTSTRAP_BLOCK + 1):
        start = block * BOOTSTRAP_BLOCK
        draws = np.random.default_rng([key, block]).poisson(1.0, (n_bootstrap, BOOTSTRAP_BLOCK))
        lo, hi = max(first_index, start), min(end, start + BOOTSTRAP_BLOCK)
        out[:, lo - first_index : hi - first_index] = draws[:, lo - start : hi - start]
    return out


def _resampled(weights: np.ndarray, terms: np.ndarray) -> tuple[ExactSum, ...]:
    return tuple(ExactSum.of(row * terms) for row in weights)


def _add_each(a: tuple[ExactSum, ...], b: tuple[ExactSum, ...]) -> tuple[ExactSum, ...]:
    if len(a) != len(b):
        raise InvalidInputError(
            f"sums with {len(a)} and {len(b)} bootstrap resamples cannot be added"
        )
    return tuple(x + y for x, y in zip(a, b, strict=True))


@dataclass(frozen=True)
class EstimateSums:
    """What IPS, SNIPS, DR, their Poisson bootstrap and the support diagnostic need from a
    set of evaluated events (module docstring). With ``w_i = pi(a_i | x_i) / pscore_i``:
    ``weighted_reward = sum w r`` (IPS and SNIPS numerator), ``weight = sum w`` (SNIPS
    denominator), ``doubly_robust`` the sum of DR's per-event terms; ``resampled_*`` the
    same weighted by each resample's Poisson counts, ``resampled_n`` the counts' sums."""

    n: int
    deterministic_events: int
    unsupported: ExactSum
    reward: ExactSum
    weighted_reward: ExactSum
    weight: ExactSum
    doubly_robust: ExactSum
    resampled_n: tuple[int, ...]
    resampled_weighted_reward: tuple[ExactSum, ...]
    resampled_weight: tuple[ExactSum, ...]
    resampled_doubly_robust: tuple[ExactSum, ...]

    @classmethod
    def of(
        cls,
        reward: np.ndarray,
        weight: np.ndarray,
        doubly_robust: np.ndarray,
        deterministic: np.ndarray,
        unsupported: np.ndarray,
        resample_weights: np.ndarray,
    ) -> EstimateSums:
        """The sums of per-event arrays (n,) and the events' Poisson weights (B, n)."""
        weighted_reward = weight * reward
        return cls(
            n=int(reward.size),
            deterministic_events=int(np.count_nonzero(deterministic)),
            unsupported=ExactSum.of(unsupported),
            reward=ExactSum.of(reward),
            weighted_reward=ExactSum.of(weighted_reward),
            weight=ExactSum.of(weight),
            doubly_robust=ExactSum.of(doubly_robust),
            resampled_n=tuple(int(c) for c in resample_weights.sum(axis=1)),
            resampled_weighted_reward=_resampled(resample_weights, weighted_reward),
            resampled_weight=_resampled(resample_weights, weight),
            resampled_doubly_robust=_resampled(resample_weights, doubly_robust),
        )

    def __add__(self, other: EstimateSums) -> EstimateSums:
        return EstimateSums(
            n=self.n + other.n,
            deterministic_events=self.deterministic_events + other.deterministic_events,
            unsupported=self.unsupported + other.unsupported,
            reward=self.reward + other.reward,
            weighted_reward=self.weighted_reward + other.weighted_reward,
            weight=self.weight + other.weight,
            doubly_robust=self.doubly_robust + other.doubly_robust,
            resampled_n=tuple(
                a + b for a, b in zip(self.resampled_n, other.resampled_n, strict=False)
            ),
            resampled_weighted_reward=_add_each(
                self.resampled_weighted_reward, other.resampled_weighted_reward
            ),
            resampled_weight=_add_each(self.resampled_weight, other.resampled_weight),
            resampled_doubly_robust=_add_each(
                self.resampled_doubly_robust, other.resampled_doubly_robust
            ),
        )

    def support(self) -> SupportDiagnostic:
        """The log's support of the target over these events
        (:func:`bandit_core.evaluation.support`)."""
        return SupportDiagnostic(
            n=self.n,
            deterministic_events=self.deterministic_events,
            unsupported_mass=self.unsupported.value / self.n,
        )

    def results(
        self, confidence: float = 0.95, *, require_support: bool = False
    ) -> dict[str, EstimateResult]:
        """IPS, SNIPS and DR with their percentile bootstrap intervals at ``confidence``;
        with ``require_support``, :class:`UnsupportedLogError` on a log that does not
        support the target."""
        if self.n == 0:
            raise InvalidInputError("no evaluated events: estimates need at least one")
        diagnostic = self.support()
        if require_support and not diagnostic.supported:
            raise UnsupportedLogError(diagnostic)
        n_resampled = tuple(ExactSum.of([float(c)]) for c in self.resampled_n)
        ratios: Mapping[str, tuple[ExactSum, ExactSum, tuple[ExactSum, ...], tuple[ExactSum, ...]]]
        ratios = {
            "ips": (
                self.weighted_reward,
                ExactSum.of([float(self.n)]),
                self.resampled_weighted_reward,
                n_resampled,
            ),
            "snips": (
                self.weighted_reward,
                self.weight,
                self.resampled_weighted_reward,
                self.resampled_weight,
            ),
            "dr": (
                self.doubly_robust,
                ExactSum.of([float(self.n)]),
                self.resampled_doubly_robust,
                n_resampled,
            ),
        }
        out = {}
        for name, (num, den, num_b, den_b) in ratios.items():
            if den.value <= 0:
                raise InvalidInputError(
                    f"{name} is undefined: the target policy gives weight 0 to every logged action"
                )
            nums = np.array([s.value for s in num_b])
            dens = np.array([s.value for s in den_b])
            boot = np.divide(nums, dens, out=np.full(nums.size, np.nan), where=dens > 0)
            lo, hi = np.nanquantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
            out[name] = EstimateResult(
                estimator=name,
                value=num.value / den.value,
                ci_low=float(lo),
                ci_high=float(hi),
                confidence=float(confidence),
                n_bootstrap=len(num_b),
                n=self.n,
                support=diagnostic,
            )
        return out


@dataclass(frozen=True)
class RidgeSums:
    """DR's reward-model statistics: per ``(fold, arm)``, ``gram = sum x x^T`` (d, d) and
    ``moment = sum r x`` (d,) over the served rows of that fold's events."""

    gram: Mapping[tuple[int, str], np.ndarray]
    moment: Mapping[tuple[int, str], np.ndarray]

    def __add__(self, other: RidgeSums) -> RidgeSums:
        gram, moment = dict(self.gram), dict(self.moment)
        for key, value in other.gram.items():
            gram[key] = gram[key] + value if key in gram else value
            moment[key] = moment[key] + other.moment[key] if key in moment else other.moment[key]
        return RidgeSums(gram, moment)

    def fits(self, folds: int, ridge_lambda: float) -> list[dict[str, np.ndarray]]:
        """Per fold ``f``, each arm's ``theta = (lambda I + sum_{g != f} gram) ^-1 sum_{g != f}
        moment``: the ridge fit on the other folds (an arm they never served has none)."""
        out: list[dict[str, np.ndarray]] = []
        for f in range(folds):
            others = sorted(key for key in self.gram if key[0] != f)
            fits: dict[str, np.ndarray] = {}
            for arm in sorted({a for _, a in others}):
                keys = [key for key in others if key[1] == arm]
                d = self.moment[keys[0]].size
                gram = ridge_lambda * np.eye(d) + sum(self.gram[key] for key in keys)
                fits[arm] = np.linalg.solve(gram, sum(self.moment[key] for key in keys))
            out.append(fits)
        return out
