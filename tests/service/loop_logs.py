"""An event log that ``bandit`` commands run in the test's process use: migrated, with
one loop's policy row."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from service.cli import main
from service.settings import get_settings
from service.storage.sql_log import SqlEventLog


@contextmanager
def loop_log(
    url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch, loop: str, config: dict[str, Any]
) -> Iterator[str]:
    """The event log at ``url`` (data directory ``data_dir``) as the commands' log,
    migrated by ``bandit partitions``, with ``loop``'s row holding ``config``; ``url``.
    The cached settings are cleared on entry and exit."""
    monkeypatch.setenv("BANDIT_DATABASE_URL", url)
    monkeypatch.setenv("BANDIT_DATA_DIR", str(data_dir))
    monkeypatch.setenv("BANDIT_RUN_MIGRATIONS", "true")
    get_settings.cache_clear()
    try:
        assert main(["partitions"]) == 0  # migrates
        log = SqlEventLog(url)
        log.upsert_policy(loop, config)
        log.close()
        yield url
    finally:
        get_settings.cache_clear()
