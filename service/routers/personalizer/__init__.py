"""Azure AI Personalizer's REST API over the same use cases (docs/personalizer.md).

Every route exists in four places: the default loop under the base URL and any policy
under ``/loops/{policy}``, each as ``/personalizer/...?api-version=...`` (the
``azure-ai-personalizer`` SDK; the api-version is accepted and ignored) and as
``/personalizer/{version}/...`` with ``version`` one of ``v1.0`` (the
``azure-cognitiveservices-personalizer`` SDK) and ``v1.1-preview.1`` to ``.3``.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from service.routers.personalizer.errors import error_response
from service.routers.personalizer.routes import make_router
from service.schemas import PolicyName
from service.usecases.loops import DEFAULT_LOOP

Version = Literal["v1.0", "v1.1-preview.1", "v1.1-preview.2", "v1.1-preview.3"]


async def default_loop() -> str:
    return DEFAULT_LOOP


LoopName = Path(description="the policy serving as the loop")
VersionSegment = Path(description="the API version of the path")


async def named_loop(policy: PolicyName = LoopName) -> str:
    return policy


async def api_version(
    version: str | None = Query(None, alias="api-version", description="accepted and ignored"),
) -> None:
    """The ``api-version`` query parameter the 2022 SDK sends (any value)."""


async def path_version(version: Version = VersionSegment) -> None:
    """The version segment of the ``v1.0`` / ``v1.1-preview.N`` paths."""


def not_found_router() -> APIRouter:
    """Any other path under ``/personalizer`` (multi-slot, evaluations, logs, model, a
    wrong method): 404 ``ResourceNotFound`` in Personalizer's shape."""
    router = APIRouter(include_in_schema=False)
    methods = ["GET", "POST", "PUT", "DELETE", "PATCH"]

    @router.api_route("/personalizer/{rest:path}", methods=methods)
    @router.api_route("/loops/{policy}/personalizer/{rest:path}", methods=methods)
    async def unknown_route(request: Request) -> JSONResponse:
        return error_response(
            404, "ResourceNotFound", f"no route {request.method} {request.url.path}"
        )

    return router


def routers() -> list[APIRouter]:
    """The Personalizer routers, in the order to include them (the ``api-version``
    family first, so that ``/personalizer/configurations/...`` never reads as a version;
    the catch-all last)."""
    return [
        make_router("/personalizer", default_loop, api_version),
        make_router("/loops/{policy}/personalizer", named_loop, api_version),
        make_router("/personalizer/{version}", default_loop, path_version),
        make_router("/loops/{policy}/personalizer/{version}", named_loop, path_version),
        not_found_router(),
    ]
