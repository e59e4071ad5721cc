"""Policy administration (``/policies``): create, replace, list, delete, reset, arms
and statistics. A change the engine sees (``engine_changed``) resets the learned state
(the use cases' own records beside it, ``metrics:`` keys, are kept); every config change
is recorded in the event log first, so a rebuild replays it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from bandit_core.policy import ARM_PREFIX
from service.errors import InvalidRequest, NotFound
from service.observability import metrics
from service.policies import (
    CONFIG_KEY,
    IMPORT_GUARDRAILS_REFUSED,
    build_policy,
    encode_info,
    engine_changed,
    loads_server_code,
    new_info,
    spec_of,
)
from service.schemas import ArmStatsOut, PolicyInfo, PolicySpec, PolicyStats
from service.settings import Settings
from service.storage.base import EventLog
from service.storage.state_store import CounterStore, PartStore, PolicyDirectory
from service.usecases.audit import DELETE, RESET, RETIRE_ARMS, AuditTrail, settings_of
from service.usecases.policy_cache import METRICS_PREFIX, PULLS_PREFIX, PolicyCache

if TYPE_CHECKING:
    from service.usecases.folds import Folds
    from service.usecases.retrain import Retrains


def check_guardrails_allowed(spec: PolicySpec, settings: Settings) -> None:
    """422 for guardrails of type ``import`` (they load server-side code) unless the
    server allows them (``BANDIT_ALLOW_IMPORT_GUARDRAILS``); checked before the spec
    builds a policy."""
    if not settings.allow_import_guardrails and loads_server_code(spec):
        raise InvalidRequest(IMPORT_GUARDRAILS_REFUSED, ["body", "guardrails"])


class AdminStore(PolicyDirectory, PartStore, CounterStore, Protocol):
    """The state store's roles administration calls beside the cache: the policy list,
    a policy's stored keys (reset keeps its records) and its counters
    (``service.storage.state_store``)."""


@dataclass
class PolicyAdmin:
    """The policy administration use cases; one per process."""

    cache: PolicyCache
    store: AdminStore
    event_log: EventLog
    settings: Settings
    audit: AuditTrail
    clock: Callable[[], float] = time.time
    retrains: Retrains | None = None
    """Relearns a new model from the log when the engine changes (``retrain_days``)."""
    folds: Folds | None = None
    """Folds the pending rewards before the stats read the model."""

    async def get_policy(self, name: str) -> PolicyInfo:
        runtime, _, _ = await self.cache.load(name)
        return runtime.info

    async def upcoming_policy(self, name: str) -> PolicyInfo:
        """The config of ``name``; while a new model is relearned from the log for
        another config (:mod:`service.usecases.retrain`), that one."""
        info = await self.get_policy(name)
        return info if self.retrains is None else await self.retrains.upcoming(info)

    async def list_policies(self) -> list[PolicyInfo]:
        out = []
        for name in sorted(await self.store.list_policies()):
            try:
                out.append(await self.get_policy(name))
            except NotFound:
                continue
        return out

    async def put_policy(
        self,
        name: str,
        spec: PolicySpec,
        log_config: bool = True,
        declared: PolicySpec | None = None,
    ) -> PolicyInfo:
        """Create or replace a policy; a change the engine sees resets its state, or,
        with ``retrain_days`` and rewards logged in that window, starts relearning a new
        model from the log while the current one serves (:mod:`service.usecases.retrain`:
        the config takes effect at the switch; the config it will be is returned).
        ``declared``: what the policies file applies (kept from the old config if None).
        The audit trail records the creation, or the settings changed."""
        check_guardrails_allowed(spec, self.settings)
        build_policy(spec)
        now = self.clock()
        try:
            old = await self.get_policy(name)
        except NotFound:
            old = None
        reset = old is None or engine_changed(spec_of(old), spec)
        info = new_info(name, spec, now, old, reset=reset)
        if declared is not None:
            info.declared = declared
        if old is not None and reset and self.retrains is not None:
            retrain = await self.retrains.start(old, info)
            if retrain is not None:  # the current model serves until the switch
                self.audit.settings_change(old, info, {"retrain_id": retrain.retrain_id})
                return info
        with self.cache.config_writes.writing(name):
            if log_config:
                await asyncio.to_thread(
                    self.event_log.upsert_policy, name, info.model_dump(mode="json")
                )
            if old is not None and reset:
                await self._reset_state(name, info)
            else:
                await self._write_config(name, info)
        self.audit.settings_change(old, info, {"state_reset": True} if old and reset else None)
        return info

    async def update_policy(self, name: str, changes: Mapping[str, Any]) -> PolicyInfo:
        """Change some fields of the existing policy ``name`` (the others are kept);
        resets the learned state only as :meth:`put_policy` does. An invalid result is a
        422 naming the field."""
        spec = spec_of(await self.get_policy(name)).model_dump()
        try:
            new = PolicySpec.model_validate({**spec, **changes})
        except ValidationError as exc:
            error = exc.errors()[0]
            raise InvalidRequest(error["msg"], ["body", *error["loc"]]) from None
        return await self.put_policy(name, new)

    async def ensure_policy(self, name: str, spec: PolicySpec) -> bool:
        """Create ``name`` with ``spec`` unless a policy of that name exists; whether it
        was created."""
        try:
            await self.get_policy(name)
        except NotFound:
            await self.put_policy(name, spec)
            return True
        return False

    async def delete_policy(self, name: str) -> None:
        """Delete the policy, its state and its log (the audit trail keeps its records)."""
        old = await self.get_policy(name)
        with self.cache.config_writes.writing(name):
            await asyncio.to_thread(self.event_log.delete_policy, name)
            await self.store.delete_policy(name)
        self.cache.forget(name)
        self.audit.record(name, DELETE, before=settings_of(old))

    async def reset(self, name: str) -> PolicyInfo:
        """Forget everything learned (and the pending events); keeps the config."""
        old = await self.get_policy(name)
        info = new_info(name, spec_of(old), self.clock(), old, reset=True)
        with self.cache.config_writes.writing(name):
            await asyncio.to_thread(
                self.event_log.upsert_policy, name, info.model_dump(mode="json")
            )
            await self._reset_state(name, info)
        self.audit.record(name, RESET, detail={"reset_at": info.reset_at})
        return info

    async def change_arms(
        self, name: str, add: Sequence[str] = (), retire: Sequence[str] = ()
    ) -> PolicyInfo:
        """Register arms, or retire them: registered arms and any arm with state (stored
        parts or a pull count); their learned state and pull count are deleted and
        registered ones unregistered. 404 names the arms that are neither."""
        old = await self.get_policy(name)
        registered = old.arms or []
        retire = list(dict.fromkeys(retire))
        unregistered = [a for a in retire if a not in registered]
        if unregistered:
            await self._check_have_state(name, unregistered)
        if retire:
            await self.cache.forget_arms(name, retire)
            if not set(retire) & set(registered):
                self.audit.record(name, RETIRE_ARMS, detail={"retired_arms": retire})
                return old
        arms = [a for a in registered if a not in retire] + [
            a for a in dict.fromkeys(add) if a not in registered
        ]
        spec = spec_of(old).model_copy(update={"arms": arms})
        info = new_info(name, spec, self.clock(), old, reset=False)
        await asyncio.to_thread(self.event_log.upsert_policy, name, info.model_dump(mode="json"))
        await self._write_config(name, info)
        self.audit.settings_change(old, info, {"retired_arms": retire} if retire else None)
        return info

    async def _check_have_state(self, name: str, arms: Sequence[str]) -> None:
        """404 naming the ``arms`` with neither a stored part nor a pull count."""
        parts = await self.cache.read(name, [ARM_PREFIX + a for a in arms], {})
        counters = await self.store.counters(name)
        unknown = [
            a
            for a in arms
            if parts[ARM_PREFIX + a].data is None and PULLS_PREFIX + a not in counters
        ]
        if unknown:
            raise NotFound(
                f"arms {unknown} are neither registered arms of policy {name!r} nor have state",
                reason="arm",
            )

    async def stats(self, name: str, fold_pending: bool = True) -> PolicyStats:
        """Counts and per-arm statistics of ``name``; also publishes its gauges (alpha
        per arm, delta_G and its limit, pending events). Unless ``fold_pending`` is
        false, the rewards still pending as deltas are folded first
        (:meth:`Folds.fold_pending <service.usecases.folds.Folds.fold_pending>`): the
        stats count every accepted reward. The counters are read first: a reward commits
        its count with its model update or its delta, so every reward they count is in
        the model read after them."""
        counters = await self.store.counters(name)
        if fold_pending and self.folds is not None:
            await self.folds.fold_pending(name)
        runtime, arms = await self.cache.load_all(name)
        policy = runtime.policy
        out: dict[str, ArmStatsOut] = {}
        for arm in arms:
            if arm in policy.arm_ids:
                s = policy.arm_stats(arm)
                rewarded, total, extras = s.rewarded, s.reward_sum, dict(s.extras)
            else:
                rewarded, total, extras = 0, 0.0, {}
            alpha = extras.get("alpha")
            if alpha is not None and arm in runtime.labelled_arms:
                metrics.LNUCB_TA_ALPHA.labels(name, arm).set(alpha)
            out[arm] = ArmStatsOut(
                pulls=int(counters.get(PULLS_PREFIX + arm, 0)),
                rewarded=rewarded,
                reward_sum=total,
                mean_reward=total / rewarded if rewarded else 0.0,
                alpha=alpha,
                extras=extras,
            )
        pstats = {k: float(v) for k, v in policy.policy_stats().items()}
        delta_g = pstats.get("delta_g")
        if delta_g is not None:
            metrics.DELTA_G.labels(name).set(delta_g)
            limit = runtime.info.delta_g_limit
            metrics.DELTA_G_LIMIT.labels(name).set(
                self.settings.default_delta_g_limit if limit is None else limit
            )
        metrics.PENDING_EVENTS.labels(name).set(counters.get("pending", 0.0))
        return PolicyStats(
            policy=name,
            algorithm=runtime.info.algorithm,
            decisions=int(counters.get("decisions", 0)),
            rewards=int(counters.get("rewards", 0)),
            default_rewards=int(counters.get("default_rewards", 0)),
            arms=out,
            delta_G=delta_g,
            policy_stats=pstats,
        )

    async def _write_config(
        self, name: str, info: PolicyInfo, records: Mapping[str, bytes | None] | None = None
    ) -> None:
        await self.store.add_policy(name)
        await self.cache.replace(name, {CONFIG_KEY: encode_info(info), **(records or {})})

    async def _reset_state(self, name: str, info: PolicyInfo) -> None:
        """Delete everything stored for ``name`` (model, pending events, counters) and
        write ``info``, keeping the records the use cases keep beside the model
        (``metrics:`` keys, such as a loop's apprentice metrics): they count events that
        happened, which a new model does not undo."""
        kept = await self.store.keys(name, [METRICS_PREFIX])
        records = await self.store.read(name, kept, {}) if kept else {}
        await self.store.delete_policy(name)
        await self._write_config(name, info, {k: v.data for k, v in records.items()})
