"""Off-policy estimators of a fixed target policy's value from logged propensities.

Inputs (shapes as in Open Bandit Pipeline): ``reward`` (n,), ``action`` (n,) int in
``[0, K)``, ``pscore`` (n,) the logging policy's probability of the logged action,
``action_dist`` (n, K) the target policy's action probabilities per event, and for DR
``q_hat`` (n, K) a reward model's estimates. With ``w_i = action_dist[i, action_i] /
pscore_i``:

* IPS (Horvitz-Thompson): ``V = (1/n) sum_i w_i r_i`` -- unbiased when every action the
  target may take has ``pscore > 0``;
* SNIPS (self-normalised): ``V = sum_i w_i r_i / sum_i w_i`` -- biased but consistent,
  bounded by the reward range;
* DR (Dudik et al. 2011): ``V = (1/n) sum_i [sum_a action_dist[i, a] q_hat[i, a]
  + w_i (r_i - q_hat[i, action_i])]`` -- unbiased if either the propensities or
  ``q_hat`` are correct.

Each estimator is a ratio ``sum(num) / sum(den)`` of per-event terms, which
:func:`estimate` resamples for percentile bootstrap confidence intervals.

All three need *support*: every action the target may take must have had a logging
probability > 0. A log only shows the probability of the logged action, but an event with
``pscore = 1`` was logged deterministically, so the target's probability on every other
action of that event has no support: IPS counts it as reward 0, SNIPS drops it and DR
falls back on ``q_hat`` alone, so the three disagree however many events there are (and
their bootstrap intervals stay tight). :func:`support` measures that share and
:func:`estimate` reports it on every result (:class:`SupportDiagnostic`).

>>> import numpy as np
>>> r, a, p = np.array([1.0, 0.0]), np.array([0, 1]), np.array([0.5, 0.5])
>>> pi = np.array([[1.0, 0.0], [1.0, 0.0]])
>>> ips(r, a, p, pi), snips(r, a, p, pi)
(1.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import InvalidInputError
from bandit_core.validation import check_choice, check_confidence, check_int

Terms = tuple[np.ndarray, np.ndarray]


def _check(
    reward: ArrayLike,
    action: ArrayLike,
    pscore: ArrayLike,
    action_dist: ArrayLike,
    q_hat: ArrayLike | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    r = np.asarray(reward, dtype=np.float64)
    if r.ndim != 1 or r.size == 0:
        raise InvalidInputError(f"reward must be a non-empty 1D array, but got shape {r.shape}")
    n = r.size
    a = np.asarray(action)
    if a.shape != (n,) or not np.issubdtype(a.dtype, np.integer):
        raise InvalidInputError(
            f"action must be an int array of shape ({n},), but got {a.dtype} of shape {a.shape}"
        )
    p = np.asarray(pscore, dtype=np.float64)
    if p.shape != (n,):
        raise InvalidInputError(f"pscore must have shape ({n},), but got {p.shape}")
    pi = np.asarray(action_dist, dtype=np.float64)
    if pi.ndim != 2 or pi.shape[0] != n:
        raise InvalidInputError(f"action_dist must have shape ({n}, K), but got {pi.shape}")
    k = pi.shape[1]
    if not np.isfinite(r).all():
        raise InvalidInputError("reward must be finite")
    if a.min() < 0 or a.max() >= k:
        raise InvalidInputError(
            f"action must lie in [0, {k}), but got values in [{a.min()}, {a.max()}]"
        )
    if not (np.isfinite(p).all() and (p > 0).all() and (p <= 1).all()):
        raise InvalidInputError(
            f"pscore must lie in (0, 1], but got values in [{p.min()}, {p.max()}]"
        )
    if not (
        np.isfinite(pi).all() and (pi >= 0).all() and np.allclose(pi.sum(axis=1), 1.0, atol=1e-6)
    ):
        raise InvalidInputError("action_dist must hold non-negative rows that each sum to 1")
    q = None
    if q_hat is not None:
        q = np.asarray(q_hat, dtype=np.float64)
        if q.shape != (n, k):
            raise InvalidInputError(f"q_hat must have shape ({n}, {k}), but got {q.shape}")
        if not np.isfinite(q).all():
            raise InvalidInputError("q_hat must be finite")
    return r, a.astype(np.intp), p, pi, q


def _weights(a: np.ndarray, p: np.ndarray, pi: np.ndarray) -> np.ndarray:
    result: np.ndarray = pi[np.arange(a.size), a] / p
    return result


def _ips_terms(
    r: np.ndarray, a: np.ndarray, p: np.ndarray, pi: np.ndarray, q: np.ndarray | None
) -> Terms:
    return _weights(a, p, pi) * r, np.ones_like(r)


def _snips_terms(
    r: np.ndarray, a: np.ndarray, p: np.ndarray, pi: np.ndarray, q: np.ndarray | None
) -> Terms:
    w = _weights(a, p, pi)
    return w * r, w


def _dr_terms(
    r: np.ndarray, a: np.ndarray, p: np.ndarray, pi: np.ndarray, q: np.ndarray | None
) -> Terms:
    if q is None:
        raise InvalidInputError("dr needs q_hat of shape (n, K), but got None")
    w = _weights(a, p, pi)
    direct = np.einsum("nk,nk->n", pi, q)
    return direct + w * (r - q[np.arange(a.size), a]), np.ones_like(r)


_TERMS: dict[str, Callable[..., Terms]] = {
    "ips": _ips_terms,
    "snips": _snips_terms,
    "dr": _dr_terms,
}


def estimator_terms(
    estimator: str,
    reward: ArrayLike,
    action: ArrayLike,
    pscore: ArrayLike,
    action_dist: ArrayLike,
    q_hat: ArrayLike | None = None,
) -> Terms:
    """The per-event terms ``(num, den)`` (n,) of ``estimator``, whose estimate is
    ``sum(num) / sum(den)`` (module docstring)."""
    check_choice(estimator, "estimator", sorted(_TERMS), error=InvalidInputError)
    return _TERMS[estimator](*_check(reward, action, pscore, action_dist, q_hat))


def _ratio(num: np.ndarray, den: np.ndarray) -> float:
    total = den.sum()
    if total <= 0:
        raise InvalidInputError(
            "snips is undefined: the target policy gives weight 0 to every logged action"
        )
    return float(num.sum() / total)


def ips(reward: ArrayLike, action: ArrayLike, pscore: ArrayLike, action_dist: ArrayLike) -> float:
    """Inverse propensity scoring estimate of the target policy's value (module docstring)."""
    return _ratio(*_ips_terms(*_check(reward, action, pscore, action_dist, None)))


