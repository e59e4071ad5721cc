"""The Personalizer adapter plugs into the core, never the other way round: no module of
``service/`` outside ``service/personalizer/`` imports it, but the two entry points that
wire it in: the app (``service/api/app.py``), which builds the adapter over the core use
cases, and the command line's table of commands (``service/cli/__init__.py``), which adds
the adapter's ``import-log`` and ``export-log``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"
ADAPTER = "service.personalizer"
WIRING = (SERVICE / "api" / "app.py", SERVICE / "cli" / "__init__.py")


def imported_modules(path: Path, root: Path) -> set[str]:
    """Every module ``path`` (a file under ``root``) imports, at any depth of its code:
    ``from x import y`` counts as ``x`` and ``x.y``; relative imports are resolved
    against ``path``'s package."""
    package = path.relative_to(root).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parent = package[: len(package) - node.level + 1] if node.level else ()
            base = ".".join([*parent, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def names_adapter(module: str) -> bool:
    return module == ADAPTER or module.startswith(ADAPTER + ".")


def test_the_core_never_imports_the_personalizer_adapter() -> None:
    core = [
        path
        for path in sorted(SERVICE.rglob("*.py"))
        if SERVICE / "personalizer" not in path.parents and path not in WIRING
    ]
    assert len(core) > 50  # the walk found the service's modules
    offenders = {
        str(path.relative_to(ROOT)): sorted(filter(names_adapter, imported_modules(path, ROOT)))
        for path in core
    }
    assert {path: found for path, found in offenders.items() if found} == {}
    for wiring in WIRING:  # each entry point does name it
        assert any(map(names_adapter, imported_modules(wiring, ROOT)))


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    """The parser above finds the adapter behind each form of import (it cannot pass
    by missing one): plain, from, inside a function, and relative."""
    sources = [
        "import service.personalizer.loops\n",
        "from service.personalizer import loops\n",
        "def f():\n    from service.personalizer.loops import Loops\n",
        "from ..personalizer import loops\n",
        "from .. import personalizer\n",
    ]
    path = tmp_path / "service" / "usecases" / "probe.py"
    path.parent.mkdir(parents=True)
    for source in sources:
        path.write_text(source)
        assert any(map(names_adapter, imported_modules(path, tmp_path))), source
    path.write_text("from service.personalizing import x\nimport service.policies\n")
    assert not any(map(names_adapter, imported_modules(path, tmp_path)))
