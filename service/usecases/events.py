"""Pending events: what ``POST /recommend`` stores for a decision until its reward.

An event (state key ``event:<id>``, JSON) moves through the states of
:class:`EventState`::

    pending --POST /reward-------------> rewarded   (model updated once)
    pending --sweeper, rewards summed--> rewarded   (their sum applied once)
    pending --sweeper, activated-------> defaulted  (default_reward applied once)
    pending --sweeper, not activated---> expired    (never learned from)

A Personalizer loop with ``rewardAggregation: sum`` adds each reward received within the
wait to the pending event (``reward_sum``) and the sweeper applies the total when the wait
ends (:mod:`service.personalizer.loop_rewards`).

Every transition is one store transaction over the event key and the parts the update
touches (:mod:`service.usecases.rewards`), so a reward and the sweepers of several
replicas race safely: exactly one transition happens.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel

from bandit_core.features import SparseRows
from service.storage.base import Schedule

EVENT_PREFIX = "event:"
DELTA_PREFIX = "delta:"  # a reward accepted, waiting for the next fold (service.usecases.folds)


class EventState(str, Enum):
    """Where a pending event is in its life (stored as the value string)."""

    PENDING = "pending"
    REWARDED = "rewarded"
    DEFAULTED = "defaulted"
    EXPIRED = "expired"


SOURCE_OF_STATE = {EventState.REWARDED: "explicit", EventState.DEFAULTED: "default"}
"""The logged reward source of a finalized state (an expired event logs no reward)."""


def event_key(event_id: str) -> str:
    """The state-store key of the event ``event_id`` in its policy's namespace."""
    return EVENT_PREFIX + event_id


def delta_key(event_id: str) -> str:
    """The state-store key of the pending delta of the event ``event_id``'s reward."""
    return DELTA_PREFIX + event_id


def dumps(obj: Any) -> bytes:
    """JSON bytes of ``obj``; numpy scalars an engine may hand back are written as the
    numbers they are."""
    # orjson: a K = 50 pending event (with its response) in 43 us against 117 us by json
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)


def stored_row(X: np.ndarray | SparseRows, i: int) -> list[float] | dict[str, Any]:
    """Row ``i`` of a request's rows as a pending event keeps it (``PendingEvent.x``): a
    dense row as its list of floats; a row of :class:`SparseRows` (``diag_linucb`` over
    ``2^12`` to ``2^20`` hashed buckets) as ``{"dim", "indices", "values"}``, its
    nonzeros only."""
    if isinstance(X, SparseRows):
        indices, values = X.row(i)
        return {"dim": X.dim, "indices": indices.tolist(), "values": values.tolist()}
    return X[i].tolist()


def nonzeros(x: list[float] | dict[str, Any]) -> dict[str, Any]:
    """A stored row by its nonzeros (``{"dim", "indices", "values"}``, the form of
    :func:`stored_row`'s sparse rows): how a pending delta keeps the row (a hashed dense
    row of the default loop is mostly zeros; :mod:`service.usecases.folds`)."""
    if isinstance(x, dict):
        return x
    dense = np.asarray(x, dtype=np.float64)
    nonzero = np.flatnonzero(dense)
    return {"dim": len(dense), "indices": nonzero.tolist(), "values": dense[nonzero].tolist()}


def request_digest(request: BaseModel) -> str:
    """A digest of the request's content (its JSON with sorted keys, defaults filled in):
    equal for the same body in any key order, different for any other body. A repeated
    client ``event_id`` is answered only when its request has the original's digest, as
    an idempotency key is (the IETF draft "The Idempotency-Key HTTP Header Field",
    section 2.6: a key reused with a different payload is an error)."""
    content = request.model_dump(mode="json")
    try:
        body = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer beyond 64 bits in JSON features (refused later, a 422)
        body = json.dumps(content, sort_keys=True).encode()
    return hashlib.blake2b(body, digest_size=16).hexdigest()


