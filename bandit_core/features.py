"""JSON feature objects -> hashed feature vectors (docs/algorithms.md section 7).

A product frontend sends facts, not vectors: a context such as
``{"user": {"interest": "tech", "tenureYears": 2}, "device": {"type": "mobile"}}`` and,
for each candidate action, an object such as ``{"item": {"category": "food", "price": 25,
"tags": ["vegan", "new"]}}``. :class:`Featurizer` turns them into the vectors the models
use, by Vowpal Wabbit's JSON conventions (which Azure Personalizer payloads follow; same
meaning, not bit-compatible with VW):

* **Input** is one JSON object or a list of them (Personalizer's ``contextFeatures`` and
  each action's ``features`` are lists); the features of all objects of a list add up.
* **Namespaces**: a key whose value is an object opens a namespace; nested objects
  extend the path (``user.address``); a scalar at the top level of an object belongs to
  the default namespace, spelled ``""`` (its features read ``|key``).
* **Values**: string ``k: "v"`` -> ``ns|k=v`` with value 1; number ``k: 2.5`` -> ``ns|k``
  = 2.5; ``true`` -> ``ns|k`` = 1; ``false``, ``null`` and ``0`` -> no feature. In an
  array, numbers (and booleans) are positional, ``ns|k[i]`` = the element, and strings
  are multi-hot, ``ns|k=v`` = 1 each (a string repeated n times has value n); an array
  of arrays or of objects is refused. Keys starting with ``_`` are ignored with all
  they hold (VW).
* **Hashing trick** (Weinberger et al. 2009): a feature's bucket is the 32-bit
  MurmurHash3 (seed 0, :func:`feature_hash`, the hash Vowpal Wabbit uses) of its UTF-8
  name, masked to its low ``bits`` bits; features that land in the same bucket add
  up. Column ``2**bits`` is the constant (bias) feature, 1 in every vector, so vectors
  have ``dim = 2**bits + 1`` entries.
* **Interactions** (VW ``-q``): for every context feature ``c`` and action feature
  ``a`` whose namespaces match one of the configured pairs (default ``("*", "*")``:
  every context namespace x every action namespace) the product feature ``c ^ a`` with
  value ``value(c) * value(a)``, in the bucket of :func:`interaction_hash` of their two
  32-bit hashes (computed from the hashes, never from the joined name).
* **Vectors**: the context vector (for per-arm models) holds the context's features and
  the bias. Action ``a``'s vector (for shared models) holds the context's features
  (unless ``context_in_actions`` is off), ``a``'s own features, the interactions and
  the bias. Keys are read in sorted order, so the same JSON in any key order gives the
  same vector, bit for bit.

Input the featurizer cannot take raises :class:`InvalidFeatureError` (an
:class:`~bandit_core.errors.InvalidInputError`), whose ``path`` names the offending
value, e.g. ``context[0].user.tags[3]``: NaN or infinite numbers, numbers beyond
``max_abs_value``, values that are not JSON (a set, bytes, a numpy integer...),
non-string keys, nesting deeper than ``max_depth``, more than ``max_features``
features in the context or in one action, strings or keys longer than
``max_string_length``, arrays longer than ``max_array_length``, and requests whose
interactions would exceed ``max_interactions`` (:class:`FeatureLimits`).

:class:`BucketNames` is a bounded map from bucket back to the names of the features
seen in it, state the caller owns (``to_dict`` / ``from_dict``), so weights can be
explained by name. :meth:`Featurizer.describe` lists one vector's features by name: a
plain, scalar re-computation that the vectorised :meth:`Featurizer.featurize` is
tested against.

>>> featurizer = Featurizer(FeaturizerConfig(bits=4))
>>> batch = featurizer.featurize({"user": {"interest": "tech"}}, [{"item": {"price": 2}}])
>>> batch.actions.shape, float(batch.actions.sum())  # user|interest=tech, item|price, their product, bias
((1, 17), 6.0)
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import mmh3
import numpy as np

from bandit_core.bucket_names import BucketNames, NamedFeature
from bandit_core.errors import ConfigError, InvalidFeatureError, json_kind
from bandit_core.feature_config import FeatureLimits, FeaturizerConfig
from bandit_core.feature_hashing import (
    FEATURE_SEED,
    feature_hash,
    interaction_hash,
    interaction_hash_scalar,
    sort_stably,
)
from bandit_core.hashed_features import FeatureBatch, HashedActions, HashedFeatures
from bandit_core.interaction_terms import InteractionTerms
from bandit_core.namespace_rules import NamespaceRules
from bandit_core.sparse_rows import SparseRows

__all__ = [
    "BIAS_NAME",
    "DEFAULT_NAMESPACE",
    "BucketNames",
    "FeatureBatch",
    "FeatureLimits",
    "Featurizer",
    "FeaturizerConfig",
    "HashedActions",
    "HashedFeatures",
    "NamedFeature",
    "SparseRows",
    "feature_hash",
    "interaction_hash",
    "sort_stably",
]

DEFAULT_NAMESPACE = ""
"""Namespace of the scalars at the top level of a feature object."""
BIAS_NAME = "bias"
"""Name of the constant feature (column ``2**bits``) in :meth:`Featurizer.describe`."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class _Parsed:
    """Features of feature-object lists, in walk order (sorted keys). Several lists (the
    K actions) may share one: ``cap`` is the length ``names`` may reach while the
    current one is walked (its ``max_features`` past the features before it)."""

    __slots__ = ("cap", "names", "namespaces", "values")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.values: list[float] = []
        self.namespaces: list[str] = []
        self.cap = 0


