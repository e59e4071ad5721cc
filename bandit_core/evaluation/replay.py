"""The replay method of Li et al. (2011) and its rejection-sampling form.

Li, Chu, Langford, Wang, "Unbiased offline evaluation of contextual-bandit-based news
article recommendation algorithms", WSDM 2011 (docs/algorithms.md section 6).

**Strict protocol.** Events are streamed in time order. For each event the evaluated
policy selects among the logged candidates; if it picks the logged arm the event is
*matched*: its reward counts and the policy learns from it (``update``). Otherwise the
event is skipped and the policy learns nothing from it. The run stops after
``n_rounds`` matched events or at the end of the log. On a log of a uniformly random
policy over K arms, the matched events are an unbiased sample of the policy's own
interaction (Li et al. 2011, Theorem 1).

**Rejection sampling** (:func:`rejection_replay`) extends this to logs with known,
non-uniform propensities: a matched event is also accepted only with probability
``p_min / pscore``, ``p_min`` the smallest logged propensity, so the accepted events are
distributed as if the log were uniform. On a uniform log every ratio is 1 and the result
equals :func:`replay`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import numpy as np

from bandit_core.clock import Clocked, clock_at
from bandit_core.datasets import LoggedEvent, LogSource
from bandit_core.errors import InvalidInputError
from bandit_core.evaluation.summary import Spread
from bandit_core.policy import Policy
from bandit_core.validation import check_int, check_real

Progress = Callable[[int], None]


@dataclass(frozen=True)
class ReplayResult:
    """One replay run.

    ``cumulative_reward`` sums the rewards of the matched (and accepted) events,
    ``mean_reward`` is that over ``matched`` (0 when nothing matched), ``events_seen``
    counts the log events read, ``seconds`` the wall time of the run, ``cpu_seconds`` the
    CPU time of this process during it (the compute, unaffected by other processes on
    a shared machine), and ``curve`` (shape ``(matched,)``) the cumulative reward after
    each matched event.
    """

    cumulative_reward: float
    mean_reward: float
    matched: int
    events_seen: int
    seconds: float
    cpu_seconds: float
    curve: np.ndarray

    def to_dict(self) -> dict[str, float | int]:
        """The scalar figures as a JSON-able dict (no curve)."""
        return {
            "cumulative_reward": self.cumulative_reward,
            "mean_reward": self.mean_reward,
            "matched": self.matched,
            "events_seen": self.events_seen,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
        }


def _check_rounds(n_rounds: int | None) -> None:
    check_int(n_rounds, "n_rounds", low=1, allow_none=True, error=InvalidInputError)


_READ_AHEAD = 64  # events buffered from the source and stacked for select_until


class _Lookahead:
    """Events read ahead from a source; an error the source raises is kept and raised
    only when the events before it are used up, where the one-by-one loop would meet it."""

    def __init__(self, source: LogSource) -> None:
        self._it = iter(source)
        self._buf: deque[LoggedEvent] = deque()
        self._error: BaseException | None = None
        self._done = False

    def _fill(self, n: int) -> None:
        while len(self._buf) < n and not self._done:
            try:
                self._buf.append(next(self._it))
            except StopIteration:
                self._done = True
            except Exception as exc:  # noqa: BLE001 - re-raised in order by take_run/touch
                self._error, self._done = exc, True

    def _check(self) -> bool:
        """True if an event is available; raises the source's error if that is next."""
        self._fill(1)
        if self._buf:
            return True
        if self._error is not None:
            raise self._error
        return False

    def touch(self) -> None:
        """Read the next event as the one-by-one loop would before stopping."""
        self._check()

    def take_run(self, n: int, timed: bool = False) -> list[LoggedEvent]:
        """Up to ``n`` next events sharing ``arm_ids``, ``user_id`` and the shape of ``X``
        (an event whose ``X`` is not an array comes alone; [] at the end); ``timed``:
        and their ``time``."""
        if not self._check():
            return []
        self._fill(n)
        buf = self._buf
        first = buf.popleft()
        run = [first]
        shape = first.X.shape if isinstance(first.X, np.ndarray) else None
        while (
            shape is not None
            and buf
            and len(run) < n
            and buf[0].arm_ids == first.arm_ids
            and buf[0].user_id == first.user_id
            and isinstance(buf[0].X, np.ndarray)
            and buf[0].X.shape == shape
            and (not timed or buf[0].time == first.time)
        ):
            run.append(buf.popleft())
        return run


