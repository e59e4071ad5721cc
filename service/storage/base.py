"""The storage contracts of the service: the state store's data types, the event log
and the writer's sink in front of it.

The state store (its role protocols in :mod:`service.storage.state_store`) keeps policy
state *parts* as opaque bytes (the engine serializes them; see ``bandit_core.policy``),
pending events, counters and the policy list, namespaced per policy (in Redis every key
of a policy shares the hash tag ``bandit:{policy}:``).
``EventLog`` is the append-only record of decisions and rewards (PostgreSQL, or SQLite
for the embedded default) and the source of truth that ``bandit rebuild`` replays.

Key names inside a policy's namespace are free-form strings chosen by the use cases
(``service.usecases``): ``arm:<id>``, ``shared``, ``user:<id>``, ``event:<id>``, ``config``.
Beside the keys, each policy has a *last-seen index* (name -> unix time; the service
puts an arm there when it is served, updated or given state) from which
:meth:`~service.storage.state_store.LastSeenIndex.take_idle` takes the names not seen
since a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from service.storage.activity import Activity

if TYPE_CHECKING:  # the protocols import no SQLAlchemy
    from service.storage.partitions import Partition


def ips_weights(served: str, candidates: Sequence[str], propensity: float) -> list[float]:
    """The importance weights of a decision that served ``served`` with probability
    ``propensity`` among ``candidates`` (after exclusions): ``1{served = baseline} / p``
    for the baseline, the first candidate, and ``1 / (K p)`` for the uniformly random
    policy over the ``K`` candidates. A reward ``r`` times a weight is that policy's
    inverse-propensity term (docs/console.md, "Baseline and random")."""
    baseline = 1.0 / propensity if served == candidates[0] else 0.0
    return [baseline, 1.0 / (len(candidates) * propensity)]


class StoreUnavailableError(RuntimeError):
    """The backing store could not be reached (the service degrades or answers 503)."""


class EventLogUnavailableError(StoreUnavailableError):
    """The event-log database could not be reached (records spool; counted in
    ``bandit_event_log_errors_total``, not as a state-store error)."""


class TransactionConflictError(RuntimeError):
    """An optimistic transaction kept conflicting after its retries."""


class EventIdTakenError(RuntimeError):
    """The event id a transaction was to claim is registered already."""


@dataclass(frozen=True)
class VersionedValue:
    """A stored value and its version; ``data`` is None when the key does not exist
    (version 0)."""

    version: int
    data: bytes | None


@dataclass(frozen=True)
class Schedule:
    """A :meth:`~service.storage.state_store.DeadlineIndex.schedule` that a transaction's commit performs atomically
    with its writes: ``event_id`` on the deadline index at ``deadline`` (unix seconds),
    ``counters`` added and the ``seen`` names put on the last-seen index; ``more_events``
    (event id -> deadline) go on the deadline index too (a coalesced batch of decisions,
    docs/performance.md)."""

    event_id: str
    deadline: float
    counters: Mapping[str, float] = field(default_factory=dict)
    seen: Mapping[str, float] = field(default_factory=dict)
    more_events: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """A :meth:`~service.storage.state_store.EventRegistry.register_event` of ``event_id`` and of each of ``more_ids``
    (for the transaction's policy, ``ttl_seconds``) sent with a transaction's first
    commit."""

    event_id: str
    ttl_seconds: float
    more_ids: tuple[str, ...] = ()

    @property
    def event_ids(self) -> tuple[str, ...]:
        """Every id the claim registers."""
        return (self.event_id, *self.more_ids)


# fn(current values by key) -> new values by key (None deletes); may raise to abort.
TransactionFn = Callable[[dict[str, bytes | None]], Mapping[str, bytes | None]]


SLOT_EVENT_SEPARATOR = ":slot"
"""Slot ``i`` of the multi-slot event ``E`` is logged as the single-slot event ``E:slot<i>``."""


@dataclass(frozen=True)
class DecisionRecord:
    """One served decision as written to the ``decisions`` table."""

    event_id: str
    policy: str
    created_at: float
    context: Any
    # the candidate list, or (as the service submits it) its JSON already encoded
    candidates: list[dict[str, Any]] | orjson.Fragment
    arm_id: str
    propensity: float
    scores: list[float]
    model_version: int
    user_id: str | None = None
    explored: bool = False
    guardrail: dict[str, Any] | None = None
    degraded: bool = False
    # microseconds from the request's receipt to its decision logged (None: not served
    # by this process's recommend, e.g. imported)
    latency_us: int | None = None
    # the probability that the logging system dropped an event like this one (DSJSON's
    # pdrop, kept from an imported log; None: none given)
    drop_probability: float | None = None


_CREATED_AT = [f.name for f in fields(DecisionRecord)].index("created_at")


@dataclass
class EventRows:
    """Decisions and rewards as the rows of their tables (an import writes them without
    building records): ``decisions`` tuples of the :class:`DecisionRecord` fields in
    their order, ``rewards`` of the :class:`RewardRecord` fields, each JSON column
    (``context``, ``candidates``, ``scores``, ``guardrail``) as its JSON text
    (``service.storage.schema.json_dumps``; None for NULL)."""

    decisions: list[tuple[Any, ...]] = field(default_factory=list)
    rewards: list[tuple[Any, ...]] = field(default_factory=list)

    def earliest(self) -> float | None:
        """The earliest time of the decisions (None: there are none)."""
        return min((row[_CREATED_AT] for row in self.decisions), default=None)


LATE_SOURCE = "late"
"""The source of a reward received after its event's reward wait (``late_rewards``)."""


@dataclass(frozen=True)
class RewardRecord:
    """One applied reward as written to the ``rewards`` table; ``source`` is
    ``explicit`` (POST /reward, or the sum of a Personalizer loop's rewards) or
    ``default`` (the sweeper after reward_wait_seconds). A reward received after the
    wait has source ``late`` and goes to the ``late_rewards`` table: logged, never
    learned from (``arm_id`` empty when the event was gone). ``baseline_weight`` and
    ``random_weight`` are the decision's importance weights of the baseline and of
    uniform random (``ips_weights``; None for a decision logged
    without them, and for late rewards)."""

    event_id: str
    policy: str
    arm_id: str
    value: float
    source: str
    created_at: float
    baseline_weight: float | None = None
    random_weight: float | None = None


@dataclass(frozen=True)
class LoggedDecision:
    """A decision joined with its reward (``reward`` None if never rewarded);
    ``reward_order`` is the reward's place in the order the log received rewards (0 when
    the log does not say), by which :func:`applied_order` orders rewards of one time."""

    decision: DecisionRecord
    reward: RewardRecord | None = None
    reward_order: int = field(default=0, compare=False)


def applied_order(event: LoggedDecision) -> tuple[float, int]:
    """Sort key of rewarded events in the order their rewards were applied live: by the
    reward's time, then (rewards of one time, as a frozen or coarse clock gives) by the
    order the log received them: the order one process applied them in, which it logs
    them in."""
    assert event.reward is not None  # the callers sort rewarded events only
    return event.reward.created_at, event.reward_order


@dataclass(frozen=True)
class EventTrail:
    """One logged decision and every reward logged for it (applied, default and late),
    oldest first."""

    decision: DecisionRecord
    rewards: list[RewardRecord]


@dataclass(frozen=True)
class Snapshot:
    """A serialized whole-policy state saved at ``created_at`` (``BasePolicy.to_bytes``)."""

    policy: str
    created_at: float
    model_version: int
    data: bytes
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Retention:
    """What one :meth:`EventLog.apply_retention` removed; ``by_policy``: each policy's
    share of it (only policies that lost events)."""

    dropped_partitions: list[str]
    deleted_rows: int
    by_policy: Mapping[str, PolicyRetention] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyRetention:
    """What a retention removed of one policy's events: the day partitions dropped that
    held some of them, and the rows deleted from the partitions that stay."""

    dropped_partitions: list[str]
    deleted_rows: int


@dataclass(frozen=True)
class AuditRecord:
    """One change to a policy, its model or its log, as written to ``audit_log``
    (:mod:`service.usecases.audit`): ``actor`` is who made it (``key:<hash>``,
    ``loopback``, ``policies-file``, ``system``), never a key; ``before`` and ``after``
    the changed settings (None where there is nothing), ``detail`` what else the action
    says (rows deleted, a rebuild's counts). ``record_id`` is unique, so a record sent
    twice is logged once."""

    record_id: str
    created_at: float
    policy: str
    action: str
    actor: str
    request_id: str | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None


class LogSink(Protocol):
    """Where the use cases send decisions and rewards on their way to the
    :class:`EventLog` (the batching writer, ``service.storage.writer``): never blocks."""

    def submit_decision(self, record: DecisionRecord) -> None: ...

    def submit_decisions(self, records: Sequence[DecisionRecord]) -> None: ...

    def submit_reward(self, record: RewardRecord) -> None: ...

    def submit_audit(self, record: AuditRecord) -> None: ...

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is written or spooled; False on timeout."""
        ...

    @property
    def spool_depth(self) -> int: ...

    @property
    def lag_seconds(self) -> float: ...

    @property
    def dead_letters(self) -> int: ...


class EventLog(Protocol):
    """Append-only log of decisions and rewards, plus policy configs and snapshots.

    Methods are synchronous (SQLAlchemy 2 sessions); the service calls them from a
    background writer thread, never on the request path.
    """

    def append(
        self,
        decisions: Sequence[DecisionRecord],
        rewards: Sequence[RewardRecord],
        audit: Sequence[AuditRecord] = (),
    ) -> None:
        """Write a batch in one transaction; idempotent on event id (a decision or a
        reward already logged for that event id is not written twice) and on audit
        record id."""
        ...

    def append_batches(self, batches: Iterable[EventRows]) -> int:
        """Write the rows of each batch, read one at a time, all in one transaction (an
        error while reading or writing them logs none), skipping event ids logged already
        as :meth:`append` does; the batches written."""
        ...

    def audit_records(
        self,
        policy: str | None = None,
        since: float | None = None,
        after: tuple[float, str] | None = None,
        limit: int = 100,
    ) -> list[AuditRecord]:
        """Up to ``limit`` audit records in ``(created_at, record_id)`` order: of
        ``policy`` (None: every policy), from ``since`` on, and after the record whose
        ``(created_at, record_id)`` is ``after`` (the next page)."""
        ...

    def upsert_policy(self, name: str, config: dict[str, Any]) -> None: ...

    def delete_policy(self, name: str) -> None: ...

    def policies(self) -> dict[str, dict[str, Any]]:
        """Configs of the policies recorded in the log, by name."""
        ...

    def save_snapshot(self, snapshot: Snapshot) -> None: ...

    def latest_snapshot(self, policy: str) -> Snapshot | None: ...

    def prune_snapshots(self, policy: str, keep: int, before: float | None) -> int:
        """Delete the snapshots of ``policy`` beyond its newest ``keep`` (0: no count
        limit) and those created before ``before`` (None: no age limit), never its newest
        one; returns how many were deleted."""
        ...

    def iter_events(
        self,
        policy: str,
        since: float | None = None,
        until: float | None = None,
        batch_size: int = 1000,
    ) -> Iterator[LoggedDecision]:
        """Decisions of ``policy`` in time order with their rewards, streamed in batches."""
        ...

    def recent_decisions(self, policy: str, limit: int) -> list[DecisionRecord]:
        """The latest ``limit`` decisions of ``policy``, newest first."""
        ...

    def late_rewards(self, policy: str) -> list[RewardRecord]:
        """The rewards of ``policy`` received after their reward wait, oldest first."""
        ...

    def last_reward_at(self, policy: str) -> float | None:
        """When the newest logged reward of ``policy`` was applied (None: no reward)."""
        ...

    def count(self, policy: str | None = None) -> tuple[int, int]:
        """``(decisions, rewards)`` logged, for one policy or all."""
        ...

    def prepare_partitions(self, now: float, days_ahead: int) -> list[str]:
        """Create the time partitions up to ``days_ahead`` days after ``now`` (none on
        a database without partitions); the names created."""
        ...

    def delete_events(self, policy: str, before: float, batch_size: int) -> int:
        """Delete the events of ``policy`` older than ``before``, ``batch_size`` rows per
        transaction; the rows deleted."""
        ...

    def apply_retention(self, cutoffs: Mapping[str, float], batch_size: int) -> Retention:
        """Delete each policy's events older than its cutoff (policy -> unix time)."""
        ...

    def time_range(self, policy: str) -> tuple[float, float] | None:
        """Times of the first and the last decision of ``policy`` logged, or None."""
        ...

    def activity(self, policy: str, since: float, until: float, bucket_seconds: float) -> Activity:
        """Decisions and rewards per arm of ``policy`` with ``since <= created_at <
        until``, counted in buckets of ``bucket_seconds``; all three whole minutes (a
        ValueError otherwise), so the per-minute or per-hour rollups answer it."""
        ...

    def event_trail(self, event_id: str) -> EventTrail | None:
        """The decision logged as ``event_id`` with its rewards; None if none is."""
        ...

    def partitions(self) -> list[Partition]:
        """The partitions of the partitioned tables with their bounds, estimated rows and
        sizes, from the database's catalog (none where the log is not partitioned)."""
        ...

    def ping(self) -> None:
        """Raise :class:`StoreUnavailableError` if the database is unreachable."""
        ...

    def close(self) -> None: ...