def _render(path: tuple[str | int, ...]) -> str:
    """``("context", 0, "user", "my key")`` -> ``context[0].user["my key"]``."""
    parts = [str(path[0])]
    for part in path[1:]:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif _IDENTIFIER.match(part):
            parts.append(f".{part}")
        else:
            parts.append(f"[{json.dumps(part)}]")
    return "".join(parts)


_JSON_TYPES = frozenset({str, bool, int, float, dict, list, type(None)})
_JSON_CONVERSIONS: tuple[type[Any], ...] = (str, float, int, dict, list)


def _exact_json(value: Any, path: tuple[str | int, ...]) -> Any:
    """A subclass of a JSON type (a numpy float is a float) as that type; anything else
    (a set, bytes, a numpy integer, a tuple...) is not JSON."""
    for json_type in _JSON_CONVERSIONS:
        if isinstance(value, json_type) and not isinstance(value, bool):
            return json_type(value)
    raise _fail(
        path,
        f"a JSON value (object, array, string, number, boolean or null), but got {json_kind(value)}",
    )


def _check_actions(actions: Any) -> None:
    if isinstance(actions, (str, bytes, dict)) or not isinstance(actions, Sequence) or not actions:
        raise _fail(
            ("actions",), f"a non-empty list of feature objects, but got {json_kind(actions)}"
        )


def _fail(path: tuple[str | int, ...], expected: str) -> InvalidFeatureError:
    return InvalidFeatureError(_render(path), expected, path)


