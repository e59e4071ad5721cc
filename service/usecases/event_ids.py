"""A client's ``event_id`` on ``POST /recommend``: a repeat answers the original decision
(docs/architecture.md, "POST /recommend").

An id is registered to its policy before its decision is stored
(``EventRegistry.register_event``); a request whose id is registered already answers the
stored response when its body is the original's (``PendingEvent.request_digest``), else
409. A request that finds the id registered but its decision not stored yet (a concurrent
request with the same id) waits for it: on the in-process request's completion when this
process serves it, by reading the store again until a deadline otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

from service.errors import Conflict
from service.settings import Settings
from service.storage.base import StoreUnavailableError
from service.storage.state_store import EventRegistry
from service.usecases.events import PendingEvent, event_key
from service.usecases.policy_cache import PolicyCache
from service.usecases.recommendation import Recommendation

CONCURRENT_WAIT_SECONDS = 1.0
"""How long a repeat waits for the concurrent request holding its id to store a decision."""
STORE_POLL_SECONDS = 0.05
"""Between two reads of the store while another process holds the id."""


@dataclass
class EventIds:
    """The client event ids of one process's recommendations."""

    cache: PolicyCache
    store: EventRegistry
    settings: Settings
    wait_seconds: float = CONCURRENT_WAIT_SECONDS
    # event id -> set once this process's request holding it stored its decision or failed
    _held: dict[str, asyncio.Event] = field(default_factory=dict, init=False)

    async def original(self, name: str, event_id: str, digest: str | None) -> Recommendation | None:
        """The stored recommendation of the client's ``event_id`` (None when it is new);
        409 when the id belongs to another policy or came with another request body."""
        owner = await self.store.event_policy(event_id)
        if owner is None:
            return None
        if owner != name:
            raise Conflict(f"event_id {event_id!r} belongs to another policy")
        values = await self.cache.read(name, [event_key(event_id)], {})
        value = values.get(event_key(event_id))
        if value is None or value.data is None:
            return None
        event = PendingEvent.from_json(value.data)
        if event.response is None:
            raise Conflict(f"event_id {event_id!r} was generated for another decision")
        if event.request_digest is not None and event.request_digest != digest:
            raise Conflict(
                f"event_id {event_id!r} was already used with a different request body; "
                "send a new event_id, or repeat the original body to get the original decision"
            )
        return Recommendation.from_response(event.response)

    async def register(self, event_id: str, name: str) -> bool:
        """Register ``event_id`` to the policy ``name``; False when it is taken."""
        return await self.store.register_event(event_id, name, self.settings.event_ttl_seconds)

    async def register_all(self, event_ids: list[str], name: str) -> list[bool]:
        """Register each of ``event_ids`` (one round trip); which ones were free. None is
        registered when the store is down."""
        try:
            return await self.store.register_events(
                event_ids, name, self.settings.event_ttl_seconds
            )
        except StoreUnavailableError:
            return [False] * len(event_ids)

    @contextmanager
    def held(self, event_ids: Iterable[str]) -> Iterator[None]:
        """Mark ``event_ids``, just registered by this process, as being served until the
        block ends: a concurrent repeat waits for that rather than polling the store."""
        done = asyncio.Event()
        held = list(event_ids)
        for event_id in held:
            self._held[event_id] = done
        try:
            yield
        finally:
            for event_id in held:
                if self._held.get(event_id) is done:
                    del self._held[event_id]
            done.set()

    async def wait_original(self, name: str, event_id: str, digest: str | None) -> Recommendation:
        """The recommendation stored under ``event_id`` by the concurrent request that
        registered it, once stored; 409 when none is within :attr:`wait_seconds`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_seconds
        in_process = self._held.get(event_id)
        if in_process is not None:
            with suppress(TimeoutError):
                await asyncio.wait_for(in_process.wait(), self.wait_seconds)
        while True:
            original = await self.original(name, event_id, digest)
            if original is not None:
                return original
            remaining = deadline - loop.time()
            if in_process is not None or remaining <= 0:
                raise Conflict(f"event_id {event_id!r} is being used by a concurrent request")
            await asyncio.sleep(min(STORE_POLL_SECONDS, remaining))
