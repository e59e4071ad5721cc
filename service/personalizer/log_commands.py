"""``bandit import-log`` and ``bandit export-log``: a loop's event log from and to the
Decision Service JSON-lines format of Azure AI Personalizer's logs and Vowpal Wabbit's
``--dsjson`` (:mod:`service.storage.dsjson`; docs/personalizer.md, "Importing and
exporting logs").

An import streams each file (``.gz`` decompressed) in batches of
:data:`BATCH_EVENTS` events into the event log (``BANDIT_DATABASE_URL``, else the
embedded SQLite file; PostgreSQL by ``COPY``), all batches of a file in one
transaction: a malformed line stops the import with ``file:line`` and the reason, and
nothing of that file is logged (files before it are). With ``--skip-bad`` the line is
reported and skipped. Records already logged (same event id and time) are skipped, so a
second import of the same files adds nothing. The loop's ``reset_at`` moves back to the
earliest imported event when it is later, so that ``bandit rebuild`` replays the
imported history.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import gzip
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from service.cli.arguments import add_no_progress, timestamp_argument
from service.cli.exit_codes import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from service.cli.reports import progress_bar
from service.storage.dsjson_files import (
    LOG_SUFFIXES,
    BadLine,
    decompressed,
    file_lines,
    log_files,
)

if TYPE_CHECKING:
    from service.storage.base import EventLog, EventRows

BATCH_EVENTS = 5000
"""Events read before their rows go to the database (memory stays bounded)."""
FORMATS = ("dsjson",)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``import-log`` and ``export-log``."""
    importer = subparsers.add_parser(
        "import-log",
        help="import Azure Personalizer / Decision Service logs (DSJSON) into a loop's event log",
        description="Read JSON-lines logs in the Decision Service format (Azure AI "
        "Personalizer's log mirror and exports, VW --dsjson) into the event log of the loop "
        "NAME (BANDIT_DATABASE_URL, else the embedded SQLite file), which must exist. Each "
        "PATH is a file (.gz decompressed) or a directory, read recursively (files ending "
        f"{', '.join(LOG_SUFFIXES)}, in name order). A file goes in as one transaction: a "
        "malformed line stops the import with FILE:LINE and why, and nothing of that file is "
        "logged. Events already logged are skipped: importing the same files again adds "
        "nothing. Afterwards `bandit rebuild --policy NAME` (or a restart of the embedded "
        "service) learns from the imported history. docs/personalizer.md.",
    )
    importer.add_argument("--format", choices=FORMATS, required=True, help="the log format")
    importer.add_argument("--loop", required=True, metavar="NAME", help="the loop (policy)")
    importer.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help="files or directories"
    )
    importer.add_argument(
        "--skip-bad",
        action="store_true",
        help="report a malformed line (FILE:LINE on stderr) and go on instead of stopping",
    )
    add_no_progress(importer)
    importer.set_defaults(run=_import)

    exporter = subparsers.add_parser(
        "export-log",
        help="export a loop's event log as DSJSON (for vw --dsjson, or another import)",
        description="Write the decisions of the loop NAME with their rewards as Decision "
        "Service JSON lines, in time order, to --output (.gz compressed) or standard output. "
        "Importing the export into a loop gives the same events. docs/personalizer.md.",
    )
    exporter.add_argument("--format", choices=FORMATS, required=True, help="the log format")
    exporter.add_argument("--loop", required=True, metavar="NAME", help="the loop (policy)")
    exporter.add_argument("--output", type=Path, metavar="PATH", help="the file to write")
    exporter.add_argument(
        "--since", type=timestamp_argument, metavar="TIME", help="first decision time (ISO 8601)"
    )
    exporter.add_argument(
        "--until", type=timestamp_argument, metavar="TIME", help="end of the range (exclusive)"
    )
    exporter.set_defaults(run=_export)


@dataclass
class ImportCounts:
    """What an import read: lines with an event, decisions and rewards in them, lines
    skipped as malformed, and the earliest decision time."""

    lines: int = 0
    decisions: int = 0
    rewards: int = 0
    skipped: list[str] = field(default_factory=list)
    earliest: float | None = None

    def tally(self, batch: EventRows) -> EventRows:
        """Count a batch; returns it."""
        self.decisions += len(batch.decisions)
        self.rewards += len(batch.rewards)
        earliest = batch.earliest()
        if earliest is not None:
            self._earliest(earliest)
        return batch

    def add(self, other: ImportCounts) -> None:
        """Add the counts of another file."""
        self.lines += other.lines
        self.decisions += other.decisions
        self.rewards += other.rewards
        self.skipped += other.skipped
        if other.earliest is not None:
            self._earliest(other.earliest)

    def _earliest(self, moment: float) -> None:
        if self.earliest is None or moment < self.earliest:
            self.earliest = moment


