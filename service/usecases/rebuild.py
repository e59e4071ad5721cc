"""Reconstruct a policy's model state from the event log (``bandit rebuild``).

The log is the source of truth: the policy's config comes from the ``policies``
table, and every reward logged for a decision made since the policy's last reset
(``reset_at``) and learned from (:meth:`LearningSettings.learns_at`: not one served in
Personalizer's LoggingOnly mode) is applied in the order the rewards were applied live
(their ``created_at``, then the order the log received them:
:func:`~service.storage.base.applied_order`), each to the served arm's logged feature
vector (for a policy with ``features``, its logged JSON featurized again by the policy's
featurizer). For the linear policies the result equals the live state up to
floating-point summation order. State that selections change (guardrail counters) is
not replayed. Each arm goes on the last-seen index at its last logged decision or
reward; with ``arm_idle_seconds`` the arms idle longer than that are forgotten, as the
sweeper would have. The replay starts from the beginning, not from the latest snapshot:
a snapshot cannot say which logged rewards it already holds (``RewardRecord`` carries no
state version to compare). The one exception is an imported model (``PUT .../model``):
it is saved in the log at the policy's ``reset_at``
(:func:`~service.usecases.models.imported_model_record`), so no reward of the policy's
current model precedes it, and the replay starts from it.

The counters (decisions, rewards, default rewards, pulls per arm) are set to what the
log says, whatever the store held (a request counted after the store lost the policy
is in the log too); the pending events and their ``pending`` counter are kept. With
``replace=True`` (``bandit rebuild``) the result replaces the whole state: stored parts
the replay does not hold are deleted too. Several replicas that find the policy missing at
once (:mod:`service.usecases.recovery`) replay it with ``replace=False``: the state is
written by one compare-and-set transaction that writes nothing when the policy's config
is already in the store, so the first replica's replay is the one kept and the counters
are added once (docs/operations.md, "Several replicas").
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bandit_core import BasePolicy, clock_at, policy_from_bytes
from bandit_core.features import Featurizer, SparseRows
from service.policies import CONFIG_KEY, build_policy, encode_info, info_from_record, spec_of
from service.schemas import PolicyInfo
from service.storage.base import DecisionRecord, EventLog, LoggedDecision, applied_order
from service.storage.state_store import CounterStore, LastSeenIndex, PartStore, PolicyDirectory
from service.usecases.events import DELTA_PREFIX
from service.usecases.json_features import logged_rows
from service.usecases.learning_settings import LearningSettings
from service.usecases.models import PART_PREFIXES, imported_model_record
from service.usecases.policy_cache import PULLS_PREFIX


class RebuiltCounters(CounterStore, LastSeenIndex, Protocol):
    """The state store's roles that hold a policy's counters and last-seen arms."""


class RebuildTarget(PartStore, RebuiltCounters, PolicyDirectory, Protocol):
    """The state store's roles a rebuild writes (``service.storage.state_store``)."""


@dataclass(frozen=True)
class RebuildReport:
    policy: str
    decisions: int
    rewards: int
    parts: int
    written: bool = True  # False: the policy was in the store already (``replace=False``)


def _collect(
    event_log: EventLog, info: PolicyInfo, learning: LearningSettings
) -> tuple[list[LoggedDecision], Counter[str], dict[str, float]]:
    """Rewarded events in reward order (but those ``learning`` says the policy did not
    learn from: logged, never learned), the decisions served per arm and when each arm
    was last served or rewarded."""
    rewarded: list[LoggedDecision] = []
    pulls: Counter[str] = Counter()
    seen: dict[str, float] = {}
    for event in event_log.iter_events(info.name, since=info.reset_at):
        d = event.decision
        if d.degraded:
            continue
        pulls[d.arm_id] += 1
        last = d.created_at if event.reward is None else max(d.created_at, event.reward.created_at)
        seen[d.arm_id] = max(seen.get(d.arm_id, last), last)
        if event.reward is not None and learning.learns_at(info, d.created_at):
            rewarded.append(event)
    rewarded.sort(key=applied_order)
    return rewarded, pulls, seen


def learn_logged(policy: BasePolicy, info: PolicyInfo, rewarded: Iterable[LoggedDecision]) -> None:
    """Update ``policy`` (of ``info``'s spec) with each rewarded event's logged reward, in
    the order given, on the served arm's logged row (for a policy with ``features``, its
    logged JSON featurized again by the policy's featurizer), at the decision's time."""
    row = served_rows(policy, info)
    for event in rewarded:
        d = event.decision
        assert event.reward is not None  # the caller passes rewarded events only
        policy.add_arm(d.arm_id)
        with clock_at(policy, d.created_at):  # the time the service updated it with
            policy.update(d.arm_id, row(d), event.reward.value, user_id=d.user_id)


