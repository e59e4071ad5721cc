"""Field types, limits and base models shared by the native API's request and response
models (docs/api.md): every float finite, features bounded, ids storable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from bandit_core.registry import POLICIES

MAX_DENSE_DIMENSION = 4096
"""Longest dense rows a policy may take (float vectors, dense JSON features)."""
MAX_SPARSE_DIMENSION = 2**20 + 1
"""Longest sparse rows: ``diag_linucb`` over JSON features of up to ``bits`` 20
(docs/features.md, "Large hashed spaces"); the pending event keeps the served row sparse."""

# strict: JSON true/false or "1.5" are not numbers (lax mode would read true as 1.0)
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]
# Features are bounded so that no request can overflow the model: with |x| <= 1e6 the
# products in x x^T stay far inside float64 (a 1e308 feature made every score NaN and a
# reward with it poisoned the arm for good).
MAX_ABS_FEATURE = 1e6
Feature = Annotated[FiniteFloat, Field(ge=-MAX_ABS_FEATURE, le=MAX_ABS_FEATURE)]


def _storable(value: str) -> str:
    """PostgreSQL text and JSONB cannot hold NUL: an id with one could not be logged."""
    if "\x00" in value:
        raise ValueError("must not contain the NUL character (\\u0000)")
    return value


Text = Annotated[str, AfterValidator(_storable)]
# The lengths come before the validator so that pydantic-core checks them on the string
# itself; after it they run as Python functions (a rank request validates 50 arm ids).
ArmId = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_storable)]
EVENT_ID_MAX_LENGTH = 256
EventId = Annotated[
    str, Field(min_length=1, max_length=EVENT_ID_MAX_LENGTH), AfterValidator(_storable)
]
"""A client's event id: any 1 to 256 characters but NUL (Azure Personalizer's rule), kept
exactly; the stores key it injectively (docs/personalizer.md, "Event ids")."""
StoredEventId = Annotated[
    str, Field(min_length=1, max_length=EVENT_ID_MAX_LENGTH + 16), AfterValidator(_storable)
]
"""An event id the service may hold, rewarded or activated by: a client's, or one the
service derived from it with a suffix of at most 16 characters (a Personalizer multi-slot
event's per-slot id ``<id>:slot<i>``)."""
PolicyName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]
if TYPE_CHECKING:  # the registry is known at run time only: to mypy, an algorithm is a name
    Algorithm = str
else:
    # The registered engine policies, in registry order: the OpenAPI enum follows the registry.
    Algorithm = Literal[tuple(POLICIES)]


JsonFeatures = dict[str, Any] | list[dict[str, Any]]
"""JSON feature objects (one object or a list of them, as Personalizer sends), for a policy
with ``features``; checked by its featurizer (bandit_core.features), not here."""
JSON_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "additionalProperties": True}
JSON_FEATURES_SCHEMA: list[dict[str, Any]] = [
    JSON_OBJECT_SCHEMA,
    {"type": "array", "items": JSON_OBJECT_SCHEMA},
]


def is_json_features(value: Any) -> bool:
    """A JSON feature object (one holding something else than numbers: a flat object of
    numbers stays named features) or a non-empty list of objects."""
    if type(value) is dict:
        for v in value.values():  # a plain loop: called per candidate on the request path
            kind = type(v)
            if kind is not float and kind is not int:
                return True
        return False
    return type(value) is list and bool(value) and all(type(v) is dict for v in value)


def _vector_or_json(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """Floats are validated as before; JSON feature objects (:data:`JsonFeatures`) pass
    as they came, so a field typed for floats may hold them."""
    return value if is_json_features(value) else handler(value)


def _as_is(value: Any) -> Any:
    return value


VectorOrJson = WrapValidator(_vector_or_json)
AsSent = PlainSerializer(_as_is, return_type=Any)


class StrictModel(BaseModel):
    """A request body: an unknown field is a 422 naming it."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    detail: str | list[dict[str, Any]]
