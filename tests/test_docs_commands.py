"""Every command and Python example in README.md and docs/*.md runs on a fresh clone.

Each document is a test: its fenced ``python`` blocks and its console commands (lines of
indented, ``console``, ``bash`` or unlabelled fenced blocks that start with a known
program, ``$ `` prompts and ``\\`` continuations handled) run in the document's order in
a fresh directory that mirrors the repository (symlinks to its top-level entries), so
one command can create what the next one uses and nothing is written into the clone.
Python blocks share their document's namespace (each runs after the earlier ones);
blocks written as doctests (``>>>``) are run by doctest, so their outputs are checked.
``bandit``, ``python`` and ``cp`` commands run and must exit 0; every other command is
listed in ``EXCLUDED`` with the reason it is not run here. A new document under docs/
is covered without changing this file.
"""

from __future__ import annotations

import doctest
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import AppProcess

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = ("bandit", "python", "cp")
# A Python block addressing this server (with this key) runs against one the test starts.
DOC_SERVER, DOC_KEY = "http://127.0.0.1:8000", "my-key"
# Programs a command line may start with; a line starting with anything else is output,
# configuration or a formula shown in a code block, not a command.
PROGRAMS = (*RUN, "pip", "curl", "docker", "apt-get", "py-spy", "uptime", "git", "redis-cli")
# (command prefix or pattern, why the test does not run it)
EXCLUDED: list[tuple[str, str]] = [
    (r"pip install|python -m pip install", "installs the package; the test runs the tree it is in"),
    (r"bandit serve", "serves until stopped; tests/service/test_serve.py starts it and probes it"),
    (r"python -m pytest", "runs the test suite this test is part of"),
    (
        r"bandit compare --format news",
        "Table 3's protocol, many policies, seeds and alphas: minutes of CPU (parsed by "
        + "tests/test_standalone.py; tests/bandit_core check LinUCB's row on the same data)",
    ),
    (r"curl ", "talks to a running server; tests/service/test_api.py sends the same requests"),
    (
        r"bandit features",
        "asks a running server; tests/service/test_feature_importance.py runs it against one",
    ),
    (
        r"bandit model",
        "asks a running server; tests/service/personalizer/test_model_admin.py runs it against one",
    ),
    (r"docker ", "needs a Docker engine; tests/deploy checks the compose file and the image"),
    (r"apt-get ", "installs system packages"),
    (r"py-spy ", "attaches to a running server process"),
    (r"uptime$", "prints the machine's load (part of the benchmark recipes)"),
    (
        r"python (-m benchmarks\.|benchmarks/|-m pyinstrument)",
        "a benchmark: minutes of CPU on a quiet machine; results are under benchmarks/results",
    ),
]


@dataclass(frozen=True)
class Step:
    """One thing a document asks the reader to run."""

    line: int
    kind: str  # "python" or "command"
    text: str


def _blocks(text: str) -> list[tuple[int, str, str]]:
    """``(line, language, code)`` of every fenced block and indented code block."""
    lines = text.split("\n")
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)", lines[i])
        indented = re.match(r"^( {4,})\S", lines[i])
        if fence:
            width, body, j = len(fence.group(1)), [], i + 1
            while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
                body.append(lines[j][width:])
                j += 1
            blocks.append((i + 1, fence.group(2), "\n".join(body)))
            i = j + 1
        elif indented and (i == 0 or not lines[i - 1].strip()):
            width, body, j = len(indented.group(1)), [], i
            while j < len(lines) and (not lines[j].strip() or lines[j].startswith(" " * width)):
                body.append(lines[j][width:])
                j += 1
            blocks.append((i + 1, "", "\n".join(body).rstrip()))
            i = j
        else:
            i += 1
    return blocks


def _open_quote(text: str) -> bool:
    """Whether ``text`` ends inside a quoted shell word."""
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return True
    return False


