"""Input checks shared by the engine; each error names the argument, the expectation
and what came (see :mod:`bandit_core.errors`).

Scalar checks (``check_int``, ``check_real``, ``check_bool``, ``check_choice``,
``check_true``), in the spirit of Open Bandit Pipeline's ``check_scalar`` and
MABWiser's ``check_true``, are the one rule every policy config, guardrail, estimator,
replay and the offline CLI apply:

- a number is a Python or numpy int/float scalar and is returned as a Python ``int`` /
  ``float`` (so a config holding it serializes as JSON); ``True``/``False`` (Python or
  numpy) are not numbers;
- an int parameter takes no float, not even ``3.0``; a real parameter takes ints;
- a real parameter must be finite unless its bound says otherwise (``high=math.inf``
  with ``allow_inf=True``);
- the exception class is the caller's: :class:`ConfigError` (the default) for
  configurations, :class:`InvalidInputError` for call arguments.

>>> check_int(np.int64(3), "seed", low=0), check_real(1, "alpha", low=0.0)
(3, 1.0)
>>> check_int(True, "d", low=1)
Traceback (most recent call last):
...
bandit_core.errors.ConfigError: d must be a positive int, but got True
>>> check_real(1.5, "epsilon", low=0.0, high=1.0)
Traceback (most recent call last):
...
bandit_core.errors.ConfigError: epsilon must be a finite number in [0, 1], but got 1.5
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from bandit_core.errors import BanditError, ConfigError, InvalidInputError

T = TypeVar("T")

_INTS = (int, np.integer)
_REALS = (int, float, np.integer, np.floating)
_BOOLS = (bool, np.bool_)


def is_int(value: Any) -> bool:
    """True for a Python or numpy integer scalar that is not a bool."""
    return isinstance(value, _INTS) and not isinstance(value, _BOOLS)


def is_real(value: Any) -> bool:
    """True for a Python or numpy int or float scalar that is not a bool."""
    return isinstance(value, _REALS) and not isinstance(value, _BOOLS)


def _range_text(low: float | None, high: float | None, low_open: bool, high_open: bool) -> str:
    """`` in [low, high)``, `` > low``, `` <= high`` ... as the bounds say."""
    if low is not None and high is not None:
        return f" in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f" {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f" {'<' if high_open else '<='} {high:g}"
    return ""


def _in_range(
    v: float, low: float | None, high: float | None, low_open: bool, high_open: bool
) -> bool:
    if low is not None and not (v > low if low_open else v >= low):
        return False
    return high is None or (v < high if high_open else v <= high)


def check_int(
    value: Any,
    name: str,
    *,
    low: int | None = None,
    high: int | None = None,
    allow_none: bool = False,
    error: type[BanditError] = ConfigError,
) -> Any:
    """``value`` as a Python int after checking it is an int (numpy ints included, bools
    and floats not) in ``[low, high]``; ``None`` passes through when ``allow_none``.

    >>> check_int(None, "seed", low=0, allow_none=True) is None
    True
    >>> check_int(2.0, "heads", low=1)
    Traceback (most recent call last):
    ...
    bandit_core.errors.ConfigError: heads must be a positive int, but got 2.0
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or not _in_range(value, low, high, False, False):
        kind = (
            "a positive int"
            if (low, high) == (1, None)
            else "an int" + _range_text(low, high, False, False)
        )
        raise error(f"{name} must be {kind}{' or None' if allow_none else ''}, but got {value!r}")
    return int(value)


def check_real(
    value: Any,
    name: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
    error: type[BanditError] = ConfigError,
) -> float:
    """``value`` as a Python float after checking it is a real number (numpy scalars
    included, bools not), finite (unless ``allow_inf``) and inside the bounds
    (``low_open``/``high_open`` exclude the bound itself)."""
    if (
        not is_real(value)
        or not _in_range(value, low, high, low_open, high_open)
        or math.isnan(value)
        or (not allow_inf and not math.isfinite(value))
    ):
        kind = "a number" if allow_inf else "a finite number"
        raise error(
            f"{name} must be {kind}{_range_text(low, high, low_open, high_open)}, but got {value!r}"
        )
    return float(value)


