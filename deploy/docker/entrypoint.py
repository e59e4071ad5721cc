"""Container entrypoint: prepare the process, then ``exec`` the server command.

1. Empty ``PROMETHEUS_MULTIPROC_DIR`` (creating it if missing): prometheus_client sums
   every ``*.db`` file in that directory into ``/metrics``, so files left by a previous
   run would be reported as this run's counts.
2. When the settings ask for migrations (``BANDIT_RUN_MIGRATIONS``, read through the
   service's own ``Settings`` so "true"/"1"/"yes" mean what they mean to the app),
   apply them once here and export ``BANDIT_RUN_MIGRATIONS=false`` to the server, so
   its N workers do not each run ``alembic upgrade head`` at the same time.
3. ``exec`` the command: the server replaces this process as PID 1 and receives the
   SIGTERM of ``docker stop`` directly.

Usage: ``python entrypoint.py COMMAND [ARG ...]`` (the Dockerfile's ENTRYPOINT).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path


def reset_multiproc_dir(env: Mapping[str, str]) -> Path | None:
    """Empty (or create) the directory named by ``PROMETHEUS_MULTIPROC_DIR``; return it,
    or None when the variable is unset or empty (single-process metrics)."""
    raw = env.get("PROMETHEUS_MULTIPROC_DIR", "")
    if not raw:
        return None
    path = Path(raw)
    path.mkdir(parents=True, exist_ok=True)
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    return path


def migrate_once(env: MutableMapping[str, str]) -> bool:
    """Apply the Alembic migrations if the settings ask for it; return whether they ran.

    After running them, sets ``BANDIT_RUN_MIGRATIONS=false`` in ``env`` (the
    environment the server inherits)."""
    from service.settings import Settings
    from service.storage.migrate import upgrade_head

    settings = Settings()
    if not settings.run_migrations:
        return False
    upgrade_head(settings.sqlalchemy_url)
    env["BANDIT_RUN_MIGRATIONS"] = "false"
    return True


def main(argv: Sequence[str]) -> int:
    """Prepare, then replace this process with ``argv``; returns only on a usage error."""
    if not argv:
        print("usage: entrypoint.py COMMAND [ARG ...]", file=sys.stderr)
        return 2
    reset_multiproc_dir(os.environ)
    migrate_once(os.environ)
    os.execvp(argv[0], list(argv))
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