def _commands(code: str) -> list[str]:
    """The command lines of a shell-like block, continuations joined."""
    commands, pending = [], ""
    for raw in code.split("\n"):
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        elif not pending and not line.startswith(PROGRAMS):
            continue
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        if _open_quote(pending):  # a quoted argument (a JSON body) spans lines
            pending += "\n"
            continue
        for part in re.split(r"\s*(?:&&|;)\s+|;$", pending):
            words = shlex.split(part, comments=True)
            if words and words[0] in PROGRAMS:
                commands.append(shlex.join(words))
        pending = ""
    return commands


def steps(document: Path) -> list[Step]:
    """The document's Python blocks and commands, in order."""
    found = []
    for line, language, code in _blocks(document.read_text()):
        if language == "python":
            found.append(Step(line, "python", code))
        elif language in ("", "console", "bash", "sh", "shell"):
            found += [Step(line, "command", command) for command in _commands(code)]
    return found


def exclusion(command: str) -> str | None:
    """Why ``command`` is not run here, or None when it is."""
    for pattern, reason in EXCLUDED:
        if re.match(pattern, command):
            return reason
    return None


def _mirror(work: Path) -> None:
    """A directory that reads like the repository's root, without writing into it."""
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry)


def _run(step: Step, python_so_far: list[str], work: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    if step.kind == "python" and step.text.lstrip().startswith(">>>"):
        # a doctest-style block: its printed outputs are checked too
        script = (
            "import doctest, sys\n"
            f"names = {{}}\nexec({chr(10).join(python_so_far)!r}, names)\n"
            f"test = doctest.DocTestParser().get_doctest({step.text!r}, names, 'doc', None, 0)\n"
            "runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)\n"
            "sys.exit(1 if runner.run(test).failed else 0)\n"
        )
        argv = [sys.executable, "-c", script]
    elif step.kind == "python":
        argv = [sys.executable, "-c", "\n\n".join([*python_so_far, step.text])]
    else:
        words = shlex.split(step.text)
        program = {"bandit": shutil.which("bandit"), "python": sys.executable}.get(words[0])
        argv = [program or words[0], *words[1:]]
    return subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, check=False, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_and_example_of_the_document_runs(document: Path, tmp_path: Path) -> None:
    work = tmp_path / "clone"
    work.mkdir()
    _mirror(work)
    python_so_far: list[str] = []
    server: AppProcess | None = None
    try:
        for step in steps(document):
            if step.kind == "command" and exclusion(step.text):
                continue
            if step.kind == "python" and DOC_SERVER in step.text:
                # a client example: against a real `bandit serve` (embedded default, the
                # example's key) on a free port
                if server is None:
                    env = {"BANDIT_API_KEYS": DOC_KEY, "BANDIT_DATA_DIR": str(tmp_path / "data")}
                    server = AppProcess(env).start()
                step = Step(step.line, step.kind, step.text.replace(DOC_SERVER, server.url))
            _check_step(document, step, python_so_far, work)
    finally:
        if server is not None:
            server.stop()


def _check_step(document: Path, step: Step, python_so_far: list[str], work: Path) -> None:
    """Run ``step`` after the document's earlier Python blocks; it must succeed."""
    result = _run(step, python_so_far, work)
    assert result.returncode == 0, (
        f"{document.name}:{step.line}: {step.text}\n{result.stdout[-2000:]}"
        f"\n{result.stderr[-3000:]}"
    )
    if step.kind == "python":
        doctest_block = step.text.lstrip().startswith(">>>")
        python_so_far.append(
            doctest.script_from_examples(step.text) if doctest_block else step.text
        )


def test_the_parser_finds_commands_and_examples_and_every_skip_has_a_reason() -> None:
    every = {document.name: steps(document) for document in DOCUMENTS}
    commands = [s.text for found in every.values() for s in found if s.kind == "command"]
    assert "bandit bound guardrail --d 128 --T 1e6 --delta-g 0.01 --r-max 100" in commands
    assert "python -m pip install -c requirements/dev.txt -e '.[dev]'" in commands
    assert any(s.kind == "python" for s in every["README.md"])
    assert all(reason for _, reason in EXCLUDED)
    run = [c for c in commands if not exclusion(c)]
    assert len(run) >= 5, run
    assert _commands("$ bandit replay --a 1 \\\n    --b 2   # note\nsome output") == [
        "bandit replay --a 1 --b 2"
    ]
