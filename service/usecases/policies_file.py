"""The policies file (``BANDIT_POLICIES_FILE``) applied at start.

A policy the file declares that does not exist is created from it. For one that exists
the file is one writer among others (the API, the console, Personalizer's configuration
routes), and the rule is that of a three-way merge against what the file last applied
(``PolicyInfo.declared``):

- a field whose value in the file differs from the one the file last applied was edited
  in the file: it is applied (:meth:`PoliciesFile.apply_overrides`, a warning naming the
  policy, the field, the value before and after);
- a field the file did not change keeps the stored value, even when that differs (it was
  changed through the API; logged at info);
- a change to a field the engine learns with (``ENGINE_FIELDS``) is never applied to a
  policy with history (decisions counted or learned state): that would reset what it
  learned. It is logged as a warning at every start until the policy is changed or reset
  through the API;
- a policy the file never applied (``declared`` null: created through the API, or
  stored before the rule) counts as declared with its stored values.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ValidationError

from service.errors import ApiError, NotFound
from service.policies import ENGINE_FIELDS, spec_of
from service.schemas import PolicyInfo, PolicySpec
from service.usecases.admin import PolicyAdmin
from service.usecases.audit import POLICIES_FILE, acting_as

log = logging.getLogger("bandit.service")


@dataclass
class PoliciesFile:
    """The policies the file declares, applied through :class:`PolicyAdmin`."""

    admin: PolicyAdmin
    specs: Mapping[str, PolicySpec]

    async def apply(self, name: str) -> None:
        """Create ``name`` from the file unless it exists, else apply the fields the
        file changed (module docstring); nothing when the file does not declare it. The
        audit trail records the changes as the policies file's."""
        spec = self.specs.get(name)
        if spec is None:
            return
        with acting_as(POLICIES_FILE):
            try:
                info = await self.admin.get_policy(name)
            except NotFound:
                await self.admin.put_policy(name, spec, declared=spec)
                log.info("policies file: created policy %r", name)
                return
            await self.apply_overrides(info, spec)

    async def apply_overrides(self, info: PolicyInfo, spec: PolicySpec) -> PolicyInfo:
        """The one place the file changes an existing policy: the fields of ``spec``
        changed since the file last applied them, but engine fields of a policy with
        history; each override logged with its before and after."""
        name, stored = info.name, spec_of(info)
        last = info.declared or stored
        edited = [f for f in PolicySpec.model_fields if getattr(spec, f) != getattr(last, f)]
        overrides = {f: getattr(spec, f) for f in edited if getattr(spec, f) != getattr(stored, f)}
        for f in PolicySpec.model_fields:
            if f not in edited and getattr(stored, f) != getattr(spec, f):
                log.info(
                    "policies file: policy %r keeps %s=%r set through the API (the file says %r)",
                    name,
                    f,
                    getattr(stored, f),
                    getattr(spec, f),
                )
        refused = [f for f in overrides if f in ENGINE_FIELDS]
        if refused and await self._has_history(name):
            log.warning(
                "policies file: policy %r has learned state; not applied, as it would reset "
                "it: %s (PUT /policies/%s or reset the policy to apply them)",
                name,
                ", ".join(f"{f}={overrides[f]!r}" for f in refused),
                name,
            )
        else:
            refused = []
        applied = {f: v for f, v in overrides.items() if f not in refused}
        declared = spec.model_copy(update={f: getattr(last, f) for f in refused})
        if not applied and declared == info.declared:
            return info
        try:
            new = PolicySpec.model_validate({**stored.model_dump(), **applied})
            changed = await self.admin.put_policy(name, new, declared=declared)
        except (ValidationError, ApiError) as exc:
            log.error("policies file: policy %r: the file's changes are not applied: %s", name, exc)
            return info
        for f, value in applied.items():
            log.warning(
                "policies file overrides policy %r %s: %r -> %r", name, f, getattr(stored, f), value
            )
        return changed

    async def _has_history(self, name: str) -> bool:
        """Whether ``name`` made decisions or holds learned state (an imported model)."""
        stats = await self.admin.stats(name)
        return stats.decisions > 0 or any(a.rewarded for a in stats.arms.values())
