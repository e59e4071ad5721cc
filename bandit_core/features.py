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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple

import mmh3
import numpy as np

from bandit_core.errors import ConfigError, InvalidFeatureError
from bandit_core.validation import check_bool, check_choice, check_int, check_real

__all__ = [
    "BIAS_NAME",
    "DEFAULT_NAMESPACE",
    "BucketNames",
    "FeatureBatch",
    "FeatureLimits",
    "Featurizer",
    "FeaturizerConfig",
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
MAX_BITS = 30
MAX_DENSE_BITS = 16
"""Dense output is refused above this: a (K, 2**16 + 1) float64 matrix is 26 MB at K = 50."""
AUTO_DENSE_MAX_BITS = 10
"""``output="auto"`` means dense up to this many bits (full-matrix models), sparse above."""

_FEATURE_SEED = 0
_MIX_MULTIPLIER = np.uint32(0x9E3779B1)  # odd: c -> c * m is a bijection of uint32
_FMIX_1 = np.uint32(0x85EBCA6B)
_FMIX_2 = np.uint32(0xC2B2AE35)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def feature_hash(name: str) -> int:
    """32-bit MurmurHash3 (seed 0, unsigned) of the UTF-8 bytes of ``name``.

    The same value on every process, machine and release (no salt, unlike ``hash``).

    >>> feature_hash("user|interest=tech") & 0xFF
    150
    """
    return mmh3.hash(name, _FEATURE_SEED, signed=False)


def interaction_hash(context_hashes: np.ndarray, action_hashes: np.ndarray) -> np.ndarray:
    """32-bit hash of the interaction ``c ^ a`` from the hashes of ``c`` and ``a``.

    ``fmix32(h_c * 0x9E3779B1 + h_a mod 2**32)`` (MurmurHash3's finalizer, so every
    output bit depends on every input bit before the mask keeps the low ``bits``);
    ordered, so ``c ^ a`` and ``a ^ c`` differ. Arrays of uint32 that broadcast against
    each other; the result has their broadcast shape.

    >>> int(interaction_hash(np.uint32([1]), np.uint32([2]))[0])
    2117216093
    """
    mixed = np.asarray(context_hashes, dtype=np.uint32) * _MIX_MULTIPLIER + np.asarray(
        action_hashes, dtype=np.uint32
    )
    mixed ^= mixed >> np.uint32(16)
    mixed *= _FMIX_1
    mixed ^= mixed >> np.uint32(13)
    mixed *= _FMIX_2
    mixed ^= mixed >> np.uint32(16)
    return mixed


def sort_stably(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``(keys[order], order)`` with ``order = np.argsort(keys, kind="stable")``, for int64
    ``keys`` in ``[0, bound)``.

    When ``bound * len(keys)`` fits in an int64 this sorts ``keys * n + position`` with
    one ``np.sort`` (no permutation to carry, several times cheaper than a stable
    ``argsort`` at a request's few thousand entries) and splits the result; otherwise it
    is the stable ``argsort``. Both give the same arrays.

    >>> sort_stably(np.array([3, 1, 3, 0]), 4)
    (array([0, 1, 3, 3]), array([3, 1, 0, 2]))
    """
    n = len(keys)
    if bound * max(n, 1) < 1 << 63:
        return np.divmod(np.sort(keys * n + np.arange(n)), n) if n else (keys, np.arange(0))
    order = np.argsort(keys, kind="stable")
    return keys[order], order


def _interaction_hash_scalar(context_hash: int, action_hash: int) -> int:
    """:func:`interaction_hash` of two Python ints, in plain integer arithmetic (the
    reference the vectorised form is tested against, through :meth:`Featurizer.describe`)."""
    h = (context_hash * 0x9E3779B1 + action_hash) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


@dataclass(frozen=True)
class FeatureLimits:
    """What one request may hold (each breach is an :class:`InvalidFeatureError`).

    ``max_depth``: nesting of objects and arrays, the feature object itself being
    level 1 (``{"user": {"tags": ["a"]}}`` is 3 deep). ``max_features``: features of the
    context, and of each action, before interactions. ``max_string_length``: characters
    of a string value or a key. ``max_array_length``: elements of an array.
    ``max_abs_value``: largest magnitude of a number (products of two stay far from
    overflow). ``max_interactions``: context x action interaction features of one
    request, over all its actions.
    """

    max_depth: int = 8
    max_features: int = 1024
    max_string_length: int = 1024
    max_array_length: int = 1024
    max_abs_value: float = 1e12
    max_interactions: int = 250_000

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "max_abs_value":
                v = check_real(self.max_abs_value, "limits.max_abs_value", low=0.0, high=1e100, low_open=True)
                object.__setattr__(self, "max_abs_value", v)
            else:
                object.__setattr__(
                    self, f.name, check_int(getattr(self, f.name), f"limits.{f.name}", low=1)
                )


@dataclass(frozen=True)
class FeaturizerConfig:
    """How a policy's JSON features become vectors (docs/algorithms.md section 7).

    ``bits``: features hash into ``2**bits`` buckets (1 to 30); vectors have
    ``dim = 2**bits + 1`` entries, the last the bias. ``interactions``: pairs
    ``(context namespace pattern, action namespace pattern)``, ``*`` matching any run of
    characters (dots included; ``"*"`` also matches the default namespace ``""``);
    ``()`` turns interactions off. ``context_in_actions``: whether each action's vector
    also holds the context's own features. ``output``: ``"dense"`` (numpy arrays, up to
    ``bits`` = 16), ``"sparse"`` (:class:`SparseRows`) or ``"auto"``, resolved on
    creation to dense up to ``bits`` = 10 and sparse above. ``limits``:
    :class:`FeatureLimits` (a dict is accepted).

    >>> FeaturizerConfig(bits=8).to_dict()["output"]
    'dense'
    >>> FeaturizerConfig(bits=40)
    Traceback (most recent call last):
    ...
    bandit_core.errors.ConfigError: bits must be an int in [1, 30], but got 40
    """

    bits: int = 18
    interactions: tuple[tuple[str, str], ...] = (("*", "*"),)
    context_in_actions: bool = True
    output: Literal["auto", "dense", "sparse"] = "auto"
    limits: FeatureLimits = field(default_factory=FeatureLimits)

    def __post_init__(self) -> None:
        bits = check_int(self.bits, "bits", low=1, high=MAX_BITS)
        object.__setattr__(self, "bits", bits)
        pairs = self.interactions
        if isinstance(pairs, (str, bytes)) or not isinstance(pairs, (list, tuple)):
            raise ConfigError(
                f"interactions must be a list of [context, action] namespace patterns, but got {pairs!r}"
            )
        checked = []
        for pair in pairs:
            if (
                not isinstance(pair, (list, tuple))
                or len(pair) != 2
                or not all(isinstance(p, str) and len(p) <= 256 for p in pair)
            ):
                raise ConfigError(
                    f"each interaction must be a pair of namespace patterns [context, action], but got {pair!r}"
                )
            checked.append((pair[0], pair[1]))
        object.__setattr__(self, "interactions", tuple(dict.fromkeys(checked)))
        object.__setattr__(self, "context_in_actions", check_bool(self.context_in_actions, "context_in_actions"))
        output = check_choice(self.output, "output", ("auto", "dense", "sparse"))
        if output == "auto":
            output = "dense" if bits <= AUTO_DENSE_MAX_BITS else "sparse"
        if output == "dense" and bits > MAX_DENSE_BITS:
            raise ConfigError(
                f"dense output needs bits <= {MAX_DENSE_BITS}, but got bits = {bits}; use 'sparse'"
            )
        object.__setattr__(self, "output", output)
        limits = self.limits
        if isinstance(limits, dict):
            limits = _from_mapping(FeatureLimits, limits, "limits")
        elif not isinstance(limits, FeatureLimits):
            raise ConfigError(
                f"limits must be a FeatureLimits or a dict, but got {type(limits).__name__}"
            )
        object.__setattr__(self, "limits", limits)

    @property
    def dim(self) -> int:
        """Length of every vector: ``2**bits`` buckets and the bias."""
        return (1 << self.bits) + 1

    @property
    def bias_index(self) -> int:
        """Column of the constant feature, ``2**bits``."""
        return 1 << self.bits

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of the configuration (inverse of :meth:`from_dict`)."""
        return {
            "bits": self.bits,
            "interactions": [list(p) for p in self.interactions],
            "context_in_actions": self.context_in_actions,
            "output": self.output,
            "limits": {f.name: getattr(self.limits, f.name) for f in fields(self.limits)},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FeaturizerConfig:
        """The configuration :meth:`to_dict` wrote; an unknown key is a :class:`ConfigError`.

        >>> config = FeaturizerConfig(bits=12, interactions=[["user*", "item"]])
        >>> FeaturizerConfig.from_dict(config.to_dict()) == config
        True
        """
        return _from_mapping(cls, data, "featurizer")


def _from_mapping(cls: type, data: Any, what: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{what} config must be an object, but got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise ConfigError(
            f"unknown {what} config key {unknown[0]!r}; expected some of {sorted(known)}"
        )
    return cls(**data)


@dataclass(frozen=True)
class SparseRows:
    """Rows of ``dim``-long vectors in compressed sparse row form (numpy only).

    Row ``i`` has ``values[indptr[i]:indptr[i+1]]`` at columns
    ``indices[indptr[i]:indptr[i+1]]``, strictly increasing within a row; no stored value
    is 0. Shapes: ``indptr`` (n_rows + 1,) int64, ``indices`` and ``values`` (nnz,) int64
    and float64.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    dim: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.dim)

    def row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, values)`` of row ``i``."""
        lo, hi = self.indptr[i], self.indptr[i + 1]
        return self.indices[lo:hi], self.values[lo:hi]

    def one_row(self, i: int) -> SparseRows:
        """Row ``i`` alone, as a one-row :class:`SparseRows` (the ``x`` a sparse-rows
        policy's ``update`` takes for the served candidate)."""
        indices, values = self.row(i)
        return SparseRows(np.array([0, len(indices)]), indices, values, self.dim)

    @classmethod
    def from_dense(cls, X: np.ndarray) -> SparseRows:
        """The nonzero entries of the 2-d float64 array ``X``, row by row, columns
        increasing (the inverse of :meth:`to_dense`).

        >>> SparseRows.from_dense(np.array([[0.0, 2.0], [0.0, 0.0]])).indptr.tolist()
        [0, 1, 1]
        """
        rows, columns = np.nonzero(X)
        indptr = np.zeros(X.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=X.shape[0]), out=indptr[1:])
        return cls(indptr=indptr, indices=columns.astype(np.int64), values=X[rows, columns], dim=X.shape[1])

    def to_dense(self) -> np.ndarray:
        """The rows as a dense float64 array of shape (n_rows, dim)."""
        out = np.zeros((self.n_rows, self.dim))
        rows = np.repeat(np.arange(self.n_rows), np.diff(self.indptr))
        out[rows, self.indices] = self.values
        return out


@dataclass(frozen=True)
class FeatureBatch:
    """One request, featurized (:meth:`Featurizer.featurize`).

    ``context``: the context's vector, shape (dim,) when the config's output is dense,
    else a one-row :class:`SparseRows`. ``actions``: one vector per action, shape
    (K, dim) or a K-row :class:`SparseRows`.
    """

    context: np.ndarray | SparseRows
    actions: np.ndarray | SparseRows


@dataclass(frozen=True)
class HashedFeatures:
    """One feature object's features, parsed and hashed (:meth:`Featurizer.hash_features`):
    the 32-bit hashes (uint32) and values (float64) in walk order, and each feature's
    namespace. Independent of ``bits`` and of the interactions."""

    hashes: np.ndarray
    values: np.ndarray
    namespaces: tuple[str, ...]


class NamedFeature(NamedTuple):
    """One feature of a vector by name (:meth:`Featurizer.describe`)."""

    name: str
    bucket: int
    value: float


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


def _exact_json(value: Any, path: tuple[str | int, ...]) -> Any:
    """A subclass of a JSON type (a numpy float is a float) as that type; anything else
    (a set, bytes, a numpy integer, a tuple...) is not JSON."""
    for json_type in (str, float, int, dict, list):
        if isinstance(value, json_type) and not isinstance(value, bool):
            return json_type(value)
    raise _fail(
        path,
        f"a JSON value (object, array, string, number, boolean or null), but got {_kind(value)}",
    )


def _check_actions(actions: Any) -> None:
    if isinstance(actions, (str, bytes, dict)) or not isinstance(actions, Sequence) or not actions:
        raise _fail(("actions",), f"a non-empty list of feature objects, but got {_kind(actions)}")


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
        self._patterns = [(self._compile(c), self._compile(a)) for c, a in config.interactions]
        self._every_pair = ("*", "*") in config.interactions

    @staticmethod
    def _compile(pattern: str) -> re.Pattern[str]:
        return re.compile(
            ".*".join(re.escape(part) for part in pattern.split("*")) + r"\Z", re.DOTALL
        )

    def interacts(self, context_namespace: str, action_namespace: str) -> bool:
        """Whether features of these two namespaces interact under the config's pairs.

        >>> Featurizer(FeaturizerConfig(interactions=[["user*", "item"]])).interacts("user.address", "item")
        True
        """
        return any(
            c.match(context_namespace) and a.match(action_namespace) for c, a in self._patterns
        )

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
                    raise _fail((*root_path, i), f"a JSON object, but got {_kind(obj)}")
                self._walk(obj, DEFAULT_NAMESPACE, (*root_path, i), 1, out)
        else:
            raise _fail(root_path, f"a JSON object or a list of objects, but got {_kind(root)}")
        return out

    def _walk(
        self, obj: dict, namespace: str, path: tuple[str | int, ...], depth: int, out: _Parsed
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
            if type(inner) is dict:
                child = key if namespace == DEFAULT_NAMESPACE else f"{namespace}.{key}"
                self._walk(inner, child, path + (key,), depth + 1, out)
            else:
                self._array(inner, prefix + key, namespace, path + (key,), depth + 1, out)

    def _array(
        self,
        arr: list,
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
                    f"a number, string, boolean or null in an array, but got {_kind(inner)}",
                )

    def _leaf(
        self,
        value: Any,
        stem: str,
        namespace: str,
        path: tuple[str | int, ...],
        last: str | int,
        out: _Parsed,
    ) -> dict | list | None:
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
            return value
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
            (mmh3.hash(n, _FEATURE_SEED, signed=False) for n in parsed.names),
            dtype=np.uint32,
            count=len(parsed.names),
        )

    def featurize_context(self, context: Any) -> np.ndarray | SparseRows:
        """The context's vector alone (per-arm models): shape (dim,) or a one-row
        :class:`SparseRows`, by the config's output. ``context`` may also be the
        :class:`HashedFeatures` :meth:`hash_features` made of it."""
        if not isinstance(context, HashedFeatures):
            context = self.hash_features(context, ("context",))
        return self._context_vector(context.hashes, context.values)

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
            HashedFeatures(self._hashes(ctx), np.asarray(ctx.values, dtype=np.float64), tuple(ctx.namespaces)),
            self._hashes(act),
            np.asarray(act.values, dtype=np.float64),
            act.namespaces,
            np.diff(ends),
        )

    def hash_features(self, obj: Any, path: tuple[str | int, ...] = ("actions", 0)) -> HashedFeatures:
        """One feature object (or list of them) parsed and hashed, for
        :meth:`featurize_hashed`: a caller may keep the result of an object that recurs
        (a catalog item) and skip walking it again. ``path`` prefixes the error paths.
        Raises :class:`InvalidFeatureError` as :meth:`featurize` does."""
        parsed = self._parse(obj, path)
        return HashedFeatures(
            self._hashes(parsed), np.asarray(parsed.values, dtype=np.float64), tuple(parsed.namespaces)
        )

    def featurize_hashed(self, context: HashedFeatures, actions: Sequence[HashedFeatures]) -> FeatureBatch:
        """:meth:`featurize` over objects already passed through :meth:`hash_features`
        (by this featurizer or one with the same ``limits``): the same vectors, bit for bit."""
        _check_actions(actions)
        counts = np.array([len(a.values) for a in actions], dtype=np.int64)
        namespaces = (
            None if self._every_pair else tuple(ns for a in actions for ns in a.namespaces)
        )
        return self._batch(
            context,
            np.concatenate([a.hashes for a in actions]),
            np.concatenate([a.values for a in actions]),
            namespaces,
            counts,
        )

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
        namespaces may be None when every pair of namespaces interacts)."""
        config = self.config
        K = len(counts)
        h_ctx, v_ctx = ctx.hashes, ctx.values
        row_act = np.repeat(np.arange(K), counts)

        pair_mask = self._pair_mask(ctx.namespaces, act_namespaces, len(h_act))
        h_int = interaction_hash(h_ctx[:, None], h_act[None, :])
        v_int = v_ctx[:, None] * v_act[None, :]
        row_int = np.broadcast_to(row_act, h_int.shape)
        if pair_mask is not None:
            h_int, v_int, row_int = h_int[pair_mask], v_int[pair_mask], row_int[pair_mask]

        n_ctx = len(h_ctx) if config.context_in_actions else 0
        rows = np.concatenate(
            [np.repeat(np.arange(K), n_ctx), row_act, row_int.ravel(), np.arange(K)]
        )
        hashes = np.concatenate([np.tile(h_ctx, K) if n_ctx else h_ctx[:0], h_act, h_int.ravel()])
        idx = np.concatenate(
            [(hashes & self._mask).astype(np.int64), np.full(K, config.bias_index)]
        )
        vals = np.concatenate(
            [np.tile(v_ctx, K) if n_ctx else v_ctx[:0], v_act, v_int.ravel(), np.ones(K)]
        )
        return FeatureBatch(
            context=self._context_vector(h_ctx, v_ctx),
            actions=self._assemble(rows, idx, vals, K, single=False),
        )

    def _pair_mask(
        self, ctx_namespaces: Sequence[str], act_namespaces: Sequence[str] | None, n_act: int
    ) -> np.ndarray | None:
        """(n_context, n_action_total) bool mask of the interacting pairs, None when all
        pairs interact; raises when the request exceeds ``max_interactions``.
        ``act_namespaces`` may be None only when every pair interacts."""
        if act_namespaces is None or self._every_pair:  # ("*", "*"): no namespace to look at
            allowed, total = None, len(ctx_namespaces) * n_act
        else:
            ctx_ns = {ns: i for i, ns in enumerate(dict.fromkeys(ctx_namespaces))}
            act_ns = {ns: i for i, ns in enumerate(dict.fromkeys(act_namespaces))}
            allowed = np.array(
                [[self.interacts(c, a) for a in act_ns] for c in ctx_ns], dtype=bool
            ).reshape(len(ctx_ns), len(act_ns))
            c_ids = np.fromiter(
                (ctx_ns[ns] for ns in ctx_namespaces), dtype=np.int64, count=len(ctx_namespaces)
            )
            a_ids = np.fromiter(
                (act_ns[ns] for ns in act_namespaces), dtype=np.int64, count=len(act_namespaces)
            )
            total = (
                np.bincount(c_ids, minlength=len(ctx_ns))
                @ allowed
                @ np.bincount(a_ids, minlength=len(act_ns))
            )
        if total > self._limits.max_interactions:
            raise _fail(
                ("actions",),
                f"at most {self._limits.max_interactions} context x action interactions per request, "
                f"but these features make {int(total)}",
            )
        if allowed is None or allowed.all():
            return None
        return allowed[c_ids[:, None], a_ids[None, :]]

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
        ctx_named = [
            NamedFeature(n, h & mask, v) for n, h, v in zip(ctx.names, ctx_hashes, ctx.values)
        ]
        bias = NamedFeature(BIAS_NAME, self.config.bias_index, 1.0)
        if action is None:
            return [*ctx_named, bias]
        act = self._parse(action, ("actions", 0))
        act_hashes = [feature_hash(n) for n in act.names]
        interactions = [
            NamedFeature(f"{cn} ^ {an}", _interaction_hash_scalar(ch, ah) & mask, cv * av)
            for cn, ch, cv, cns in zip(ctx.names, ctx_hashes, ctx.values, ctx.namespaces)
            for an, ah, av, ans in zip(act.names, act_hashes, act.values, act.namespaces)
            if self.interacts(cns, ans)
        ]
        act_named = [
            NamedFeature(n, h & mask, v) for n, h, v in zip(act.names, act_hashes, act.values)
        ]
        own_context = ctx_named if self.config.context_in_actions else []
        return [*own_context, *act_named, *interactions, bias]


def _kind(value: Any) -> str:
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


@dataclass
class BucketNames:
    """Bounded map from bucket to the names of the features seen in it (state the
    caller owns; docs/algorithms.md section 7: explain a model's weights by name).

    At most ``max_names_per_bucket`` names per bucket (colliding features beyond it are
    not kept) and ``max_names`` in all; the first names seen are the ones kept, and
    ``dropped`` counts those that were not. ``buckets`` maps a bucket to its names in
    the order first seen.

    >>> names = BucketNames(max_names=2)
    >>> names.observe([NamedFeature("a", 3, 1.0), NamedFeature("b", 3, 2.0), NamedFeature("c", 5, 1.0)])
    >>> names.names(3), names.names(5), names.dropped
    (('a', 'b'), (), 1)
    """

    max_names: int = 65_536
    max_names_per_bucket: int = 4
    buckets: dict[int, list[str]] = field(default_factory=dict)
    dropped: int = 0

    def __post_init__(self) -> None:
        self.max_names = check_int(self.max_names, "max_names", low=1)
        self.max_names_per_bucket = check_int(self.max_names_per_bucket, "max_names_per_bucket", low=1)
        self.dropped = check_int(self.dropped, "dropped", low=0)
        if not isinstance(self.buckets, dict):
            raise ConfigError(
                f"buckets must be a dict of bucket -> names, but got {type(self.buckets).__name__}"
            )
        buckets: dict[int, list[str]] = {}
        for bucket, names in self.buckets.items():
            b = int(bucket) if isinstance(bucket, str) and bucket.isdigit() else bucket
            b = check_int(b, "bucket", low=0)
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ConfigError(f"bucket {b} must map to a list of names, but got {names!r}")
            if len(names) > self.max_names_per_bucket:
                raise ConfigError(
                    f"bucket {b} holds {len(names)} names, more than {self.max_names_per_bucket}"
                )
            buckets[b] = list(dict.fromkeys(names))
        self.buckets = buckets
        total = self.size
        if total > self.max_names:
            raise ConfigError(
                f"the map holds {total} names, more than max_names = {self.max_names}"
            )

    @property
    def size(self) -> int:
        """Number of names held (never above ``max_names``)."""
        return sum(len(v) for v in self.buckets.values())

    def observe(self, features: Iterable[NamedFeature]) -> None:
        """Record the names of ``features`` (e.g. :meth:`Featurizer.describe` of a served
        action when its reward arrives) within the bounds."""
        size = self.size
        for name, bucket, _ in features:
            held = self.buckets.get(bucket)
            if held is not None and name in held:
                continue
            if size >= self.max_names or (
                held is not None and len(held) >= self.max_names_per_bucket
            ):
                self.dropped += 1
                continue
            if held is None:
                self.buckets[bucket] = [name]
            else:
                held.append(name)
            size += 1

    def names(self, bucket: int) -> tuple[str, ...]:
        """Names seen in ``bucket`` (empty if none was recorded)."""
        return tuple(self.buckets.get(bucket, ()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (bucket keys as strings; inverse of :meth:`from_dict`)."""
        return {
            "max_names": self.max_names,
            "max_names_per_bucket": self.max_names_per_bucket,
            "buckets": {str(b): list(n) for b, n in sorted(self.buckets.items())},
            "dropped": self.dropped,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BucketNames:
        """The map :meth:`to_dict` wrote (validated: a :class:`ConfigError` if not)."""
        return _from_mapping(cls, data, "bucket names")
