"""The worker processes of the background jobs (offline evaluations, feature-importance
jobs): CPU-bound Python that would hold the serving process's GIL on a thread."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class WorkerPool:
    """Up to ``workers`` spawned processes (spawned: the serving process's threads and
    event loop are not forked into them), started at the first :meth:`submit` and kept
    for the next. A worker that died breaks a process pool: the next submit starts a new
    one."""

    workers: int
    _pool: ProcessPoolExecutor | None = field(default=None, init=False)

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run ``fn(*args)`` in a worker (``fn`` and ``args`` are pickled)."""
        try:
            return self._executor().submit(fn, *args)
        except BrokenProcessPool:
            self.shutdown()
            return self._executor().submit(fn, *args)

    def shutdown(self) -> None:
        """Stop the workers without waiting, cancelling what has not started."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=multiprocessing.get_context("spawn")
            )
        return self._pool
