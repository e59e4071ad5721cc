"""The actions and context of a DSJSON line (:mod:`service.storage.dsjson`, whose module
docstring describes the format): ``c._multi`` read into candidates, ``c``'s namespaces
into a context, and the error a malformed line raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


class DsjsonError(ValueError):
    """A line that is not a DSJSON event; the message names the field and what was wrong."""


def fail(field: str, expected: str, got: Any) -> DsjsonError:
    """The error of ``field``: what it should be and (its first 60 characters) what it
    was."""
    shown = orjson.dumps(got).decode() if not isinstance(got, bytes) else repr(got)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return DsjsonError(f"{field}: expected {expected}, but got {shown}")


def _is_objects(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def context_of(namespaces: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The context of a line's ``c`` (less ``_multi`` and ``_slots``) as the list of
    feature objects a rank's ``contextFeatures`` is: first an object of every namespace
    whose value is not a list of objects, then one object per element of each such list
    (VW reads ``"ns": [{..}, {..}]`` as features of ``ns`` from each; the featurizer
    takes a list of objects, not an array of them)."""
    if list not in map(type, namespaces.values()):
        return [dict(namespaces)]
    base: dict[str, Any] = {}
    split: list[dict[str, Any]] = []
    for key, value in namespaces.items():
        if _is_objects(value):
            split.extend({key: item} for item in value)
        else:
            base[key] = value
    return [base, *split]


def action_of(item: Any, number: int, field: str) -> dict[str, Any]:
    """A candidate ``{"id", "features"}`` of one ``_multi`` element (``number``: its
    1-based position)."""
    if not isinstance(item, dict):
        raise fail(field, "a JSON object", item)
    tag = item.get("_tag")
    ids = item.get("i")
    if isinstance(tag, str) and tag:
        action_id = tag
    elif isinstance(ids, dict) and isinstance(ids.get("id"), str) and ids["id"]:
        action_id = ids["id"]
    else:
        action_id = str(number)
    rest = {k: v for k, v in item.items() if k != "_tag"}
    if rest.get("i") == {"constant": 1, "id": action_id}:
        del rest["i"]  # the id namespace Personalizer adds to every action
    features = rest.pop("j", None)
    if features is None:
        return {"id": action_id, "features": context_of(rest)}
    if isinstance(features, dict) and not rest:
        # one object, as the native API takes a candidate's features and exports them
        return {"id": action_id, "features": features}
    if isinstance(features, dict):
        features = [features]
    if not _is_objects(features) and features != []:
        raise fail(f"{field}.j", "a feature object or a list of them", features)
    return {"id": action_id, "features": features + (context_of(rest) if rest else [])}


def candidates_of(items: Any) -> list[dict[str, Any]]:
    """The candidates of a line's ``c._multi`` (:func:`action_of` of each), their ids
    checked to be distinct."""
    if not isinstance(items, list) or not items:
        raise fail("c._multi", "a non-empty list of actions", items)
    candidates = [action_of(item, n, f"c._multi[{n - 1}]") for n, item in enumerate(items, 1)]
    ids = [a["id"] for a in candidates]
    if len(set(ids)) != len(ids):
        raise fail("c._multi", "actions with distinct ids (_tag)", ids)
    return candidates
