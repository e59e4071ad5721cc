"""Errors of the service and the one place mapping every error to an HTTP status.

=================================  ======  ==========================================
error                              status  body
=================================  ======  ==========================================
request validation (pydantic)      422     FastAPI's ``detail`` list, ``loc`` names the field
``InvalidInputError``              422     ``detail`` list with ``loc`` of the field
``ConfigError`` / ``StateFormat``  422     idem
``UnknownArmError``                422     idem (``loc`` names the arm field)
``NoEligibleArmError``             422     idem
:class:`NotFound`                  404     ``{"detail": message}``
:class:`Conflict`                  409     ``{"detail": message}``
:class:`Unauthorized`              401     ``{"detail": message}`` + ``WWW-Authenticate``
body over ``max_body_bytes``       413     ``{"detail": message}``
``StoreUnavailableError``          503     ``{"detail": message}`` + ``Retry-After``
``TransactionConflictError``       503     ``{"detail": message}`` + ``Retry-After``
=================================  ======  ==========================================

Nothing is written when an error is answered: every check runs before the first write.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from bandit_core.errors import BanditError
from service.storage.base import StoreUnavailableError, TransactionConflictError


class ApiError(Exception):
    """An error answered with ``status``; ``loc`` names the offending field for 422s."""

    status: int = 400

    def __init__(self, message: str, loc: Sequence[str | int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = list(loc) if loc is not None else None


class InvalidRequest(ApiError):
    status = 422


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    status = 409


class Unauthorized(ApiError):
    status = 401


def _validation(message: str, loc: Sequence[str | int] | None, kind: str) -> JSONResponse:
    return JSONResponse(
        status_code=422,
        content={"detail": [{"loc": list(loc or ["body"]), "msg": message, "type": kind}]},
    )


def install_handlers(app: FastAPI, retry_after_seconds: int) -> None:
    """Register the mapping above on ``app``."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Only loc/msg/type: the offending input may be NaN (not JSON) or large.
        detail = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        if exc.status == 422:
            return _validation(exc.message, exc.loc, "invalid_input")
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(
            status_code=exc.status, content={"detail": exc.message}, headers=headers
        )

    @app.exception_handler(BanditError)
    async def _bandit_error(request: Request, exc: BanditError) -> JSONResponse:
        loc = getattr(exc, "service_loc", None)
        return _validation(str(exc), loc, type(exc).__name__)

    @app.exception_handler(StoreUnavailableError)
    async def _store_down(request: Request, exc: StoreUnavailableError) -> JSONResponse:
        return JSONResponse(
            status_code=503,
            content={"detail": f"state store unavailable, retry later: {exc}"},
            headers={"Retry-After": str(retry_after_seconds)},
        )

    @app.exception_handler(TransactionConflictError)
    async def _contended(request: Request, exc: TransactionConflictError) -> JSONResponse:
        return JSONResponse(
            status_code=503,
            content={"detail": f"state update contended, retry: {exc}"},
            headers={"Retry-After": "1"},
        )


def with_loc(exc: BanditError, loc: Sequence[str | int]) -> BanditError:
    """Attach the request field an engine error is about (read by the handler)."""
    exc.service_loc = list(loc)  # type: ignore[attr-defined]
    return exc
