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


@dataclass
class LofoReplay:
    """A :func:`replay_value` in progress, fed the log's consecutive parts in time order
    (:meth:`feed`; picklable between them): fed the parts one by one, it ends with the
    value of one fed the whole log, bit for bit (the sums are taken in the same order)."""

    policy: AnyPolicy
    dropped: Feature | None = None
    weighted: float = 0.0
    total: float = 0.0

    def feed(self, featurizer: Featurizer, events: Sequence[JsonEvent]) -> None:
        """Replay ``events`` (the log's next part; module docstring)."""
        policy, dropped = self.policy, self.dropped
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
            self.weighted += ratio * e.reward
            self.total += ratio
            served = ids.index(e.arm_id)
            row = X.one_row(served) if isinstance(X, SparseRows) else X[served]
            policy.update(e.arm_id, row, e.reward, user_id=e.user_id)

    @property
    def value(self) -> float:
        """The SNIPS value so far; 0 for no event."""
        return self.weighted / self.total if self.total > 0 else 0.0


def replay_value(
    new_policy: Callable[[], AnyPolicy],
    featurizer: Featurizer,
    events: Sequence[JsonEvent],
    dropped: Feature | None = None,
) -> float:
    """The SNIPS value of a fresh ``new_policy()`` learning over ``events`` in order
    (module docstring), with ``dropped`` taken out of every context and action; 0 for
    no event."""
    run = LofoReplay(new_policy(), dropped)
    run.feed(featurizer, events)
    return run.value


def features_of(events: Sequence[JsonEvent]) -> set[Feature]:
    """The features of the events' contexts and actions (the union over a log's parts
    is the log's)."""
    return json_features([e.context for e in events]) | json_features(
        [a for e in events for a in e.actions]
    )


def effects(value: float, without: dict[Feature, float]) -> list[FeatureEffect]:
    """Each feature's effect from the value with every feature and the value
    ``without[feature]`` of the replay without it, by descending ``drop``, ties by
    feature."""
    found = [FeatureEffect(f, v, value - v) for f, v in without.items()]
    found.sort(key=lambda f: (-f.drop, f.feature))
    return found


def leave_one_feature_out(
    new_policy: Callable[[], AnyPolicy], featurizer: Featurizer, events: Sequence[JsonEvent]
) -> tuple[float, list[FeatureEffect]]:
    """The value with every feature and each feature's effect (one replay per feature
    found in the events' contexts and actions, plus one), by descending ``drop``, ties
    by feature."""
    value = replay_value(new_policy, featurizer, events)
    without = {
        feature: replay_value(new_policy, featurizer, events, feature)
        for feature in sorted(features_of(events))
    }
    return value, effects(value, without)
