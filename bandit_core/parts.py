"""A policy's state as named parts, and the byte layout of a whole policy.

State is explicit and split into *parts* so a store can load, update and save one arm
without touching the others: ``"arm:<id>"`` (one arm's model), ``"shared"`` (state
common to all arms, e.g. HARE's projections or guardrail counters) and ``"user:<id>"``
(per-user state, HARE). :class:`ArmTable` holds them for
:class:`~bandit_core.policy.BasePolicy` and moves them in and out as bytes
(``export_parts`` / ``import_parts``); :func:`pack_policy` and :func:`unpack_policy`
are the layout of :meth:`BasePolicy.to_bytes <bandit_core.policy.BasePolicy.to_bytes>`:
the config, the RNG state, the retired arms and every part, in one
:func:`bandit_core.state.pack` blob of kind ``"policy"``.

Cache rules (the score caches of ridge policies)
    Policies over ridge states (LinUCB, hybrid LinUCB, LNUCB-TA) score from stacked
    copies of the candidates' arrays (:class:`bandit_core.linear.RidgeStack`) kept
    between calls. Only the hooks of the owning policy write an arm's arrays, through
    :meth:`LinearArmState.add <bandit_core.linear.LinearArmState.add>`, which bumps the
    update count ``n`` the stack compares; nothing else writes them in place
    (``arm_state`` and the other accessors are to read). A stack row is rewritten when
    its arm's state *object* is replaced or its ``n`` moved; the whole stack is rebuilt
    when the candidate list differs. ``update`` records the arm it changed; any change
    to the arm *table* (cold start, ``add_arm``, ``retire_arm``, ``import_parts``) calls
    ``_arm_table_changed``, after which every arm counts as changed and the
    candidate-state lookup is redone. A hook that replaces a state object outside these
    paths must call ``_arm_table_changed`` itself.

>>> split_part_name("arm:a"), split_part_name("shared")
(('arm', 'a'), ('shared', ''))
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar, cast

import numpy as np

from bandit_core.errors import StateFormatError, UnknownArmError
from bandit_core.state import ArrayState, pack, unpack
from bandit_core.validation import check_arm_ids

SHARED_PART = "shared"
ARM_PREFIX = "arm:"
USER_PREFIX = "user:"

ArmT = TypeVar("ArmT", bound=ArrayState)
"""The state class of one arm (``ARM_STATE``)."""
SharedT = TypeVar("SharedT", bound=ArrayState | None)
"""The ``"shared"`` part's class (``SHARED_STATE``), ``None`` for a policy without one."""
UserT = TypeVar("UserT", bound=ArrayState | None)
"""The class of one ``"user:<id>"`` part (``USER_STATE``), ``None`` for a policy without them."""


def split_part_name(name: str) -> tuple[str, str]:
    """``(kind, key)`` of a part name: ``("arm", id)``, ``("user", id)`` or ``("shared", "")``;
    any other name is a :class:`StateFormatError`."""
    if name == SHARED_PART:
        return "shared", ""
    for prefix in (ARM_PREFIX, USER_PREFIX):
        if name.startswith(prefix) and len(name) > len(prefix):
            return prefix[:-1], name[len(prefix) :]
    raise StateFormatError(
        f"state part names are 'arm:<id>', 'user:<id>' or 'shared', but got {name!r}"
    )


@dataclass(frozen=True)
class PolicyRecord:
    """The fields of a serialized policy (:func:`unpack_policy`), checked for their types."""

    config: dict[str, Any]
    rng: Mapping[str, Any]
    retired: list[str]
    parts: dict[str, bytes]


def pack_policy(algorithm: str, record: PolicyRecord) -> bytes:
    """The bytes of a whole policy: ``meta`` holds the algorithm, config, RNG state,
    retired arms and part names; part ``i``'s bytes are the uint8 array ``p<i>``."""
    meta = {
        "algorithm": algorithm,
        "config": record.config,
        "rng": record.rng,
        "retired": record.retired,
        "parts": list(record.parts),
    }
    arrays = {f"p{i}": np.frombuffer(b, np.uint8) for i, b in enumerate(record.parts.values())}
    return pack("policy", meta, arrays)


