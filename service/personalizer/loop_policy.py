"""A Personalizer loop's learning policy (docs/personalizer.md, "Learning policy"): the
default loop's engine, and the Vowpal Wabbit argument strings that ask for changes to it
(:func:`parse_vw_arguments`) or describe a loop's engine (:func:`vw_arguments`)."""

from __future__ import annotations

from typing import Any

from bandit_core.feature_config import NAMESPACE_FILTERS
from service.errors import InvalidRequest
from service.personalizer.settings import DEFAULT_RETRAIN_DAYS, LoopSettings
from service.personalizer.vw_arguments import CB_TYPES, read_vw_arguments
from service.policies import spec_of
from service.schemas import PolicyInfo, PolicySpec

DEFAULT_EPSILON = 0.2
DEFAULT_UPDATE_INTERVAL = 1.0
# 2^8 hashed buckets + the bias: the shared model keeps a full 257 x 257 matrix
DEFAULT_FEATURES: dict[str, Any] = {"bits": 8, "interactions": [["*", "*"]]}
DEFAULT_LOOP_SPEC = PolicySpec(
    algorithm="hybrid_linucb",
    params={"alpha": 0.0, "context_dim": 0},
    features=DEFAULT_FEATURES,
    reward_range=(-1.0, 1.0),
    default_reward=0.0,
    reward_wait_seconds=600.0,
    epsilon=DEFAULT_EPSILON,
    retrain_days=float(DEFAULT_RETRAIN_DAYS),
    # modelUpdateFrequency PT1S: rewards kept as deltas and folded once a second
    # (service.usecases.folds), so a loop takes thousands of rewards a second
    model_update_interval=DEFAULT_UPDATE_INTERVAL,
)
# the engine of a loop whose learning policy is given as VW arguments
ENGINE_OF_VW = ("algorithm", "params", "features", "dimension")
# the learning-policy string last written, read back while the engine is what it made
POLICY_ARGUMENTS_KEY = "policyArguments"
# the --cb_type of the VW arguments last written (the estimator of the loop's evaluations)
CB_TYPE_KEY = "cbType"


def parse_vw_arguments(arguments: str) -> tuple[dict[str, Any], list[str]]:
    """The policy-spec changes a Vowpal Wabbit argument string asks for, over the default
    loop's engine, and the arguments with no effect here
    (:func:`service.personalizer.vw_arguments.read_vw_arguments`, whose table says what
    each option does): ``epsilon``; ``features`` with the interactions (none without
    ``-q``, as in VW) and the terms of three or more namespaces (``--cubic``,
    ``--interactions abc``), ``--ignore``/``--keep``/``--ignore_linear`` as its namespace
    patterns and ``-b`` as its ``bits``; ``--random_seed`` and
    ``--half_life_seconds`` as those ``params`` (the shared model's seed and its
    forgetting, docs/algorithms.md section 10.3)."""
    read, ignored = read_vw_arguments(arguments)
    features = {**DEFAULT_FEATURES, "interactions": read["interactions"]}
    for name in ("bits", "interaction_terms", *NAMESPACE_FILTERS):
        if name in read:
            features[name] = read[name]
    params = dict(DEFAULT_LOOP_SPEC.params)
    for name in ("seed", "half_life_seconds"):
        if name in read:
            params[name] = read[name]
    # dimension None: derived from the features (2^bits + 1)
    changes: dict[str, Any] = {"features": features, "params": params, "dimension": None}
    if "epsilon" in read:
        changes["epsilon"] = read["epsilon"]
    return changes, ignored


def vw_arguments(info: PolicyInfo) -> str:
    """The learning-policy string of a loop: the one last written while the loop's
    engine and epsilon are what it made; else, for the default engine, VW arguments
    that make them; else the JSON policy spec (namespace patterns VW's letters cannot
    write included)."""
    spec = spec_of(info)
    written = LoopSettings.of(info).model_extra or {}
    arguments = written.get(POLICY_ARGUMENTS_KEY)
    if isinstance(arguments, str) and _engine_of(arguments, spec.epsilon) == _engine(spec):
        return arguments
    features = dict(spec.features or {})
    pairs = features.pop("interactions", [])
    terms = features.pop("interaction_terms", [])
    bits = features.pop("bits", None)
    filters = {name: features.pop(name, []) for name in NAMESPACE_FILTERS}
    params = dict(spec.params)
    seed = params.pop("seed", None)
    half_life = params.pop("half_life_seconds", None)
    default = DEFAULT_LOOP_SPEC
    default_features = {
        k: v for k, v in (default.features or {}).items() if k not in ("interactions", "bits")
    }
    patterns = [p for group in (*pairs, *terms, *filters.values()) for p in group]
    if (spec.algorithm, params, features) != (
        default.algorithm,
        default.params,
        default_features,
    ) or not all(map(_is_letter_pattern, patterns)):
        return spec.model_dump_json(exclude={"personalizer"})
    words = ["--cb_explore_adf", "--epsilon", f"{spec.epsilon or 0.0:g}"]
    for pair in pairs:
        words += ["-q", _letters(pair)]
    for term in terms:
        words += ["--interactions", _letters(term)]
    for name, chosen in filters.items():
        if chosen:
            words += [f"--{name}", _letters(chosen)]
    if bits is not None and bits != (default.features or {}).get("bits"):
        words += ["-b", str(bits)]
    if seed is not None:
        words += ["--random_seed", str(seed)]
    if half_life is not None:
        words += ["--half_life_seconds", _number(half_life)]
    if cb_type_of(info) != "ips":
        words += ["--cb_type", cb_type_of(info)]
    return " ".join(words)


def cb_type_in(arguments: str) -> str:
    """The ``--cb_type`` of VW ``arguments`` (``ips`` without one)."""
    return str(read_vw_arguments(arguments)[0].get("cb_type", "ips"))


def cb_type_of(info: PolicyInfo) -> str:
    """The estimator of the loop's evaluations: the ``--cb_type`` of the VW arguments last
    written as its learning policy, kept while a JSON policy spec replaces the engine
    (``ips`` when none was written)."""
    kept = (LoopSettings.of(info).model_extra or {}).get(CB_TYPE_KEY)
    return kept if kept in CB_TYPES else "ips"


def _is_letter_pattern(pattern: str) -> bool:
    """Whether VW can write the namespace pattern: ``*`` or one letter and ``*``."""
    return pattern == "*" or (len(pattern) == 2 and pattern.endswith("*"))


def _letters(patterns: list[str]) -> str:
    """The VW namespace letters of featurizer patterns (``*``: ``:``)."""
    return "".join(":" if p == "*" else p[0] for p in patterns)


def _number(value: float) -> str:
    """``value`` written so that it reads back the same: 86400, not 86400.0."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _engine(spec: PolicySpec) -> tuple[Any, ...]:
    return (spec.algorithm, spec.params, spec.features, spec.epsilon)


def _engine_of(arguments: str, epsilon: float | None) -> tuple[Any, ...] | None:
    """The engine and epsilon ``arguments`` make on a loop exploring with ``epsilon``
    (None: they no longer parse)."""
    try:
        changes, _ = parse_vw_arguments(arguments)
    except InvalidRequest:
        return None
    fields = {**DEFAULT_LOOP_SPEC.model_dump(), "epsilon": epsilon, **changes}
    return _engine(PolicySpec.model_validate(fields))  # features as stored, defaults filled
