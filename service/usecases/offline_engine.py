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

Stateful passes over a log (learning replays, evaluations' candidates) go through
:meth:`OfflineEngine.stream`: a :class:`PartitionStream` per candidate (or per group of
candidates, :meth:`OfflineEngine.cpus` groups) reads the log's partitions itself, in
time order. Locally the streams run here one after the other; on
Ray each is an actor (restarted by Ray up to ``actor_restarts`` times), whose state
comes back to the driver as bytes after each partition (its checkpoint): an actor
restarted mid-partition is sent its last checkpoint and goes on from there, so the
result is that of an undisturbed run.

The cluster's nodes run the same installation as the caller (``service`` and
``bandit_core`` importable, the log's database and files reachable). A cluster that
cannot be reached, or that stops answering while tasks are pending for longer than
:attr:`OfflineEngine.lost_after_seconds`, ends the work with
:class:`OfflineEngineError` (pending tasks cancelled), never a hang.
"""

from __future__ import annotations

import contextlib
import importlib.util
import pickle
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from service.settings import Settings

T = TypeVar("T")
S = TypeVar("S")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

ENGINES = ("local", "ray")
RAY_EXTRA = 'pip install -e ".[distributed]"'
"""How to install Ray (the ``distributed`` extra of pyproject.toml)."""


class OfflineEngineError(Exception):
    """The Ray cluster could not be reached or was lost while tasks were pending."""


class PartitionStream(Protocol[S, R_co]):
    """One stateful pass over a log's ``partitions`` in time order (a module-level,
    picklable object: it travels to the actor that runs it). The state ``S`` is
    picklable and changed in place; the same stream fed the same partitions gives the
    same result on either engine."""

    @property
    def partitions(self) -> int:
        """How many partitions the log has."""
        ...

    def begin(self) -> S:
        """The state before the first partition."""
        ...

    def advance(self, state: S, partition: int) -> int:
        """Read partition ``partition`` (the one after the last advanced) into
        ``state``; the events read."""
        ...

    def finished(self, state: S) -> bool:
        """Whether the stream needs no more partitions (a replay's rounds reached)."""
        ...

    def result(self, state: S) -> R_co:
        """The stream's result from its final state."""
        ...


class StreamActor:
    """The Ray actor of a :class:`PartitionStream` (one per stream): it keeps the state
    between partitions and returns it as bytes after each one (the driver's checkpoint).
    Restarted by Ray, it starts again at the first partition, so a call for a later one
    answers None: the driver then sends the last checkpoint."""

    def __init__(self, stream: PartitionStream[Any, Any]) -> None:
        self.stream = stream
        self.state: Any = None
        self.position = 0

    def advance(self, partition: int, checkpoint: bytes | None) -> tuple[int, bytes, bool] | None:
        """``(events read, the state's checkpoint, finished)`` after ``partition``, or
        None when this actor (restarted) is not at ``partition`` and no checkpoint came.
        A call with the checkpoint of the partition before, or for the first partition,
        always gives the same answer: the driver may send it again."""
        if checkpoint is not None:
            self.state, self.position = pickle.loads(checkpoint), partition
        elif partition == 0:  # begun here, so that an error is the call's, not the actor's
            self.state, self.position = self.stream.begin(), 0
        elif partition != self.position:
            return None
        events = self.stream.advance(self.state, partition)
        self.position += 1
        return events, pickle.dumps(self.state), self.stream.finished(self.state)


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
    actor_restarts: int = 3
    """Ray's ``max_restarts`` (and ``max_task_retries``) of a stream's actor."""
    unavailable_seconds: float = 120.0
    """How long a call to an actor Ray answers unavailable (its node lost, not yet
    declared dead) is sent again before the work fails."""
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

    def stream(
        self,
        streams: Sequence[PartitionStream[Any, R]],
        done: Callable[[int, int], None] | None = None,
        check: Callable[[], None] | None = None,
    ) -> list[R]:
        """The result of each stream fed its partitions in time order (module
        docstring); ``done(i, events)`` is called as stream ``i`` finishes a partition
        of ``events`` events, ``check()`` on Ray every ``poll_seconds``. An exception of
        a stream, ``done`` or ``check`` ends the work (on Ray, the actors are killed)."""
        if self.kind == "local":
            results = []
            for i, stream in enumerate(streams):
                state = stream.begin()
                for partition in range(stream.partitions):
                    events = stream.advance(state, partition)
                    if done is not None:
                        done(i, events)
                    if stream.finished(state):
                        break
                results.append(stream.result(state))
            return results
        return self._ray_stream(streams, done, check)

    def cpus(self) -> int:
        """How many streams run at once: 1 here, the cluster's CPUs on Ray (each
        stream's actor takes one)."""
        if self.kind == "local":
            return 1
        import ray

        self._connect()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    def _ray_map(
        self,
        fn: Callable[..., T],
        tasks: Sequence[tuple[Any, ...]],
        done: Callable[[int, T], None] | None,
        check: Callable[[], None] | None,
    ) -> list[T]:
        import ray

        self._connect()
        remote = ray.remote(max_retries=self.task_retries)(fn)
        refs = {remote.remote(*args): i for i, args in enumerate(tasks)}
        results: list[Any] = [None] * len(refs)

        def ready(i: int, value: Any) -> dict[Any, int]:
            results[i] = value
            if done is not None:
                done(i, value)
            return {}

        self._drive(refs, ready, check, f"{len(tasks)} task(s)")
        return results

    def _ray_stream(
        self,
        streams: Sequence[PartitionStream[Any, R]],
        done: Callable[[int, int], None] | None,
        check: Callable[[], None] | None,
    ) -> list[R]:
        import ray

        self._connect()
        restarts = self.actor_restarts
        actor_class = ray.remote(num_cpus=1, max_restarts=restarts, max_task_retries=restarts)(
            StreamActor
        )
        actors: list[Any] = [actor_class.remote(stream) for stream in streams]
        checkpoints: list[bytes | None] = [None] * len(streams)
        position = [0] * len(streams)
        ended: set[int] = set()

        def again(i: int) -> dict[Any, int]:
            return {actors[i].advance.remote(position[i], checkpoints[i]): i}

        def ready(i: int, value: tuple[int, bytes, bool] | None) -> dict[Any, int]:
            if value is None:  # a restarted actor: on from the last checkpoint
                return again(i)
            events, checkpoints[i], finished = value
            position[i] += 1
            if done is not None:
                done(i, events)
            if finished or position[i] == streams[i].partitions:
                # its CPU goes to a waiting actor; a task, not ray.kill, whose call waits
                # on the head and would hang with a lost cluster
                actors[i].__ray_terminate__.remote()
                ended.add(i)
                return {}
            return {actors[i].advance.remote(position[i], None): i}

        first = {
            actor.advance.remote(0, None): i
            for i, (actor, stream) in enumerate(zip(actors, streams, strict=True))
            if stream.partitions
        }
        try:
            self._drive(first, ready, check, f"{len(streams)} stream(s)", again)
        finally:  # the work stopped: its actors go
            # After a lost cluster Ray is shut down: nothing is left to kill, and a call
            # would start a Ray instance of its own on this machine (Ray's auto-init).
            if ray.is_initialized():
                for i in set(range(len(actors))) - ended:
                    with contextlib.suppress(Exception):
                        ray.kill(actors[i], no_restart=True)
        results = []
        for stream, checkpoint in zip(streams, checkpoints, strict=True):
            state = stream.begin() if checkpoint is None else pickle.loads(checkpoint)
            results.append(stream.result(state))
        return results

    def _drive(
        self,
        refs: dict[Any, int],
        ready: Callable[[int, Any], dict[Any, int]],
        check: Callable[[], None] | None,
        work: str,
        again: Callable[[int], dict[Any, int]] | None = None,
    ) -> None:
        """Wait for ``refs`` (Ray object refs, each with its work's index); ``ready(i,
        value)`` takes each value as it comes and returns the refs to wait for next. A
        cluster that stops answering for ``lost_after_seconds`` is an
        :class:`OfflineEngineError`; the refs still pending are cancelled on any error.
        ``again(i)`` sends an idempotent call anew when its actor is unavailable."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayError, RayTaskError

        pending = dict(refs)
        since: dict[int, float] = {}  # when each call's actor was first unavailable
        silent_since: float | None = None
        try:
            while pending:
                finished, _ = ray.wait(list(pending), num_returns=1, timeout=self.poll_seconds)
                answered = False  # an unavailable actor's answer is no sign of a live cluster
                for ref in finished:
                    i = pending.pop(ref)
                    try:
                        value = ray.get(ref)
                    except ActorUnavailableError:
                        # its node lost and not yet declared dead: the call again, once
                        # Ray has restarted the actor (until unavailable_seconds)
                        if (
                            again is None
                            or time.monotonic() - since.setdefault(i, time.monotonic())
                            > self.unavailable_seconds
                        ):
                            raise
                        time.sleep(self.poll_seconds)
                        pending.update(again(i))
                        continue
                    since.pop(i, None)
                    answered = True
                    pending.update(ready(i, value))
                if check is not None:
                    check()
                if answered or self._head_answers():
                    silent_since = None
                    continue
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > self.lost_after_seconds:
                    raise OfflineEngineError(
                        f"the Ray cluster at {self._address()} stopped answering "
                        f"({self.lost_after_seconds:g} s) with {len(pending)} of {work} "
                        "unfinished; run the work again when the cluster is back"
                    )
        except RayTaskError as exc:  # the work raised: the cause, as it raised locally
            self._cancel(list(pending))
            raise exc.as_instanceof_cause() from None
        except RayError as exc:
            self._cancel(list(pending))
            ray.shutdown()
            raise OfflineEngineError(
                f"the Ray cluster at {self._address()} failed: {exc}"
            ) from None
        except OfflineEngineError:
            self._cancel(list(pending))
            ray.shutdown()  # the next map connects again
            raise
        except BaseException:  # done() stopped the work (a deleted evaluation)
            self._cancel(list(pending))
            raise

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

        return self._answers(ray.get_runtime_context().gcs_address)

    def lost_cluster(self) -> str | None:
        """The address of this engine's Ray cluster when its head does not answer (asked
        from any process, connected to Ray or not); None when it answers, when the
        engine is local, or when the address is Ray's ``auto``."""
        if self.kind != "ray" or self.ray_address is None:
            return None
        return None if self._answers(self.ray_address) else self.ray_address

    def _answers(self, address: str) -> bool:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=self.poll_seconds):
                return True
        except (OSError, ValueError):
            return False

    @staticmethod
    def _cancel(refs: Sequence[Any]) -> None:
        import ray
        from ray.exceptions import RayError

        for ref in refs:
            # a lost cluster has nothing left to cancel; an actor's call cannot be
            # force-cancelled (ValueError): the caller kills its actor
            with contextlib.suppress(RayError, ValueError):
                ray.cancel(ref, force=True)
