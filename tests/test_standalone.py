"""The repository stands alone: nothing reads or cites the project handbook that lives
beside the checkout, every citation of docs/algorithms.md names a section it has, and
the documented offline commands parse and find their data."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bandit_core.datasets import news_dataset_path
from service.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ROOT / "docs" / "algorithms.md"
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "build", "dist"}
# Written split so this file does not match itself.
HANDBOOK = [
    "../" + "shared",
    "shared/" + "data",
    "shared/" + "seeds",
    "ALGO" + "RITHMS.md",
    "DESIGN" + ".md",
    "STYLE" + ".md",
    "seeds" + "/",
    "guardrail " + "seed",
    "regret " + "seed",
    "HARE " + "derivations",
]


def _text_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if not path.is_file() or SKIP_DIRS & set(rel.parts) or rel.parts[0].endswith(".egg-info"):
            continue
        try:
            files.append((path, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:  # binary: images, the gzipped data set
            continue
    return files


def test_nothing_reads_or_cites_the_handbook() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {needle}"
        for path, text in _text_files()
        for n, line in enumerate(text.splitlines(), 1)
        for needle in HANDBOOK
        if needle in line
    ]
    assert not hits, "\n".join(hits)


def test_every_citation_of_the_algorithm_notes_names_one_of_their_sections() -> None:
    headings = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", ALGORITHMS.read_text(), re.MULTILINE))
    assert {str(n) for n in range(1, 10)} <= headings and {"3.2", "4.2", "4.5"} <= headings
    cited = {
        (path.relative_to(ROOT), number)
        for path, text in _text_files()
        for number in re.findall(
            r"docs/algorithms\.md,?`? sections? (\d+(?:\.\d+)?)", " ".join(text.split())
        )
    }
    assert len(cited) > 20  # the engine's modules, tests and docs cite it
    missing = sorted(
        f"{path}: section {number}" for path, number in cited if number not in headings
    )
    assert not missing, missing


def _documented_commands() -> list[str]:
    """Every ``bandit replay|compare|estimate|simulate|bound`` command of README.md and docs/,
    continuation lines joined."""
    commands = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = iter(doc.read_text().splitlines())
        for line in lines:
            m = re.match(
                r"\s*(?:\$ )?(bandit (?:replay|compare|estimate|simulate|bound)\b.*)", line
            )
            if not m:
                continue
            command = m.group(1)
            while command.endswith("\\"):
                command = command[:-1] + next(lines).strip()
            commands.append(command)
    return commands


COMMANDS = _documented_commands()


def test_the_docs_document_the_offline_commands() -> None:
    assert len(COMMANDS) >= 8 and any(
        c.startswith("bandit compare --format news") for c in COMMANDS
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_a_documented_command_parses_and_finds_its_data(command: str) -> None:
    args = build_parser().parse_args(shlex.split(command)[1:])
    if getattr(args, "format", None) == "news":
        data = Path(args.data) if args.data else news_dataset_path()
        assert data.is_file(), command
