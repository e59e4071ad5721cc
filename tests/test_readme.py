"""The README's set-up lines are what CI runs."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_readme_has_the_two_setup_lines() -> None:
    lines = _setup_lines()
    assert len(lines) == 2, lines
    assert "bandit serve" in lines[0]
    assert "pytest" in lines[1]


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert _setup_lines()[1] in ci.splitlines()