def served_rows(
    policy: BasePolicy, info: PolicyInfo
) -> Callable[[DecisionRecord], np.ndarray | SparseRows]:
    """The row ``policy`` (of ``info``'s spec) learns a logged decision's reward on: the
    served arm's logged float row, or (for a policy with ``features``) its logged JSON
    featurized again by the policy's featurizer."""
    config = info.featurizer_config
    featurizer = None if config is None else Featurizer(config)

    def row(d: DecisionRecord) -> np.ndarray | SparseRows:
        served = next(c for c in d.candidates if c["id"] == d.arm_id)
        if featurizer is None:
            return np.asarray(served["features"], dtype=np.float64)
        rows = logged_rows(featurizer, policy, d.context, [served])
        return rows.one_row(0) if isinstance(rows, SparseRows) else rows[0]

    return row


async def rebuild_policy(
    event_log: EventLog,
    store: RebuildTarget,
    name: str,
    replace: bool = True,
    *,
    learning: LearningSettings,
) -> RebuildReport:
    """Replay ``name``'s log into ``store``: config, every learned part and the counters
    (:func:`_set_counters`); ``learning`` says which decisions the policy learned from. With ``replace=False`` nothing is written when the store
    holds the policy's config already, checked atomically with the write (another
    replica rebuilt it first). Raises KeyError for an unknown policy."""
    configs = await asyncio.to_thread(event_log.policies)
    if name not in configs:
        raise KeyError(f"policy {name!r} is not in the event log; known: {sorted(configs)}")
    info = info_from_record(configs[name])
    policy = build_policy(spec_of(info))
    imported = await asyncio.to_thread(event_log.latest_snapshot, imported_model_record(name))
    if imported is not None and imported.created_at == info.reset_at:
        model = policy_from_bytes(imported.data)
        policy.import_parts(model.export_parts(model.part_names()))
    rewarded, pulls, seen = await asyncio.to_thread(_collect, event_log, info, learning)
    n_decisions = sum(pulls.values())
    learn_logged(policy, info, rewarded)
    if info.arms:
        for arm in [a for a in policy.arm_ids if a not in info.arms]:
            policy.retire_arm(arm)
    if info.arm_idle_seconds is not None:  # what the sweeper would have forgotten by now
        cutoff = time.time() - info.arm_idle_seconds
        for arm in [a for a, t in seen.items() if t <= cutoff and a not in (info.arms or ())]:
            if arm in policy.arm_ids:
                policy.forget_arm(arm)
            del seen[arm], pulls[arm]
    parts = policy.export_parts(policy.part_names())
    payload: dict[str, bytes | None] = {CONFIG_KEY: encode_info(info), **parts}
    if replace:  # the whole state: a stored part the replay does not hold goes, and the
        # pending rewards of a folding policy (the log holds those it logged)
        stored = await store.keys(name, [*PART_PREFIXES, DELTA_PREFIX])
        payload.update({k: None for k in stored if k not in payload})

    def write(values: dict[str, bytes | None]) -> dict[str, bytes | None]:
        return {} if not replace and values[CONFIG_KEY] is not None else payload

    counters = {f"{PULLS_PREFIX}{arm}": float(n) for arm, n in pulls.items()}
    counters.update(
        decisions=float(n_decisions),
        rewards=float(len(rewarded)),
        default_rewards=float(sum(e.reward.source == "default" for e in rewarded)),  # type: ignore[union-attr]
    )
    # read before the commit: once the config is written, requests add to them
    before = await store.counters(name)
    written = bool(await store.transact(name, list(payload), write))
    if written:
        await store.mark_seen(name, seen)
        await _set_counters(store, name, counters, before)
    await store.add_policy(name)  # last: the sweeper and snapshots find it complete
    return RebuildReport(
        policy=name,
        decisions=n_decisions,
        rewards=len(rewarded),
        parts=len(parts),
        written=written,
    )


async def _set_counters(
    store: RebuiltCounters, name: str, counters: dict[str, float], before: dict[str, float]
) -> None:
    """Make the counters of ``name``, which were ``before`` when the state was written,
    equal ``counters`` plus what requests added since: increments of the difference, not
    an overwrite. An arm's ``pulls:`` counter the log does not know is deleted, with the
    arm's last-seen entry; ``pending`` is kept (it counts the pending events the store
    holds)."""
    increments = {k: v - before.get(k, 0.0) for k, v in counters.items()}
    await store.add_counters(name, {k: d for k, d in increments.items() if d})
    stale = [k for k in before if k.startswith(PULLS_PREFIX) and k not in counters]
    if stale:
        await store.forget(name, [k[len(PULLS_PREFIX) :] for k in stale], stale)
