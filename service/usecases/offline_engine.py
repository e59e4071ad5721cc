"""Where offline work runs (docs/operations.md "Offline work on a Ray cluster"): the one
seam the offline commands (``bandit replay``, ``compare``, ``evaluate``) and the
service's evaluations and feature-importance jobs send their independent tasks through.

* ``local`` (the default): each task runs here, one after the other, in the calling
  process (the service calls from its worker processes, ``bandit compare`` from its
  process pool).
* ``ray``: each task is a Ray task on the cluster at ``ray_address``, retried by Ray when
  its worker process or node is lost. A task is a module-level function and its
  arguments: queries and settings (a database URL, a policy, a time range, a policy
  spec, a seed), never the events; the task reads its log itself, in time order. The
  same function over the same arguments gives the same result on either engine.

The cluster's nodes run the same installation as the caller (``service`` and
``bandit_core`` importable, the log's database and files reachable). A cluster that
cannot be reached, or that stops answering while tasks are pending for longer than
:attr:`OfflineEngine.lost_after_seconds`, ends the work with
:class:`OfflineEngineError` (pending tasks cancelled), never a hang.
"""

from __future__ import annotations

import contextlib
import importlib.util
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from service.settings import Settings

T = TypeVar("T")

ENGINES = ("local", "ray")
RAY_EXTRA = 'pip install -e ".[distributed]"'
"""How to install Ray (the ``distributed`` extra of pyproject.toml)."""


class OfflineEngineError(Exception):
    """The Ray cluster could not be reached or was lost while tasks were pending."""


def ray_installed() -> bool:
    """True when the ``ray`` package can be imported."""
    return importlib.util.find_spec("ray") is not None


@dataclass(frozen=True)
class OfflineEngine:
    """An engine choice (picklable: it travels to the worker processes that use it)."""

    kind: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    """host:port of the cluster's head (its GCS port); None: ``RAY_ADDRESS`` or the
    cluster started on this machine (Ray's ``auto``)."""
    task_retries: int = 3
    """Ray's ``max_retries`` of each task (a lost worker or node runs it again)."""
    poll_seconds: float = 0.5
    lost_after_seconds: float = 15.0

    @classmethod
    def from_settings(cls, settings: Settings) -> OfflineEngine:
        """The engine of ``offline_engine`` and ``ray_address``."""
        return cls(settings.offline_engine, settings.ray_address)

    def map(
        self,
        fn: Callable[..., T],
        tasks: Sequence[tuple[Any, ...]],
        done: Callable[[int, T], None] | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[T]:
        """``[fn(*args) for args in tasks]``; ``done(i, result)`` is called as task ``i``
        finishes (in that order locally, in completion order on Ray), ``check()`` on Ray
        every ``poll_seconds`` while tasks are pending. An exception of ``fn``, ``done``
        or ``check`` ends the map (on Ray, the tasks still pending are cancelled)."""
        if self.kind == "local":
            results = []
            for i, args in enumerate(tasks):
                results.append(fn(*args))
                if done is not None:
                    done(i, results[-1])
            return results
        return self._ray_map(fn, tasks, done, check)

    def _ray_map(
        self,
        fn: Callable[..., T],
        tasks: Sequence[tuple[Any, ...]],
        done: Callable[[int, T], None] | None,
        check: Callable[[], None] | None,
    ) -> list[T]:
        import ray
        from ray.exceptions import RayError, RayTaskError

        self._connect()
        remote = ray.remote(max_retries=self.task_retries)(fn)
        refs = [remote.remote(*args) for args in tasks]
        index = {ref: i for i, ref in enumerate(refs)}
        results: list[Any] = [None] * len(refs)
        pending = list(refs)
        silent_since: float | None = None
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=self.poll_seconds)
                for ref in ready:
                    i = index[ref]
                    results[i] = ray.get(ref)
                    if done is not None:
                        done(i, results[i])
                if check is not None:
                    check()
                if ready or self._head_answers():
                    silent_since = None
                    continue
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > self.lost_after_seconds:
                    raise OfflineEngineError(
                        f"the Ray cluster at {self._address()} stopped answering "
                        f"({self.lost_after_seconds:g} s) with {len(pending)} of {len(refs)} "
                        "task(s) unfinished; run the work again when the cluster is back"
                    )
        except RayTaskError as exc:  # fn raised: the cause, as fn raised it locally
            self._cancel(pending)
            raise exc.as_instanceof_cause() from None
        except RayError as exc:
            self._cancel(pending)
            ray.shutdown()
            raise OfflineEngineError(
                f"the Ray cluster at {self._address()} failed: {exc}"
            ) from None
        except OfflineEngineError:
            self._cancel(pending)
            ray.shutdown()  # the next map connects again
            raise
        except BaseException:  # done() stopped the work (a deleted evaluation)
            self._cancel(pending)
            raise
        return results

    def _address(self) -> str:
        return self.ray_address or "auto"

    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        try:
            ray.init(
                address=self._address(),
                log_to_driver=False,
                configure_logging=False,
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise OfflineEngineError(
                f"no Ray cluster at {self._address()} (BANDIT_RAY_ADDRESS / --ray-address): {exc}"
            ) from None

    def _head_answers(self) -> bool:
        """Whether the head's GCS port accepts a connection (a lost cluster leaves
        ``ray.wait`` returning nothing, forever)."""
        import ray

        host, _, port = ray.get_runtime_context().gcs_address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=self.poll_seconds):
                return True
        except OSError:
            return False

    @staticmethod
    def _cancel(refs: Sequence[Any]) -> None:
        import ray
        from ray.exceptions import RayError

        for ref in refs:
            with contextlib.suppress(RayError):  # a lost cluster has nothing left to cancel
                ray.cancel(ref, force=True)
