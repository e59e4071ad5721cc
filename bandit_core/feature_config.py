"""The configuration of a :class:`~bandit_core.features.Featurizer` (docs/algorithms.md
section 7): the hashed space and its output form (:class:`FeaturizerConfig`) and what
one request may hold (:class:`FeatureLimits`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from bandit_core.errors import ConfigError
from bandit_core.validation import check_bool, check_choice, check_int, check_real

__all__ = [
    "AUTO_DENSE_MAX_BITS",
    "MAX_BITS",
    "MAX_DENSE_BITS",
    "NAMESPACE_FILTERS",
    "FeatureLimits",
    "FeaturizerConfig",
    "from_mapping",
]

MAX_BITS = 30
MAX_DENSE_BITS = 16
"""Dense output is refused above this: a (K, 2**16 + 1) float64 matrix is 26 MB at K = 50."""
AUTO_DENSE_MAX_BITS = 10
NAMESPACE_FILTERS = ("ignore", "keep", "ignore_linear")
"""The config's namespace-pattern lists other than the interactions."""
"""``output="auto"`` means dense up to this many bits (full-matrix models), sparse above."""

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

ConfigT = TypeVar("ConfigT", bound="DataclassInstance")


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
                v = check_real(
                    self.max_abs_value, "limits.max_abs_value", low=0.0, high=1e100, low_open=True
                )
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
    ``()`` turns interactions off. ``interaction_terms``: terms of three or more namespace
    patterns, each matching the context's and the action's namespaces alike
    (:mod:`bandit_core.interaction_terms`; written by :meth:`to_dict` only when given).
    ``ignore`` / ``keep`` / ``ignore_linear``: namespace
    patterns left out, the only ones read (when given), and those whose own features are
    left out while their interactions stay (VW's ``--ignore``, ``--keep``,
    ``--ignore_linear``; :class:`~bandit_core.namespace_rules.NamespaceRules`); written by
    :meth:`to_dict` only when given. ``context_in_actions``: whether each action's vector
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
    interaction_terms: tuple[tuple[str, ...], ...] = ()
    context_in_actions: bool = True
    ignore: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    ignore_linear: tuple[str, ...] = ()
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
        terms = self.interaction_terms
        if isinstance(terms, (str, bytes)) or not isinstance(terms, (list, tuple)):
            raise ConfigError(
                f"interaction_terms must be a list of lists of namespace patterns, but got {terms!r}"
            )
        for term in terms:
            if (
                not isinstance(term, (list, tuple))
                or len(term) < 3
                or not all(isinstance(p, str) and len(p) <= 256 for p in term)
            ):
                raise ConfigError(
                    "each interaction term must be a list of three or more namespace patterns, "
                    f"but got {term!r}"
                )
        object.__setattr__(self, "interaction_terms", tuple(dict.fromkeys(tuple(t) for t in terms)))
        for name in NAMESPACE_FILTERS:
            patterns = getattr(self, name)
            if isinstance(patterns, (str, bytes)) or not isinstance(patterns, (list, tuple)):
                raise ConfigError(
                    f"{name} must be a list of namespace patterns, but got {patterns!r}"
                )
            for pattern in patterns:
                if not isinstance(pattern, str) or len(pattern) > 256:
                    raise ConfigError(
                        f"each {name} entry must be a namespace pattern (a string of at most "
                        f"256 characters), but got {pattern!r}"
                    )
            object.__setattr__(self, name, tuple(dict.fromkeys(patterns)))
        object.__setattr__(
            self, "context_in_actions", check_bool(self.context_in_actions, "context_in_actions")
        )
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
            limits = from_mapping(FeatureLimits, limits, "limits")
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
            **(
                {"interaction_terms": [list(t) for t in self.interaction_terms]}
                if self.interaction_terms
                else {}
            ),
            **{
                name: list(getattr(self, name)) for name in NAMESPACE_FILTERS if getattr(self, name)
            },
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
        return from_mapping(cls, data, "featurizer")


def from_mapping(cls: type[ConfigT], data: Any, what: str) -> ConfigT:
    """``cls(**data)`` for a dict ``data`` whose keys are fields of the dataclass ``cls``;
    anything else is a :class:`ConfigError` naming ``what``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{what} config must be an object, but got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        raise ConfigError(
            f"unknown {what} config key {unknown[0]!r}; expected some of {sorted(known)}"
        )
    return cls(**data)
