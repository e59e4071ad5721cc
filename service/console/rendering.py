"""How a console page is answered: the Jinja2 templates (FastAPI's ``Jinja2Templates``),
the session cookie set on a page when the request brought none, and every error as an
HTML page with its status (never a 500 for a bad request: docs/console.md, "Errors")."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from service.api.errors import note_not_found
from service.console.session import (
    CSRF_FIELD,
    Refused,
    Session,
    SignInRequired,
    current_session,
    store_session,
)
from service.errors import ApiError
from service.storage.base import StoreUnavailableError

log = logging.getLogger("bandit.console")

PACKAGE = Path(__file__).parent
TEMPLATES = Jinja2Templates(directory=PACKAGE / "templates")
TEMPLATES.env.filters["utc"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))
TEMPLATES.env.filters["pretty_json"] = lambda v: json.dumps(v, indent=2, sort_keys=True)
TEMPLATES.env.globals["csrf_field"] = CSRF_FIELD


def page(
    request: Request,
    session: Session | None,
    template: str,
    context: dict[str, Any],
    status: int = 200,
) -> Response:
    """``template`` rendered with ``context`` and the session; the session's cookie is
    set when the request did not carry it."""
    response = TEMPLATES.TemplateResponse(
        request, template, {"session": session, **context}, status_code=status
    )
    if session is not None and not session.stored:
        store_session(request, response, session)
    return response


def error_page(request: Request, status: int, message: str) -> Response:
    """The error page with ``status`` and ``message``; the session if there is one."""
    try:
        session: Session | None = current_session(request)
    except Refused:
        session = None
    return page(request, session, "error.html", {"status": status, "message": message}, status)


def sign_in_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/console/signin?next={quote(target)}", status_code=303)


class ConsoleRoute(APIRoute):
    """A console route: a refusal, a missing thing, a bad parameter or an unreachable
    store is answered as an HTML page with its status, not as the API's JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except SignInRequired:
                return sign_in_redirect(request)
            except Refused as exc:
                return error_page(request, exc.status, exc.message)
            except ApiError as exc:
                note_not_found(request, exc)
                return error_page(request, exc.status, exc.message)
            except RequestValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"])
                return error_page(request, 422, f"{where}: {error['msg']}")
            except StoreUnavailableError as exc:
                log.warning("console page %s: %s", request.url.path, exc)
                return error_page(request, 503, f"a store is unavailable: {exc}")

        return answer
