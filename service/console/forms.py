"""How a console form reports an error beside its field (docs/console.md, "Pages"): the
API's own schema or use case says what is wrong, and its location names the field."""

from __future__ import annotations

import time
from collections.abc import Sequence

from pydantic import ValidationError

from service.errors import ApiError
from service.usecases import UseCases

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def field_name(loc: Sequence[str | int] | None) -> str:
    """A location as the form's field name: ``["body", "policies", 0, "name"]`` ->
    ``policies.0.name`` (the request body's prefix left out; empty: the whole form)."""
    parts = [str(p) for p in loc or [] if p != "body"]
    return ".".join(parts)


def schema_errors(exc: ValidationError) -> dict[str, str]:
    """Each field's first message from a schema's validation error."""
    errors: dict[str, str] = {}
    for error in exc.errors():
        errors.setdefault(field_name(error["loc"]), error["msg"])
    return errors


def use_case_errors(exc: ApiError) -> dict[str, str]:
    """A use case's error as the message of the field its location names."""
    return {field_name(exc.loc): exc.message}


def iso_time(seconds: float) -> str:
    """Unix ``seconds`` as the forms write times: ISO 8601 in UTC, to the second."""
    return time.strftime(TIME_FORMAT, time.gmtime(seconds))


async def range_form(
    use_cases: UseCases, name: str, form: dict[str, str] | None, fields: tuple[str, str]
) -> tuple[tuple[str, str] | None, dict[str, str]]:
    """The log's range of ``name`` (its first decision to one second after its last: the
    end is exclusive; None when the log holds none, ``LogUpkeep.properties``) and the
    ``form``'s values with the range as the default of its two ``fields``."""
    values = dict(form or {})
    logged = await use_cases.log_upkeep.properties(name)
    if logged.first is None or logged.last is None:
        return None, values
    span = iso_time(int(logged.first.timestamp())), iso_time(int(logged.last.timestamp()) + 1)
    for field, default in zip(fields, span, strict=True):
        values.setdefault(field, default)
    return span, values
