"""Routers that pass over a path none of their routes can match, in one look at it.

The application includes 29 routers (the native API's five, and six route groups for
each of Personalizer's four path families: service/personalizer/routers). FastAPI
matches a request against the included routers in order, route by route, each route
with its own bookkeeping: ``POST /personalizer/v1.0/rank`` went through 89 routes
before its own. A :class:`PathFilteredRouter` first tries one pattern, its routes' path
patterns as alternatives, on the request's path and answers "no match" when it fails,
which is what every one of its routes would have answered; otherwise FastAPI's matching
runs as before (methods, partial matches, path parameters). docs/performance.md section
9, "Routing".
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter
from starlette.routing import Match
from starlette.types import Scope

_UNNAMED_GROUP = re.compile(r"\(\?P<\w+>")
"""The opening of a named group, ``(?P<name>``: alternatives may not repeat a name."""


def _route_path(scope: Scope) -> str:
    """The path routes match: ``path`` less the ``root_path`` it starts with (as Starlette
    routes it)."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    if (
        root_path
        and path.startswith(root_path)
        and path[len(root_path) : len(root_path) + 1] in ("", "/")
    ):
        return path[len(root_path) :]
    return path


class PathFilteredRouter(APIRouter):
    """An :class:`~fastapi.APIRouter` that answers ``Match.NONE`` at once for an HTTP
    request whose path matches none of its routes' patterns (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._any_route: tuple[int, re.Pattern[str] | None] = (-1, None)

    def _any_route_pattern(self) -> re.Pattern[str] | None:
        """One pattern matching the paths any route matches (their patterns as
        alternatives, the groups unnamed), None when a route has none (it is never
        skipped); made again when routes were added."""
        count, pattern = self._any_route
        if count != len(self.routes):
            found = [getattr(route, "path_regex", None) for route in self.routes]
            pattern = None
            if found and None not in found:
                alternatives = (_UNNAMED_GROUP.sub("(?:", p.pattern) for p in found if p)
                pattern = re.compile("|".join(f"(?:{a})" for a in alternatives))
            self._any_route = (len(self.routes), pattern)
        return pattern

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            pattern = self._any_route_pattern()
            if pattern is not None and pattern.match(_route_path(scope)) is None:
                return Match.NONE, {}
        return super().matches(scope)
