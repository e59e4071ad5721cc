"""Which namespaces a :class:`~bandit_core.features.Featurizer` reads, which of them
keep their own (linear) features, and which pairs interact (docs/algorithms.md
section 7; VW's ``--ignore``, ``--keep``, ``--ignore_linear`` and ``-q``).

A pattern matches a namespace name with ``*`` standing for any run of characters
(dots included; ``"*"`` also matches the default namespace ``""``).

* ``ignore``: a namespace matching one of them is left out: no feature, no interaction.
* ``keep``: when given, only the namespaces matching one of them are read (VW: ``keep``
  wins over ``ignore``).
* ``ignore_linear``: a namespace matching one of them loses its own features from the
  vectors, while its interactions stay.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["NamespaceRules", "ReadFeatures", "compile_pattern"]


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression of a namespace pattern (``*``: any run of characters)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")) + r"\Z", re.DOTALL)


def _matches_any(patterns: Sequence[re.Pattern[str]], namespace: str) -> bool:
    return any(p.match(namespace) for p in patterns)


@dataclass(frozen=True)
class ReadFeatures:
    """The features of a request that :meth:`NamespaceRules.select` keeps: the read
    masks of the context's and the actions' features, the namespaces of those read, the
    actions' counts of read features, and, among the read features of each side, the
    masks of those that keep their own (linear) entries."""

    read_context: np.ndarray
    read_actions: np.ndarray
    ctx_namespaces: tuple[str, ...]
    act_namespaces: list[str]
    counts: np.ndarray
    own_context: np.ndarray
    own_actions: np.ndarray

    def context(self, hashes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The read context features' hashes and values."""
        return hashes[self.read_context], values[self.read_context]

    def actions(self, hashes: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The read action features' hashes and values."""
        return hashes[self.read_actions], values[self.read_actions]


class NamespaceRules:
    """The namespace patterns of a featurizer config, compiled once; answers per
    namespace and, vectorised, per feature (one lookup per distinct namespace)."""

    def __init__(
        self,
        interactions: Sequence[tuple[str, str]],
        ignore: Sequence[str] = (),
        keep: Sequence[str] = (),
        ignore_linear: Sequence[str] = (),
    ) -> None:
        self._pairs = [(compile_pattern(c), compile_pattern(a)) for c, a in interactions]
        self.every_pair = ("*", "*") in interactions
        self._ignore = [compile_pattern(p) for p in ignore]
        self._keep = [compile_pattern(p) for p in keep]
        self._ignore_linear = [compile_pattern(p) for p in ignore_linear]
        self.filters = bool(ignore or keep or ignore_linear)

    def interacts(self, context_namespace: str, action_namespace: str) -> bool:
        """Whether features of these two namespaces interact under the config's pairs."""
        return any(c.match(context_namespace) and a.match(action_namespace) for c, a in self._pairs)

    def reads(self, namespace: str) -> bool:
        """Whether the namespace's features are read at all (``ignore`` / ``keep``)."""
        if self._keep:
            return _matches_any(self._keep, namespace)
        return not _matches_any(self._ignore, namespace)

    def linear(self, namespace: str) -> bool:
        """Whether a read namespace's own features stay in the vectors (``ignore_linear``)."""
        return not _matches_any(self._ignore_linear, namespace)

    def masks(self, namespaces: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Per feature of these namespaces: (read, read and linear) boolean masks."""
        distinct, ids = _distinct(namespaces)
        reads = np.array([self.reads(ns) for ns in distinct], dtype=bool)
        linear = reads & np.array([self.linear(ns) for ns in distinct], dtype=bool)
        return reads[ids], linear[ids]

    def select(
        self, ctx_namespaces: Sequence[str], act_namespaces: Sequence[str], counts: np.ndarray
    ) -> ReadFeatures:
        """What the rules keep of a request: its context's features and its K actions'
        features one after the other (``counts[k]`` of them for action ``k``)."""
        read_c, own_c = self.masks(ctx_namespaces)
        read_a, own_a = self.masks(act_namespaces)
        rows = np.repeat(np.arange(len(counts)), counts)[read_a]
        return ReadFeatures(
            read_c,
            read_a,
            tuple(ns for ns, r in zip(ctx_namespaces, read_c) if r),
            [ns for ns, r in zip(act_namespaces, read_a) if r],
            np.bincount(rows, minlength=len(counts)),
            own_c[read_c],
            own_a[read_a],
        )

    def pair_table(
        self, ctx_namespaces: Sequence[str], act_namespaces: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which pairs interact, per distinct namespace: the (distinct context, distinct
        action) boolean table and each feature's row (context) and column (action) in it."""
        ctx_distinct, c_ids = _distinct(ctx_namespaces)
        act_distinct, a_ids = _distinct(act_namespaces)
        allowed = np.array(
            [[self.interacts(c, a) for a in act_distinct] for c in ctx_distinct], dtype=bool
        ).reshape(len(ctx_distinct), len(act_distinct))
        return allowed, c_ids, a_ids


def _distinct(namespaces: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct namespaces in first-seen order and each feature's index among them."""
    index = {ns: i for i, ns in enumerate(dict.fromkeys(namespaces))}
    ids = np.fromiter((index[ns] for ns in namespaces), dtype=np.int64, count=len(namespaces))
    return list(index), ids
