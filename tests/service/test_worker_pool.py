"""``WorkerPool``: jobs run in spawned processes kept between submits, and a worker that
died (which breaks a process pool) is replaced at the next submit."""

from __future__ import annotations

import os
from concurrent.futures.process import BrokenProcessPool

from service.usecases.worker_pool import WorkerPool


def test_a_worker_is_kept_and_one_that_died_is_replaced_at_the_next_submit() -> None:
    pool = WorkerPool(1)
    try:
        first = pool.submit(os.getpid).result(timeout=60)
        assert first != os.getpid()
        assert pool.submit(os.getpid).result(timeout=60) == first  # kept for the next
        dying = pool.submit(os._exit, 3)
        assert isinstance(dying.exception(timeout=60), BrokenProcessPool)
        replaced = pool.submit(os.getpid).result(timeout=60)
        assert replaced not in (first, os.getpid())
    finally:
        pool.shutdown()
    assert pool.submit(os.getpid).result(timeout=60) not in (first, replaced)  # after shutdown
    pool.shutdown()
