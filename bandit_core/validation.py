"""Input checks shared by every policy; each error names the argument, the
expectation and what came (see :mod:`bandit_core.errors`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import InvalidInputError


def check_arm_ids(arm_ids: Sequence[str], known: list[str] | None = None) -> list[str]:
    """Return ``arm_ids`` as a list after checking it is a non-empty list of unique strings.

    ``known``, a list this function returned before, makes a repeated check cheap: a
    list of str equal to it (one ``str.join`` proves every element a str, and str
    equality is equality of content) passes without the uniqueness pass.
    """
    if type(arm_ids) is list and arm_ids == known:
        try:
            "".join(arm_ids)
            return arm_ids.copy()
        except TypeError:
            pass  # a non-str equal to a known id: the full check names it
    if isinstance(arm_ids, (str, bytes)):
        raise InvalidInputError(f"arm_ids must be a sequence of str, but got a single {type(arm_ids).__name__}")
    try:
        ids = list(arm_ids)
    except TypeError:
        raise InvalidInputError(f"arm_ids must be a sequence of str, but got {type(arm_ids).__name__}") from None
    if not ids:
        raise InvalidInputError("arm_ids must hold at least one candidate arm, but got an empty list")
    try:
        "".join(ids)  # C-level pass: TypeError on a non-str
        unique = set(ids)
        all_named = "" not in unique
    except TypeError:
        all_named = False
    if not all_named:
        bad = next(a for a in ids if not isinstance(a, str) or not a)
        raise InvalidInputError(f"every arm id must be a non-empty str, but got {bad!r}")
    if len(unique) != len(ids):
        seen: set[str] = set()
        dup = next(a for a in ids if a in seen or seen.add(a))  # type: ignore[func-returns-value]
        raise InvalidInputError(f"arm_ids must be unique, but {dup!r} appears more than once")
    return ids


def _as_real_array(value: ArrayLike, name: str, expected: str) -> np.ndarray:
    """``value`` as float64; booleans, ints and floats only (strings, complex and objects
    are rejected rather than parsed or truncated)."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must be {expected}: {exc}") from exc
    if raw.dtype.kind not in "biuf":
        raise InvalidInputError(f"{name} must be {expected} of real numbers, but got dtype {raw.dtype}")
    return raw.astype(np.float64, copy=False)


_FLOAT64 = np.dtype(np.float64)


# all_finite takes the sum of squares of arrays up to this size with one BLAS dot (a numpy
# reduction costs several times more to call); OpenBLAS splits longer dots across threads.
_DOT_MAX = 8192


def all_finite(arr: np.ndarray) -> bool:
    """True if every entry of the float64 array ``arr`` is finite.

    One pass proves it: the sum of squares ``x . x`` (arrays of up to ``_DOT_MAX``
    entries) or the sum (larger ones) is NaN or infinite when any entry is. Only when
    that total is not finite (a non-finite entry, or finite entries whose squares or
    sum overflow) is each entry tested. An empty array takes the sum (0.0), never a dot
    product over an empty axis.
    """
    if 0 < arr.size <= _DOT_MAX:
        flat = arr.reshape(-1)
        total = flat.dot(flat)
    else:
        total = np.add.reduce(arr, axis=None)
    return math.isfinite(total) or bool(np.isfinite(arr).all())


def check_matrix(X: ArrayLike, rows: int, d: int, name: str = "X") -> np.ndarray:
    """Return ``X`` as a finite float64 array of shape ``(rows, d)``."""
    if type(X) is np.ndarray and X.dtype is _FLOAT64:
        arr = X  # the common case, already what _as_real_array returns
    else:
        arr = _as_real_array(X, name, f"a numeric array of shape ({rows}, {d})")
    if arr.shape != (rows, d):
        raise InvalidInputError(f"{name} must have shape (K, d) = ({rows}, {d}), but got {arr.shape}")
    if not all_finite(arr):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise InvalidInputError(
            f"{name} must be finite, but {name}[{bad[0]}, {bad[1]}] is {arr[bad[0], bad[1]]}"
        )
    return arr


def check_vector(x: ArrayLike, d: int, name: str = "x") -> np.ndarray:
    """Return ``x`` as a finite float64 vector of length ``d``."""
    if type(x) is np.ndarray and x.dtype is _FLOAT64:
        arr = x
    else:
        arr = _as_real_array(x, name, f"a numeric vector of length {d}")
    if arr.shape != (d,):
        raise InvalidInputError(f"{name} must have shape ({d},), but got {arr.shape}")
    if not all_finite(arr):
        i = int(np.argmin(np.isfinite(arr)))
        raise InvalidInputError(f"{name} must be finite, but {name}[{i}] is {arr[i]}")
    return arr


def check_reward(reward: float, reward_range: tuple[float, float]) -> float:
    """Return ``reward`` as a float after checking it is finite and inside ``reward_range``."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float, np.integer, np.floating)):
        raise InvalidInputError(f"reward must be a number, but got {type(reward).__name__}")
    value = float(reward)
    low, high = reward_range
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidInputError(f"reward must be a finite number in [{low}, {high}], but got {value}")
    return value
