"""Personalizer's multi-slot rank, reward and activate over the single-slot rank of
:class:`~service.personalizer.loops.Loops` (docs/algorithms.md section 9, docs/personalizer.md
"Multi-slot").

The slots are filled in order: slot ``i`` chooses among the actions no earlier slot
placed, less its own ``excludedActions``, with its ``features`` joined to the
``contextFeatures``. Its decision is the single-slot event ``E:slot<i>`` of the
multi-slot event ``E`` (:func:`slot_event_id`): a pending event like any other, with its
own propensity, its exactly-once reward, the sweeper's default reward and its line in
the event log. The first slot's stored event also keeps the request's slot ids and digest
(:class:`MultiSlotHeader`, an annotation of its response, :meth:`Recommender.recommend`),
which is how a reward names a slot by id, an activation finds every slot and a repeated
``eventId`` is told from a reused one; slot 0 always has an action (its baseline is
one of its candidates). A slot whose candidates are all excluded gets no action and no
event. Everything a request can get wrong (the slots, baselines, features) is checked
before the first slot is served, so a refused request leaves nothing behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bandit_core.errors import InvalidFeatureError
from service.errors import Conflict, InvalidRequest
from service.personalizer.loops import Loops
from service.personalizer.schemas import (
    PersonalizerAction,
    PersonalizerMultiSlotRankRequest,
    PersonalizerMultiSlotRankResponse,
    PersonalizerMultiSlotReward,
    PersonalizerRankRequest,
    PersonalizerSlotResponse,
)
from service.schemas import PolicyInfo
from service.storage.base import SLOT_EVENT_SEPARATOR
from service.usecases.events import PendingEvent, event_key, request_digest
from service.usecases.json_features import check_loggable

HEADER_ANNOTATION = "multislot"
"""The field of the first slot's stored response holding the multi-slot event's
:class:`MultiSlotHeader`."""


@dataclass(frozen=True)
class MultiSlotHeader:
    """What the first slot's event keeps of its multi-slot request: the slot ids in
    order and the request's digest (:func:`request_digest`), which tells a repeated
    ``eventId`` with the same body (answered the first decisions) from one with another
    body (409)."""

    slots: list[str]
    digest: str

    def annotation(self) -> dict[str, Any]:
        return {HEADER_ANNOTATION: {"slots": self.slots, "digest": self.digest}}


def slot_event_id(event_id: str, index: int) -> str:
    """The single-slot event of slot ``index`` of the multi-slot event ``event_id``."""
    return f"{event_id}{SLOT_EVENT_SEPARATOR}{index}"


def check_slots(body: PersonalizerMultiSlotRankRequest) -> None:
    """400 naming the field unless the slots can be served as Personalizer required: no
    more slots than actions, distinct slot ids, and per slot a ``baselineAction`` that is
    an action id, not excluded from the slot and no other slot's baseline."""
    actions = {a.id for a in body.actions}
    if len(body.slots) > len(actions):
        raise InvalidRequest(
            f"slots: {len(body.slots)} slots but only {len(actions)} distinct actions "
            "(each slot is given a different action)",
            ["body", "slots"],
        )
    ids = [s.id for s in body.slots]
    duplicates = sorted({s for s in ids if ids.count(s) > 1})
    if duplicates:
        raise InvalidRequest(f"slots: duplicate slot ids {duplicates}", ["body", "slots"])
    baseline_of: dict[str, str] = {}
    for i, slot in enumerate(body.slots):
        field = f"slots[{i}].baselineAction"
        loc: list[str | int] = ["body", "slots", i, "baselineAction"]
        baseline = slot.baseline_action
        if baseline not in actions:
            raise InvalidRequest(f"{field}: {baseline!r} is not the id of an action", loc)
        if baseline in (slot.excluded_actions or []):
            raise InvalidRequest(
                f"{field}: {baseline!r} is excluded from this slot (excludedActions)", loc
            )
        if baseline in baseline_of:
            raise InvalidRequest(
                f"{field}: {baseline!r} is already the baseline of slot {baseline_of[baseline]!r}",
                loc,
            )
        baseline_of[baseline] = slot.id