def _at_time(policy: Policy, at: float | None) -> AbstractContextManager[None]:
    """The block in which ``policy`` runs at the time ``at`` (None: its own clocks)."""
    return nullcontext() if at is None else clock_at(policy, at)


@dataclass
class ReplayRun:
    """A replay in progress (strict protocol, module docstring), fed a log's consecutive
    parts in time order (:meth:`feed`) and picklable between them: a run fed the parts
    of a log one by one ends in the state, and with the :meth:`result`, of a run fed
    the whole log at once. ``rejection`` is ``(rng, p_min)`` for
    :func:`rejection_replay`, None for :func:`replay`."""

    policy: Policy
    n_rounds: int | None = None
    rejection: tuple[np.random.Generator, float] | None = None
    rewards: list[float] = field(default_factory=list)
    seen: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def finished(self) -> bool:
        """Whether ``n_rounds`` matched events have been reached."""
        return self.n_rounds is not None and len(self.rewards) >= self.n_rounds

    def _accept(self, event: LoggedEvent) -> bool:
        if self.rejection is None:
            return True
        rng, p_min = self.rejection
        if event.pscore is None:
            raise InvalidInputError(
                "rejection_replay needs a pscore on every event, but one has none"
            )
        if event.pscore < p_min:
            raise InvalidInputError(f"pscore {event.pscore} is below min_pscore {p_min}")
        return bool(rng.random() < p_min / event.pscore)

    def feed(self, source: LogSource, progress: Progress | None = None) -> None:
        """Replay the events of ``source`` (the log's next part). Events with the same
        candidates go to :meth:`Policy.select_until` together, up to ``_READ_AHEAD`` of
        them, and after a match the rest of them again: the policy learns only at a
        match, so every result (matches, ``events_seen``, the acceptance draws, the
        final state) is that of calling ``select`` on each event in turn."""
        _check_rounds(self.n_rounds)
        start, start_cpu = time.perf_counter(), time.process_time()
        policy, rewards = self.policy, self.rewards
        events = _Lookahead(source)
        # a policy with a wall clock runs each event at its decision's time (section 10.3)
        timed = isinstance(policy, Clocked) and policy.uses_wall_clock()
        while True:
            if self.finished:
                events.touch()
                break
            run = events.take_run(_READ_AHEAD, timed)
            if not run:
                break
            at = run[0].time if timed else None  # the run's decision time
            X = np.stack([e.X for e in run]) if len(run) > 1 else [run[0].X]
            targets = np.array([e.action for e in run], dtype=np.intp)
            pos = 0
            while pos < len(run) and not self.finished:
                with _at_time(policy, at):
                    i = policy.select_until(
                        run[0].arm_ids, X[pos:], targets[pos:], user_id=run[0].user_id
                    )
                if i == len(run) - pos:
                    self.seen, pos = self.seen + i, len(run)
                    continue
                self.seen, pos = self.seen + i + 1, pos + i + 1
                event = run[pos - 1]
                if not self._accept(event):
                    continue
                with _at_time(policy, at):
                    policy.update(
                        event.chosen, event.X[event.action], event.reward, user_id=event.user_id
                    )
                rewards.append(event.reward)
                if progress is not None:
                    progress(1)
        self.seconds += time.perf_counter() - start
        self.cpu_seconds += time.process_time() - start_cpu

    def result(self) -> ReplayResult:
        """The run's :class:`ReplayResult` so far."""
        curve = np.cumsum(np.asarray(self.rewards, dtype=np.float64))
        total = float(curve[-1]) if curve.size else 0.0
        return ReplayResult(
            cumulative_reward=total,
            mean_reward=total / curve.size if curve.size else 0.0,
            matched=int(curve.size),
            events_seen=self.seen,
            seconds=self.seconds,
            cpu_seconds=self.cpu_seconds,
            curve=curve,
        )


def smallest_pscore(source: LogSource) -> float | None:
    """The smallest logged propensity of ``source`` (rejection sampling's ``p_min``),
    None when it holds no event; an event without ``pscore`` is an
    :class:`InvalidInputError`. The minimum of a log's parts is the log's."""
    scores = [e.pscore for e in source]
    if any(p is None for p in scores):
        raise InvalidInputError(
            "rejection_replay needs a pscore on every event, but some have none"
        )
    return min((p for p in scores if p is not None), default=None)


