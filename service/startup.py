"""Why the service cannot start, in one line.

The start (the app's lifespan, ``service.api.app``) raises :class:`StartupError` for a cause
it names: the event-log schema is not the code's, a state store or database that cannot
be reached; :class:`SettingError` when a setting names something unusable: a data
directory, the policies file or a policy in it. ``bandit serve`` prints the message as
one line on stderr and exits with 1, or 2 for a :class:`SettingError`
(docs/operations.md, "Start-up failures").
"""

from __future__ import annotations

import tempfile
from pathlib import Path


class StartupError(Exception):
    """The service cannot start; the message names the cause on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class SettingError(StartupError):
    """A setting names something the service cannot use."""


def usable_directory(path: Path, variable: str) -> None:
    """Create the directory ``path`` if missing and check a file can be written in it; a
    :class:`SettingError` naming the environment variable ``variable`` otherwise."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise SettingError(
            f"{variable}={path} is not a usable directory: {exc.strerror or exc}"
        ) from None
