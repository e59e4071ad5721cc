"""Leave-one-feature-out importance of JSON features over a log (docs/personalizer.md
"Feature importances").

A *feature* is a key of a namespace, whatever its values: ``{"user": {"segment":
"student"}}`` holds ``("user", "segment")`` (the featurizer's rules,
docs/features.md: an object value opens a namespace, nested ones extend it with ``.``,
a top-level scalar belongs to the namespace ``""``, keys starting with ``_`` are
ignored). For the whole set of features and then once without each of them,
:func:`replay_value` replays a fresh learning policy over the logged events in order:
on each event it chooses greedily among the logged candidates (ties split evenly), its
choice is scored against the logged one with the logged propensity, and then it learns
the logged reward of the served candidate. The value is the self-normalized IPS
estimate (SNIPS, docs/algorithms.md section 6) of those choices:

    V = sum_t pi_t(a_t) r_t / p_t  /  sum_t pi_t(a_t) / p_t

The importance of a feature is ``V(all) - V(without it)``: what the learning policy
loses on this traffic when the feature is taken out of every context and action. A
feature whose effect another one carries as well (the interactions of a one-hot
feature sum to the other side's main effect) loses nothing, and a feature the rewards
ignore loses nothing in expectation, which a model's weights cannot tell apart.

>>> sorted(json_features([{"user": {"segment": "a", "address": {"city": "x"}}}, {"age": 3}]))
[('', 'age'), ('user', 'segment'), ('user.address', 'city')]
>>> without_feature({"user": {"segment": "a", "tier": 2}}, ("user", "segment"))
{'user': {'tier': 2}}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bandit_core.features import Featurizer
from bandit_core.featurized import featurized_rows
from bandit_core.policy import AnyPolicy
from bandit_core.sparse_rows import SparseRows

Feature = tuple[str, str]
"""``(namespace, key)``."""


@dataclass(frozen=True)
class JsonEvent:
    """One logged decision with its reward: the context and each candidate's feature
    objects as sent, the served ``arm_id`` with its logged ``propensity``, the reward."""

    context: Any
    arm_ids: Sequence[str]
    actions: Sequence[Any]
    arm_id: str
    propensity: float
    reward: float
    user_id: str | None = None


@dataclass(frozen=True)
class FeatureEffect:
    """What the learning policy's value loses without one feature (``drop``; negative:
    it does better without)."""

    feature: Feature
    value_without: float
    drop: float


def json_features(objects: Any, path: tuple[str, ...] = ()) -> set[Feature]:
    """The features of a JSON feature object or list of objects."""
    if isinstance(objects, list):
        return set().union(*(json_features(o, path) for o in objects)) if objects else set()
    if not isinstance(objects, dict):
        return set()
    found: set[Feature] = set()
    for key, value in objects.items():
        if key.startswith("_"):
            continue
        if isinstance(value, dict):
            found |= json_features(value, (*path, key))
        else:
            found.add((".".join(path), key))
    return found


def without_feature(objects: Any, feature: Feature) -> Any:
    """``objects`` with ``feature`` taken out (a copy; the input is not changed)."""
    if isinstance(objects, list):
        return [without_feature(o, feature) for o in objects]
    namespace, key = feature
    return _without(objects, namespace.split(".") if namespace else [], key)


def _without(obj: Any, path: list[str], key: str) -> Any:
    if not isinstance(obj, dict):
        return obj
    if not path:
        return {k: v for k, v in obj.items() if k != key or isinstance(v, dict)}
    head, rest = path[0], path[1:]
    if not isinstance(obj.get(head), dict):
        return obj
    return {**obj, head: _without(obj[head], rest, key)}


def replay_value(
    new_policy: Callable[[], AnyPolicy],
    featurizer: Featurizer,
    events: Sequence[JsonEvent],
    dropped: Feature | None = None,
) -> float:
    """The SNIPS value of a fresh ``new_policy()`` learning over ``events`` in order
    (module docstring), with ``dropped`` taken out of every context and action; 0 for
    no event."""
    policy = new_policy()
    weighted = total = 0.0
    for e in events:
        context, actions = e.context, list(e.actions)
        if dropped is not None:
            context = without_feature(context, dropped)
            actions = [without_feature(a, dropped) for a in actions]
        ids = list(e.arm_ids)
        X = featurized_rows(featurizer, policy, context, actions)
        decision = policy.select(ids, X, user_id=e.user_id, explore=False)
        chosen = dict(
            zip(decision.ranking, np.asarray(decision.propensities).tolist(), strict=True)
        )
        ratio = chosen.get(e.arm_id, 0.0) / e.propensity
        weighted += ratio * e.reward
        total += ratio
        served = ids.index(e.arm_id)
        row = X.one_row(served) if isinstance(X, SparseRows) else X[served]
        policy.update(e.arm_id, row, e.reward, user_id=e.user_id)
    return weighted / total if total > 0 else 0.0


def leave_one_feature_out(
    new_policy: Callable[[], AnyPolicy], featurizer: Featurizer, events: Sequence[JsonEvent]
) -> tuple[float, list[FeatureEffect]]:
    """The value with every feature and each feature's effect (one replay per feature
    found in the events' contexts and actions, plus one), by descending ``drop``, ties
    by feature."""
    features = json_features([e.context for e in events]) | json_features(
        [a for e in events for a in e.actions]
    )
    value = replay_value(new_policy, featurizer, events)
    effects = []
    for feature in sorted(features):
        without = replay_value(new_policy, featurizer, events, feature)
        effects.append(FeatureEffect(feature, without, value - without))
    effects.sort(key=lambda f: (-f.drop, f.feature))
    return value, effects