@dataclass
class MultiSlot:
    """The multi-slot use cases, over the single-slot ones of ``loops``."""

    loops: Loops

    async def rank(
        self, loop: str, body: PersonalizerMultiSlotRankRequest
    ) -> PersonalizerMultiSlotRankResponse:
        """Fill the slots in order with distinct actions (module docstring); a repeated
        ``eventId`` with the same body answers the first decisions."""
        info = await self.loops.admin.get_policy(loop)
        check_slots(body)
        self.check_slot_features(info, body)
        header = MultiSlotHeader([s.id for s in body.slots], request_digest(body))
        event_id = body.event_id or str(uuid.uuid4())
        if body.event_id is not None:
            original = await self.header(loop, event_id)
            if original is not None and original.digest != header.digest:
                raise Conflict(
                    f"eventId {event_id!r} was already used with a different request body; "
                    "send a new eventId, or repeat the original body to get the original decisions"
                )
        placed: list[str] = []
        answers: list[PersonalizerSlotResponse] = []
        for i, slot in enumerate(body.slots):
            annotations = header.annotation() if i == 0 else None
            action = await self.choose_slot_action(loop, body, i, placed, event_id, annotations)
            if action is not None:
                placed.append(action)
            answers.append(PersonalizerSlotResponse(id=slot.id, reward_action_id=action))
        return PersonalizerMultiSlotRankResponse(slots=answers, event_id=event_id)

    async def choose_slot_action(
        self,
        loop: str,
        body: PersonalizerMultiSlotRankRequest,
        index: int,
        placed: list[str],
        event_id: str,
        annotations: Mapping[str, Any] | None = None,
    ) -> str | None:
        """The action slot ``index`` serves (None: every action left is excluded from
        it), ranked as the single-slot event :func:`slot_event_id` over the actions not
        in ``placed`` (``annotations`` stored with its event). The slot's baseline, when still free, is the first candidate, so a
        learning mode serving the first non-excluded action serves the slot's baseline."""
        slot = body.slots[index]
        excluded = set(slot.excluded_actions or [])
        left = [a for a in body.actions if a.id not in placed]
        if all(a.id in excluded for a in left):
            return None
        candidates = sorted(left, key=lambda a: a.id != slot.baseline_action)
        request = PersonalizerRankRequest(
            context_features=[*(body.context_features or []), *(slot.features or [])],
            actions=[PersonalizerAction(id=a.id, features=a.features) for a in candidates],
            excluded_actions=[a.id for a in candidates if a.id in excluded] or None,
            defer_activation=body.defer_activation,
        )
        ranked = await self.loops.rank(loop, request, annotations, slot_event_id(event_id, index))
        served: str = ranked["rewardActionId"]
        return served

    def check_slot_features(self, info: PolicyInfo, body: PersonalizerMultiSlotRankRequest) -> None:
        """400 naming ``slots[i].features`` for slot features the loop's featurizer
        refuses (the context and actions are checked by the first slot's rank, before
        anything is stored)."""
        if info.features is None:
            return
        featurizer = self.loops.recommender.json_candidates.featurizer(info).featurizer
        for i, slot in enumerate(body.slots):
            if not slot.features:
                continue
            loc: list[str | int] = ["body", "slots", i, "features"]
            try:
                featurizer.hash_features(slot.features, ("slots", i, "features"))
            except InvalidFeatureError as exc:
                raise InvalidRequest(str(exc), ["body", *exc.loc]) from exc
            check_loggable(slot.features, loc, featurizer.config.limits.max_depth)

    async def header(self, loop: str, event_id: str) -> MultiSlotHeader | None:
        """The header of the multi-slot event ``event_id`` of ``loop`` (None: unknown,
        expired or another loop's)."""
        first = slot_event_id(event_id, 0)
        if await self.loops.rewards.owner(first) != loop:
            return None
        cache = self.loops.recommender.cache
        value = (await cache.read(loop, [event_key(first)], {})).get(event_key(first))
        if value is None or value.data is None:
            return None
        stored = (PendingEvent.from_json(value.data).response or {}).get(HEADER_ANNOTATION)
        return None if stored is None else MultiSlotHeader(stored["slots"], stored["digest"])

    async def reward(self, loop: str, event_id: str, body: PersonalizerMultiSlotReward) -> None:
        """Reward each named slot's decision (the earliest reward of a slot counts). As
        for a single slot, a reward for an event this loop does not know is accepted and
        not learned from; an unknown ``slotId`` of a known event is a 400."""
        info = await self.loops.admin.get_policy(loop)
        low, high = info.reward_range
        for k, reward in enumerate(body.reward):
            if not low <= reward.value <= high:
                raise InvalidRequest(
                    f"reward[{k}].value must lie in the loop's reward range [{low}, {high}], "
                    f"but got {reward.value}",
                    ["body", "reward", k, "value"],
                )
        header = await self.header(loop, event_id)
        if header is None:
            return
        slots = header.slots
        for k, reward in enumerate(body.reward):
            if reward.slot_id not in slots:
                raise InvalidRequest(
                    f"reward[{k}].slotId: {reward.slot_id!r} is not a slot of event "
                    f"{event_id!r} (its slots: {slots})",
                    ["body", "reward", k, "slotId"],
                )
        for reward in body.reward:
            await self.loops.reward(
                loop, slot_event_id(event_id, slots.index(reward.slot_id)), reward.value
            )

    async def activate(self, loop: str, event_id: str) -> None:
        """Activate every slot's decision of a deferred multi-slot event (accepted and
        ignored when unknown or finalized)."""
        await self.loops.admin.get_policy(loop)  # 404 for an unknown loop
        header = await self.header(loop, event_id)
        for index in range(0 if header is None else len(header.slots)):
            await self.loops.activate(loop, slot_event_id(event_id, index))
