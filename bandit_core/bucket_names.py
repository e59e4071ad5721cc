"""Names of hashed features: one feature by name (:class:`NamedFeature`) and a bounded
map from bucket back to the names seen in it (:class:`BucketNames`), so weights can be
explained by name (docs/algorithms.md section 7).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from bandit_core.errors import ConfigError
from bandit_core.feature_config import from_mapping
from bandit_core.validation import check_int

__all__ = ["BucketNames", "NamedFeature"]


class NamedFeature(NamedTuple):
    """One feature of a vector by name (:meth:`Featurizer.describe`)."""

    name: str
    bucket: int
    value: float


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
        self.max_names_per_bucket = check_int(
            self.max_names_per_bucket, "max_names_per_bucket", low=1
        )
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
        return from_mapping(cls, data, "bucket names")