def unpack_policy(data: bytes, algorithm: str) -> PolicyRecord:
    """The fields :func:`pack_policy` wrote for ``algorithm``; a blob of another
    algorithm, or with a field of the wrong type, is a :class:`StateFormatError`."""
    _, meta, arrays = unpack(data, "policy")
    if meta.get("algorithm") != algorithm:
        raise StateFormatError(
            f"expected a {algorithm!r} policy, but got {meta.get('algorithm')!r}"
        )
    config, rng, retired, parts = (meta.get(k) for k in ("config", "rng", "retired", "parts"))
    if not (isinstance(config, dict) and isinstance(rng, dict)):
        raise StateFormatError("a policy state needs a dict 'config' and a dict 'rng'")
    for key, names in (("retired", retired), ("parts", parts)):
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise StateFormatError(
                f"a policy state's {key!r} must be a list of strs, but got {names!r}"
            )
    part_names = cast(list[str], parts)
    expected = {f"p{i}" for i in range(len(part_names))}
    if set(arrays) != expected or any(a.dtype != np.uint8 or a.ndim != 1 for a in arrays.values()):
        raise StateFormatError(
            f"a policy state needs the uint8 arrays {sorted(expected)}, but got {sorted(arrays)}"
        )
    return PolicyRecord(
        config=config,
        rng=rng,
        retired=cast(list[str], retired),
        parts={name: arrays[f"p{i}"].tobytes() for i, name in enumerate(part_names)},
    )


@dataclass
class ArmStats:
    """Learning counters of one arm: rewards applied, their sum and mean, and extras
    (e.g. LNUCB-TA's exploration weight alpha_a)."""

    rewarded: int
    reward_sum: float
    extras: dict[str, float] = field(default_factory=dict)

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.rewarded if self.rewarded else 0.0


class RewardCounts(Protocol):
    """What every arm state counts: the rewards applied and their sum."""

    n: int
    reward_sum: float


