"""The service's domain errors, independent of any web framework.

A use case raises one of these; each API family maps them to its own body in its own
package: the native API in :mod:`service.api.errors` (``{"detail": ...}``, 422 lists
with ``loc``), Personalizer's in :mod:`service.personalizer.routers.errors`
(``{"error": {"code", "message", "target"}}``). An error carries its location as data:
``loc``, the request path of the offending field (``["body", "arms", 2, "id"]``), and,
when its message is about that field alone, ``problem``, the message without the
field's name, so that a family naming its fields otherwise renders its own
``<field>: <problem>`` (:func:`field_path`) instead of rewriting the message.

- :class:`InvalidRequest` (422): a request field is invalid, ``loc`` names it;
  :class:`EngineInputError` (422) the same raised by the engine, ``kind`` its class;
- :class:`NotFound` (404): ``reason`` names what (policy, event, arm, evaluation, job);
- :class:`Conflict` (409): the request contradicts the stored state;
- :class:`Unauthorized` (401): a missing or wrong API key.

Nothing is written when an error is raised: every check runs before the first write.
"""

from __future__ import annotations

from collections.abc import Sequence

from bandit_core.errors import BanditError

REQUEST_PARTS = ("body", "path", "query", "header")
"""The first item of a ``loc`` that says where in the request the field is."""


class ApiError(Exception):
    """An error answered with ``status``; ``loc`` names the offending field, ``kind`` is
    a 422's ``type``, ``problem`` (module docstring) is the message without the field's
    name; ``code``, when set, is the error code the Personalizer routes answer instead of
    their route's."""

    status: int = 400
    kind: str = "invalid_input"

    def __init__(
        self,
        message: str,
        loc: Sequence[str | int] | None = None,
        code: str | None = None,
        *,
        problem: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.loc = list(loc) if loc is not None else None
        self.code = code
        self.problem = problem


class InvalidRequest(ApiError):
    status = 422


class EngineInputError(InvalidRequest):
    """An engine error (``error``) about one request field (``loc``): answered 422 with
    the engine error's message and its class name as ``type``."""

    def __init__(self, error: BanditError, loc: Sequence[str | int]) -> None:
        super().__init__(str(error), loc)
        self.error = error
        self.kind = type(error).__name__


class NotFound(ApiError):
    """A 404; ``reason`` says what was not found (``policy``, ``event``, ``arm``,
    ``evaluation``, ``job``), the label of ``bandit_not_found_total``."""

    status = 404

    def __init__(
        self,
        message: str,
        loc: Sequence[str | int] | None = None,
        code: str | None = None,
        *,
        reason: str,
    ) -> None:
        super().__init__(message, loc, code)
        self.reason = reason


class Conflict(ApiError):
    status = 409


class Unauthorized(ApiError):
    status = 401


def field_path(loc: Sequence[str | int]) -> str:
    """The field ``loc`` names as text, ``context[0].user``: names joined by dots, list
    indexes in brackets, without the request part (``body``, ``path``, ...)."""
    items = list(loc[1:] if loc and loc[0] in REQUEST_PARTS else loc)
    text = ""
    for item in items:
        if isinstance(item, int):
            text += f"[{item}]"
        else:
            text += f".{item}" if text else item
    return text or "body"


def with_policy(exc: BanditError, name: str) -> BanditError:
    """Attach the policy an engine error happened in (read by the ModelError handler)."""
    # an engine error has no policy field (bandit_core knows no service): the service tags it
    exc.service_policy = name  # type: ignore[attr-defined]
    return exc
