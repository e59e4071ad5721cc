"""JSON features -> the rows ``X`` a policy takes (docs/algorithms.md sections 7 and 8).

Every policy declares how it reads featurized input in its class attribute
``FEATURE_LAYOUT`` (:class:`~bandit_core.policy.BasePolicy`), one of :data:`LAYOUTS`;
a caller holding a :class:`~bandit_core.features.Featurizer` gets the rows with
:func:`featurized_rows` without knowing the algorithm:

``"context"`` (per-arm models: LinUCB, LNUCB-TA, guardrailed LinUCB, the baselines)
    every candidate's row is the hashed context ``x`` (``featurize_context``), length
    ``dim = 2**bits + 1``; each arm learns its own weights over it.
``"actions_context"`` (shared models, ``SharedModelPolicy``: Hybrid LinUCB, diag LinUCB, section 8)
    row ``a`` is ``[z_a, x]``: the action's vector of :meth:`Featurizer.featurize`
    (context, action features, context x action interactions, bias), then, when the
    policy has a per-arm part (``context_dim = dim``), the hashed context.
``"context_item"`` (HARE, section 4)
    row ``a`` is ``[x, v_a]``: the hashed context when ``context_dim = dim`` (nothing
    when 0), then the item embedding ``v_a``, the action's own features hashed (no
    context, no interactions) with the bias.

The output is dense (a full-matrix model's few hundred columns), except for a policy
that takes sparse rows (``SPARSE_ROWS``, the model for large hashed spaces), which gets
:class:`~bandit_core.features.SparseRows` when the featurizer's output is sparse.

>>> import bandit_core
>>> from bandit_core.features import Featurizer, FeaturizerConfig
>>> f = Featurizer(FeaturizerConfig(bits=4))
>>> p = bandit_core.make_policy("hybrid_linucb", d=featurized_dimension("actions_context", f.config, 0))
>>> featurized_rows(f, p, {"user": {"tier": "gold"}}, [{"item": {"price": 2}}, {"item": {"cat": "food"}}]).shape
(2, 17)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from bandit_core.errors import ConfigError, InvalidFeatureError
from bandit_core.features import (
    DEFAULT_NAMESPACE,
    Featurizer,
    FeaturizerConfig,
    HashedActions,
    HashedFeatures,
    NamedFeature,
    SparseRows,
)

if TYPE_CHECKING:
    from bandit_core.policy import AnyPolicy

__all__ = [
    "LAYOUTS",
    "Layout",
    "context_feature_values",
    "featurized_dimension",
    "featurized_rows",
    "named_columns",
]

Layout = Literal["context", "actions_context", "context_item"]
LAYOUTS: tuple[Layout, ...] = ("context", "actions_context", "context_item")


def featurized_dimension(layout: str, features: FeaturizerConfig, context_dim: int = 0) -> int:
    """The ``d`` a policy of ``layout`` needs over ``features``' vectors; ``context_dim``
    (the per-arm or user-context columns of a shared model or HARE) must be 0 or
    ``features.dim``. Raises :class:`ConfigError` otherwise.

    >>> featurized_dimension("actions_context", FeaturizerConfig(bits=4), 17)
    34
    """
    dim = features.dim
    if layout == "context":
        return dim
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown feature layout {layout!r}; expected one of {LAYOUTS}")
    if context_dim not in (0, dim):
        raise ConfigError(
            f"context_dim must be 0 or the featurizer's dim 2**bits + 1 = {dim} with features, "
            f"but got {context_dim!r}"
        )
    return dim + context_dim


def _hashed(featurizer: Featurizer, obj: Any, path: tuple[str | int, ...]) -> HashedFeatures:
    return obj if isinstance(obj, HashedFeatures) else featurizer.hash_features(obj, path)


def featurized_rows(
    featurizer: Featurizer,
    policy: AnyPolicy,
    context: Any,
    actions: Sequence[Any] | HashedActions,
) -> np.ndarray | SparseRows:
    """The rows ``X`` (shape ``(K, policy.config.d)``) that ``policy`` takes for one
    request of JSON features, by its ``FEATURE_LAYOUT`` (module docstring): dense, except
    for a policy with ``SPARSE_ROWS`` (``diag_linucb``), which gets the featurizer's
    output form (:class:`SparseRows` above ``bits`` 10).

    ``context`` and each action are a JSON feature object, a list of them, or the
    :class:`HashedFeatures` ``featurizer.hash_features`` made of one (so a caller may
    keep the parsed form of recurring catalog items), and ``actions`` may be the
    :class:`HashedActions` of such forms (of a recurring list of actions); the vectors
    are the same bit for bit either way. Errors are :class:`InvalidFeatureError` with paths ``context...``
    and ``actions[k]...``; a policy whose ``d`` does not fit the featurizer is a
    :class:`ConfigError`.
    """
    layout = type(policy).FEATURE_LAYOUT
    context_dim = int(getattr(policy.config, "context_dim", 0))
    d = featurized_dimension(layout, featurizer.config, context_dim)
    if d != policy.config.d:
        raise ConfigError(
            f"{policy.NAME} has d = {policy.config.d}, but layout {layout!r} over "
            f"{featurizer.config.dim}-long vectors makes rows of {d}"
        )
    if not isinstance(actions, HashedActions) and (
        isinstance(actions, (str, bytes, dict)) or not isinstance(actions, Sequence) or not actions
    ):
        raise InvalidFeatureError("actions", "a non-empty list of feature objects", ("actions",))
    ctx = _hashed(featurizer, context, ("context",))
    acts: Sequence[HashedFeatures] | HashedActions = (
        actions
        if isinstance(actions, HashedActions)
        else [_hashed(featurizer, a, ("actions", k)) for k, a in enumerate(actions)]
    )
    if layout == "context":
        x = _dense(featurizer.featurize_context(ctx))
        return np.broadcast_to(x.reshape(1, d), (len(acts), d)).copy()
    if layout == "actions_context":
        batch = featurizer.featurize_hashed(ctx, acts)
        if not context_dim and policy.SPARSE_ROWS:
            return batch.actions  # the config's output form: SparseRows above bits 10
        Z = _dense(batch.actions)
        if not context_dim:
            return Z
        return np.hstack(
            [Z, np.broadcast_to(_dense(batch.context).reshape(1, -1), (len(acts), context_dim))]
        )
    own = Featurizer(
        dataclasses.replace(featurizer.config, interactions=(), context_in_actions=False)
    )
    batch = own.featurize_hashed(ctx, acts)
    V = _dense(batch.actions)
    if not context_dim:
        return V
    return np.hstack(
        [np.broadcast_to(_dense(batch.context).reshape(1, -1), (len(acts), context_dim)), V]
    )


def named_columns(
    featurizer: Featurizer, policy: AnyPolicy, context: Any, action: Any
) -> list[NamedFeature]:
    """The features of the row ``policy`` takes for one action (:func:`featurized_rows`)
    by name, each with its *column* of that row in place of its bucket (what a
    :class:`~bandit_core.features.BucketNames` fed with them maps back to names, column
    by column): :meth:`Featurizer.describe` of the action's vector at columns
    ``[0, dim)`` for ``"actions_context"``, then of the context at ``[dim, 2 dim)`` when
    the policy has a per-arm part; of the context alone for ``"context"``. Not defined
    for ``"context_item"`` (HARE is not linear in its rows): a :class:`ConfigError`."""
    layout = type(policy).FEATURE_LAYOUT
    if layout == "context":
        return featurizer.describe(context)
    if layout != "actions_context":
        raise ConfigError(
            f"named columns are defined for the layouts 'context' and 'actions_context', not {layout!r}"
        )
    named = featurizer.describe(context, action)
    if int(getattr(policy.config, "context_dim", 0)):
        dim = featurizer.config.dim
        named += [NamedFeature(n, bucket + dim, v) for n, bucket, v in featurizer.describe(context)]
    return named


def _dense(vectors: np.ndarray | SparseRows) -> np.ndarray:
    """Rows as a dense array; a one-row context vector as shape ``(dim,)``."""
    if isinstance(vectors, np.ndarray):
        return vectors
    return vectors.to_dense()


def context_feature_values(featurizer: Featurizer, context: Any) -> Mapping[str, float]:
    """The context's features by dotted name, for guardrails that name a JSON feature
    (``feature_threshold``'s ``feature``): a number at ``{"user": {"age": 16}}`` is
    ``user.age`` = 16; a string ``{"device": {"type": "mobile"}}`` is
    ``device.type=mobile`` = 1 (a categorical is named with its value); a top-level
    scalar is its key. Values of the same name add up (as in the vectors); absent,
    ``false``, ``null`` and 0 give no entry (the guardrail's ``on_missing`` decides).

    >>> f = Featurizer(FeaturizerConfig(bits=4))
    >>> dict(context_feature_values(f, {"user": {"age": 16}, "device": {"type": "mobile"}}))
    {'device.type=mobile': 1.0, 'user.age': 16.0}
    """
    out: dict[str, float] = {}
    for name, _, value in featurizer.describe(context)[:-1]:  # the last is the bias
        namespace, _, feature = name.partition("|")
        dotted = feature if namespace == DEFAULT_NAMESPACE else f"{namespace}.{feature}"
        out[dotted] = out.get(dotted, 0.0) + value
    return out
