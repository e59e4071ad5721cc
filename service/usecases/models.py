"""A policy's model as one file: export, import, reset and its properties (Personalizer's
``model`` routes, ``/policies/{name}/model`` and ``bandit model``; docs/personalizer.md
"Model export, import and reset").

The file (:func:`encode_model`) is one :mod:`bandit_core.state` blob of kind
``bandit_model`` (magic, CRC-32, JSON header, raw arrays): its ``meta`` holds the format
version, the policy's engine fields (:data:`~service.policies.ENGINE_FIELDS`: algorithm,
dimension, params, reward range, guardrails, safe arm, features), when the model started
(``created_at``) and was exported; its one array ``engine`` holds
:meth:`BasePolicy.to_bytes <bandit_core.policy.BasePolicy.to_bytes>` of a policy built
from those fields holding every stored state part: each arm's, the shared one and each
user's, read with the config in one store round trip (:func:`read_whole_policy`). The
serving settings (exploration, reward wait, default reward, arms) are the loop's, not
the model's, as Personalizer kept them in the service configuration.

Import checks everything before it writes anything: the container (magic, checksum,
header), the format, the engine fields (a valid policy spec), the engine state (its own
checks) and that the engine's config is the one the fields describe; any failure is a
400 naming it. A usable file whose algorithm, feature layout (dimension, featurizer) or
guardrails (and safe arm) differ from the policy's is a 409 naming each difference,
unless the caller asks to replace the policy's settings (Personalizer's ``PUT model``
always does, as Personalizer did). Then the imported state goes to the event log as a model snapshot of
the policy's :func:`imported_model_record` at the new ``reset_at`` (so that ``bandit
rebuild`` and the embedded default's start replay later rewards on top of it), the
config (with the model's engine fields, ``reset_at`` now) to the event log, and, in one
store transaction, the config and every part replace what was stored (parts the model
lacks are deleted), so no reader ever sees half of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import ValidationError

import bandit_core
from bandit_core import BanditError, BasePolicy, ModelError, StateFormatError
from bandit_core.policy import ARM_PREFIX, SHARED_PART, USER_PREFIX
from bandit_core.state import pack, unpack
from service.errors import Conflict, InvalidRequest, NotFound, with_policy
from service.policies import (
    CONFIG_KEY,
    ENGINE_FIELDS,
    build_policy,
    decode_info,
    encode_info,
    new_info,
    setting_differences,
    spec_of,
)
from service.schemas import PolicyInfo, PolicySpec
from service.settings import Settings
from service.storage.base import EventLog
from service.storage.base import Snapshot as LogSnapshot
from service.storage.state_store import LastSeenIndex, PartStore
from service.usecases.admin import PolicyAdmin, check_guardrails_allowed
from service.usecases.audit import MODEL_IMPORT, changed_settings
from service.usecases.events import DELTA_PREFIX
from service.usecases.folds import Folds
from service.usecases.policy_cache import PolicyCache

if TYPE_CHECKING:
    from service.usecases.retrain import RetrainStatus

MODEL_KIND = "bandit_model"
MODEL_FORMAT = 1
PART_PREFIXES = (ARM_PREFIX, USER_PREFIX, SHARED_PART)
# config fields left out of the engine comparison: exploration is a serving setting
SERVING_CONFIG = ("epsilon",)
# engine fields an import keeps unless the caller asks to replace them: what the policy's
# clients send (the feature layout) and what it must never serve (its guardrails)
GUARDED_FIELDS = ("algorithm", "dimension", "features", "guardrails", "safe_arm")


def imported_model_record(name: str) -> str:
    """The event log's snapshot name for the models imported into policy ``name`` (a
    ``#`` no policy name holds)."""
    return name + "#imported"


@dataclass(frozen=True)
class WholePolicy:
    """A policy's config and an engine policy holding every stored part."""

    info: PolicyInfo
    policy: BasePolicy
    model_version: int


