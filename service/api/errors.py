"""The native API's answer to every error, registered on the app by :func:`install_handlers`.

=================================  ======  ==========================================
error                              status  body
=================================  ======  ==========================================
request validation (pydantic)      422     FastAPI's ``detail`` list, ``loc`` names the field
``InvalidRequest``                 422     ``detail`` list with ``loc`` of the field
``ConfigError`` / ``StateFormat``  422     idem
``UnknownArmError``                422     idem (``loc`` names the arm field)
``NoEligibleArmError``             422     idem
``ModelError``                     500     ``{"detail": message}`` naming the policy; logged
``NotFound``                       404     ``{"detail": message}``
``Conflict``                       409     ``{"detail": message}``
``Unauthorized``                   401     ``{"detail": message}`` + ``WWW-Authenticate``
body over ``max_body_bytes``       413     ``{"detail": message}``
body that does not parse           422     ``detail`` list, ``type: json_invalid``
method not allowed                 405     ``{"detail": message}`` + ``Allow`` (every method)
``StoreUnavailableError``          503     ``{"detail": message}`` + ``Retry-After``
``TransactionConflictError``       503     ``{"detail": message}`` + ``Retry-After``
=================================  ======  ==========================================

The domain errors are :mod:`service.errors`'. A ``ModelError`` (the policy produced a
non-finite score from valid features, or a stored state part fails its format checks)
is the service's fault, not the request's: it is logged at ERROR level on
``bandit.service`` with the policy's name, attached by :func:`service.errors.with_policy`
where the engine is called.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from bandit_core.errors import BanditError, ModelError
from service.errors import ApiError, NotFound
from service.storage.base import (
    EventLogUnavailableError,
    StoreUnavailableError,
    TransactionConflictError,
)

log = logging.getLogger("bandit.service")

# The request scope's key under which an answered NotFound leaves its reason for the
# request middleware (service.api.app), which counts every 404; a 404 without it found no route.
NOT_FOUND_REASON = "bandit.not_found_reason"
NO_ROUTE = "route"


def note_not_found(request: Request, exc: ApiError) -> None:
    """Leave the reason of ``exc``, if it is a :class:`NotFound`, in the request's scope."""
    if isinstance(exc, NotFound):
        request.scope[NOT_FOUND_REASON] = exc.reason


def _validation(message: str, loc: Sequence[str | int] | None, kind: str) -> JSONResponse:
    return JSONResponse(
        status_code=422,
        content={"detail": [{"loc": list(loc or ["body"]), "msg": message, "type": kind}]},
    )


# The methods a 405's Allow may name: HTTP's (RFC 9110) less CONNECT and TRACE, which no
# route serves.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves on the request's path (a 405's ``Allow``):
    each method is matched against the app's routes as the router matches a request.
    Asking the routes whether they fully match, rather than reading their ``methods``,
    also sees the routes of included routers, which FastAPI keeps inside one route object
    per router."""
    routes = request.app.router.routes
    return [
        method
        for method in METHODS
        if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
    ]


def install_handlers(app: FastAPI, retry_after_seconds: int) -> None:
    """Register the mapping above on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only loc/msg/type: the offending input may be NaN (not JSON) or large.
        detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400:  # a body that is not JSON (e.g. not UTF-8): like bad JSON
            return _validation(
                f"request body is not valid JSON: {exc.detail}", ["body"], "json_invalid"
            )
        if exc.status_code == 405:
            allow = ", ".join(allowed_methods(request))
            return JSONResponse({"detail": exc.detail}, 405, headers={"Allow": allow})
        return await http_exception_handler(request, exc)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        note_not_found(request, exc)
        if exc.status == 422:
            return _validation(exc.message, exc.loc, exc.kind)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(
            status_code=exc.status, content={"detail": exc.message}, headers=headers
        )

    @app.exception_handler(BanditError)
    async def _bandit_error(request: Request, exc: BanditError) -> JSONResponse:
        return _validation(str(exc), None, type(exc).__name__)

    @app.exception_handler(ModelError)
    async def _model_error(request: Request, exc: ModelError) -> JSONResponse:
        policy = getattr(exc, "service_policy", None)
        log.error(
            "policy %r: model error on %s %s: %s", policy, request.method, request.url.path, exc
        )
        return JSONResponse(
            status_code=500,
            content={
                "detail": f"policy {policy!r} failed (a model error, not the request's): {exc}"
            },
        )

    @app.exception_handler(StoreUnavailableError)
    async def _store_down(request: Request, exc: StoreUnavailableError) -> JSONResponse:
        return JSONResponse(
            status_code=503,
            content={"detail": f"{_unavailable(exc)} unavailable, retry later: {exc}"},
            headers={"Retry-After": str(retry_after_seconds)},
        )

    @app.exception_handler(TransactionConflictError)
    async def _contended(request: Request, exc: TransactionConflictError) -> JSONResponse:
        return JSONResponse(
            status_code=503,
            content={"detail": f"state update contended, retry: {exc}"},
            headers={"Retry-After": "1"},
        )


def _unavailable(exc: StoreUnavailableError) -> str:
    """Which store ``exc`` says is down."""
    return "event log" if isinstance(exc, EventLogUnavailableError) else "state store"
