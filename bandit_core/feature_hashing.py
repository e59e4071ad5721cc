"""The feature hashes (docs/algorithms.md section 7): a feature's 32-bit MurmurHash3
(:func:`feature_hash`, the hash Vowpal Wabbit uses) and an interaction's hash computed
from its two features' hashes (:func:`interaction_hash`, vectorised, and
:func:`interaction_hash_scalar`, its plain-integer reference), plus the stable sort
the featurizer sums its buckets with.
"""

from __future__ import annotations

import mmh3
import numpy as np

__all__ = [
    "FEATURE_SEED",
    "feature_hash",
    "interaction_hash",
    "interaction_hash_scalar",
    "sort_stably",
]

FEATURE_SEED = 0
"""MurmurHash3 seed of every feature name."""
_MIX_MULTIPLIER = np.uint32(0x9E3779B1)  # odd: c -> c * m is a bijection of uint32
_FMIX_1 = np.uint32(0x85EBCA6B)
_FMIX_2 = np.uint32(0xC2B2AE35)


def feature_hash(name: str) -> int:
    """32-bit MurmurHash3 (seed 0, unsigned) of the UTF-8 bytes of ``name``.

    The same value on every process, machine and release (no salt, unlike ``hash``).

    >>> feature_hash("user|interest=tech") & 0xFF
    150
    """
    return mmh3.hash(name, FEATURE_SEED, signed=False)


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


def interaction_hash_scalar(context_hash: int, action_hash: int) -> int:
    """:func:`interaction_hash` of two Python ints, in plain integer arithmetic (the
    reference the vectorised form is tested against, through :meth:`Featurizer.describe`)."""
    h = (context_hash * 0x9E3779B1 + action_hash) & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)