def snips(reward: ArrayLike, action: ArrayLike, pscore: ArrayLike, action_dist: ArrayLike) -> float:
    """Self-normalised IPS estimate: ``sum w r / sum w`` (module docstring)."""
    return _ratio(*_snips_terms(*_check(reward, action, pscore, action_dist, None)))


def dr(
    reward: ArrayLike,
    action: ArrayLike,
    pscore: ArrayLike,
    action_dist: ArrayLike,
    q_hat: ArrayLike,
) -> float:
    """Doubly robust estimate (Dudik et al. 2011; module docstring)."""
    return _ratio(*_dr_terms(*_check(reward, action, pscore, action_dist, q_hat)))


@dataclass(frozen=True)
class SupportDiagnostic:
    """How much of the target policy the log cannot see (module docstring, "support").

    ``deterministic_events``: events logged with ``pscore = 1`` (every other candidate had
    logging probability 0); ``unsupported_mass``: the target's probability on actions the
    logging policy could not take, averaged over the ``n`` events (a lower bound: at an
    event with ``pscore < 1`` the log does not say which other actions had probability 0).
    The estimates are biased unless it is 0 (:attr:`supported`).
    """

    n: int
    deterministic_events: int
    unsupported_mass: float

    @property
    def supported(self) -> bool:
        """True when no target probability is known to lack support."""
        return self.unsupported_mass == 0.0

    def message(self) -> str:
        """One sentence saying what is missing and how to log with support."""
        if self.supported:
            return f"the log supports the target on all {self.n} events"
        return (
            f"the log does not support the target policy: {self.deterministic_events} of {self.n} "
            f"events were logged deterministically (propensity 1), and {self.unsupported_mass:.1%} "
            "of the target's choices are arms the logging policy served with probability 0 there; "
            "IPS, SNIPS and DR are biased in different directions and their intervals do not "
            "cover the true value. Log with exploration (epsilon > 0) to evaluate other policies"
        )

    def to_dict(self) -> dict[str, float | int | bool]:
        """JSON-able dict of the fields and :attr:`supported`."""
        return {**self.__dict__, "supported": self.supported}