@dataclass(frozen=True)
class ModelTimes:
    """``created_at``: when the current model started (creation, reset, engine change or
    import: the policy's ``reset_at``; a model relearned from the log: its window's
    start); ``modified_at``: the later of that and the newest logged reward (unix
    seconds); ``retrain``: the latest relearning from the log (None: none);
    ``pending_rewards``: the rewards waiting as deltas for a fold, the oldest for
    ``staleness_seconds`` (0: none waits; :meth:`Folds.pending
    <service.usecases.folds.Folds.pending>`)."""

    created_at: float
    modified_at: float
    retrain: RetrainStatus | None = None
    pending_rewards: int = 0
    staleness_seconds: float = 0.0


async def read_whole_policy(cache: PolicyCache, store: PartStore, name: str) -> WholePolicy:
    """The config and every stored part of ``name`` (arms, shared, users), read in one
    round trip after listing the parts; 404 for an unknown policy. The model version is
    the sum of the parts' store versions (:meth:`Runtime.model_version
    <service.policies.Runtime.model_version>` over all parts)."""
    names = await store.keys(name, PART_PREFIXES)
    values = await cache.read(name, [CONFIG_KEY, *names], {})
    config = values[CONFIG_KEY].data
    if config is None:
        raise NotFound(f"policy {name!r} does not exist", reason="policy")
    info = decode_info(config)
    policy = build_policy(spec_of(info))
    parts = {k: values[k].data for k in names if values[k].data is not None}
    try:
        policy.import_parts(parts)
    except StateFormatError as exc:
        raise with_policy(ModelError(f"a stored state part is corrupt: {exc}"), name) from exc
    return WholePolicy(info, policy, sum(values[k].version for k in parts))


def encode_model(whole: WholePolicy, exported_at: float) -> bytes:
    """The model file of ``whole`` (module docstring)."""
    meta = {
        "format": MODEL_FORMAT,
        "policy": whole.info.name,
        "engine_fields": spec_of(whole.info).model_dump(mode="json", include=set(ENGINE_FIELDS)),
        "created_at": whole.info.reset_at,
        "exported_at": exported_at,
        "model_version": whole.model_version,
    }
    engine = np.frombuffer(whole.policy.to_bytes(), dtype=np.uint8)
    return pack(MODEL_KIND, meta, {"engine": engine})


def _engine_config(policy: BasePolicy) -> dict[str, Any]:
    return {k: v for k, v in policy.config.to_dict().items() if k not in SERVING_CONFIG}


def decode_model(
    data: bytes, loop_spec: PolicySpec, settings: Settings
) -> tuple[PolicySpec, BasePolicy]:
    """The spec a model file gives a loop whose spec is ``loop_spec`` (its engine fields
    replaced by the model's) and a policy of that spec holding the model's parts; every
    check of the module docstring, each failure a 400 naming the problem (guardrails of
    type ``import`` only where ``settings`` allow them, before anything is built)."""

    def invalid(message: str) -> InvalidRequest:
        return InvalidRequest(f"body is not a usable model file: {message}", ["body"])

    try:
        _, meta, arrays = unpack(data, MODEL_KIND)
    except StateFormatError as exc:
        raise invalid(str(exc)) from None
    if meta.get("format") != MODEL_FORMAT:
        raise invalid(f"format {meta.get('format')!r} is not the supported {MODEL_FORMAT}")
    fields = meta.get("engine_fields")
    if not isinstance(fields, dict) or set(fields) - set(ENGINE_FIELDS):
        raise invalid(f"engine_fields must be an object with some of {list(ENGINE_FIELDS)}")
    if set(arrays) != {"engine"} or arrays["engine"].dtype != np.uint8:
        raise invalid(f"it must hold one uint8 array 'engine', but holds {sorted(arrays)}")
    try:
        spec = PolicySpec.model_validate({**loop_spec.model_dump(), **fields})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise invalid(f"engine_fields.{where}: {error['msg']}") from None
    try:
        check_guardrails_allowed(spec, settings)
    except InvalidRequest as exc:
        raise invalid(f"engine_fields: {exc.message}") from None
    try:
        target = build_policy(spec)
    except InvalidRequest as exc:
        raise invalid(f"engine_fields: {exc.message}") from None
    try:
        engine = bandit_core.policy_from_bytes(arrays["engine"].tobytes())
    except BanditError as exc:
        raise invalid(f"engine state: {exc}") from None
    if engine.NAME != target.NAME or _engine_config(engine) != _engine_config(target):
        raise invalid(
            f"the engine state is {engine.NAME} with config {_engine_config(engine)}, but "
            f"engine_fields describe {target.NAME} with config {_engine_config(target)}"
        )
    target.import_parts(engine.export_parts(engine.part_names()))
    return spec, target


