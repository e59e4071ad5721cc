"""Sign-in and sign-out of the console (docs/console.md, "Sign-in"); the session
itself is :mod:`service.console.session`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse

from service.console.rendering import ConsoleRoute, page
from service.console.session import (
    checked_form,
    clear_session,
    current_session,
    sign_in,
    store_session,
)

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


def _safe_next(target: str) -> str:
    """Only a console path is followed after sign-in (no redirect to another host)."""
    if target.startswith("/console/") and not target.startswith("/console//"):
        return target
    return "/console/"


@router.get("/signin", name="console_signin")
async def signin_form(request: Request, next: Annotated[str, Query()] = "/console/") -> Response:
    """The sign-in form (the home page when already signed in)."""
    session = current_session(request)
    if session.signed_in:
        return RedirectResponse(_safe_next(next), status_code=303)
    return page(request, session, "signin.html", {"next": _safe_next(next), "error": None})


@router.post("/signin", name="console_signin_post")
async def signin(request: Request) -> Response:
    """Sign in with an API key or a read-only key: a new session (and CSRF token) in a
    signed cookie; a wrong key is 401 and the form again."""
    session = current_session(request)
    form = await checked_form(request, session)
    target = _safe_next(form.get("next", "/console/"))
    signed = sign_in(request, form.get("key", ""))
    if signed is None:
        context = {"next": target, "error": "not an API key or read-only key of this service"}
        return page(request, session, "signin.html", context, 401)
    response = RedirectResponse(target, status_code=303)
    store_session(request, response, signed)
    return response


@router.post("/signout", name="console_signout")
async def signout(request: Request) -> Response:
    """Forget the session (its cookie is deleted) and show the sign-in form."""
    await checked_form(request, current_session(request))
    response = RedirectResponse("/console/signin", status_code=303)
    clear_session(response)
    return response
