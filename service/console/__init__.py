"""The browser console at ``/console/`` (docs/console.md): server-rendered Jinja2 pages
over the use cases the API calls, served by the API's own app and process.

==============  ================================================================
module          what it holds
==============  ================================================================
``session``     the signed session cookie, the roles, the CSRF check
``signin``      sign-in and sign-out
``pages``       the pages and their forms
``settings_page``  a policy's settings: edit, preview, history, rollback
``evaluations_page``  a policy's offline evaluations: create, progress, result, apply
``forms``       a form's errors beside its fields
``charts``      the SVG charts' geometry
``rendering``   templates, the session cookie on a page, errors as HTML pages
==============  ================================================================
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles

from service.console import (
    apprentice_page,
    evaluations_page,
    features_page,
    log_page,
    model_page,
    pages,
    settings_page,
    signin,
)
from service.console.rendering import PACKAGE


def mount_console(host: APIRouter) -> None:
    """Add the console's routes and its static files to ``host``."""
    host.include_router(signin.router)
    host.mount("/console/static", StaticFiles(directory=PACKAGE / "static"), name="console_static")
    host.include_router(settings_page.router)
    host.include_router(evaluations_page.router)
    host.include_router(model_page.router)
    host.include_router(features_page.router)
    host.include_router(log_page.router)
    host.include_router(apprentice_page.router)
    host.include_router(pages.router)  # last: its catch-all answers the 404 page
