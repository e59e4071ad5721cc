"""The domain errors (service/errors.py) import no web framework and carry their location
as data: a path that renders as text, which the Personalizer adapter moves into its own
field names without touching the message."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from service.errors import InvalidRequest, field_path
from service.personalizer.loops import in_rank_request

ERRORS = Path(__file__).resolve().parents[2] / "service" / "errors.py"


def test_the_domain_errors_import_no_web_framework() -> None:
    tree = ast.parse(ERRORS.read_text())
    modules = {alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names}
    modules |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert modules  # the walk read the imports
    assert not {m for m in modules if m.split(".")[0] in ("fastapi", "starlette")}


@pytest.mark.parametrize(
    ("loc", "text"),
    [
        (["body", "context", 0, "user", "tags", 3], "context[0].user.tags[3]"),
        (["body", "arms", 1, "features", 0, "p"], "arms[1].features[0].p"),
        (["query", "window"], "window"),
        (["body"], "body"),
        ([], "body"),
        (["slots", 2, "id"], "slots[2].id"),
    ],
)
def test_a_location_renders_as_a_field_path(loc: list[str | int], text: str) -> None:
    assert field_path(loc) == text


def test_a_rank_error_is_located_in_personalizers_field_names() -> None:
    """The adapter moves the location, never the message's words: same message, problem
    and kind, the path renamed item by item."""
    native = InvalidRequest(
        "context[0].u: expected a number", ["body", "context", 0, "u"], problem="expected a number"
    )
    native.kind = "InvalidFeatureError"
    located = in_rank_request(native)
    assert (located.message, located.problem, located.kind) == (
        native.message,
        "expected a number",
        "InvalidFeatureError",
    )
    assert field_path(located.loc or []) == "contextFeatures[0].u"
    assert field_path(in_rank_request(InvalidRequest("x", ["body", "exclude"])).loc or []) == (
        "excludedActions"
    )