class UnsupportedLogError(InvalidInputError):
    """Raised instead of estimates when they are asked only for a log that supports the
    target; ``support`` says what is missing."""

    def __init__(self, support: SupportDiagnostic) -> None:
        super().__init__(support.message())
        self.support = support


def support(action: ArrayLike, pscore: ArrayLike, action_dist: ArrayLike) -> SupportDiagnostic:
    """The support of the target ``action_dist`` in a log (:class:`SupportDiagnostic`):
    ``unsupported_mass = (1/n) sum_{i: pscore_i = 1} (1 - action_dist[i, action_i])``.

    >>> support([0, 1], [1.0, 0.5], [[0.5, 0.5], [1.0, 0.0]]).unsupported_mass
    0.25
    """
    deterministic, unsupported = unsupported_terms(action, pscore, action_dist)
    return SupportDiagnostic(
        n=int(deterministic.size),
        deterministic_events=int(deterministic.sum()),
        unsupported_mass=float(unsupported.mean()),
    )


def unsupported_terms(
    action: ArrayLike, pscore: ArrayLike, action_dist: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """Per event (n,): whether it was logged deterministically (``pscore = 1``), and the
    target's probability on the actions the logging policy could not take there,
    ``1 - action_dist[i, action_i]`` at such an event, else 0 (:func:`support`)."""
    ones = np.zeros(np.shape(pscore))
    _, a, p, pi, _ = _check(ones, action, pscore, action_dist, None)
    deterministic = np.isclose(p, 1.0, rtol=0.0, atol=1e-12)
    unsupported = np.where(deterministic, 1.0 - pi[np.arange(a.size), a], 0.0)
    return deterministic, np.clip(unsupported, 0.0, 1.0)


@dataclass(frozen=True)
class EstimateResult:
    """An estimate with its percentile bootstrap interval and the log's support.

    ``value`` is the estimate on the full sample; ``ci_low``/``ci_high`` bound the
    central ``confidence`` share of ``n_bootstrap`` resampled estimates; ``n`` events;
    ``support``: whether the log supports the target (the estimate is meaningless if not).
    """

    estimator: str
    value: float
    ci_low: float
    ci_high: float
    confidence: float
    n_bootstrap: int
    n: int
    support: SupportDiagnostic

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the fields (``support`` as a nested dict)."""
        return {**self.__dict__, "support": self.support.to_dict()}


def estimate(
    estimator: str,
    reward: ArrayLike,
    action: ArrayLike,
    pscore: ArrayLike,
    action_dist: ArrayLike,
    q_hat: ArrayLike | None = None,
    *,
    rng: np.random.Generator,
    n_bootstrap: int = 1000,
    confidence: float = 0.95,
) -> EstimateResult:
    """``estimator`` (``"ips"``, ``"snips"`` or ``"dr"``) with a bootstrap interval.

    Resamples the n events with replacement ``n_bootstrap`` times (draws from ``rng``),
    recomputes the estimate each time and takes the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles.

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> r = rng.random(200); a = rng.integers(0, 2, 200); p = np.full(200, 0.5)
    >>> res = estimate("ips", r, a, p, np.full((200, 2), 0.5), rng=rng, n_bootstrap=200)
    >>> res.ci_low <= res.value <= res.ci_high
    True
    """
    check_choice(estimator, "estimator", sorted(_TERMS), error=InvalidInputError)
    n_bootstrap = check_int(n_bootstrap, "n_bootstrap", low=1, error=InvalidInputError)
    confidence = check_confidence(confidence)
    checked = _check(reward, action, pscore, action_dist, q_hat)
    num, den = _TERMS[estimator](*checked)
    n = num.size
    boot = np.empty(n_bootstrap)
    # Resample counts in chunks so memory stays about 8e6 floats whatever n is.
    chunk = max(1, 8_000_000 // n)
    for start in range(0, n_bootstrap, chunk):
        b = min(chunk, n_bootstrap - start)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=b).astype(np.float64)
        d = counts @ den
        boot[start : start + b] = np.divide(counts @ num, d, out=np.full(b, np.nan), where=d > 0)
    lo, hi = np.nanquantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
    return EstimateResult(
        estimator=estimator,
        value=_ratio(num, den),
        ci_low=float(lo),
        ci_high=float(hi),
        confidence=float(confidence),
        n_bootstrap=n_bootstrap,
        n=n,
        support=support(checked[1], checked[2], checked[3]),
    )