def check_confidence(confidence: Any) -> float:
    """A confidence level: a real number strictly between 0 and 1 (an offline estimate's
    interval, docs/offline.md), else :class:`InvalidInputError` naming ``confidence``."""
    return check_real(
        confidence,
        "confidence",
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
        error=InvalidInputError,
    )


def check_bool(value: Any, name: str, *, error: type[BanditError] = ConfigError) -> bool:
    """``value`` as a Python bool after checking it is one (numpy bools included; 0 and 1
    are not bools).

    >>> check_bool(1, "use_knn")
    Traceback (most recent call last):
    ...
    bandit_core.errors.ConfigError: use_knn must be a bool, but got 1
    """
    if not isinstance(value, _BOOLS):
        raise error(f"{name} must be a bool, but got {value!r}")
    return bool(value)


def check_choice(
    value: T, name: str, choices: Collection[T], *, error: type[BanditError] = ConfigError
) -> T:
    """``value`` after checking it is one of ``choices``.

    >>> check_choice("cosine", "knn_weights", ("uniform", "distance"))
    Traceback (most recent call last):
    ...
    bandit_core.errors.ConfigError: knn_weights must be one of ['uniform', 'distance'], but got 'cosine'
    """
    try:
        known = value in choices
    except TypeError:  # an unhashable value asked of a set
        known = False
    if not known:
        raise error(f"{name} must be one of {list(choices)}, but got {value!r}")
    return value


def check_true(condition: Any, message: str, *, error: type[BanditError] = ConfigError) -> None:
    """Raise ``error(message)`` unless ``condition`` holds: the check of a relation
    between parameters (``theta_max >= theta_min``); the message follows the module's
    form, naming the argument, the expectation and what came."""
    if not condition:
        raise error(message)


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
        raise InvalidInputError(
            f"arm_ids must be a sequence of str, but got a single {type(arm_ids).__name__}"
        )
    try:
        ids = list(arm_ids)
    except TypeError:
        raise InvalidInputError(
            f"arm_ids must be a sequence of str, but got {type(arm_ids).__name__}"
        ) from None
    if not ids:
        raise InvalidInputError(
            "arm_ids must hold at least one candidate arm, but got an empty list"
        )
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
        dup = ids[0]
        for dup in ids:  # stops at the first id seen before
            if dup in seen:
                break
            seen.add(dup)
        raise InvalidInputError(f"arm_ids must be unique, but {dup!r} appears more than once")
    return ids


def _as_real_array(value: object, name: str, expected: str) -> np.ndarray:
    """``value`` as float64; booleans, ints and floats only (strings, complex and objects
    are rejected rather than parsed or truncated)."""
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{name} must be {expected}: {exc}") from exc
    if raw.dtype.kind not in "biuf":
        raise InvalidInputError(
            f"{name} must be {expected} of real numbers, but got dtype {raw.dtype}"
        )
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


def check_matrix(X: object, rows: int, d: int, name: str = "X") -> np.ndarray:
    """Return ``X`` as a finite float64 array of shape ``(rows, d)``; anything else is an
    :class:`InvalidInputError`."""
    if type(X) is np.ndarray and X.dtype is _FLOAT64:
        arr = X  # the common case, already what _as_real_array returns
    else:
        arr = _as_real_array(X, name, f"a numeric array of shape ({rows}, {d})")
    if arr.shape != (rows, d):
        raise InvalidInputError(
            f"{name} must have shape (K, d) = ({rows}, {d}), but got {arr.shape}"
        )
    if not all_finite(arr):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise InvalidInputError(
            f"{name} must be finite, but {name}[{bad[0]}, {bad[1]}] is {arr[bad[0], bad[1]]}"
        )
    return arr