class ModelStore(PartStore, LastSeenIndex, Protocol):
    """The state store's roles the model file calls beside the cache: a policy's stored
    parts (export, import) and the last-seen index (import)
    (``service.storage.state_store``)."""


@dataclass
class Models:
    """The model use cases; one per process."""

    admin: PolicyAdmin
    store: ModelStore
    event_log: EventLog
    folds: Folds
    clock: Callable[[], float] = time.time

    async def export_model(self, name: str) -> bytes:
        """The model file of ``name`` (404 unknown policy), with every reward accepted
        before it: the pending deltas are folded first."""
        await self.folds.fold_pending(name)
        whole = await read_whole_policy(self.admin.cache, self.store, name)
        return encode_model(whole, self.clock())

    async def import_model(
        self, name: str, data: bytes, replace_settings: bool = False
    ) -> PolicyInfo:
        """Replace the model of ``name`` with an exported one (module docstring); returns
        the new config. A bad file is a 400, and a file whose :data:`GUARDED_FIELDS`
        differ from the policy's a 409 naming each difference unless ``replace_settings``;
        either changes nothing. A policy that does not exist is a 404 saying how to create
        it."""
        try:
            old = await self.admin.get_policy(name)
        except NotFound:
            raise NotFound(
                f"policy {name!r} does not exist: create it first (PUT /policies/{name} with a "
                'policy spec, docs/personalizer.md "Creating a loop"), then import the model '
                "into it",
                reason="policy",
            ) from None
        spec, policy = await asyncio.to_thread(
            decode_model, data, spec_of(old), self.admin.settings
        )
        differences = setting_differences(
            old.model_dump(mode="json"), spec.model_dump(mode="json"), GUARDED_FIELDS, "file"
        )
        if differences and not replace_settings:
            raise Conflict(
                f"the model file does not fit policy {name!r}: {'; '.join(differences)}; "
                "import it with replace_settings=true (bandit model import --replace-settings) "
                "to give the policy the file's settings"
            )
        info = new_info(name, spec, self.clock(), old, reset=True)
        # the model replaces what was learned, the rewards not folded yet included
        stored = await self.store.keys(name, [*PART_PREFIXES, DELTA_PREFIX])
        parts = policy.export_parts(policy.part_names())
        values: dict[str, bytes | None] = {
            **dict.fromkeys(stored),
            **parts,
            CONFIG_KEY: encode_info(info),
        }
        record = LogSnapshot(
            policy=imported_model_record(name),
            created_at=info.reset_at,
            model_version=0,
            data=policy.to_bytes(),
            meta={"algorithm": spec.algorithm, "revision": info.revision},
        )
        await asyncio.to_thread(self.event_log.save_snapshot, record)
        await asyncio.to_thread(self.event_log.upsert_policy, name, info.model_dump(mode="json"))
        await self.admin.cache.replace(name, values)
        # the imported arms count as seen now (arm_idle_seconds runs from the import)
        await self.store.mark_seen(name, dict.fromkeys(policy.arm_ids, info.reset_at))
        before, after = changed_settings(old, info)
        self.admin.audit.record(
            name,
            MODEL_IMPORT,
            before or None,
            after or None,
            {"arms": len(policy.arm_ids), "bytes": len(data)},
        )
        return info

    async def reset_model(self, name: str) -> PolicyInfo:
        """A fresh model of the same config (:meth:`PolicyAdmin.reset`)."""
        return await self.admin.reset(name)

    async def model_times(self, name: str) -> ModelTimes:
        info = await self.admin.get_policy(name)
        last_reward = await asyncio.to_thread(self.event_log.last_reward_at, name)
        modified = info.reset_at if last_reward is None else max(info.reset_at, last_reward)
        retrains = self.admin.retrains
        retrain = None if retrains is None else await retrains.status(name)
        pending, oldest = await self.folds.pending(name)
        stale = 0.0 if oldest is None else max(0.0, self.clock() - oldest)
        return ModelTimes(info.reset_at, modified, retrain, pending, stale)
