"""The code in ``docs/adding_an_algorithm.md`` runs as written."""

from __future__ import annotations

import doctest
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "adding_an_algorithm.md"


def test_adding_an_algorithm_example_runs() -> None:
    result = doctest.testfile(str(GUIDE), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