@dataclass(slots=True)
class PendingEvent:
    """One served decision waiting for (or finalized with) its reward.

    ``x`` is the feature row of the served arm (length ``dimension``; sparse rows by
    their nonzeros, :func:`stored_row`; :meth:`row` gives it back), None once the event
    is finalized: the reward that needs it was applied or is kept with its own copy of
    the row (a pending delta), and nothing reads it after, so a reward writes the event
    back without it; ``reset_at`` the
    policy's reset time when it was served (a reward after a reset is refused);
    ``response`` the ``RecommendResponse`` JSON object, answered again to a repeated
    client event id whose request has the same ``request_digest`` (:func:`request_digest`);
    both are None for an id the service generated, which no request repeats (the
    response, about 4.7 KB of 5.5 at K = 50, was most of the stored event). ``reward``
    and ``finalized_at`` are set by the transition out of ``pending`` (``reward`` stays
    None for an expired event).

    ``learn`` is False for an event served in Personalizer's LoggingOnly mode (its reward
    is logged, never learned); ``imitated`` is set for an event served in Apprentice mode:
    whether the model's own greedy choice was the baseline served
    (:mod:`service.personalizer.learning_modes`). ``reward_sum`` is the total of the rewards
    summed so far (``rewardAggregation: sum``), ``deadline`` when the reward wait ends.
    ``held_rewards`` are the ``[value, received_at]`` pairs of the rewards a Personalizer
    loop received before the event was activated (applied at its activation,
    :mod:`service.personalizer.loop_rewards`; logged unlearned if it expires first).
    ``ips_weights`` are the decision's importance weights ``[1{served = baseline} / p,
    1 / (K p)]`` of the baseline and of uniform random (:func:`ips_weights`), logged
    with its reward (docs/console.md, "Baseline and random").
    """

    state: EventState
    arm_id: str
    x: list[float] | dict[str, Any] | None
    user_id: str | None
    activated: bool
    created_at: float
    reset_at: float | None
    response: dict[str, Any] | None
    reward: float | None = None
    finalized_at: float | None = None
    request_digest: str | None = None
    learn: bool = True
    imitated: bool | None = None
    reward_sum: float | None = None
    deadline: float | None = None
    held_rewards: list[list[float]] | None = None
    ips_weights: list[float] | None = None

    @property
    def pending(self) -> bool:
        return self.state is EventState.PENDING

    def row(self) -> np.ndarray | SparseRows:
        """The served row as the engine's ``update`` takes it: dense, or one sparse row
        (a pending event's: a finalized one keeps none)."""
        x = self.x
        assert x is not None, "a finalized event keeps no row"
        if isinstance(x, dict):
            indices = np.array(x["indices"], dtype=np.int64)
            values = np.array(x["values"], dtype=np.float64)
            return SparseRows(
                np.array([0, len(indices)], dtype=np.int64), indices, values, int(x["dim"])
            )
        return np.asarray(x)

    def to_json(self) -> bytes:
        """The stored JSON (field order as written since the first version; the two
        finalization fields only once finalized, with ``"x": null``; the response and the
        request digest only when set)."""
        out: dict[str, Any] = {
            "state": self.state.value,
            "arm_id": self.arm_id,
            "x": self.x if self.finalized_at is None else None,
            "user_id": self.user_id,
            "activated": self.activated,
            "created_at": self.created_at,
            "reset_at": self.reset_at,
        }
        if self.response is not None:
            out["response"] = self.response
        if self.finalized_at is not None:
            out["reward"] = self.reward
            out["finalized_at"] = self.finalized_at
        if self.request_digest is not None:
            out["request_digest"] = self.request_digest
        if not self.learn:
            out["learn"] = False
        for name in ("imitated", "reward_sum", "deadline", "held_rewards", "ips_weights"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return dumps(out)

    @classmethod
    def from_json(cls, data: bytes) -> PendingEvent:
        """The event stored as ``data`` by :meth:`to_json`."""
        ev = orjson.loads(data)
        return cls(
            state=EventState(ev["state"]),
            arm_id=ev["arm_id"],
            x=ev["x"],
            user_id=ev.get("user_id"),
            activated=ev["activated"],
            created_at=ev["created_at"],
            reset_at=ev.get("reset_at"),
            response=ev.get("response"),
            reward=ev.get("reward"),
            finalized_at=ev.get("finalized_at"),
            request_digest=ev.get("request_digest"),
            learn=ev.get("learn", True),
            imitated=ev.get("imitated"),
            reward_sum=ev.get("reward_sum"),
            deadline=ev.get("deadline"),
            held_rewards=ev.get("held_rewards"),
            ips_weights=ev.get("ips_weights"),
        )


def retention_schedule(
    finalized: list[tuple[str, PendingEvent]], retention_seconds: float
) -> Schedule:
    """What the commit finalizing the ``(event id, event)`` pairs also does (atomically,
    docs/architecture.md, "POST /reward"): each event onto the deadline index at its
    ``finalized_at`` plus ``retention_seconds`` (the sweeper deletes it then), the
    policy's ``pending`` counter less one each, ``rewards`` and ``default_rewards`` more
    by the rewards applied, and each rewarded event's arm seen at its finalization."""
    assert finalized  # a commit with writes finalized at least one event
    deadlines: dict[str, float] = {}
    counters = {"pending": -float(len(finalized))}
    seen: dict[str, float] = {}
    for event_id, event in finalized:
        assert event.finalized_at is not None  # set by the transition out of pending
        deadlines[event_id] = event.finalized_at + retention_seconds
        source = SOURCE_OF_STATE.get(event.state)
        if source is None:  # expired: no reward applied
            continue
        counters["rewards"] = counters.get("rewards", 0.0) + 1.0
        if source == "default":
            counters["default_rewards"] = counters.get("default_rewards", 0.0) + 1.0
        seen[event.arm_id] = max(seen.get(event.arm_id, 0.0), event.finalized_at)
    first = next(iter(deadlines))
    more = {e: t for e, t in deadlines.items() if e != first}
    return Schedule(first, deadlines[first], counters, seen, more)
