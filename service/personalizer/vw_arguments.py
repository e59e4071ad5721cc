"""The one parser of a Personalizer learning-policy string (Vowpal Wabbit arguments) and
its table of options (docs/personalizer.md, "Learning policy").

Every option Personalizer's portal and its Optimization discovery write is in
:data:`OPTIONS`, as one of:

* ``honoured``: it sets the loop's engine (the default shared model);
* ``no effect``: accepted, and named in the ``Warning: 299`` header of the answer;
* ``refused``: a 400 naming the option and why.

An option is written ``--name value``, ``--name=value`` or, for a one-letter option,
``-qab`` / ``-b18``. Namespace letters follow VW: an interaction ``ab`` pairs the
context namespaces whose name starts with ``a`` with the action namespaces whose name
starts with ``b``; ``:`` is any namespace. An interaction of three or more letters
(``--cubic abc``, ``--interactions abcd``) is a featurizer term whose letters each match
context and action namespaces alike, as VW treats shared and action features as
namespaces of one example. An option given twice keeps its last value, but
``-q``/``--quadratic``/``--interactions``/``--cubic`` and ``--ignore``/``--keep``/
``--ignore_linear``, which add up.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from service.errors import InvalidRequest

HONOURED = "honoured"
NO_EFFECT = "no effect"
REFUSED = "refused"
# the shared model keeps a (2^b + 1)^2 matrix: 2^12 + 1 = 4097 columns is 134 MB
MAX_BITS = 12
MIN_BITS = 1
# VW's interactions take any number of namespaces; eight bounds a term's cost
MAX_TERM_LETTERS = 8


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(f"arguments: {message}", ["body", "arguments"])


def _epsilon(value: str, changes: dict[str, Any]) -> None:
    try:
        epsilon = float(value)
    except ValueError:
        raise _invalid(f"--epsilon must be a number, but got {value!r}") from None
    if not 0.0 <= epsilon <= 1.0:
        raise _invalid(f"--epsilon must lie in [0, 1], but got {value}")
    changes["epsilon"] = epsilon


def _interaction(option: str, low: int, high: int) -> Callable[[str, dict[str, Any]], None]:
    """An interaction of ``low`` to ``high`` namespace letters: two letters are one
    featurizer pair (context, action); three or more one featurizer term
    (``interaction_terms``, each letter matching context and action namespaces alike)."""
    count = {2: "two", 3: "three"}[low] + ("" if low == high else " or more")

    def add(value: str, changes: dict[str, Any]) -> None:
        if not low <= len(value) <= high:
            raise _invalid(
                f"{option} takes {count} namespace letters (':' for any), but got {value!r}"
            )
        patterns = [namespace_pattern(c) for c in value]
        if len(value) == 2:
            changes["interactions"].append(patterns)
        elif patterns not in changes.setdefault("interaction_terms", []):
            changes["interaction_terms"].append(patterns)

    return add


def namespace_pattern(letter: str) -> str:
    """The featurizer's namespace pattern of a VW namespace letter: the namespaces whose
    name starts with it (``:``: any namespace)."""
    return "*" if letter == ":" else letter + "*"


def _namespaces(option: str, key: str) -> Callable[[str, dict[str, Any]], None]:
    """``--ignore`` and its kin: each letter of the value is one namespace (VW)."""

    def add(value: str, changes: dict[str, Any]) -> None:
        if not value:
            raise _invalid(f"{option} takes namespace letters (':' for any), but got {value!r}")
        patterns = changes.setdefault(key, [])
        patterns.extend(p for p in map(namespace_pattern, value) if p not in patterns)

    return add


def _bits(value: str, changes: dict[str, Any]) -> None:
    try:
        bits = int(value)
    except ValueError:
        raise _invalid(f"-b/--bit_precision must be an integer, but got {value!r}") from None
    if not MIN_BITS <= bits <= MAX_BITS:
        raise _invalid(
            f"-b/--bit_precision must lie in [{MIN_BITS}, {MAX_BITS}] (the shared model keeps "
            f"a (2^b + 1)^2 matrix), but got {value}"
        )
    changes["bits"] = bits


def _seed(value: str, changes: dict[str, Any]) -> None:
    try:
        changes["seed"] = int(value)
    except ValueError:
        raise _invalid(f"--random_seed must be an integer, but got {value!r}") from None


def _half_life(value: str, changes: dict[str, Any]) -> None:
    try:
        seconds = float(value)
    except ValueError:
        raise _invalid(f"--half_life_seconds must be a number, but got {value!r}") from None
    if not 0.0 < seconds < math.inf:
        raise _invalid(f"--half_life_seconds must be positive and finite, but got {value}")
    changes["half_life_seconds"] = seconds


CB_TYPES = ("ips", "dr", "mtr")
"""The ``--cb_type`` values: the estimator the loop's evaluations report (docs/personalizer.md,
"Learning policy")."""


def _cb_type(value: str, changes: dict[str, Any]) -> None:
    if value not in CB_TYPES:
        raise _invalid(f"--cb_type must be one of {', '.join(CB_TYPES)}, but got {value!r}")
    changes["cb_type"] = value


def _flag(_value: str, _changes: dict[str, Any]) -> None:
    """A flag that names what the loop is already."""


@dataclass(frozen=True)
class VwOption:
    """One option of the table: its spellings, whether it takes a value, what it is
    here (:data:`HONOURED`, :data:`NO_EFFECT`, :data:`REFUSED`) and what it does (or
    why not)."""

    names: tuple[str, ...]
    takes_value: bool
    kind: str
    meaning: str
    apply: Callable[[str, dict[str, Any]], None] = _flag


OPTIONS: tuple[VwOption, ...] = (
    VwOption(("--cb_explore_adf",), False, HONOURED, "the shared model over action features"),
    VwOption(
        ("--ccb_explore_adf",),
        False,
        HONOURED,
        "the shared model, each slot of a multi-slot rank one decision of it",
    ),
    VwOption(("--epsilon",), True, HONOURED, "epsilon-greedy exploration", _epsilon),
    VwOption(
        ("-q", "--quadratic"),
        True,
        HONOURED,
        "one context x action interaction",
        _interaction("-q", 2, 2),
    ),
    VwOption(
        ("--interactions",),
        True,
        HONOURED,
        "two letters: one context x action interaction; three or more: the product of one "
        "feature per letter, context and action namespaces alike",
        _interaction("--interactions", 2, MAX_TERM_LETTERS),
    ),
    VwOption(
        ("--ignore",),
        True,
        HONOURED,
        "the namespaces of these letters are left out: no feature, no interaction",
        _namespaces("--ignore", "ignore"),
    ),
    VwOption(
        ("--keep",),
        True,
        HONOURED,
        "only the namespaces of these letters are read (over --ignore, as in VW)",
        _namespaces("--keep", "keep"),
    ),
    VwOption(
        ("--ignore_linear",),
        True,
        HONOURED,
        "the namespaces of these letters give their interactions only, not their own features",
        _namespaces("--ignore_linear", "ignore_linear"),
    ),
    VwOption(
        ("--cubic",),
        True,
        HONOURED,
        "the product of one feature per letter (three), context and action namespaces alike",
        _interaction("--cubic", 3, 3),
    ),
    VwOption(("-b", "--bit_precision"), True, HONOURED, "the featurizer's hash bits", _bits),
    VwOption(("--random_seed",), True, HONOURED, "the seed of the exploration", _seed),
    VwOption(
        ("--half_life_seconds",),
        True,
        HONOURED,
        "not VW's: the shared model forgets, a reward that many seconds old weighing half",
        _half_life,
    ),
    VwOption(("-l", "--learning_rate"), True, NO_EFFECT, "a ridge model has no learning rate"),
    VwOption(("--power_t",), True, NO_EFFECT, "a ridge model has no learning-rate decay"),
    VwOption(("--l1",), True, NO_EFFECT, "no L1 penalty in a ridge model"),
    VwOption(("--l2",), True, NO_EFFECT, "the ridge penalty is the policy's ridge_lambda"),
    VwOption(
        ("--cb_type",),
        True,
        HONOURED,
        "the estimator of the loop's evaluations and Auto-Optimize: ips, dr or mtr (doubly "
        "robust with the arm's mean reward so far, or its 1/p-weighted mean)",
        _cb_type,
    ),
    VwOption(("--dsjson", "--json"), False, NO_EFFECT, "the input format of VW's command line"),
    VwOption(("--quiet",), False, NO_EFFECT, "VW's console output"),
    VwOption(("--first",), True, REFUSED, "exploration here is epsilon-greedy (--epsilon)"),
    VwOption(("--bag",), True, REFUSED, "exploration here is epsilon-greedy (--epsilon)"),
    VwOption(("--cover",), True, REFUSED, "exploration here is epsilon-greedy (--epsilon)"),
    VwOption(("--softmax",), False, REFUSED, "exploration here is epsilon-greedy (--epsilon)"),
)
OPTION_OF: dict[str, VwOption] = {name: option for option in OPTIONS for name in option.names}


def _tokens(arguments: str) -> list[tuple[str, str | None]]:
    """``(option, value)`` pairs of ``arguments`` (value None: none written adjacent)."""
    try:
        words = shlex.split(arguments)
    except ValueError as exc:
        raise _invalid(f"do not parse: {exc}") from None
    pairs: list[tuple[str, str | None]] = []
    for word in words:
        name, equals, value = word.partition("=")
        if word.startswith("--") and equals:
            pairs.append((name, value))
        elif word.startswith("-") and not word.startswith("--") and len(word) > 2:
            pairs.append((word[:2], word[2:]))
        else:
            pairs.append((word, None))
    return pairs


def read_vw_arguments(arguments: str) -> tuple[dict[str, Any], list[str]]:
    """The settings a learning-policy string gives (``epsilon``, ``interactions`` as
    featurizer pairs, ``ignore``/``keep``/``ignore_linear`` as featurizer namespace
    patterns, ``bits``, ``seed``, ``half_life_seconds``, ``cb_type``; only those written, but
    ``interactions``, always there) and the options it gives that have no effect here (as written,
    for the ``Warning`` header). No ``-q``: no interactions, as in VW. A refused or
    unknown option, or a bad value, is a 400 naming it."""
    pairs = _tokens(arguments)
    changes: dict[str, Any] = {"interactions": []}
    ignored: list[str] = []
    i = 0
    while i < len(pairs):
        name, value = pairs[i]
        option = OPTION_OF.get(name)
        if option is None:
            raise _invalid(f"{name!r} is not supported (docs/personalizer.md, 'Learning policy')")
        if option.kind == REFUSED:
            raise _invalid(f"{name} is not supported: {option.meaning}")
        if option.takes_value and value is None:
            if i + 1 >= len(pairs) or pairs[i + 1][1] is not None:
                raise _invalid(f"{name} needs a value")
            value, i = pairs[i + 1][0], i + 1
        elif not option.takes_value and value is not None:
            raise _invalid(f"{name} takes no value, but got {value!r}")
        if option.kind == NO_EFFECT:
            ignored.append(name if value is None else f"{name} {value}")
        else:
            option.apply(value or "", changes)
        i += 1
    return changes, ignored