def replay(
    policy: Policy,
    source: LogSource,
    n_rounds: int | None = None,
    *,
    progress: Progress | None = None,
) -> ReplayResult:
    """Replay ``policy`` on a uniformly random log (strict protocol, module docstring).

    ``progress``, if given, is called with 1 after each matched event.

    >>> import numpy as np, bandit_core
    >>> from bandit_core.datasets import BanditLog
    >>> log = BanditLog(("a", "b"), np.ones((4, 2, 1)), np.array([0, 1, 0, 1]), np.array([1.0, 0, 1, 0]))
    >>> r = replay(bandit_core.make_policy("linucb", d=1, alpha=0.0), log)
    >>> r.events_seen, r.matched == r.curve.size
    (4, True)
    """
    run = ReplayRun(policy, n_rounds)
    run.feed(source, progress)
    return run.result()


def rejection_replay(
    policy: Policy,
    source: LogSource,
    rng: np.random.Generator,
    n_rounds: int | None = None,
    *,
    min_pscore: float | None = None,
    progress: Progress | None = None,
) -> ReplayResult:
    """Replay with rejection sampling for a log with known propensities (module docstring).

    Every event needs ``pscore``. ``min_pscore`` is ``p_min``; when None it is read from
    the log in a first pass (so ``source`` must then be iterable twice). ``rng`` draws
    the acceptances.
    """
    if min_pscore is None:
        min_pscore = smallest_pscore(source)
        if min_pscore is None:
            raise InvalidInputError("source must hold at least one event, but got none")
    p_min = check_real(
        min_pscore, "min_pscore", low=0.0, high=1.0, low_open=True, error=InvalidInputError
    )
    run = ReplayRun(policy, n_rounds, (rng, p_min))
    run.feed(source, progress)
    return run.result()


@dataclass(frozen=True)
class SeedReplays:
    """Replays of one policy configuration over several seeds."""

    seeds: tuple[int, ...]
    results: tuple[ReplayResult, ...]

    @property
    def cumulative_reward(self) -> Spread:
        """Mean and spread of the cumulative reward over seeds."""
        return Spread.of([r.cumulative_reward for r in self.results])

    @property
    def cpu_seconds(self) -> Spread:
        """Mean and spread of the CPU time of a run over seeds."""
        return Spread.of([r.cpu_seconds for r in self.results])

    @property
    def mean_reward(self) -> Spread:
        """Mean and spread of the mean reward over seeds."""
        return Spread.of([r.mean_reward for r in self.results])

    @property
    def seconds(self) -> Spread:
        """Mean and spread of the run time over seeds."""
        return Spread.of([r.seconds for r in self.results])

    def curves(self) -> np.ndarray:
        """Cumulative-reward curves, shape ``(seeds, min matched)`` (cut to the shortest)."""
        n = min(r.curve.size for r in self.results)
        return np.stack([r.curve[:n] for r in self.results])

    def mean_curve(self) -> np.ndarray:
        """Mean cumulative-reward curve over seeds, shape ``(min matched,)``."""
        result: np.ndarray = self.curves().mean(axis=0)
        return result


def replay_seeds(
    make_policy: Callable[[int], Policy],
    source: LogSource,
    seeds: Sequence[int],
    n_rounds: int | None = None,
    *,
    rejection: bool = False,
    progress: Progress | None = None,
) -> SeedReplays:
    """Replay a fresh ``make_policy(seed)`` for each seed (``source`` is read once per seed).

    With ``rejection=True`` each seed runs :func:`rejection_replay` with the RNG
    ``numpy.random.default_rng([seed, 1])``, a stream distinct from the policy's.
    """
    if not seeds:
        raise InvalidInputError("seeds must hold at least one seed, but got none")
    results = []
    for seed in seeds:
        policy = make_policy(seed)
        if rejection:
            rng = np.random.default_rng([seed, 1])
            results.append(rejection_replay(policy, source, rng, n_rounds, progress=progress))
        else:
            results.append(replay(policy, source, n_rounds, progress=progress))
    return SeedReplays(seeds=tuple(seeds), results=tuple(results))
