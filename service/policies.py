"""Policy configurations of the service and the per-process cache of engine policies.

A policy's configuration (:class:`~service.schemas.PolicyInfo`, JSON) lives in the
state-store key ``config`` of its namespace and in the event log's ``policies`` table.
Its ``revision`` (random, new on every change) tells replicas to rebuild their cached
engine policy. Changing a field the engine learns with (:data:`ENGINE_FIELDS`) resets the
policy's learned state; changing arms, ``epsilon`` (it only decides how often a decision
explores, never what an update learns), ``default_reward``, ``reward_wait_seconds``,
``feature_names``, ``delta_g_limit`` or ``model_update_interval`` keeps it.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from bandit_core import BasePolicy, ConfigError, make_policy
from bandit_core.registry import policy_class
from service.errors import InvalidRequest
from service.schemas import TOP_LEVEL_SETTINGS, PolicyInfo, PolicySpec
from service.startup import SettingError

CONFIG_KEY = "config"
ENGINE_FIELDS = (
    "algorithm",
    "dimension",
    "params",
    "reward_range",
    "guardrails",
    "safe_arm",
    "features",
)

DEMO_POLICY = "demo"
DEMO_SPEC = PolicySpec(
    algorithm="linucb",
    dimension=4,
    params={"alpha": 1.0},
    arms=["article-1", "article-2", "article-3"],
    reward_range=(0.0, 1.0),
    default_reward=0.0,
    reward_wait_seconds=600.0,
)


def hyperparameters(algorithm: str) -> list[str]:
    """The names ``params`` may hold for ``algorithm``: its config's fields except ``d``
    (the spec's ``dimension``) and the spec's top-level settings."""
    reserved = {"d", *TOP_LEVEL_SETTINGS}
    return sorted(
        f.name for f in dataclasses.fields(policy_class(algorithm).CONFIG) if f.name not in reserved
    )


IMPORT_GUARDRAILS_REFUSED = (
    "guardrails of type 'import' load server-side code; the server must set "
    "BANDIT_ALLOW_IMPORT_GUARDRAILS=true to accept them"
)


def loads_server_code(spec: PolicySpec) -> bool:
    """Whether ``spec`` has guardrails of type ``import`` (building it loads server-side
    code, so it is checked against ``BANDIT_ALLOW_IMPORT_GUARDRAILS`` first)."""
    return any(g.get("type") == "import" for g in spec.guardrails or ())


def build_policy(spec: PolicySpec) -> BasePolicy:
    """The engine policy a spec describes; an invalid combination is a 422 on ``params``
    (an unknown parameter on ``params.<name>``)."""
    allowed = hyperparameters(spec.algorithm)
    for key in spec.params:
        if key not in allowed:
            raise InvalidRequest(
                f"unknown parameter {key!r} for {spec.algorithm}; expected some of {allowed}",
                ["body", "params", key],
            )
    params: dict[str, Any] = dict(spec.params)
    params["reward_range"] = tuple(spec.reward_range)
    for name in ("epsilon", "guardrails", "safe_arm"):
        value = getattr(spec, name)
        if value is not None:
            params[name] = value
    if spec.dimension is None:  # PolicySpec's validation derives or requires it
        raise InvalidRequest("dimension is required", ["body", "dimension"])
    try:
        return make_policy(spec.algorithm, d=spec.dimension, **params)
    except ConfigError as exc:
        raise InvalidRequest(str(exc), ["body", "params"]) from exc


def new_info(
    name: str, spec: PolicySpec, now: float, old: PolicyInfo | None = None, reset: bool = True
) -> PolicyInfo:
    """A config record for ``spec`` with a fresh revision; ``reset_at`` moves to ``now``
    (and ``retrained_from`` is cleared) unless ``old`` exists and ``reset`` is False;
    ``old``'s ``declared`` is kept."""
    return PolicyInfo(
        name=name,
        revision=secrets.token_hex(8),
        created_at=old.created_at if old else now,
        updated_at=now,
        reset_at=old.reset_at if old and not reset else now,
        retrained_from=old.retrained_from if old and not reset else None,
        declared=old.declared if old else None,
        **spec.model_dump(),
    )


def spec_of(info: PolicyInfo) -> PolicySpec:
    return PolicySpec(**info.model_dump(include=set(PolicySpec.model_fields)))


def engine_changed(old: PolicySpec, new: PolicySpec) -> bool:
    """Whether going from ``old`` to ``new`` changes what the engine computes."""
    return any(getattr(old, f) != getattr(new, f) for f in ENGINE_FIELDS)


def setting_differences(
    policy: Mapping[str, Any], other: Mapping[str, Any], fields: Sequence[str], source: str
) -> list[str]:
    """One ``field: the policy's <value>, the <source>'s <value>`` for each of ``fields``
    whose value in ``other`` differs from the policy's, in the order of ``fields``."""
    return [
        f"{f}: the policy's {_setting(policy.get(f))}, the {source}'s {_setting(other.get(f))}"
        for f in fields
        if policy.get(f) != other.get(f)
    ]


def _setting(value: Any) -> str:
    return "none" if value is None else json.dumps(value, sort_keys=True)


def encode_info(info: PolicyInfo) -> bytes:
    return info.model_dump_json().encode()


def decode_info(data: bytes) -> PolicyInfo:
    return info_from_record(json.loads(data))


def info_from_record(record: dict[str, Any]) -> PolicyInfo:
    """A stored config record as a :class:`PolicyInfo`. Records written before ``params``
    was kept free of top-level settings may hold both; the top-level value, which the
    engine used then, wins, so the policy keeps computing what it did."""
    params = record.get("params")
    if isinstance(params, dict):
        kept = {
            k: v for k, v in params.items() if record.get(k) is None or k not in TOP_LEVEL_SETTINGS
        }
        record = {**record, "params": kept}
    return PolicyInfo.model_validate(record)


def load_policies_file(path: Path, allow_import_guardrails: bool = False) -> dict[str, PolicySpec]:
    """Policies declared in a YAML or JSON file: a mapping ``name -> spec`` (optionally
    under a top-level ``policies`` key), each spec checked as ``PUT /policies/{name}``
    checks it (guardrails of type ``import`` only when ``allow_import_guardrails``); a
    :class:`~service.startup.SettingError` naming the file, and the policy and the field
    of a bad spec, otherwise."""
    where = f"BANDIT_POLICIES_FILE={path}"
    syntax = "JSON" if path.suffix == ".json" else "YAML"
    try:
        text = path.read_text()
        raw = json.loads(text) if syntax == "JSON" else yaml.safe_load(text)
    except OSError as exc:
        raise SettingError(f"{where}: {exc.strerror or exc}") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise SettingError(f"{where}: not valid {syntax}: {exc}") from None
    if isinstance(raw, Mapping) and isinstance(raw.get("policies"), Mapping):
        raw = raw["policies"]
    if not isinstance(raw, Mapping):
        raise SettingError(
            f"{where}: expected a mapping of policy name -> spec, but got {type(raw).__name__}"
        )
    specs: dict[str, PolicySpec] = {}
    for name, fields in raw.items():
        try:
            specs[str(name)] = spec = PolicySpec.model_validate(fields)
            if loads_server_code(spec) and not allow_import_guardrails:
                raise InvalidRequest(IMPORT_GUARDRAILS_REFUSED, ["body", "guardrails"])
            build_policy(spec)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(p) for p in error["loc"]) or "spec"
            raise SettingError(f"{where}: policy {name!r}: {field}: {error['msg']}") from None
        except InvalidRequest as exc:
            field = ".".join(str(p) for p in (exc.loc or ["body"])[1:]) or "spec"
            raise SettingError(f"{where}: policy {name!r}: {field}: {exc.message}") from None
    return specs


@dataclass
class Runtime:
    """One policy as cached by this process: its config, the engine object holding the
    parts loaded so far, and the store version of each loaded part."""

    info: PolicyInfo
    policy: BasePolicy
    versions: dict[str, int] = field(default_factory=dict)
    config_version: int = 0  # store version of ``info`` (0: not known)
    absorbed: int = 0  # loads applied so far; a transaction checks no load interleaved
    # the version of "shared" when the stored arm parts were last listed (selects_every_arm)
    arms_listed_at: int = -1
    labelled_arms: frozenset[str] = frozenset()  # arms with their own metric series

    @property
    def spec(self) -> PolicySpec:
        return spec_of(self.info)

    def model_version(self, parts: list[str]) -> int:
        """Sum of the store versions of ``parts``: grows with every update they saw."""
        return sum(self.versions.get(p, 0) for p in parts)