def check_vector(x: object, d: int, name: str = "x") -> np.ndarray:
    """Return ``x`` as a finite float64 vector of length ``d``; anything else is an
    :class:`InvalidInputError`."""
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
    if isinstance(reward, _BOOLS) or not isinstance(
        reward, _REALS
    ):  # is_real, inline: every update
        raise InvalidInputError(f"reward must be a number, but got {type(reward).__name__}")
    value = float(reward)
    low, high = reward_range
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidInputError(
            f"reward must be a finite number in [{low}, {high}], but got {value}"
        )
    return value


def check_sparse_rows(
    indptr: ArrayLike,
    indices: ArrayLike,
    values: ArrayLike,
    dim: Any,
    rows: int,
    d: int,
    name: str = "X",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the arrays of ``rows`` sparse rows of length ``d`` in compressed sparse row
    form (:class:`bandit_core.features.SparseRows`) as ``(indptr, indices, values)``,
    int64, int64 and float64, after checking them: ``dim == d``; ``indptr`` of length
    ``rows + 1``, from 0, non-decreasing, ending at the number of stored entries;
    ``indices`` in ``[0, d)`` and strictly increasing within each row; ``values`` finite
    and as many as ``indices``. Each error names ``name`` and the offending row.

    >>> check_sparse_rows([0, 1, 1], [3], [2.0], 4, 2, 4)[1:]
    (array([3]), array([2.]))
    >>> check_sparse_rows([0, 2], [1, 1], [1.0, 1.0], 4, 1, 4)
    Traceback (most recent call last):
    ...
    bandit_core.errors.InvalidInputError: X row 0 must have strictly increasing column indices, but column 1 repeats or goes back
    """
    if not is_int(dim) or dim != d:
        raise InvalidInputError(
            f"{name} must have shape (K, d) = ({rows}, {d}), but got dim {dim!r}"
        )
    ptr = np.asarray(indptr)
    if ptr.dtype.kind not in "iu" or ptr.shape != (rows + 1,):
        raise InvalidInputError(
            f"{name} must have shape (K, d) = ({rows}, {d}): indptr must be {rows + 1} ints, "
            f"but got shape {ptr.shape} and dtype {ptr.dtype}"
        )
    cols = np.asarray(indices)
    if cols.dtype.kind not in "iu" or cols.ndim != 1:
        raise InvalidInputError(
            f"{name}.indices must be a 1-d int array, but got shape {cols.shape} and dtype {cols.dtype}"
        )
    vals = _as_real_array(values, f"{name}.values", "a 1-d array")
    if vals.shape != cols.shape:
        raise InvalidInputError(
            f"{name}.values must match {name}.indices' shape {cols.shape}, but got {vals.shape}"
        )
    ptr, cols = ptr.astype(np.int64, copy=False), cols.astype(np.int64, copy=False)
    counts = np.diff(ptr)
    if ptr[0] != 0 or ptr[-1] != len(cols) or (counts < 0).any():
        shown = ptr.tolist() if len(ptr) <= 8 else f"{ptr[:8].tolist()[:-1]}..."
        raise InvalidInputError(
            f"{name}.indptr must rise from 0 to the {len(cols)} stored entries, but got {shown}"
        )
    if len(cols):
        row_of = np.repeat(np.arange(rows), counts)
        outside = (cols < 0) | (cols >= d)
        if outside.any():
            i = int(np.argmax(outside))
            raise InvalidInputError(
                f"{name} row {row_of[i]} has column {cols[i]}, outside [0, {d})"
            )
        back = np.diff(cols) <= 0
        back &= row_of[1:] == row_of[:-1]  # only within a row
        if back.any():
            i = int(np.argmax(back)) + 1
            raise InvalidInputError(
                f"{name} row {row_of[i]} must have strictly increasing column indices, "
                f"but column {cols[i]} repeats or goes back"
            )
        if not all_finite(vals):
            i = int(np.argmin(np.isfinite(vals)))
            raise InvalidInputError(
                f"{name} must be finite, but {name}[{row_of[i]}, {cols[i]}] is {vals[i]}"
            )
    return ptr, cols, vals
