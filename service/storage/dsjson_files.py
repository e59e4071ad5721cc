"""DSJSON log files (:mod:`service.storage.dsjson` reads their lines): files and
directories as ``bandit import-log`` and the offline commands' ``--format dsjson`` take
them (docs/personalizer.md, "Importing and exporting logs"; docs/offline.md), ``.gz``
decompressed, a malformed line a :class:`BadLine` naming its file and line.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the parser needs orjson (the server extra): imported when a line is read
    from service.storage.dsjson import ActionSets, ImportedEvent

READ_BYTES = 1 << 20
"""How much of a file :func:`file_lines` reads at a time."""
LOG_SUFFIXES = (".json", ".jsonl", ".json.gz", ".jsonl.gz")
"""The files of a directory that are read (recursively, in name order)."""


class BadLine(Exception):
    """A malformed line: ``str()`` is ``file:line: why``."""

    @classmethod
    def at(cls, path: Path, number: int, why: Exception) -> BadLine:
        """Line ``number`` of ``path``, malformed for the reason ``why``."""
        return cls(f"{path}:{number}: {why}")


def log_files(paths: Sequence[Path]) -> list[Path]:
    """The files of ``paths``: a file as given, a directory's log files recursively in
    name order; a path that does not exist is a :class:`FileNotFoundError`."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(
                p for p in path.rglob("*") if p.is_file() and p.name.endswith(LOG_SUFFIXES)
            )
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return files


def decompressed(raw: IO[bytes], path: Path) -> IO[bytes]:
    """The lines of the open file ``raw`` (at ``path``): gunzipped when it ends ``.gz``."""
    if path.name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def file_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``stream`` (without their line ends), read 1 MiB at a time (a
    file's own line iterator takes longer a line)."""
    rest = b""
    while chunk := stream.read(READ_BYTES):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        yield from lines
    if rest:
        yield rest


def read_line(
    line: bytes, path: Path, number: int, loop: str, actions: ActionSets
) -> ImportedEvent:
    """:func:`service.storage.dsjson.parse_line` of line ``number`` of ``path``; a
    malformed line is a :class:`BadLine`."""
    from service.storage.dsjson import DsjsonError, parse_line

    try:
        return parse_line(line, loop, actions)
    except DsjsonError as exc:
        raise BadLine.at(path, number, exc) from None


def file_events(path: Path, loop: str) -> Iterator[ImportedEvent]:
    """The events of the lines of ``path`` in file order (blank lines skipped), for the
    loop ``loop``; the first malformed line is a :class:`BadLine`."""
    from service.storage.dsjson import ActionSets

    actions = ActionSets()
    with path.open("rb") as raw:
        for number, line in enumerate(file_lines(decompressed(raw, path)), 1):
            if line.strip():
                yield read_line(line, path, number, loop, actions)


def first_time(path: Path) -> float:
    """The time of the first decision of ``path`` (unix seconds; infinity when it has
    none), read from its first event line alone."""
    for event in file_events(path, ""):
        return event.decisions[0].created_at
    return math.inf
