"""Each use case takes of the state store only the roles it calls
(docs/architecture.md, "The state store's roles"): the whole ``StateStore`` is named only
by the storage package that defines and implements it and by the two modules that wire
one store into everything (``build_use_cases`` in ``service/usecases/__init__.py`` and
the lifespan in ``service/api/app.py``), and no module reaches the store through
:class:`~service.usecases.policy_cache.PolicyCache` (``<x>.cache.store``): a use case
that calls a role beyond the cache's declares it as its own ``store``."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.service.test_adapter_boundary import imported_modules

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "service"
WIRING = (SERVICE / "usecases" / "__init__.py", SERVICE / "api" / "app.py")
WHOLE_STORE = "service.storage.state_store.StateStore"


def reaches_through_the_cache(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that read ``store`` of a name or an attribute ``cache``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "store"
        and (
            (isinstance(node.value, ast.Attribute) and node.value.attr == "cache")
            or (isinstance(node.value, ast.Name) and node.value.id == "cache")
        )
    ]


def test_only_the_storage_package_and_the_wiring_name_the_whole_store() -> None:
    modules = sorted(SERVICE.rglob("*.py"))
    assert len(modules) > 50  # the walk found the service's modules
    naming = {
        path.relative_to(ROOT).as_posix()
        for path in modules
        if WHOLE_STORE in imported_modules(path, ROOT)
    }
    outside = {path for path in naming if not path.startswith("service/storage/")}
    assert outside == {path.relative_to(ROOT).as_posix() for path in WIRING}


def test_no_module_reaches_the_store_through_the_policy_cache() -> None:
    offenders = {
        path.relative_to(ROOT).as_posix(): lines
        for path in sorted(SERVICE.rglob("*.py"))
        if path.name != "policy_cache.py"
        and (lines := reaches_through_the_cache(ast.parse(path.read_text(), str(path))))
    }
    assert offenders == {}


def test_the_check_sees_a_reach_through_the_cache() -> None:
    tree = ast.parse("async def f(self):\n    await self.admin.cache.store.keys('p', [])\n")
    assert reaches_through_the_cache(tree) == [2]
    assert reaches_through_the_cache(ast.parse("x = 1\nstore = cache.store\n")) == [2]
    assert reaches_through_the_cache(ast.parse("self.cache.read('p', [], {})\n")) == []
