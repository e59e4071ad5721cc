"""Logged events written as Decision Service JSON lines (``bandit export-log``): the
inverse of :func:`service.storage.dsjson.parse_line`, whose module describes the
format (docs/personalizer.md, "Importing and exporting logs").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from service import timeparse
from service.storage.base import DecisionRecord, LoggedDecision
from service.storage.dsjson import ACTIONS_KEY, EXPLICIT, PROBABILITY_TOLERANCE


def namespaces_of(context: Any) -> dict[str, Any]:
    """The ``c`` of a context (the inverse of
    :func:`service.storage.dsjson.context_of`): the first object's
    namespaces, then each later object's namespaces gathered per name into a list of
    objects (with the first object's of that name, if any); a later object's top-level
    feature of a new name joins the first object's."""
    items = context if isinstance(context, list) else [context]
    if not items:
        return {}
    namespaces = dict(items[0]) if isinstance(items[0], dict) else {}
    gathered: dict[str, list[Any]] = {}
    for item in items[1:]:
        for key, value in item.items():
            if not isinstance(value, dict) and key not in namespaces and key not in gathered:
                namespaces[key] = value  # a top-level feature, not a namespace
                continue
            if key in namespaces and key not in gathered:
                gathered[key] = [namespaces.pop(key)]
            gathered.setdefault(key, []).append(value)
    namespaces.update(gathered)
    return namespaces


def _candidates(decision: DecisionRecord) -> list[dict[str, Any]]:
    candidates = decision.candidates
    if isinstance(candidates, orjson.Fragment):
        return list(orjson.loads(candidates.contents))
    return list(candidates)


def export_line(event: LoggedDecision) -> bytes:
    """One logged decision and its reward as a single-slot DSJSON line (module
    docstring): the served action first in ``a``, the others by their score; ``p`` the
    decision's scores when they are the ranking's probabilities (an imported event),
    else the served action's propensity and the rest shared evenly (the log keeps only
    the served one's). A rewarded decision has ``_label_cost`` and the ``_label_*``
    fields, an explicit reward one outcome ``v``; one without a reward is written with
    ``_skipLearn`` (never learned from); an imported decision's ``drop_probability`` as
    ``pdrop``."""
    decision, reward = event.decision, event.reward
    candidates = _candidates(decision)
    ids = [a["id"] for a in candidates]
    served = ids.index(decision.arm_id)
    scores = list(decision.scores)
    others = sorted(
        (i for i in range(len(ids)) if i != served),
        key=lambda i: -scores[i] if len(scores) == len(ids) else i,
    )
    ranking = [served, *others]
    if _are_probabilities(scores, len(ids), served, decision.propensity):
        probabilities = [scores[i] for i in ranking]
    else:
        rest = (1.0 - decision.propensity) / len(others) if others else 0.0
        probabilities = [decision.propensity] + [rest] * len(others)
    line: dict[str, Any] = {}
    if reward is not None:
        line |= {
            "_label_cost": -reward.value + 0.0,
            "_label_probability": decision.propensity,
            "_label_Action": served + 1,
            "_labelIndex": served,
            "o": (
                [{"v": reward.value, "EventId": decision.event_id}]
                if reward.source == EXPLICIT
                else []
            ),
        }
    line |= {
        "Timestamp": timeparse.format_timestamp(decision.created_at),
        "Version": "1",
        "EventId": decision.event_id,
        "a": [i + 1 for i in ranking],
        "c": {
            **namespaces_of(decision.context),
            ACTIONS_KEY: [
                {"_tag": a["id"], "i": {"constant": 1, "id": a["id"]}, "j": a["features"]}
                for a in candidates
            ],
        },
        "p": probabilities,
    }
    if reward is None:
        line["_skipLearn"] = True
    if decision.drop_probability is not None:
        line["pdrop"] = decision.drop_probability
    return orjson.dumps(line)


def _are_probabilities(scores: Sequence[float], count: int, served: int, propensity: float) -> bool:
    return (
        len(scores) == count
        and scores[served] == propensity
        and all(0.0 <= s <= 1.0 for s in scores)
        and abs(sum(scores) - 1.0) < PROBABILITY_TOLERANCE * count
    )
