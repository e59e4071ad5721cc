"""Command-line tools some tests run (``promtool``, ``docker-compose``, ``chromium``), provided on
demand so the README's test line works on a fresh machine.

A missing tool is installed from its Debian package when the tests run as root on a
machine with ``apt-get`` (as ``.ci/run`` does), unless ``BANDIT_TEST_INSTALL_TOOLS=0``.
Otherwise the test is skipped with the command that provides the tool -- except under
``CI`` (``CI=true``), where a missing tool fails the test: CI never skips them."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# command -> the Debian package that provides it
DEBIAN_PACKAGES = {
    "promtool": "prometheus",
    "docker-compose": "docker-compose",
    "chromium": "chromium",
}
_LOCK = Path(tempfile.gettempdir()) / "bandit-tests-apt.lock"


def _may_install() -> bool:
    return (
        os.environ.get("BANDIT_TEST_INSTALL_TOOLS", "1") != "0"
        and os.geteuid() == 0
        and shutil.which("apt-get") is not None
    )


def _apt_install(package: str) -> str:
    """Install ``package`` without recommends; return apt's output when it fails."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with _LOCK.open("w") as lock:  # one apt at a time across concurrent test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package]
        result = subprocess.run(
            install, check=False, capture_output=True, text=True, env=env, timeout=900
        )
        if result.returncode != 0:  # the package lists may be missing or stale
            subprocess.run(
                ["apt-get", "update", "-qq"], check=False, capture_output=True, env=env, timeout=900
            )
            result = subprocess.run(
                install, check=False, capture_output=True, text=True, env=env, timeout=900
            )
    return "" if result.returncode == 0 else result.stdout + result.stderr


def system_tool(command: str) -> str:
    """Path of ``command``, installing its Debian package if missing and possible;
    skips the calling test (fails it under ``CI``) when the tool cannot be had."""
    path = shutil.which(command)
    package = DEBIAN_PACKAGES[command]
    failure = ""
    if path is None and _may_install():
        failure = _apt_install(package)
        path = shutil.which(command)
    if path is not None:
        return path
    message = (
        f"{command} is missing: install the Debian package {package!r} "
        f"(apt-get install --no-install-recommends {package}; bash .ci/run does it), "
        f"or run the tests as root, where they install it themselves. {failure}"
    ).strip()
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message)
    pytest.skip(message)
