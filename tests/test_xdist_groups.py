"""The suite's ``xdist_group`` marks keep a group on one worker under the installed
pytest and pytest-xdist (``--dist loadgroup``, pyproject.toml): the module-scoped
servers (a Ray cluster, a Redis Cluster, a Sentinel group) then start once per run,
and the ``timed`` tests never run beside each other. With pytest 9.2 and
pytest-xdist 3.8 the marks are ignored without a warning
(pytest-dev/pytest-xdist#1386): each group's tests are spread over both workers, and
each worker starts the group's servers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("{group}")


@pytest.fixture(scope="module")
def server():
    with open("setups.txt", "a") as out:
        out.write("{group} " + os.environ["PYTEST_XDIST_WORKER"] + "\\n")


@pytest.mark.parametrize("i", range(8))
def test_grouped(server, i):
    pass
"""

LOOSE = """
import pytest


@pytest.mark.parametrize("i", range(40))
def test_loose(i):
    pass
"""


def test_a_group_runs_on_one_worker_and_sets_its_module_fixture_up_once(tmp_path: Path) -> None:
    for group in ("one", "two"):
        (tmp_path / f"test_{group}.py").write_text(GROUPED.format(group=group))
    (tmp_path / "test_loose.py").write_text(LOOSE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repository's options
    command = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup"]
    run = subprocess.run(
        [*command, "-p", "no:cacheprovider"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "56 passed" in run.stdout, run.stdout
    setups = sorted((tmp_path / "setups.txt").read_text().split("\n")[:-1])
    assert [line.split()[0] for line in setups] == ["one", "two"], setups
