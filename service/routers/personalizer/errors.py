"""Personalizer's error body and auth, scoped to its routes (the native API keeps its own).

:class:`PersonalizerRoute` answers every error of a Personalizer route as
``{"error": {"code": ..., "message": ...}}``: bad input 400 (the message names the
field; the code is the route's, e.g. ``InvalidRankRequest``), a missing or wrong key 401,
an unknown loop or API version 404 ``ResourceNotFound``, the state store down 503 with ``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from bandit_core.errors import BanditError
from service.auth import check_key
from service.errors import ApiError
from service.storage.base import StoreUnavailableError, TransactionConflictError

SUBSCRIPTION_KEY = "Ocp-Apim-Subscription-Key"
# the code of a 400 per route (endpoint function name); others: BadRequest
INVALID_INPUT_CODES = {
    "rank": "InvalidRankRequest",
    "reward": "InvalidRewardRequest",
    "activate": "InvalidEventIdToActivate",
    "update_service_configuration": "InvalidServiceConfiguration",
    "update_policy": "InvalidPolicyConfiguration",
    "create_evaluation": "InvalidEvaluationContract",
    "put_evaluation": "InvalidEvaluationContract",
}
CODE_OF_STATUS = {401: "401", 404: "ResourceNotFound", 409: "Conflict", 413: "PayloadSizeExceeded"}

_subscription_key = APIKeyHeader(
    name=SUBSCRIPTION_KEY, auto_error=False, description="an API key from BANDIT_API_KEYS"
)
_bearer = HTTPBearer(auto_error=False, description="an API key from BANDIT_API_KEYS")


async def personalizer_key(
    request: Request,
    subscription_key: Annotated[str | None, Depends(_subscription_key)],
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Dependency of every Personalizer route: ``Ocp-Apim-Subscription-Key`` (or
    ``Authorization: Bearer``) against the service's API keys (service/auth.py)."""
    presented = (
        subscription_key
        if subscription_key is not None
        else (bearer.credentials if bearer else None)
    )
    check_key(request, presented, f"{SUBSCRIPTION_KEY} (or Authorization: Bearer <api key>)")


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        status_code=status, content={"error": {"code": code, "message": message}}, headers=headers
    )


def _field(loc: Sequence[str | int]) -> str:
    """The field a validation ``loc`` names, without FastAPI's ``body``/``path``/``query``."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "path", "query", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


class PersonalizerRoute(APIRoute):
    """A route answering its errors in Personalizer's shape (module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        invalid = INVALID_INPUT_CODES.get(self.name, "BadRequest")

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                error = exc.errors()[0]
                if tuple(error["loc"]) == ("path", "version"):  # not a Personalizer path
                    return error_response(404, "ResourceNotFound", f"no route {request.url.path}")
                if error["type"] == "json_invalid":
                    return error_response(
                        400, invalid, f"the body is not valid JSON: {error['msg']}"
                    )
                return error_response(400, invalid, f"{_field(error['loc'])}: {error['msg']}")
            except StarletteHTTPException as exc:  # a body that is not UTF-8
                return error_response(
                    exc.status_code,
                    invalid if exc.status_code == 400 else "BadRequest",
                    str(exc.detail),
                )
            except ApiError as exc:
                if exc.status in (400, 422):
                    field = _field(exc.loc) if exc.loc else None
                    named = field is None or exc.message.startswith(field.split(".")[0])
                    message = exc.message if named else f"{field}: {exc.message}"
                    return error_response(400, invalid, message)
                headers = {"WWW-Authenticate": SUBSCRIPTION_KEY} if exc.status == 401 else None
                return error_response(
                    exc.status, CODE_OF_STATUS.get(exc.status, "BadRequest"), exc.message, headers
                )
            except BanditError as exc:
                return error_response(400, invalid, str(exc))
            except (StoreUnavailableError, TransactionConflictError) as exc:
                return error_response(
                    503,
                    "ServiceUnavailable",
                    f"state store unavailable or contended, retry later: {exc}",
                    {"Retry-After": str(request.app.state.settings.redis_retry_after_seconds)},
                )

        return route
