"""The candidates of one ``POST /recommend``: arm ids and their feature rows, checked
against the policy's configuration, and the log's JSON of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from service.errors import InvalidRequest
from service.schemas import PolicyInfo, RecommendRequest, is_json_features


def candidate_arms(
    req: RecommendRequest, info: PolicyInfo, max_candidates: int
) -> list[tuple[str, Any, int | None]]:
    """The candidates left after ``exclude``: ``(arm id, its features as sent or None,
    its index in the request's ``arms`` or None for a registered arm)``. Ids must be
    unique and, when the policy registers arms, registered; a bad request is
    :class:`InvalidRequest` naming the field."""
    if req.arms is None:
        if not info.arms:
            raise InvalidRequest(
                f"policy {info.name!r} has no registered arms; send arms", ["body", "arms"]
            )
        arms: list[tuple[str, Any, int | None]] = [(a, None, None) for a in info.arms]
    else:
        if len(req.arms) > max_candidates:
            raise InvalidRequest(
                f"at most {max_candidates} candidates, but got {len(req.arms)}",
                ["body", "arms"],
            )
        arms = [(a.id, a.features, i) for i, a in enumerate(req.arms)]
        seen: set[str] = set()
        registered = set(info.arms or ())
        for i, arm in enumerate(req.arms):
            arm_id = arm.id
            if arm_id in seen:
                raise InvalidRequest(
                    f"arm id {arm_id!r} appears more than once", ["body", "arms", i, "id"]
                )
            seen.add(arm_id)
            if registered and arm_id not in registered:
                raise InvalidRequest(
                    f"arm {arm_id!r} is not a registered arm of policy {info.name!r}",
                    ["body", "arms", i, "id"],
                )
    exclude = set(req.exclude or ())
    arms = [a for a in arms if a[0] not in exclude]
    if not arms:
        raise InvalidRequest(
            "no candidate arms left (empty arms, or all excluded)", ["body", "arms"]
        )
    return arms


def build_candidates(
    req: RecommendRequest, info: PolicyInfo, max_candidates: int
) -> tuple[list[str], np.ndarray, dict[str, float] | None]:
    """Candidate ids, their feature rows ``X`` (shape ``(K, dimension)``: each row is the
    context followed by the arm's own features) and the named context (None for a list
    context), for a policy of float vectors (one with ``features`` goes through
    ``usecases/json_features.py``). A bad request is :class:`InvalidRequest` naming the field."""
    features: dict[str, float] | None = None
    if is_json_features(req.context):
        raise InvalidRequest(
            f"policy {info.name!r} declares no features; send context as floats",
            ["body", "context"],
        )
    if isinstance(req.context, dict):
        if not info.feature_names:
            raise InvalidRequest(
                f"policy {info.name!r} declares no feature_names; send context as a list of floats",
                ["body", "context"],
            )
        missing = [f for f in info.feature_names if f not in req.context]
        unknown = sorted(set(req.context) - set(info.feature_names))
        if missing or unknown:
            raise InvalidRequest(
                f"context must hold exactly the features {info.feature_names}; missing {missing}, unknown {unknown}",
                ["body", "context"],
            )
        features = dict(req.context)
        context = [req.context[f] for f in info.feature_names]
    else:
        context = list(req.context)
    arms = candidate_arms(req, info, max_candidates)
    for _, own, i in arms:
        if own is not None and i is not None and is_json_features(own):
            raise InvalidRequest(
                f"policy {info.name!r} declares no features; send arm features as floats",
                ["body", "arms", i, "features"],
            )
    d = info.dimension
    assert d is not None  # a stored policy's dimension is derived or required (PolicySpec)
    n_ctx = len(context)
    for arm_id, own, i in arms:
        n_own = len(own) if own else 0
        if n_ctx + n_own != d:
            loc: list[str | int] = (
                ["body", "context"] if i is None or own is None else ["body", "arms", i, "features"]
            )
            raise InvalidRequest(
                f"the feature vector of arm {arm_id!r} (context {n_ctx} + arm features "
                f"{n_own}) has length {n_ctx + n_own}, but the policy's dimension is {d}",
                loc,
            )
    # Filled by columns, not built from K Python row lists (the lists cost ~10x more).
    X = np.empty((len(arms), d), dtype=np.float64)
    X[:, :n_ctx] = context
    if n_ctx < d:  # then every arm brought d - n_ctx features of its own
        X[:, n_ctx:] = [own for _, own, _ in arms]
    return [a[0] for a in arms], X, features


def candidates_json(ids: Sequence[str], X: np.ndarray) -> orjson.Fragment:
    """The log's ``candidates`` column, ``[{"id": <arm>, "features": <row of X>}, ...]``,
    as the JSON orjson writes for it, built from the text of each distinct row.

    Without arm features of their own every row is the context: its text is written once
    instead of K times (the K x d floats were 55 us of the writer thread's time under the
    GIL at K = 50, d = 32, and the K row lists kept about 100 objects per queued decision
    for the garbage collector to scan); the rows are compared bitwise, so ``-0.0`` and
    ``0.0`` keep their own text.
    """
    option = orjson.OPT_SERIALIZE_NUMPY
    if X.tobytes() == X[0].tobytes() * len(X):
        rows = [orjson.Fragment(orjson.dumps(X[0], option=option))] * len(X)
    else:
        rows = [orjson.Fragment(orjson.dumps(x, option=option)) for x in X]
    return orjson.Fragment(orjson.dumps([{"id": a, "features": r} for a, r in zip(ids, rows)]))