def _batches(
    path: Path,
    loop: str,
    counts: ImportCounts,
    skip_bad: bool,
    advance: Any,
) -> Iterator[EventRows]:
    """The rows of the events of ``path`` in batches (:mod:`service.storage.dsjson_rows`);
    ``advance(n)`` after each with the bytes read."""
    from service.storage.base import EventRows
    from service.storage.dsjson import DsjsonError
    from service.storage.dsjson_rows import RowReader

    reader = RowReader(loop)
    with path.open("rb") as raw:
        batch = EventRows()
        position = 0
        for number, line in enumerate(file_lines(decompressed(raw, path)), 1):
            if not line or line.isspace():
                continue
            try:
                reader.read(line, batch)
            except DsjsonError as exc:
                bad = BadLine.at(path, number, exc)
                if not skip_bad:
                    raise bad from None
                counts.skipped.append(str(bad))
                print(f"skipped {bad}", file=sys.stderr)
                continue
            counts.lines += 1
            if len(batch.decisions) >= BATCH_EVENTS:
                yield counts.tally(batch)
                batch = EventRows()
                position = _advanced(raw, position, advance)
        if batch.decisions or batch.rewards:
            yield counts.tally(batch)
        _advanced(raw, position, advance)


def _advanced(raw: IO[bytes], position: int, advance: Any) -> int:
    now = raw.tell()
    advance(now - position)
    return now


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cyclic garbage collector off while it runs: the lines of a batch of
    5,000 events are read into tens of thousands of lists and dicts, which the collector
    would scan again and again; they form no cycles, so reference counting frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def import_files(
    event_log: EventLog,
    loop: str,
    files: Sequence[Path],
    skip_bad: bool = False,
    progress: bool = False,
) -> ImportCounts:
    """Import ``files`` into the log of ``loop`` (module docstring); a :class:`BadLine`
    stops it, the failing file logged not at all. Counts only what committed."""
    counts = ImportCounts()
    total = sum(p.stat().st_size for p in files)
    with _no_cycle_collection(), progress_bar(total, not progress, "B") as bar:
        for path in files:
            file_counts = ImportCounts()
            event_log.append_batches(_batches(path, loop, file_counts, skip_bad, bar.update))
            counts.add(file_counts)
    return counts


def include_history(event_log: EventLog, loop: str, since: float) -> bool:
    """Move the loop's ``reset_at`` back to ``since`` when it is later (so that a rebuild
    replays events from then on); whether it moved."""
    from service.policies import info_from_record

    info = info_from_record(event_log.policies()[loop])
    if info.reset_at is not None and info.reset_at <= since:
        return False
    moved = info.model_copy(update={"reset_at": since})
    event_log.upsert_policy(loop, moved.model_dump(mode="json"))
    return True


def _loop_log(command: str, loop: str) -> EventLog | None:
    """The event log of the settings, or None after saying why it cannot serve
    ``loop`` (invalid settings, no such loop)."""
    from service.api.app import make_event_log
    from service.cli.server import settings_or_none

    settings = settings_or_none()
    if settings is None:
        return None
    event_log: EventLog = make_event_log(settings)
    if loop not in event_log.policies():
        event_log.close()
        print(
            f"bandit {command}: error: the event log has no loop {loop!r}; create it first "
            "(the service creates the default loop 'personalizer')",
            file=sys.stderr,
        )
        return None
    return event_log


def _import(args: argparse.Namespace) -> int:
    from service.storage.base import StoreUnavailableError

    try:
        files = log_files(args.paths)
    except FileNotFoundError as exc:
        print(f"bandit import-log: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    event_log = _loop_log("import-log", args.loop)
    if event_log is None:
        return EXIT_USAGE
    started = time.perf_counter()
    try:
        before = event_log.count(args.loop)
        try:
            counts = import_files(event_log, args.loop, files, args.skip_bad, not args.no_progress)
        except BadLine as exc:
            print(
                f"bandit import-log: error: {exc} (nothing of that file was imported; "
                "--skip-bad skips such lines)",
                file=sys.stderr,
            )
            return EXIT_FAILURE
        after = event_log.count(args.loop)
        moved = counts.earliest is not None and include_history(
            event_log, args.loop, counts.earliest
        )
    except StoreUnavailableError as exc:
        print(f"bandit import-log: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        event_log.close()
    seconds = time.perf_counter() - started
    print(
        f"read {counts.lines} events ({counts.decisions} decisions, {counts.rewards} rewards) "
        f"from {len(files)} files in {seconds:.1f} s; logged {after[0] - before[0]} new "
        f"decisions and {after[1] - before[1]} new rewards into {args.loop!r}"
        + (f"; skipped {len(counts.skipped)} malformed lines" if counts.skipped else "")
        + ("; its history now starts at the earliest imported event" if moved else "")
    )
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from service.personalizer.dsjson_export import export_line
    from service.storage.base import StoreUnavailableError

    event_log = _loop_log("export-log", args.loop)
    if event_log is None:
        return EXIT_USAGE
    try:
        with contextlib.ExitStack() as files:
            out: IO[bytes] = sys.stdout.buffer
            if args.output is not None:
                opener = gzip.open if args.output.name.endswith(".gz") else open
                out = files.enter_context(opener(args.output, "wb"))
            written = 0
            for event in event_log.iter_events(args.loop, args.since, args.until, batch_size=5000):
                out.write(export_line(event) + b"\n")
                written += 1
            out.flush()
    except StoreUnavailableError as exc:
        print(f"bandit export-log: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        event_log.close()
    print(f"exported {written} events of {args.loop!r}", file=sys.stderr)
    return EXIT_OK
