"""A method a path does not serve is a 405 whose ``Allow`` lists every method the app's
routes serve on that path, on every route of every family (native, Personalizer under
each prefix, the documentation and metrics routes)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts

from service.api.errors import METHODS
from service.personalizer.routers import PERSONALIZER_PATH
from tests.service.conftest import running

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("backend", ["embedded"])]

# a value for each path parameter that its route accepts (any other takes "x")
PATH_VALUES = {"version": "v1.0"}


def _concrete(template: str) -> str:
    return re.sub(r"{(\w+)(?::\w+)?}", lambda m: PATH_VALUES.get(m.group(1), "x"), template)


async def test_every_405_lists_the_methods_of_its_path(make_settings: Any) -> None:
    async with running(make_settings()) as (app, http, _):
        routes = [rc for rc in iter_route_contexts(app.routes) if rc.methods]
        paths = {_concrete(rc.path) for rc in routes}
        for family in (
            "/policies/",
            "/personalizer/",
            "/personalizer/v1.0/",
            "/loops/x/personalizer/",
            "/loops/x/personalizer/v1.0/",
            "/docs",
        ):  # every family's routes were found
            assert sum(p.startswith(family) for p in paths) >= 1, family
        refused = 0
        for path in sorted(paths):
            # what the declarations say: the methods of every route whose pattern takes the path
            declared = {m for rc in routes if rc.path_regex.match(path) for m in rc.methods}
            assert declared, path
            for method in sorted(set(METHODS) - declared):
                r = await http.request(method, path)
                assert r.status_code == 405, (method, path, r.status_code)
                assert set(r.headers["allow"].split(", ")) == declared, (method, path)
                if method != "HEAD":  # a HEAD answer has no body
                    body = r.json()
                    if PERSONALIZER_PATH.match(path):
                        assert body["error"]["code"] == "BadRequest", (method, path)
                    else:
                        assert body == {"detail": "Method Not Allowed"}, (method, path)
                refused += 1
        assert refused > 5 * len(paths)
