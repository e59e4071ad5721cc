"""Personalizer's error body and auth, scoped to its routes (the native API keeps its own).

:class:`PersonalizerRoute` answers every error of a Personalizer route as
``{"error": {"code": ..., "message": ...}}`` with the code also in the
``x-ms-error-code`` header: bad input 400 (the message names the field; the code is the
route's, e.g. ``InvalidRankRequest``), a missing or wrong key 401, a 404 coded by what
was not found (:data:`NOT_FOUND_CODES`, else ``ResourceNotFound``), a model error 500
``InternalServerError``, the state store down 503 with ``Retry-After``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection

from bandit_core.errors import BanditError, ModelError
from service.api.auth import check_key
from service.api.errors import note_not_found
from service.errors import ApiError, NotFound, field_path
from service.personalizer.schemas import PersonalizerErrorResponse
from service.routers.json_route import JsonRoute
from service.storage.base import StoreUnavailableError, TransactionConflictError

log = logging.getLogger("bandit.service")

SUBSCRIPTION_KEY = "Ocp-Apim-Subscription-Key"
# the code of a 400 per route (endpoint function name); others: BadRequest
INVALID_INPUT_CODES = {
    "rank": "InvalidRankRequest",
    "reward": "InvalidRewardRequest",
    "activate": "InvalidEventIdToActivate",
    "update_service_configuration": "InvalidServiceConfiguration",
    "update_policy": "InvalidPolicyConfiguration",
    "rank_multi_slot": "InvalidRankRequest",
    "reward_multi_slot": "InvalidRewardRequest",
    "activate_multi_slot": "InvalidEventIdToActivate",
    "create_evaluation": "InvalidEvaluationContract",
    "put_evaluation": "InvalidEvaluationContract",
}
# codes from Personalizer's ErrorCode enum (401: Azure's gateway answered code "401");
# a 409 (an eventId used again with another body) has the code of the route's bad input
CODE_OF_STATUS = {401: "401", 404: "ResourceNotFound", 413: "PayloadSizeExceeded"}
# the specification's 404 codes, by what was not found (NotFound.reason), or by route
NOT_FOUND_CODES = {"evaluation": "EvaluationNotFound", "job": "FeatureImportanceNotFound"}
NOT_FOUND_CODES_OF_ROUTE = {"get_logs_properties": "LogsPropertiesNotFound"}
ERROR_CODE_HEADER = "x-ms-error-code"

_bearer = HTTPBearer(auto_error=False, description="an API key from BANDIT_API_KEYS")


class PersonalizerKey(APIKeyHeader):
    """The key every Personalizer route checks: ``Ocp-Apim-Subscription-Key`` (or
    ``Authorization: Bearer``) against the service's API keys (service/api/auth.py).

    One dependency, the ``APIKeyHeader`` scheme of the OpenAPI document, that reads the
    bearer credentials itself: the two schemes as sub-dependencies of a third cost FastAPI
    two more dependencies to solve on every request (docs/performance.md section 9,
    item 10). :class:`PersonalizerRoute` names the bearer scheme beside it in each
    route's security.
    """

    async def __call__(self, request: HTTPConnection) -> None:
        presented = await super().__call__(request)
        if presented is None:
            bearer = await _bearer(request)
            presented = bearer.credentials if bearer else None
        await check_key(
            request, presented, f"{SUBSCRIPTION_KEY} (or Authorization: Bearer <api key>)"
        )


personalizer_key = PersonalizerKey(
    name=SUBSCRIPTION_KEY,
    scheme_name="APIKeyHeader",
    auto_error=False,
    description="an API key from BANDIT_API_KEYS",
)
"""The dependency of every Personalizer route (:class:`PersonalizerKey`)."""


def error_response(
    status: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    target: str | None = None,
    details: list[dict[str, Any]] | None = None,
    inner: str | None = None,
) -> JSONResponse:
    """Personalizer's error body: ``code`` and ``message``, and when known the field as
    ``target``, each problem found in ``details`` and this service's own error type as
    ``innerError.code``; ``code`` is also the ``x-ms-error-code`` header."""
    error: dict[str, Any] = {"code": code, "message": message}
    if target is not None:
        error["target"] = target
    if details:
        error["details"] = details
    if inner is not None:
        error["innerError"] = {"code": inner}
    return JSONResponse(
        status_code=status,
        content={"error": error},
        headers={**(headers or {}), ERROR_CODE_HEADER: code},
    )


def _field(loc: Sequence[str | int]) -> str:
    """The field a validation ``loc`` names, without FastAPI's ``body``/``path``/``query``."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "path", "query", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def _message(exc: ApiError, field: str | None) -> str:
    """The message of a bad-input ``exc`` naming its field: ``<field>: <problem>`` when
    the error says its problem apart (:mod:`service.errors`), else its message, after
    the field unless the message starts with it."""
    if exc.problem is not None and exc.loc:
        return f"{field_path(exc.loc)}: {exc.problem}"
    if field is None or exc.message.startswith(field.split(".")[0]):
        return exc.message
    return f"{field}: {exc.message}"


