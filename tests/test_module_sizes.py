"""No module outgrows its package's limit (docs/architecture.md, "Layers"): at most 450
lines under ``service/`` and 600 under ``bandit_core/``; a module that needs more is
split on a seam."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"service": 450, "bandit_core": 600}


def too_long(package: Path, limit: int) -> dict[str, int]:
    """The modules under ``package`` longer than ``limit`` lines, with their length
    (paths from the package's parent: ``service/...``)."""
    lengths = {
        path.relative_to(package.parent).as_posix(): len(path.read_text().splitlines())
        for path in package.rglob("*.py")
    }
    return {path: lines for path, lines in lengths.items() if lines > limit}


@pytest.mark.parametrize("package", sorted(LIMITS))
def test_every_module_is_within_its_package_limit(package: str) -> None:
    modules = list((ROOT / package).rglob("*.py"))
    assert len(modules) > 20  # the walk found the package's modules
    assert too_long(ROOT / package, LIMITS[package]) == {}


def test_the_walk_measures_a_module_it_finds(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * 11)
    (tmp_path / "short.py").write_text("x = 1\n" * 10)
    assert too_long(tmp_path, 10) == {f"{tmp_path.name}/sub/long.py": 11}
    assert too_long(tmp_path, 11) == {}
