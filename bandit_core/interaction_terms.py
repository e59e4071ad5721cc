"""Interactions of three or more namespaces (docs/algorithms.md section 7; VW's
``--cubic`` and ``--interactions`` of three or more letters).

A term is a tuple of k >= 3 namespace patterns. As in VW, where the shared (context)
features and an action's features are namespaces of one example, each pattern of a
term matches among all the read features of an action's row: the context's, then that
action's. The term's features in a row are the products of one matching feature per
pattern, every combination in pattern order (as VW's ``--permutations``), with value
``v1 * ... * vk`` and the hash chained from the pairwise one,
``h(f1, ..., fk) = interaction_hash(h(f1, ..., f(k-1)), h(fk))``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bandit_core.errors import InvalidFeatureError
from bandit_core.feature_hashing import interaction_hash, interaction_hash_scalar
from bandit_core.namespace_rules import compile_pattern

__all__ = ["InteractionTerms"]


class InteractionTerms:
    """The k-way terms of a featurizer config, compiled once."""

    def __init__(self, terms: Sequence[tuple[str, ...]], max_entries: int) -> None:
        self._terms = [[compile_pattern(p) for p in term] for term in terms]
        self._max_entries = max_entries

    def __bool__(self) -> bool:
        return bool(self._terms)

    def _masks(self, namespaces: Sequence[str]) -> list[np.ndarray]:
        """Per term, a (k, n) boolean table: which of these features each pattern matches."""
        distinct = list(dict.fromkeys(namespaces))
        index = {ns: i for i, ns in enumerate(distinct)}
        ids = np.fromiter((index[ns] for ns in namespaces), dtype=np.int64, count=len(namespaces))
        return [
            np.array([[bool(p.match(ns)) for ns in distinct] for p in term], dtype=bool).reshape(
                len(term), len(distinct)
            )[:, ids]
            for term in self._terms
        ]

    def entries(
        self,
        ctx: tuple[np.ndarray, np.ndarray, Sequence[str]],
        act: tuple[np.ndarray, np.ndarray, Sequence[str]],
        counts: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(rows, hashes, values)`` of every term's features in the K rows, from the
        read context features and the K actions' read features one after the other
        (``counts[k]`` of them for action ``k``), each given as (hashes, values,
        namespaces). Raises :class:`InvalidFeatureError` (path ``actions``) when they
        would exceed ``max_entries``."""
        h_ctx, v_ctx, ns_ctx = ctx
        h_act, v_act, ns_act = act
        K, n_ctx = len(counts), len(h_ctx)
        h_all, v_all = np.concatenate([h_ctx, h_act]), np.concatenate([v_ctx, v_act])
        row_of_act = np.repeat(np.arange(K), counts)
        tables = []  # per term, per pattern: (K, n_ctx + n_act) which features row k offers
        for cm, am in zip(self._masks(ns_ctx), self._masks(ns_act)):
            table = np.zeros((len(cm), K, n_ctx + len(h_act)), dtype=bool)
            table[:, :, :n_ctx] = cm[:, None, :]
            table[:, row_of_act, n_ctx + np.arange(len(h_act))] = am
            tables.append(table)
        total = sum(int(np.prod(t.sum(axis=2), axis=0).sum()) for t in tables)
        if total > self._max_entries:
            raise InvalidFeatureError(
                "actions",
                f"at most {self._max_entries} interactions of three or more namespaces per "
                f"request, but these features make {total}",
                ("actions",),
            )
        rows, hashes, values = [np.zeros(0, np.int64)], [np.zeros(0, np.uint32)], [np.zeros(0)]
        for table in tables:
            row, first = np.nonzero(table[0])
            h, v = h_all[first], v_all[first]
            for match in table[1:]:
                row, partner = _join_by_row(row, match)
                h = interaction_hash(h[partner[0]], h_all[partner[1]])
                v = v[partner[0]] * v_all[partner[1]]
            rows.append(row)
            hashes.append(h)
            values.append(v)
        return np.concatenate(rows), np.concatenate(hashes), np.concatenate(values)

    def scalar_entries(
        self, features: Sequence[tuple[str, int, float, str]]
    ) -> list[tuple[str, int, float]]:
        """One row's term features as ``(name, 32-bit hash, value)`` from its read
        features ``(name, hash, value, namespace)`` (context first), in plain integer
        arithmetic: the reference :meth:`entries` is tested against."""
        out: list[tuple[str, int, float]] = []
        for term in self._terms:
            combos: list[tuple[str, int, float]] = [("", 0, 1.0)]
            for i, pattern in enumerate(term):
                combos = [
                    (
                        f"{name} ^ {n}" if i else n,
                        interaction_hash_scalar(h, fh) if i else fh,
                        value * fv if i else fv,
                    )
                    for name, h, value in combos
                    for n, fh, fv, ns in features
                    if pattern.match(ns)
                ]
            out.extend(combos)
        return out


def _join_by_row(
    row: np.ndarray, match: np.ndarray
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Each entry of row ``row[i]`` (rows non-decreasing) joined with every feature
    ``match`` offers in that row, in feature order: the joined rows and, per joined
    entry, (its entry's index, its feature's index); ordered entry by entry."""
    offered_row, offered = np.nonzero(match)
    per_row = np.bincount(offered_row, minlength=match.shape[0])
    starts = np.cumsum(per_row) - per_row
    reps = per_row[row]
    entry = np.repeat(np.arange(len(row)), reps)
    within = np.arange(len(entry)) - np.repeat(np.cumsum(reps) - reps, reps)
    return row[entry], (entry, offered[starts[row[entry]] + within])