class Featurizer:
    """Turns JSON feature objects into vectors by a :class:`FeaturizerConfig`.

    Stateless apart from its configuration: the same input gives the same output on
    every process. Thread-safe.
    """

    def __init__(self, config: FeaturizerConfig) -> None:
        if not isinstance(config, FeaturizerConfig):
            raise ConfigError(f"config must be a FeaturizerConfig, but got {type(config).__name__}")
        self.config = config
        self._limits = config.limits
        self._max_string_length = config.limits.max_string_length  # read per value
        self._max_abs_value = config.limits.max_abs_value
        self._mask = np.uint32((1 << config.bits) - 1)
        self._rules = NamespaceRules(
            config.interactions, config.ignore, config.keep, config.ignore_linear
        )
        self._terms = InteractionTerms(config.interaction_terms, config.limits.max_interactions)

    def interacts(self, context_namespace: str, action_namespace: str) -> bool:
        """Whether features of these two namespaces interact under the config's pairs.

        >>> Featurizer(FeaturizerConfig(interactions=[["user*", "item"]])).interacts("user.address", "item")
        True
        """
        return self._rules.interacts(context_namespace, action_namespace)

    # --- parsing -------------------------------------------------------------------

    def _parse(
        self, root: Any, root_path: tuple[str | int, ...], out: _Parsed | None = None
    ) -> _Parsed:
        """Walk one feature object, or a list of them, at ``root_path`` into ``out`` (a
        new ``_Parsed`` if None); returns ``out``."""
        out = _Parsed() if out is None else out
        out.cap = len(out.names) + self._limits.max_features
        if isinstance(root, dict):
            self._walk(root, DEFAULT_NAMESPACE, root_path, 1, out)
        elif isinstance(root, list):
            if len(root) > self._limits.max_array_length:
                raise _fail(
                    root_path,
                    f"a list of at most {self._limits.max_array_length} feature objects, but got {len(root)}",
                )
            for i, obj in enumerate(root):
                if not isinstance(obj, dict):
                    raise _fail((*root_path, i), f"a JSON object, but got {json_kind(obj)}")
                self._walk(obj, DEFAULT_NAMESPACE, (*root_path, i), 1, out)
        else:
            raise _fail(root_path, f"a JSON object or a list of objects, but got {json_kind(root)}")
        return out

    def _walk(
        self,
        obj: dict[str, Any],
        namespace: str,
        path: tuple[str | int, ...],
        depth: int,
        out: _Parsed,
    ) -> None:
        limits = self._limits
        if depth > limits.max_depth:
            raise _fail(path, f"nesting at most {limits.max_depth} levels deep")
        try:
            keys = sorted(obj)
        except TypeError:  # keys of several types: the loop names the first non-string
            keys = list(obj)
        max_len = limits.max_string_length
        prefix = namespace + "|"
        for key in keys:
            if type(key) is not str and not isinstance(key, str):
                raise _fail(path, f"string keys, but got the key {key!r}")
            if key[:1] == "_":
                continue
            if len(key) > max_len:
                shown = key if len(key) <= 40 else key[:40] + "..."
                raise _fail(
                    path + (shown,), f"keys of at most {max_len} characters, but got {len(key)}"
                )
            inner = self._leaf(obj[key], prefix + key, namespace, path, key, out)
            if inner is None:
                continue
            if isinstance(inner, dict):  # exact JSON types: a dict or a list
                child = key if namespace == DEFAULT_NAMESPACE else f"{namespace}.{key}"
                self._walk(inner, child, path + (key,), depth + 1, out)
            else:
                self._array(inner, prefix + key, namespace, path + (key,), depth + 1, out)

    def _array(
        self,
        arr: list[Any],
        stem: str,
        namespace: str,
        path: tuple[str | int, ...],
        depth: int,
        out: _Parsed,
    ) -> None:
        """Elements of the array ``path`` whose features are named ``stem=v`` / ``stem[i]``."""
        limits = self._limits
        if depth > limits.max_depth:
            raise _fail(path, f"nesting at most {limits.max_depth} levels deep")
        if len(arr) > limits.max_array_length:
            raise _fail(
                path, f"an array of at most {limits.max_array_length} elements, but got {len(arr)}"
            )
        for i, value in enumerate(arr):
            inner = self._leaf(value, stem, namespace, path, i, out)
            if inner is not None:
                raise _fail(
                    path + (i,),
                    f"a number, string, boolean or null in an array, but got {json_kind(inner)}",
                )

    def _leaf(
        self,
        value: Any,
        stem: str,
        namespace: str,
        path: tuple[str | int, ...],
        last: str | int,
        out: _Parsed,
    ) -> dict[str, Any] | list[Any] | None:
        """Record the feature of the scalar ``value`` at ``path + (last,)``: a string is
        ``stem=value``, a number or ``true`` is ``stem`` (``stem[last]`` in an array, where
        ``last`` is the element's index);
        ``false``, ``null`` and 0 give none. An object or an array is returned (as its
        exact JSON type) for the caller to walk or refuse; anything else raises."""
        # Hot path: exact-type dispatch (what json.loads makes); paths rendered on error.
        kind = type(value)
        if kind not in _JSON_TYPES:
            value = _exact_json(value, path + (last,))
            kind = type(value)
        if kind is str:
            if len(value) > self._max_string_length:
                raise _fail(
                    path + (last,),
                    f"a string of at most {self._max_string_length} characters, "
                    f"but got {len(value)}",
                )
            out.names.append(f"{stem}={value}")
            out.values.append(1.0)
        elif kind is float or kind is int or kind is bool:
            if kind is not bool and not -self._max_abs_value <= value <= self._max_abs_value:
                raise _fail(path + (last,), self._bad_number(value))  # also NaN
            if not value:
                return None
            out.names.append(f"{stem}[{last}]" if type(last) is int else stem)
            out.values.append(float(value))
        elif value is None:
            return None
        else:
            container: dict[str, Any] | list[Any] = value
            return container
        out.namespaces.append(namespace)
        if len(out.names) > out.cap:
            raise _fail(path + (last,), f"at most {self._limits.max_features} features")
        return None

    def _bad_number(self, value: float) -> str:
        shown = f"an int of {value.bit_length()} bits" if isinstance(value, int) else repr(value)
        return (
            f"a finite number of magnitude at most {self._limits.max_abs_value:g}, but got {shown}"
        )

    # --- vectors -------------------------------------------------------------------

    def _hashes(self, parsed: _Parsed) -> np.ndarray:
        return np.fromiter(
            (mmh3.hash(n, FEATURE_SEED, signed=False) for n in parsed.names),
            dtype=np.uint32,
            count=len(parsed.names),
        )

    def featurize_context(self, context: Any) -> np.ndarray | SparseRows:
        """The context's vector alone (per-arm models): shape (dim,) or a one-row
        :class:`SparseRows`, by the config's output. ``context`` may also be the
        :class:`HashedFeatures` :meth:`hash_features` made of it."""
        if not isinstance(context, HashedFeatures):
            context = self.hash_features(context, ("context",))
        own = self._rules.masks(context.namespaces)[1] if self._rules.filters else slice(None)
        return self._context_vector(context.hashes[own], context.values[own])

    def _context_vector(self, hashes: np.ndarray, values: np.ndarray) -> np.ndarray | SparseRows:
        idx = np.append((hashes & self._mask).astype(np.int64), self.config.bias_index)
        return self._assemble(np.zeros(len(idx), dtype=np.int64), idx, np.append(values, 1.0), 1)

    def featurize(self, context: Any, actions: Sequence[Any]) -> FeatureBatch:
        """Vectors of one request: the context, and each of the K actions.

        ``context``: a feature object or a list of them (path ``context``). ``actions``: a
        non-empty list of K feature objects or lists of them (paths ``actions[k]``).
        The K actions share the context's hashing, and the interactions are computed
        from the two sets of 32-bit hashes at once (see the module docstring for the
        rules; :meth:`describe` computes the same vector feature by feature).
        """
        _check_actions(actions)
        ctx = self._parse(context, ("context",))
        act = _Parsed()  # the K actions' features one after the other
        ends = [0]
        for k, action in enumerate(actions):
            ends.append(len(self._parse(action, ("actions", k), act).names))
        return self._batch(
            HashedFeatures(
                self._hashes(ctx), np.asarray(ctx.values, dtype=np.float64), tuple(ctx.namespaces)
            ),
            self._hashes(act),
            np.asarray(act.values, dtype=np.float64),
            act.namespaces,
            np.diff(ends),
        )

    def hash_features(
        self, obj: Any, path: tuple[str | int, ...] = ("actions", 0)
    ) -> HashedFeatures:
        """One feature object (or list of them) parsed and hashed, for
        :meth:`featurize_hashed`: a caller may keep the result of an object that recurs
        (a catalog item) and skip walking it again. ``path`` prefixes the error paths.
        Raises :class:`InvalidFeatureError` as :meth:`featurize` does."""
        parsed = self._parse(obj, path)
        return HashedFeatures(
            self._hashes(parsed),
            np.asarray(parsed.values, dtype=np.float64),
            tuple(parsed.namespaces),
        )

    def featurize_hashed(
        self, context: HashedFeatures, actions: Sequence[HashedFeatures] | HashedActions
    ) -> FeatureBatch:
        """:meth:`featurize` over objects already passed through :meth:`hash_features`
        (by this featurizer or one with the same ``limits``), the actions' also as their
        :class:`HashedActions`: the same vectors, bit for bit."""
        if not isinstance(actions, HashedActions):
            _check_actions(actions)
            actions = HashedActions.join(actions)
        every_pair = self._rules.every_pair and not (self._rules.filters or self._terms)
        joined = actions.features
        namespaces = None if every_pair else joined.namespaces
        return self._batch(context, joined.hashes, joined.values, namespaces, actions.counts)

    def _batch(
        self,
        ctx: HashedFeatures,
        h_act: np.ndarray,
        v_act: np.ndarray,
        act_namespaces: Sequence[str] | None,
        counts: np.ndarray,
    ) -> FeatureBatch:
        """The vectors of a request from its context's features and the K actions'
        features one after the other (``counts[k]`` of them for action ``k``; their
        namespaces may be None when every pair of namespaces interacts and every namespace
        is read whole). Namespaces the config does not read are left out first; those
        under ``ignore_linear`` then give their interactions only.

        Every bucket sums its entries in one order: the context's, the action's, the
        interactions (context-major), the bias. Dense output sums the context's entries
        once, into the context vector, and starts every action's row from that vector
        (the bias aside: no hashed feature lands in its column); the entries that depend
        on the action are then added in order (``np.add.at``), so each sum is the same,
        bit for bit, as one pass over every entry of every row."""
        config = self.config
        K = len(counts)
        own_ctx: Any = slice(None)
        own_act: Any = slice(None)
        if self._rules.filters:
            read = self._rules.select(ctx.namespaces, act_namespaces or (), counts)
            ctx = HashedFeatures(*read.context(ctx.hashes, ctx.values), read.ctx_namespaces)
            (h_act, v_act), act_namespaces = read.actions(h_act, v_act), read.act_namespaces
            counts, own_ctx, own_act = read.counts, read.own_context, read.own_actions
        h_ctx, v_ctx = ctx.hashes, ctx.values
        row_act = np.repeat(np.arange(K), counts)

        pair_mask = self._pair_mask(ctx.namespaces, act_namespaces, len(h_act))
        h_int = interaction_hash(h_ctx[:, None], h_act[None, :])
        v_int = v_ctx[:, None] * v_act[None, :]
        row_int = np.broadcast_to(row_act, h_int.shape)
        if pair_mask is not None:
            h_int, v_int, row_int = h_int[pair_mask], v_int[pair_mask], row_int[pair_mask]
        if self._terms:  # k-way terms after the pairs, in each row's order
            ns = (ctx.namespaces, act_namespaces or ())
            terms = self._terms.entries((h_ctx, v_ctx, ns[0]), (h_act, v_act, ns[1]), counts)
            row_int, h_int, v_int = (
                np.append(x, t) for x, t in zip((row_int, h_int, v_int), terms)
            )

        h_ctx, v_ctx = h_ctx[own_ctx], v_ctx[own_ctx]
        row_act, h_act, v_act = row_act[own_act], h_act[own_act], v_act[own_act]
        context = self._context_vector(h_ctx, v_ctx)
        n_ctx = len(h_ctx) if config.context_in_actions else 0
        rows = np.concatenate([row_act, row_int.ravel(), np.arange(K)])
        hashes = np.concatenate([h_act, h_int.ravel()])
        idx = np.concatenate(
            [(hashes & self._mask).astype(np.int64), np.full(K, config.bias_index)]
        )
        vals = np.concatenate([v_act, v_int.ravel(), np.ones(K)])
        if isinstance(context, np.ndarray):  # the config's output is dense
            dim = config.dim
            start = np.zeros(dim) if not n_ctx else context.copy()
            start[config.bias_index] = 0.0
            dense = np.tile(start, K)
            np.add.at(dense, rows * dim + idx, vals)
            return FeatureBatch(context=context, actions=dense.reshape(K, dim))
        ctx_idx = (h_ctx & self._mask).astype(np.int64)
        return FeatureBatch(
            context=context,
            actions=self._assemble(
                np.concatenate([np.repeat(np.arange(K), n_ctx), rows]),
                np.concatenate([np.tile(ctx_idx, K) if n_ctx else ctx_idx[:0], idx]),
                np.concatenate([np.tile(v_ctx, K) if n_ctx else v_ctx[:0], vals]),
                K,
                single=False,
            ),
        )

    def _pair_mask(
        self, ctx_namespaces: Sequence[str], act_namespaces: Sequence[str] | None, n_act: int
    ) -> np.ndarray | None:
        """(n_context, n_action_total) bool mask of the interacting pairs, None when all
        pairs interact; raises when the request exceeds ``max_interactions``.
        ``act_namespaces`` may be None only when every pair interacts."""
        if act_namespaces is None or self._rules.every_pair:  # ("*", "*"): no namespace to look at
            allowed, total = None, len(ctx_namespaces) * n_act
        else:
            allowed, c_ids, a_ids = self._rules.pair_table(ctx_namespaces, act_namespaces)
            total = (
                np.bincount(c_ids, minlength=allowed.shape[0])
                @ allowed
                @ np.bincount(a_ids, minlength=allowed.shape[1])
            )
        if total > self._limits.max_interactions:
            raise _fail(
                ("actions",),
                f"at most {self._limits.max_interactions} context x action interactions per request, "
                f"but these features make {int(total)}",
            )
        if allowed is None or allowed.all():
            return None
        return np.asarray(allowed[c_ids[:, None], a_ids[None, :]], dtype=bool)

    def _assemble(
        self, rows: np.ndarray, idx: np.ndarray, vals: np.ndarray, n_rows: int, single: bool = True
    ) -> np.ndarray | SparseRows:
        """Sum the (row, column, value) entries into the config's output form.

        Entries of one (row, column) add up in their order of arrival (walk order) in
        both forms (``bincount`` sums sequentially; the sparse form sorts stably first),
        so dense and sparse vectors are equal bit for bit.
        """
        dim = self.config.dim
        key = rows * dim + idx
        if self.config.output == "dense":
            dense = np.bincount(key, weights=vals, minlength=n_rows * dim).reshape(n_rows, dim)
            return dense[0] if single else dense
        key, order = sort_stably(key, n_rows * dim)
        first = np.empty(len(key), dtype=bool)
        first[:1] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
        summed = np.bincount(np.cumsum(first) - 1, weights=vals[order])
        keep = summed != 0.0
        out_rows, columns = np.divmod(key[first][keep], dim)
        indptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(out_rows, minlength=n_rows), out=indptr[1:])
        return SparseRows(indptr=indptr, indices=columns, values=summed[keep], dim=dim)

    # --- by name -------------------------------------------------------------------

    def describe(self, context: Any, action: Any = None) -> list[NamedFeature]:
        """The features of one vector by name, bucket and value, unsummed, in walk order.

        With ``action`` None: the context vector's features. Otherwise that action's
        vector in :meth:`featurize` (path ``actions[0]``): the context's features (if
        ``context_in_actions``), the action's, the interactions ``c ^ a``, the bias.
        Scalar code throughout (one hash call per feature, integer arithmetic for the
        interactions): the reference the vectorised path is tested against, and what
        :class:`BucketNames` records.
        """
        mask = int(self._mask)
        ctx = self._parse(context, ("context",))
        ctx_hashes = [feature_hash(n) for n in ctx.names]
        reads, own = self._rules.reads, self._rules.linear
        ctx_named = [
            NamedFeature(n, h & mask, v)
            for n, h, v, ns in zip(ctx.names, ctx_hashes, ctx.values, ctx.namespaces)
            if reads(ns) and own(ns)
        ]
        bias = NamedFeature(BIAS_NAME, self.config.bias_index, 1.0)
        if action is None:
            return [*ctx_named, bias]
        act = self._parse(action, ("actions", 0))
        act_hashes = [feature_hash(n) for n in act.names]
        interactions = [
            NamedFeature(f"{cn} ^ {an}", interaction_hash_scalar(ch, ah) & mask, cv * av)
            for cn, ch, cv, cns in zip(ctx.names, ctx_hashes, ctx.values, ctx.namespaces)
            for an, ah, av, ans in zip(act.names, act_hashes, act.values, act.namespaces)
            if reads(cns) and reads(ans) and self.interacts(cns, ans)
        ]
        row = zip(
            ctx.names + act.names,
            ctx_hashes + act_hashes,
            ctx.values + act.values,
            ctx.namespaces + act.namespaces,
        )
        terms = self._terms.scalar_entries([f for f in row if reads(f[3])])
        interactions += [NamedFeature(n, h & mask, v) for n, h, v in terms]
        act_named = [
            NamedFeature(n, h & mask, v)
            for n, h, v, ns in zip(act.names, act_hashes, act.values, act.namespaces)
            if reads(ns) and own(ns)
        ]
        own_context = ctx_named if self.config.context_in_actions else []
        return [*own_context, *act_named, *interactions, bias]
