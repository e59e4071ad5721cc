"""Batched, non-blocking writes to the event log with a durable local spool.

The request path hands records to :class:`EventLogWriter` (``submit_decision`` /
``submit_reward`` only append to an in-memory queue). A background thread appends them
to the :class:`~service.storage.base.EventLog` in batches of up to ``batch_size``, at
least every ``flush_interval`` seconds. When the database cannot be reached the batch is
written to the spool instead: JSON-lines segment files, fsync'ed, under
``<spool_dir>/slot-<n>/``. The thread retries the spool every ``retry_interval``
seconds, oldest segment first, and deletes a segment only once every record in it is in
the log; a crash between the two re-sends a segment, which the log's idempotent
``append`` (on event id) absorbs, so each record lands exactly once.

Each writer holds an exclusive ``flock`` on its slot, so several app processes sharing
one spool directory never write the same files; at start a writer adopts the segments
of slots no live process holds (a restarted or scaled-down worker's spool), and flushes
them. A record the database rejects for a reason other than being unreachable (a bug,
not an outage) is set aside in ``dead-letter.jsonl`` with the error, never retried
forever and never blocking the records behind it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from service.observability import metrics
from service.storage.base import (
    LATE_SOURCE,
    AuditRecord,
    DecisionRecord,
    EventLog,
    RewardRecord,
    StoreUnavailableError,
)
from service.storage.schema import json_dumps

log = logging.getLogger(__name__)

Record = DecisionRecord | RewardRecord | AuditRecord
# (submitted at, record)
_Item = tuple[float, Record]
# the spool's name of each kind of record
_KINDS: dict[str, type[Record]] = {
    "decision": DecisionRecord,
    "reward": RewardRecord,
    "audit": AuditRecord,
}


def _encode(item: _Item) -> str:
    submitted, record = item
    kind = next(name for name, cls in _KINDS.items() if isinstance(record, cls))
    # the fields as they are (asdict would deep-copy them), by the log's own JSON writer:
    # a decision's candidates may come already encoded (an orjson.Fragment)
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return json_dumps({"kind": kind, "submitted": submitted, "record": fields})


def _decode(line: str) -> _Item:
    raw = json.loads(line)
    return float(raw["submitted"]), _KINDS[raw["kind"]](**raw["record"])


class _Spool:
    """Append-only segment files in one locked slot directory (used by one thread)."""

    def __init__(self, root: Path, segment_records: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.segment_records = segment_records
        self.dir, self._lock = self._claim_slot(root)
        self._adopt_orphans(root)
        self._current: IO[str] | None = None
        self._current_count = 0
        self.depth = sum(len(self._read(seg)) for seg in self.segments())
        self.oldest = self._oldest()

    @staticmethod
    def _try_lock(slot: Path) -> IO[bytes] | None:
        slot.mkdir(exist_ok=True)
        handle = open(slot / "lock", "ab")  # noqa: SIM115 -- held for the writer's lifetime
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        return handle

    def _claim_slot(self, root: Path) -> tuple[Path, IO[bytes]]:
        n = 0
        while True:
            slot = root / f"slot-{n}"
            handle = self._try_lock(slot)
            if handle is not None:
                return slot, handle
            n += 1

    def _adopt_orphans(self, root: Path) -> None:
        for slot in sorted(root.glob("slot-*")):
            if slot == self.dir or not any(slot.glob("seg-*.jsonl")):
                continue
            handle = self._try_lock(slot)
            if handle is None:
                continue  # a live writer owns it
            try:
                for seg in sorted(slot.glob("seg-*.jsonl")):
                    seg.rename(self._new_segment_path())
                    log.info("adopted spool segment %s", seg)
            finally:
                handle.close()
        self._sync_dir()

    def segments(self) -> list[Path]:
        return sorted(self.dir.glob("seg-*.jsonl"))

    def _new_segment_path(self) -> Path:
        last = self.segments()
        seq = int(last[-1].stem.split("-")[1]) + 1 if last else 1
        return self.dir / f"seg-{seq:012d}.jsonl"

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _read(self, segment: Path) -> list[str]:
        text = segment.read_text()
        lines = text.split("\n")
        # a line without its newline was torn by a crash mid-write: never acknowledged
        return [line for line in lines[:-1] if line]

    def _oldest(self) -> float | None:
        """Submission time of the first readable record of the oldest segment."""
        for seg in self.segments():
            for line in self._read(seg):
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    return _decode(line)[0]
        return None

    def write(self, items: list[_Item]) -> None:
        """Append ``items`` durably (fsync) before returning."""
        if self._current is None or self._current_count >= self.segment_records:
            self.close_segment()
            self._current = open(self._new_segment_path(), "a", encoding="utf-8")  # noqa: SIM115
            self._current_count = 0
            self._sync_dir()
        self._current.write("".join(_encode(item) + "\n" for item in items))
        self._current.flush()
        os.fsync(self._current.fileno())
        self._current_count += len(items)
        if self.depth == 0:
            self.oldest = min(t for t, _ in items)
        self.depth += len(items)

    def close_segment(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None

    def read_segment(self, segment: Path) -> tuple[list[_Item], list[tuple[str, str]]]:
        """Records of ``segment`` and (line, error) of lines that do not decode."""
        items, bad = [], []
        for line in self._read(segment):
            try:
                items.append(_decode(line))
            except (ValueError, KeyError, TypeError) as exc:
                bad.append((line, repr(exc)))
        return items, bad

    def remove(self, segment: Path, records: int) -> None:
        segment.unlink()
        self._sync_dir()
        self.depth -= records
        self.oldest = self._oldest()

    def dead_letter(self, entries: list[dict[str, Any]]) -> None:
        with open(self.dir / "dead-letter.jsonl", "a", encoding="utf-8") as f:
            f.write("".join(json.dumps(e) + "\n" for e in entries))
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        self.close_segment()
        self._lock.close()


class EventLogWriter:
    """Writes decisions and rewards to ``event_log`` off the request path.

    ``lag_seconds``, ``spool_depth`` and ``pending`` are for the metrics; ``close()``
    writes (or spools) everything submitted before it returns.
    """

    def __init__(
        self,
        event_log: EventLog,
        spool_dir: str | os.PathLike[str],
        *,
        batch_size: int = 500,
        flush_interval: float = 0.25,
        retry_interval: float = 1.0,
        segment_records: int = 10_000,
    ) -> None:
        self._log = event_log
        self._batch_size = batch_size
        self._flush_interval = flush_interval
        self._retry_interval = retry_interval
        self._spool = _Spool(Path(spool_dir), segment_records)
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._inflight: list[_Item] = []
        self._submitted = 0
        self._handled = 0
        self._dead_letters = 0
        self._flush_waiters = 0
        self._stopping = False
        self._next_retry = 0.0
        self._thread = threading.Thread(target=self._run, name="event-log-writer", daemon=True)
        self._thread.start()

    # -- request path -------------------------------------------------------------------

    def submit_decision(self, record: DecisionRecord) -> None:
        """Queue a decision for the log (never blocks on the database)."""
        self._submit(record)

    def submit_decisions(self, records: Sequence[DecisionRecord]) -> None:
        """Queue several decisions for the log at once (a coalesced batch of
        ``/recommend``, docs/performance.md; never blocks on the database)."""
        self._submit(*records)

    def submit_reward(self, record: RewardRecord) -> None:
        """Queue a reward for the log (never blocks on the database)."""
        self._submit(record)

    def submit_audit(self, record: AuditRecord) -> None:
        """Queue an audit record for the log (never blocks on the database): it lands
        once, through the spool when the database is down, as decisions do."""
        self._submit(record)

    def _submit(self, *records: Record) -> None:
        with self._cond:
            if self._stopping:
                raise RuntimeError("EventLogWriter is closed")
            now = time.time()
            self._queue.extend([(now, record) for record in records])
            self._submitted += len(records)
            if len(self._queue) >= self._batch_size:
                self._cond.notify_all()

    # -- metrics ------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Records submitted and neither in the log nor in the spool yet."""
        with self._cond:
            return len(self._queue) + len(self._inflight)

    @property
    def spool_depth(self) -> int:
        """Records waiting in the spool for the database to come back."""
        return self._spool.depth

    @property
    def dead_letters(self) -> int:
        """Records the database rejected, set aside in ``dead-letter.jsonl``."""
        return self._dead_letters

    @property
    def lag_seconds(self) -> float:
        """Age of the oldest record not yet in the log (0 when everything is written)."""
        with self._cond:
            times = [items[0][0] for items in (self._inflight, self._queue) if items]
        if self._spool.depth and self._spool.oldest is not None:
            times.append(self._spool.oldest)
        return max(0.0, time.time() - min(times)) if times else 0.0

    # -- control ------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is written or spooled; False on timeout."""
        with self._cond:
            target = self._submitted
            self._flush_waiters += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: self._handled >= target, timeout)
            finally:
                self._flush_waiters -= 1

    def close(self, timeout: float | None = None) -> None:
        """Write or spool everything submitted, stop the thread, release the spool slot."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._next_retry = 0.0  # one last try at the spool before exiting
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("event-log writer did not finish within %s s; spool left open", timeout)
            return
        self._spool.close()

    # -- background thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: (
                        self._stopping
                        or self._flush_waiters > 0
                        or len(self._queue) >= self._batch_size
                    ),
                    self._flush_interval,
                )
                stopping = self._stopping
                n = min(self._batch_size, len(self._queue))
                self._inflight = [self._queue.popleft() for _ in range(n)]
            try:
                self._step(self._inflight)
            except Exception:
                # never lose the thread: the batch is retried from memory
                log.exception("event-log writer step failed; retrying")
                with self._cond:
                    self._queue.extendleft(reversed(self._inflight))
                    self._inflight = []
                    if stopping:
                        log.error(
                            "event-log writer closing with %d unwritten records", len(self._queue)
                        )
                        return
                time.sleep(self._retry_interval)
                continue
            with self._cond:
                self._handled += len(self._inflight)
                self._inflight = []
                self._cond.notify_all()
                if stopping and not self._queue:
                    return

    def _step(self, batch: list[_Item]) -> None:
        spooled = self._spool.depth > 0
        if spooled and time.monotonic() >= self._next_retry:
            spooled = not self._drain_spool()
        if not batch:
            return
        if not spooled:
            rest = self._write(batch)
            if not rest:
                return
            batch = rest
        self._spool.write(batch)

    def _drain_spool(self) -> bool:
        """Flush spool segments to the log, oldest first; True if the spool emptied."""
        self._spool.close_segment()
        for segment in self._spool.segments():
            items, bad = self._spool.read_segment(segment)
            if bad:
                self._dead_letter([{"line": line, "error": err} for line, err in bad])
            for start in range(0, len(items), self._batch_size):
                if self._write(items[start : start + self._batch_size]):
                    self._next_retry = time.monotonic() + self._retry_interval
                    return False
            self._spool.remove(segment, len(items) + len(bad))
        return True

    def _write(self, items: list[_Item]) -> list[_Item]:
        """Append ``items`` to the log; returns those not written because it is down."""
        try:
            self._append(items)
            return []
        except StoreUnavailableError as exc:
            log.warning("event log unreachable, spooling %d records: %s", len(items), exc)
            self._next_retry = time.monotonic() + self._retry_interval
            return items
        except Exception:
            log.exception("event log rejected a batch of %d; writing one by one", len(items))
        for i, item in enumerate(items):
            try:
                self._append([item])
            except StoreUnavailableError:
                self._next_retry = time.monotonic() + self._retry_interval
                return items[i:]
            except Exception as exc:  # noqa: BLE001 -- any rejection: set aside, go on
                self._dead_letter([{"line": _encode(item), "error": repr(exc)}])
        return []

    def _append(self, items: list[_Item]) -> None:
        """``EventLog.append`` of ``items``, timed and counted in the metrics."""
        decisions = [r for _, r in items if isinstance(r, DecisionRecord)]
        rewards = [r for _, r in items if isinstance(r, RewardRecord)]
        audit = [r for _, r in items if isinstance(r, AuditRecord)]
        start = time.perf_counter()
        try:
            self._log.append(decisions, rewards, audit)
        except Exception:
            metrics.EVENT_LOG_ERRORS.labels("append").inc()
            raise
        finally:
            metrics.EVENT_LOG_LATENCY.labels("append").observe(time.perf_counter() - start)
        late = sum(r.source == LATE_SOURCE for r in rewards)
        for table, rows in (
            ("decisions", len(decisions)),
            ("rewards", len(rewards) - late),
            ("late_rewards", late),
            ("audit_log", len(audit)),
        ):
            if rows:
                metrics.EVENT_LOG_ROWS.labels(table).inc(rows)

    def _dead_letter(self, entries: list[dict[str, Any]]) -> None:
        log.error("event log: %d records set aside in dead-letter.jsonl", len(entries))
        self._spool.dead_letter(entries)
        self._dead_letters += len(entries)
