"""The candidates of a ``POST /recommend`` for a policy with ``features`` (JSON feature
objects, docs/features.md "Serving JSON features").

The policy's featurizer (``bandit_core.features``) turns the request's ``context`` and each
candidate's ``features`` into the rows its engine policy reads
(``bandit_core.featurized.featurized_rows``, by the policy's declared layout). Catalog
items recur across requests, so the parsed and hashed form of each candidate's features
is kept in a bounded LRU keyed by their canonical JSON: a request walks only its context
and the items this process has not seen. An error of the featurizer is a 422 whose
``loc`` names the request's field (``["body", "arms", 3, "features", "item", "tags", 2]``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from bandit_core import BasePolicy
from bandit_core.errors import ConfigError, InvalidFeatureError
from bandit_core.features import (
    Featurizer,
    FeaturizerConfig,
    HashedActions,
    HashedFeatures,
    SparseRows,
)
from bandit_core.featurized import context_feature_values, featurized_rows
from service.errors import InvalidRequest
from service.schemas import PolicyInfo, RecommendRequest, is_json_features
from service.usecases.candidates import candidate_arms

ACTION_CACHE_SIZE = 65_536
"""Hashed candidate feature objects kept per featurizer (a few KB each at most)."""
LIST_CACHE_SIZE = 256
"""Candidate lists (their actions' features joined and the features to log, by the list's
canonical JSON) kept per featurizer: a catalog sent whole again is one lookup instead of
one per action, and its features are not joined again."""
FEATURIZERS_KEPT = 16
"""Featurizers (one per distinct ``features`` config) a process keeps with their caches."""


class CachedFeaturizer:
    """A :class:`Featurizer` with a bounded LRU of hashed action features.

    The key is the canonical JSON of the features (orjson, sorted keys), which is also
    what the log keeps of them (:func:`logged_candidates`). JSON with a ``null`` is never
    cached: orjson writes NaN and infinities as ``null`` too, so such a key could stand
    for a value the featurizer must refuse. Thread-compatible: one per event loop (the
    recommender's)."""

    def __init__(self, config: FeaturizerConfig, max_size: int = ACTION_CACHE_SIZE) -> None:
        self.featurizer = Featurizer(config)
        self.max_size = max_size
        self._actions: OrderedDict[bytes, tuple[HashedFeatures, orjson.Fragment]] = OrderedDict()
        self._lists: OrderedDict[bytes, tuple[HashedActions, list[Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._actions)

    def hashed_action(
        self, features: Any, index: int, arm_index: Sequence[int | None]
    ) -> tuple[HashedFeatures, Any]:
        """The hashed form of candidate ``index``'s features (error paths
        ``actions[index]...``) and the features to log: their canonical JSON as an
        ``orjson.Fragment`` (the same JSON with its keys sorted, which changes no vector
        a replay makes of it; ``features`` themselves when orjson cannot write them).
        What was not seen before is also checked storable (:func:`check_loggable`, at
        the request's path by :func:`request_loc`)."""
        key: bytes | None
        try:
            key = orjson.dumps(features, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):  # ints beyond 64 bits, deep nesting
            key = None
        if key is not None and b"null" in key:
            key = None  # not cacheable (class docstring)
        if key is not None:
            cached = self._actions.get(key)
            if cached is not None:
                self._actions.move_to_end(key)
                return cached
        hashed = self.featurizer.hash_features(features, ("actions", index))
        loc = request_loc(("actions", index), arm_index)
        check_loggable(features, loc, self.featurizer.config.limits.max_depth)
        if key is None:
            return hashed, features
        entry = (hashed, orjson.Fragment(key))
        self._actions[key] = entry
        if len(self._actions) > self.max_size:
            self._actions.popitem(last=False)
        return entry

    def hashed_actions(
        self, actions: Sequence[Any], arm_index: Sequence[int | None]
    ) -> tuple[HashedActions, list[Any]]:
        """The candidates of a request (a non-empty list) as the featurizer reads them,
        their :meth:`hashed_action` forms joined, and each one's features to log. A list
        whose canonical JSON was seen before (the same actions in the same order) is one
        lookup, joined already: the canonical JSON of a list is its items' joined, so the
        key fixes every item's (22 against 74 us for the 50 per-action lookups of the
        rank request of docs/performance.md section 9). Only lists every item of which
        was cached, and so checked, are kept."""
        try:
            key: bytes | None = orjson.dumps(actions, option=orjson.OPT_SORT_KEYS)
        except (TypeError, orjson.JSONEncodeError):
            key = None
        if key is not None and b"null" in key:
            key = None  # an item is not cacheable (class docstring)
        if key is not None:
            cached = self._lists.get(key)
            if cached is not None:
                self._lists.move_to_end(key)
                return cached
        entries = [self.hashed_action(features, k, arm_index) for k, features in enumerate(actions)]
        joined = (HashedActions.join([e[0] for e in entries]), [e[1] for e in entries])
        if key is not None:
            self._lists[key] = joined
            if len(self._lists) > LIST_CACHE_SIZE:
                self._lists.popitem(last=False)
        return joined


class JsonCandidates:
    """Builds the candidates of requests for policies with ``features``; one per process,
    keeping a :class:`CachedFeaturizer` per distinct featurizer config."""

    def __init__(self, cache_size: int = ACTION_CACHE_SIZE) -> None:
        self.cache_size = cache_size
        self._featurizers: OrderedDict[str, CachedFeaturizer] = OrderedDict()

    def featurizer(self, info: PolicyInfo) -> CachedFeaturizer:
        """The cached featurizer of ``info.features``."""
        key = orjson.dumps(info.features, option=orjson.OPT_SORT_KEYS).decode()
        cached = self._featurizers.get(key)
        if cached is None:
            config = info.featurizer_config
            assert config is not None
            cached = self._featurizers[key] = CachedFeaturizer(config, self.cache_size)
            if len(self._featurizers) > FEATURIZERS_KEPT:
                self._featurizers.popitem(last=False)
        return cached

    def build(
        self, req: RecommendRequest, info: PolicyInfo, policy: BasePolicy, max_candidates: int
    ) -> tuple[list[str], np.ndarray | SparseRows, Mapping[str, float] | None, list[Any]]:
        """Candidate ids, their rows ``X`` for ``policy`` (:class:`SparseRows` for a
        policy taking sparse rows with the featurizer's sparse output), the context's features by name
        when the policy has guardrails (else None), and each candidate's features to
        log (``{}`` when none; see :meth:`CachedFeaturizer.hashed_action`). 422s name
        the request's fields."""
        context: Any = req.context
        if isinstance(context, list) and context and not is_json_features(context):
            raise InvalidRequest(
                f"policy {info.name!r} declares features: send context as a JSON feature "
                "object or a list of them",
                ["body", "context"],
            )
        arms = candidate_arms(req, info, max_candidates)
        raw: list[Any] = []
        for _, own, i in arms:
            # validated as floats or JSON features: a non-empty list of non-objects is floats
            if i is not None and type(own) is list and own and type(own[0]) is not dict:
                raise InvalidRequest(
                    f"policy {info.name!r} declares features: send arm features as a JSON "
                    "feature object or a list of them",
                    ["body", "arms", i, "features"],
                )
            raw.append({} if own is None else own)
        cached = self.featurizer(info)
        try:
            index = [i for _, _, i in arms]
            hashed, logged = cached.hashed_actions(raw, index)
            ctx = cached.featurizer.hash_features(context, ("context",))
            check_loggable(context, ["body", "context"], cached.featurizer.config.limits.max_depth)
            X = featurized_rows(cached.featurizer, policy, ctx, hashed)
            named = context_feature_values(cached.featurizer, context) if info.guardrails else None
        except InvalidFeatureError as exc:
            loc = request_loc(exc.loc, index)
            raise InvalidRequest(str(exc), loc, problem=f"expected {exc.expected}") from exc
        except ConfigError as exc:  # a stored config the engine no longer accepts
            raise InvalidRequest(str(exc), ["body", "policy"]) from exc
        return [a[0] for a in arms], X, named, logged


def check_loggable(value: Any, loc: list[str | int], max_depth: int) -> None:
    """Refuse what the featurizer may skip (keys starting with ``_`` hold anything) but
    the event log cannot store: nesting deeper than ``max_depth``, NaN and infinities,
    integers beyond 64 bits, the NUL character (PostgreSQL text). ``loc`` is the
    request's path of ``value``; iterative, so no depth can overflow the stack."""
    stack: list[tuple[Any, list[str | int], int]] = [(value, loc, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > max_depth:
                raise _unloggable(path, f"JSON features nest at most {max_depth} levels deep")
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str) and "\x00" in key:
                    raise _unloggable(path, "keys must not contain the NUL character (\\u0000)")
                stack.append((child, [*path, key], depth + 1))
        elif isinstance(item, str):
            if "\x00" in item:
                raise _unloggable(path, "strings must not contain the NUL character (\\u0000)")
        elif isinstance(item, float) and not math.isfinite(item):
            raise _unloggable(path, f"numbers must be finite, but got {item}")
        elif isinstance(item, int) and not -(1 << 63) <= item < 1 << 63:
            raise _unloggable(path, "integers must fit in 64 bits")


def _unloggable(path: list[str | int], problem: str) -> InvalidRequest:
    """The error for a value at ``path`` the event log cannot store."""
    return InvalidRequest(problem, path, problem=problem)


def request_loc(loc: Sequence[str | int], arm_index: Sequence[int | None]) -> list[str | int]:
    """A featurizer path (``("actions", k, ...)``, ``("context", ...)``) as the request's
    ``loc``: candidate ``k`` is ``arms[arm_index[k]].features`` (a registered arm, index
    None, has no features to name: its ``id`` list is ``arms``)."""
    if not loc:
        return ["body"]
    if loc[0] == "context":
        return ["body", "context", *loc[1:]]
    if len(loc) >= 2 and isinstance(loc[1], int):
        i = arm_index[loc[1]]
        return ["body", "arms"] if i is None else ["body", "arms", i, "features", *loc[2:]]
    return ["body", "arms"]


def logged_candidates(ids: Sequence[str], raw: Sequence[Any]) -> orjson.Fragment:
    """The log's ``candidates`` column for JSON features: ``[{"id", "features": <JSON as
    sent, or its canonical form>}]``, so a replay can featurize them again under another
    configuration."""
    return orjson.Fragment(orjson.dumps([{"id": a, "features": f} for a, f in zip(ids, raw)]))


def logged_rows(
    featurizer: Featurizer,
    policy: BasePolicy,
    context: Any,
    candidates: Sequence[Mapping[str, Any]],
) -> np.ndarray | SparseRows:
    """The rows of a logged JSON decision, featurized again (replay, rebuild)."""
    return featurized_rows(featurizer, policy, context, [c["features"] for c in candidates])