def _not_found_code(exc: ApiError, route: str) -> str:
    """A 404's code: the specification's for what was not found, else ``ResourceNotFound``."""
    if isinstance(exc, NotFound) and exc.reason in NOT_FOUND_CODES:
        return NOT_FOUND_CODES[exc.reason]
    return NOT_FOUND_CODES_OF_ROUTE.get(route, CODE_OF_STATUS[404])


class PersonalizerRoute(JsonRoute):
    """A route answering its errors in Personalizer's shape (module docstring), whose
    OpenAPI security names the bearer scheme beside :data:`personalizer_key`'s."""

    ERROR_MODEL = PersonalizerErrorResponse

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        # FastAPI appends a list of openapi_extra to the generated one
        security: dict[str, Any] = {"security": [{_bearer.scheme_name: []}]}
        kwargs["openapi_extra"] = {**security, **(kwargs.get("openapi_extra") or {})}
        super().__init__(path, endpoint, **kwargs)

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
                        400,
                        invalid,
                        f"the body is not valid JSON: {error['msg']}",
                        target="body",
                        inner=error["type"],
                    )
                details = [
                    {
                        "code": invalid,
                        "message": f"{_field(e['loc'])}: {e['msg']}",
                        "target": _field(e["loc"]),
                    }
                    for e in exc.errors()
                ]
                return error_response(
                    400,
                    invalid,
                    details[0]["message"],
                    target=details[0]["target"],
                    details=details if len(details) > 1 else None,
                    inner=error["type"],
                )
            except StarletteHTTPException as exc:  # a body that is not UTF-8
                return error_response(
                    exc.status_code,
                    invalid if exc.status_code == 400 else "BadRequest",
                    str(exc.detail),
                )
            except ApiError as exc:
                note_not_found(request, exc)
                field = _field(exc.loc) if exc.loc else None
                if exc.status in (400, 422):
                    return error_response(
                        400, exc.code or invalid, _message(exc, field), target=field, inner=exc.kind
                    )
                headers = {"WWW-Authenticate": SUBSCRIPTION_KEY} if exc.status == 401 else None
                if exc.status == 404:
                    code = exc.code or _not_found_code(exc, self.name)
                else:
                    code = exc.code or CODE_OF_STATUS.get(exc.status, invalid)
                return error_response(exc.status, code, exc.message, headers, target=field)
            except ModelError as exc:  # the model's fault, not the request's (a 500)
                policy = getattr(exc, "service_policy", None)
                log.error("policy %r: model error on %s: %s", policy, request.url.path, exc)
                return error_response(
                    500,
                    "InternalServerError",
                    f"loop {policy!r} failed (a model error, not the request's): {exc}",
                )
            except BanditError as exc:
                return error_response(400, invalid, str(exc), inner=type(exc).__name__)
            except (StoreUnavailableError, TransactionConflictError) as exc:
                return error_response(
                    503,
                    "ServiceUnavailable",
                    f"state store unavailable or contended, retry later: {exc}",
                    {"Retry-After": str(request.app.state.settings.redis_retry_after_seconds)},
                )

        return route
