"""Exceptions raised by :mod:`bandit_core`.

Every error is a :class:`ValueError` subclass, so library users who only catch
``ValueError`` still catch them, and the service maps each class to one HTTP status
in one place::

    BanditError(ValueError)
    ├── InvalidInputError    bad shape, NaN/inf, empty or duplicate candidates, reward out of range
    │   └── InvalidFeatureError  a JSON feature value the featurizer cannot take (``path`` names it)
    ├── UnknownArmError      an arm id the policy does not know, or one that was retired
    ├── NoEligibleArmError   every candidate blocked by a guardrail and no safe arm to serve
    ├── ConfigError          an invalid policy or guardrail configuration
    ├── StateFormatError     bytes that are not a serialized state of the expected kind
    └── ModelError           the model, not the input, is at fault (a non-finite score)

Every class but :class:`ModelError` blames the caller's input (the service answers
422); a :class:`ModelError` is the policy's own fault (its state or arithmetic), so the
service answers 500 and logs it with the policy's name.

Messages name the argument, what was expected and what came, e.g.
``"X must have shape (K, 10) = (3, 10), but got (3, 9)"``.
"""

from __future__ import annotations

from typing import Any


class BanditError(ValueError):
    """Base class of every error raised by bandit_core."""


class InvalidInputError(BanditError):
    """An input array, id or reward does not satisfy the documented contract."""


class UnknownArmError(BanditError):
    """An arm id the policy does not know (never seen, or retired)."""


class NoEligibleArmError(BanditError):
    """Guardrails blocked every candidate and the policy has no safe arm among them."""


class ConfigError(BanditError):
    """A policy or guardrail configuration is invalid."""


class StateFormatError(BanditError):
    """Serialized bytes are not a state this code can read."""


class InvalidFeatureError(InvalidInputError):
    """A JSON feature value the featurizer cannot take (:mod:`bandit_core.features`).

    ``path`` names it, e.g. ``context[0].user.tags[3]``; ``loc`` is the same path as
    components, ``("context", 0, "user", "tags", 3)``, for a caller that names its own
    request fields (a 422's ``loc``); ``expected`` says what was expected and what came.
    """

    def __init__(self, path: str, expected: str, loc: tuple[str | int, ...] = ()) -> None:
        super().__init__(f"{path}: expected {expected}")
        self.path = path
        self.expected = expected
        self.loc = loc

    def __reduce__(self) -> tuple[type, tuple[str, str, tuple[str | int, ...]]]:
        return type(self), (self.path, self.expected, self.loc)


class ModelError(BanditError):
    """The model is at fault, not the input (which :class:`InvalidInputError` blames): it
    produced a non-finite score for finite, representable features (raised by ``select``),
    or, raised by a caller such as the service, its stored state does not read back."""


def json_kind(value: Any) -> str:
    """How an error message names a value that is not what was expected (``the number 3``,
    ``an array``, ``a numpy.int64``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return (
        f"a {type(value).__module__}.{type(value).__qualname__}"
        if type(value).__module__ != "builtins"
        else f"a {type(value).__name__}"
    )
