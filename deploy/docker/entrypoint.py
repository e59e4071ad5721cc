"""Container entrypoint: prepare the process, then ``exec`` the server command.

1. When ``BANDIT_API_KEYS`` is unset or empty, use the API key kept in
   ``$BANDIT_DATA_DIR/api-key`` (``/data``, a volume), generating it on the first start,
   and print where it is: a local ``docker compose up`` with nothing set still protects
   ``/reward`` and the admin routes of an api published on every interface (behind
   Docker's network no client is loopback, so "no keys: loopback only" would lock
   everyone out). Production sets its own keys (docs/operations.md).
2. When the settings ask for migrations (``BANDIT_RUN_MIGRATIONS``, read through the
   service's own ``Settings`` so "true"/"1"/"yes" mean what they mean to the app),
   apply them once here and export ``BANDIT_RUN_MIGRATIONS=false`` to the server, so
   its N workers do not each run ``alembic upgrade head`` at start.
3. Empty ``PROMETHEUS_MULTIPROC_DIR`` (creating it if missing): prometheus_client sums
   every ``*.db`` file in that directory into ``/metrics``, so files left by a previous
   run would be reported as this run's counts.
4. ``exec`` the command: the server replaces this process as PID 1 and receives the
   SIGTERM of ``docker stop`` directly.

Usage: ``python entrypoint.py COMMAND [ARG ...]`` (the Dockerfile's ENTRYPOINT).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path

API_KEY_FILE = "api-key"


def ensure_api_keys(env: MutableMapping[str, str]) -> Path | None:
    """Set ``BANDIT_API_KEYS`` in ``env`` from ``$BANDIT_DATA_DIR/api-key`` when it is
    unset or empty, creating that file (mode 0600, one random key) if missing; return its
    path, or None when ``env`` already has keys.

    The file is created atomically (linked into place, never overwritten), so replicas
    started together on one volume agree on the key."""
    if env.get("BANDIT_API_KEYS", "").strip():
        return None
    path = Path(env.get("BANDIT_DATA_DIR") or "/data") / API_KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        descriptor, draft = tempfile.mkstemp(dir=path.parent, prefix=".api-key-")
        try:
            with os.fdopen(descriptor, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
            with contextlib.suppress(FileExistsError):  # another replica was first
                os.link(draft, path)
        finally:
            os.unlink(draft)
    key = path.read_text().strip()
    if not key:
        raise SystemExit(f"entrypoint: {path} is empty; delete it or set BANDIT_API_KEYS")
    env["BANDIT_API_KEYS"] = key
    print(
        f"entrypoint: BANDIT_API_KEYS is not set: using the API key in {path}, generated on "
        f"the first start (docker compose exec api cat {path}); set BANDIT_API_KEYS to "
        "choose your own",
        file=sys.stderr,
    )
    return path


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

    Unlike the app's own start (``service.api.app.make_event_log``), which skips migrations
    with a warning when the database is unreachable so a running fleet keeps serving,
    a failure here fails the container start: the orchestrator restarts it until the
    schema is in place. After running them, sets ``BANDIT_RUN_MIGRATIONS=false`` in
    ``env`` (the environment the server inherits)."""
    from service.settings import Settings
    from service.storage.migrate import upgrade_head

    settings = Settings()
    if not settings.run_migrations:
        return False
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade_head(settings.log_url)
    env["BANDIT_RUN_MIGRATIONS"] = "false"
    return True


def main(argv: Sequence[str]) -> int:
    """Prepare, then replace this process with ``argv``; returns only on a usage error."""
    if not argv:
        print("usage: entrypoint.py COMMAND [ARG ...]", file=sys.stderr)
        return 2
    # Migrate with single-process metrics: the app's modules imported for it must not
    # leave metric files of this PID (the server keeps it after exec) in the directory.
    ensure_api_keys(os.environ)
    multiproc_dir = os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    try:
        migrate_once(os.environ)
    finally:
        if multiproc_dir is not None:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiproc_dir
    reset_multiproc_dir(os.environ)
    os.execvp(argv[0], list(argv))
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
