"""A small reader of the repository's Dockerfile and .dockerignore, enough to check the
image's structure and to lay out, without a Docker engine, the files its final stage
holds under its WORKDIR."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, COPY, ...
    args: str  # the rest of the (joined) line

    def exec_form(self) -> list[str] | None:
        """The JSON array of an exec-form CMD/ENTRYPOINT/HEALTHCHECK CMD, else None."""
        text = self.args.partition("CMD ")[2] if self.keyword == "HEALTHCHECK" else self.args
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, list) else None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        """ENV key=value pairs of this stage (later ones win)."""
        values: dict[str, str] = {}
        for inst in self.all("ENV"):
            for token in shlex.split(inst.args):
                key, _, value = token.partition("=")
                values[key] = value
        return values

    def workdir(self) -> PurePosixPath:
        workdirs = self.all("WORKDIR")
        return PurePosixPath(workdirs[-1].args.strip()) if workdirs else PurePosixPath("/")


def instructions(path: Path = ROOT / "Dockerfile") -> list[Instruction]:
    """The Dockerfile's instructions with continuation lines joined and comments dropped."""
    result: list[Instruction] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        result.append(Instruction(keyword.upper(), " ".join(args.split())))
    return result


def stages(path: Path = ROOT / "Dockerfile") -> list[Stage]:
    """The build stages in order (instructions before the first FROM, i.e. ARG, dropped)."""
    result: list[Stage] = []
    for inst in instructions(path):
        if inst.keyword == "FROM":
            parts = inst.args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            result.append(Stage(parts[0], name))
        elif result:
            result[-1].instructions.append(inst)
    return result


def copy_parts(inst: Instruction) -> tuple[str | None, list[str], str]:
    """``(from_stage, sources, destination)`` of a COPY instruction."""
    tokens = inst.args.split()
    from_stage = None
    while tokens and tokens[0].startswith("--"):
        flag = tokens.pop(0)
        if flag.startswith("--from="):
            from_stage = flag.split("=", 1)[1]
    return from_stage, tokens[:-1], tokens[-1]


def dockerignore_patterns(path: Path = ROOT / ".dockerignore") -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's matching (Go filepath.Match plus ``**``): ``*`` and ``?`` stay within one
    path segment, ``**`` spans any number of segments."""
    out = ""
    for token in re.split(r"(\*\*/?|\*|\?)", pattern.strip("/")):
        if token in ("**", "**/"):
            out += "(?:.*/)?" if token == "**/" else ".*"
        elif token == "*":
            out += "[^/]*"
        elif token == "?":
            out += "[^/]"
        else:
            out += re.escape(token)
    return re.compile(out)


def ignored(relative: str, patterns: list[str]) -> bool:
    """Whether the build context drops ``relative``: a pattern excludes a path that it
    matches or whose parent directory it matches (no ``!`` exceptions are used here)."""
    parts = PurePosixPath(relative).parts
    regexes = [_pattern_regex(p) for p in patterns]
    return any(
        regex.fullmatch("/".join(parts[:depth]))
        for regex in regexes
        for depth in range(1, len(parts) + 1)
    )


def context_files(patterns: list[str]) -> list[Path]:
    """Every file of the repository that enters the build context."""
    files = []
    for path in ROOT.rglob("*"):
        relative = path.relative_to(ROOT).as_posix()
        if path.is_file() and not ignored(relative, patterns):
            files.append(path)
    return files


def _copy_into(sources: list[Path], dest: Path, dest_is_dir: bool) -> None:
    for source in sources:
        target = dest if not dest_is_dir else dest / source.name
        if source.is_dir():
            # COPY dir/ dest/ copies the directory's contents.
            shutil.copytree(source, dest, dirs_exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def lay_out_final_stage(root: Path) -> Path:
    """Reproduce under ``root`` the files the final stage's COPY instructions put in the
    image (from the build context, filtered by .dockerignore, or from earlier stages);
    return ``root`` + the final WORKDIR. RUN steps are not executed."""
    patterns = dockerignore_patterns()
    context = root / "_context"
    for path in context_files(patterns):
        target = context / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    image_roots: dict[str, Path] = {}
    run_text = {stage.name: " ".join(i.args for i in stage.all("RUN")) for stage in stages()}
    for stage in stages():
        fs = root / (stage.name or "final")
        fs.mkdir(parents=True, exist_ok=True)
        workdir = PurePosixPath("/")
        for inst in stage.instructions:
            if inst.keyword == "WORKDIR":
                workdir = workdir / inst.args.strip()
                continue
            if inst.keyword != "COPY":
                continue
            from_stage, sources, dest = copy_parts(inst)
            source_root = image_roots[from_stage] if from_stage else context
            dest_path = workdir / dest
            paths = []
            for source in sources:
                path = source_root / (source.lstrip("/") if from_stage else source)
                if path.exists():
                    paths.append(path)
                elif not (from_stage and source in run_text[from_stage]):
                    raise FileNotFoundError(f"COPY source {source!r} missing from {source_root}")
            _copy_into(
                paths, fs / str(dest_path).lstrip("/"), dest.endswith("/") or len(sources) > 1
            )
        image_roots[stage.name or "final"] = fs
    final = stages()[-1]
    return root / (final.name or "final") / str(final.workdir()).lstrip("/")