class ArmTable(abc.ABC, Generic[ArmT, SharedT, UserT]):
    """The state parts of a policy: the arms' states, the retired arms, the ``"shared"``
    part and the users' parts, with the record of which arms changed that the score
    caches read (module docstring, "Cache rules").

    Subclasses set ``ARM_STATE`` and, when they have them, ``SHARED_STATE`` and
    ``USER_STATE`` (the classes a part's bytes decode to), and implement the state
    hooks ``_new_arm_state`` and, for those parts, ``_new_shared_state`` and
    ``_new_user_state``.
    """

    NAME: ClassVar[str] = ""
    ARM_STATE: ClassVar[type[ArrayState] | None]
    SHARED_STATE: ClassVar[type[ArrayState] | None] = None
    USER_STATE: ClassVar[type[ArrayState] | None] = None

    def __init__(self) -> None:
        self._arms: dict[str, ArmT] = {}
        self._retired: set[str] = set()
        self._users: dict[str, UserT] = {}
        self._shared: SharedT = self._new_shared_state()
        # Arms whose state update() may have changed since _take_updated last ran; None
        # when the arm table itself changed (cold start, add, retire, part import), so
        # every arm must be treated as changed.
        self._updated_arms: set[str] | None = None
        # The candidate list select looked up last and its states, until the arm table
        # changes.
        self._select_states: tuple[list[str], list[ArmT]] | None = None

    # ---- state hooks -------------------------------------------------------------------
    @abc.abstractmethod
    def _new_arm_state(self) -> ArmT:
        """The prior state of an arm never rewarded (the cold start)."""

    def _new_shared_state(self) -> SharedT:
        """The ``"shared"`` part of a new policy; ``None`` for a policy without one."""
        return cast(
            SharedT, None
        )  # SharedT is None exactly for the policies that keep this default

    def _new_user_state(self) -> UserT:
        """The state of a user never seen, for a policy with ``USER_STATE``."""
        raise NotImplementedError(f"{self.NAME} declares USER_STATE but no _new_user_state")

    # ---- arms --------------------------------------------------------------------------
    def add_arm(self, arm_id: str) -> None:
        """Register ``arm_id`` with the prior state (no-op if known; un-retires it)."""
        check_arm_ids([arm_id])
        self._retired.discard(arm_id)
        if arm_id not in self._arms:
            self._arms[arm_id] = self._new_arm_state()
            self._arm_table_changed()

    def retire_arm(self, arm_id: str) -> None:
        """Forget ``arm_id``'s state; later selections including it raise UnknownArmError."""
        self._known_arm(arm_id)
        del self._arms[arm_id]
        self._retired.add(arm_id)
        self._arm_table_changed()

    def forget_arm(self, arm_id: str) -> None:
        """Drop ``arm_id``'s learned state as :meth:`retire_arm` does (shared totals
        that count it included) without retiring it: a later selection including it
        cold-starts it from the prior, as an arm never seen."""
        self.retire_arm(arm_id)
        self._retired.discard(arm_id)

    @property
    def arm_ids(self) -> tuple[str, ...]:
        """Ids of the arms the policy knows, in insertion order."""
        return tuple(self._arms)

    def arm_state(self, arm_id: str) -> ArmT:
        """The state of a known arm, to read: writing it bypasses the score caches (see
        the module docstring of :mod:`bandit_core.policy`); change state through
        ``update`` or :meth:`import_parts`."""
        return self._known_arm(arm_id)

    @property
    def shared_state(self) -> SharedT:
        """The ``shared`` state part (``None`` for policies without one), to read."""
        return self._shared

    def user_state(self, user_id: str) -> UserT | None:
        """The state part of ``user_id`` (``None`` if the policy holds none), to read."""
        return self._users.get(user_id)

    # ---- parts -------------------------------------------------------------------------
    def parts_for_select(self, arm_ids: Sequence[str], user_id: str | None = None) -> list[str]:
        """Names of the state parts a selection over ``arm_ids`` reads."""
        names = [ARM_PREFIX + a for a in arm_ids]
        if self.SHARED_STATE is not None:
            names.append(SHARED_PART)
        if self.USER_STATE is not None and user_id is not None:
            names.append(USER_PREFIX + user_id)
        return names

    @property
    def selects_every_arm(self) -> bool:
        """Whether a selection reads the part of every arm with state, not only the
        candidates' (the hybrid model with forgetting and per-arm parts,
        docs/algorithms.md section 10.3): a store serving the policy from several
        processes loads every stored arm part before a selection."""
        return False

    def parts_for_update(self, arm_id: str, user_id: str | None = None) -> list[str]:
        """Names of the state parts one update of ``arm_id`` reads and writes."""
        return self.parts_for_select([arm_id], user_id)

    def part_names(self) -> list[str]:
        """Names of every state part the policy holds."""
        names = [ARM_PREFIX + a for a in self._arms]
        if self._shared is not None:
            names.append(SHARED_PART)
        names.extend(USER_PREFIX + u for u in self._users)
        return names

    def export_parts(self, names: Sequence[str]) -> dict[str, bytes]:
        """Serialize the named parts; parts the policy does not hold are left out."""
        out: dict[str, bytes] = {}
        for name in names:
            state = self._part(name)
            if state is not None:
                out[name] = state.to_bytes()
        return out

    def import_parts(self, parts: Mapping[str, bytes | None]) -> None:
        """Replace the named parts with the given bytes; ``None`` drops a part."""
        decoded = {name: self._decode_part(name, data) for name, data in parts.items()}
        self._arm_table_changed()
        for name, state in decoded.items():
            kind, key = split_part_name(name)
            # _decode_part decoded each part with the class this policy declares for its kind.
            if kind == "shared":
                self._shared = (
                    cast(SharedT, state) if state is not None else self._new_shared_state()
                )
            elif kind == "arm":
                if state is None:
                    self._arms.pop(key, None)
                else:
                    self._arms[key] = cast(ArmT, state)
                    self._retired.discard(key)
            elif state is None:
                self._users.pop(key, None)
            else:
                self._users[key] = cast(UserT, state)

    def _decode_part(self, name: str, data: bytes | None) -> ArrayState | None:
        kind, _ = split_part_name(name)
        if data is None:
            return None
        cls = {"arm": self.ARM_STATE, "shared": self.SHARED_STATE, "user": self.USER_STATE}[kind]
        if cls is None:
            raise StateFormatError(f"{self.NAME} has no {kind!r} state part, but got {name!r}")
        return cls.from_bytes(data)

    def _part(self, name: str) -> ArrayState | None:
        kind, key = split_part_name(name)
        if kind == "shared":
            return self._shared
        if kind == "arm":
            return self._arms.get(key)
        return self._users.get(key)

    # ---- lookups and the record of changes ----------------------------------------------
    def _arm_for_select(self, arm_id: str) -> ArmT:
        state = self._arms.get(arm_id)
        if state is None:
            if arm_id in self._retired:
                raise UnknownArmError(f"arm {arm_id!r} was retired; add it again before serving it")
            state = self._arms[arm_id] = self._new_arm_state()
            self._arm_table_changed()
        return state

    def _arm_table_changed(self) -> None:
        """Record that arms were added, removed or given new state objects."""
        self._updated_arms = None
        self._select_states = None

    def _take_updated(self) -> set[str] | None:
        """The arms ``update`` may have changed since the last call (``None``:
        possibly any arm, and the arm table too); starts a new record."""
        updated, self._updated_arms = self._updated_arms, set()
        return updated

    def _known_arm(self, arm_id: str) -> ArmT:
        state = self._arms.get(arm_id)
        if state is None:
            why = "was retired" if arm_id in self._retired else "is not known to this policy"
            raise UnknownArmError(f"arm {arm_id!r} {why}")
        return state

    def _user_state(self, user_id: str | None, create: bool) -> UserT | None:
        if user_id is None or self.USER_STATE is None:
            return None
        state = self._users.get(user_id)
        if state is None and create:
            state = self._users[user_id] = self._new_user_state()
        return state
