"""Request bodies parsed with orjson: the route class of every router.

FastAPI parses a JSON body with the standard library's ``json`` (37-48 us for the 6.5 KB
body of a JSON-features ``/recommend``, 19 us with orjson; docs/performance.md). Bodies
orjson reads otherwise go to the standard library, so what is accepted and every error
are as before: those orjson refuses (NaN and Infinity literals, which then reach
validation and are refused there naming the field; malformed JSON, whose
``JSONDecodeError`` FastAPI answers with its 422 ``json_invalid``) and those with a run
of 19 or more digits, which may be an integer beyond 64 bits (orjson reads one as a
float; the standard library as the integer validation refuses by name).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

from service.schemas.common import ErrorDetail

# every digit to "0", every other byte to " ": a body has a run of 19 digits exactly when
# its translation holds 19 zeros in a row (4 us for 6.5 KB; the regex [0-9]{19}, 50 us)
_DIGITS_AS_ZEROS = bytes(48 if 48 <= byte <= 57 else 32 for byte in range(256))
_DIGIT_RUN = b"0" * 19


class OrjsonRequest(Request):
    """A request whose :meth:`json` parses with orjson (module docstring)."""

    async def json(self) -> Any:
        body = await self.body()
        if _DIGIT_RUN not in body.translate(_DIGITS_AS_ZEROS):
            try:
                return orjson.loads(body)
            except orjson.JSONDecodeError:
                pass
        return json.loads(body)


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""The methods whose body the application's limit reads first (``BodyLimitAndTiming`` in
service/api/app.py answers 413 above it)."""


class JsonRoute(APIRoute):
    """A route whose handler reads the body through :class:`OrjsonRequest`, and which
    documents, for a method with a body, the 413 the body limit answers
    (:data:`ERROR_MODEL` its body)."""

    ERROR_MODEL: ClassVar[type[BaseModel]] = ErrorDetail

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if BODY_METHODS & set(kwargs.get("methods") or ()):
            too_large = {413: {"model": self.ERROR_MODEL, "description": "body too large"}}
            kwargs["responses"] = {**too_large, **(kwargs.get("responses") or {})}
        super().__init__(path, endpoint, **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(OrjsonRequest(request.scope, request.receive))

        return route
