"""Azure AI Personalizer's REST API over the same use cases (docs/personalizer.md).

Every route exists in four places: the default loop under the base URL and any policy
under ``/loops/{policy}``, each as ``/personalizer/...?api-version=...`` (the
``azure-ai-personalizer`` SDK; the api-version is accepted and ignored) and as
``/personalizer/{version}/...`` with ``version`` one of ``v1.0`` (the
``azure-cognitiveservices-personalizer`` SDK) and ``v1.1-preview.1`` to ``.3``.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Literal

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.personalizer.loops import DEFAULT_LOOP
from service.personalizer.routers.errors import error_response
from service.personalizer.routers.evaluations import make_evaluations_router
from service.personalizer.routers.feature_importances import make_feature_importance_router
from service.personalizer.routers.logs import make_logs_router
from service.personalizer.routers.model import make_model_router
from service.personalizer.routers.multislot import make_multislot_router
from service.personalizer.routers.routes import make_router
from service.schemas import PolicyName

PERSONALIZER_PATH = re.compile(r"^(/loops/[^/]+)?/personalizer(/|$)")
Version = Literal["v1.0", "v1.1-preview.1", "v1.1-preview.2", "v1.1-preview.3"]


LoopName = Path(description="the policy serving as the loop")
VersionSegment = Path(description="the API version of the path")
ApiVersionQuery = Query(None, alias="api-version", description="accepted and ignored")

# A family's loop dependency also takes the family's other path or query parameter, so
# that a request solves one dependency for both (each costs FastAPI's bookkeeping on
# every request: docs/performance.md section 9, item 10).


async def default_loop(version: str | None = ApiVersionQuery) -> str:
    """The default loop, under ``/personalizer`` with the ``api-version`` query
    parameter the 2022 SDK sends (any value)."""
    return DEFAULT_LOOP


async def named_loop(policy: PolicyName = LoopName, version: str | None = ApiVersionQuery) -> str:
    """The policy of ``/loops/{policy}/personalizer`` (``api-version`` as above)."""
    return policy


async def default_loop_of_version(version: Version = VersionSegment) -> str:
    """The default loop, under ``/personalizer/{version}`` (``v1.0``, ``v1.1-preview.N``)."""
    return DEFAULT_LOOP


async def named_loop_of_version(
    version: Version = VersionSegment, policy: PolicyName = LoopName
) -> str:
    """The policy of ``/loops/{policy}/personalizer/{version}``."""
    return policy


def install_handlers(app: FastAPI) -> None:
    """Answer an unknown path (404) or method (405) under ``/personalizer`` or
    ``/loops/{policy}/personalizer`` in Personalizer's shape; wraps the native handler
    (service/errors.py), which keeps answering every other path."""
    native = app.exception_handlers[StarletteHTTPException]

    async def handler(request: Request, exc: Exception) -> Response:
        response = native(request, exc)
        if inspect.isawaitable(response):  # a handler may be sync or async
            response = await response
        if not PERSONALIZER_PATH.match(request.url.path) or response.status_code not in (404, 405):
            return response
        if response.status_code == 404:
            return error_response(404, "ResourceNotFound", f"no route {request.url.path}")
        return error_response(
            405,
            "BadRequest",
            f"{request.method} is not allowed on {request.url.path}",
            {"Allow": response.headers["Allow"]},
        )

    app.add_exception_handler(StarletteHTTPException, handler)


FAMILIES = (
    ("/personalizer", default_loop),
    ("/loops/{policy}/personalizer", named_loop),
    ("/personalizer/{version}", default_loop_of_version),
    ("/loops/{policy}/personalizer/{version}", named_loop_of_version),
)
"""Each family's prefix and loop dependency (which takes the prefix's parameters), in
the order to include them (the ``api-version`` family first, so that
``/personalizer/configurations/...`` never reads as a version)."""

ROUTE_GROUPS = (
    make_router,
    make_multislot_router,
    make_model_router,
    make_feature_importance_router,
    make_logs_router,
    make_evaluations_router,
)
"""The functions building one group of routes for a family (``make_router(prefix,
loop_of)``); a new group of Personalizer routes is one more entry here."""


@functools.cache
def routers() -> tuple[APIRouter, ...]:
    """The Personalizer routers: every route group of every family. Built once per
    process (they hold no app's state, as the native routers, which are module
    attributes): building their routes is most of an app's creation."""
    return tuple(group(*family) for family in FAMILIES for group in ROUTE_GROUPS)
