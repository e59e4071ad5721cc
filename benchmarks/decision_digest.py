"""A SHA-256 over every decision and state of every registered algorithm on a fixed seed.

Each algorithm of ``bandit_core.registry.POLICIES`` runs a fixed synthetic stream: ``K``
arms with ``d`` features, ``ROUNDS`` rounds of ``select`` then ``update`` (every other
round with a user id and exploration on, the rest greedy), then one ``select_batch``
and one ``select_until``. Two more streams go through JSON features
(:func:`bandit_core.featurized.featurized_rows`): the hybrid LinUCB default and the
sparse diagonal LinUCB. One more is the default Personalizer loop
(``service.personalizer.loop_policy.DEFAULT_LOOP_SPEC``, built as the service builds it) on
the request of ``benchmarks.featurizer`` (15 context features in 3 namespaces, 50
actions of 6 features). Into one hash per stream go the served arm, the ranking, the
propensities, scores and widths of each decision, the parts a selection changed, the
arm and policy statistics and the serialized policy (``to_bytes``) after every update.
A change to the engine that keeps behaviour keeps every digest:

    python -m benchmarks.decision_digest                    # writes results/decision_digest.json
    python -m benchmarks.decision_digest --label before
"""

from __future__ import annotations

import argparse
import hashlib
from typing import Any

import numpy as np

from bandit_core.errors import BanditError
from bandit_core.features import Featurizer, FeaturizerConfig
from bandit_core.featurized import featurized_dimension, featurized_rows
from bandit_core.policy import BasePolicy, Decision, SelectRequest
from bandit_core.registry import POLICIES, make_policy
from benchmarks._harness import add_label_argument, write_json

BENCHMARK = "decision_digest"
K, D, ROUNDS, SEED = 6, 5, 300, 7
ALGORITHM_PARAMS: dict[str, dict[str, Any]] = {
    "guardrailed_linucb": {
        "guardrails": (
            {"type": "exposure_cap", "max_share": 0.3, "window": 40},
            {"type": "min_estimate", "min_pulls": 5, "min_value": 0.05},
        ),
        "epsilon": 0.1,
    },
    "epsilon_greedy": {"epsilon": 0.2},
    "linucb": {"epsilon": 0.05},
}


def _feed(h: Any, decision: Decision, widths: bool = True) -> None:
    """``decision`` into ``h``; its widths only with ``widths``."""
    h.update(
        repr(
            (decision.arm_id, decision.ranking, decision.explored, decision.state_changed)
        ).encode()
    )
    for array in (decision.scores, decision.widths if widths else None, decision.propensities):
        if array is not None:
            h.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    if decision.guardrail is not None:
        h.update(repr(decision.guardrail).encode())
    for key in sorted(decision.extras):
        h.update(key.encode() + np.asarray(decision.extras[key]).tobytes())


def _feed_stats(h: Any, policy: BasePolicy) -> None:
    for arm in policy.arm_ids:
        h.update(repr(policy.arm_stats(arm)).encode())
    h.update(repr(sorted(policy.policy_stats().items())).encode())
    h.update(policy.to_bytes())


def dense_stream(name: str) -> str:
    """The digest of algorithm ``name`` over the dense synthetic stream."""
    rng = np.random.default_rng(SEED)
    policy = make_policy(name, d=D, seed=SEED, **ALGORITHM_PARAMS.get(name, {}))
    arms = [f"arm{i}" for i in range(K)]
    truth = rng.normal(size=(K, D))
    h = hashlib.sha256()
    for t in range(ROUNDS):
        X = rng.normal(size=(K, D))
        user = f"u{t % 3}" if t % 2 else None
        decision = policy.select(arms, X, user_id=user, explore=t % 2 == 1)
        _feed(h, decision)
        served = arms.index(decision.arm_id)
        reward = float(1.0 / (1.0 + np.exp(-X[served] @ truth[served])) > rng.random())
        policy.update(decision.arm_id, X[served], reward, user_id=user)
        if t % 50 == 0:
            _feed_stats(h, policy)
    requests = [SelectRequest(arms, rng.normal(size=(K, D))) for _ in range(8)]
    requests.append(SelectRequest(arms, np.full((K, D), np.nan)))
    for outcome in policy.select_batch(requests):
        if isinstance(outcome, BanditError):
            h.update(repr(outcome).encode())
        else:
            _feed(h, outcome)
    h.update(
        str(policy.select_until(arms, rng.normal(size=(20, K, D)), rng.integers(0, K, 20))).encode()
    )
    _feed_stats(h, policy)
    return h.hexdigest()


def json_stream(name: str) -> str:
    """The digest of algorithm ``name`` (a shared model) over JSON features."""
    rng = np.random.default_rng(SEED)
    featurizer = Featurizer(FeaturizerConfig(bits=12 if name == "diag_linucb" else 4))
    d = featurized_dimension("actions_context", featurizer.config, 0)
    policy = make_policy(name, d=d, seed=SEED)
    items = [{"item": {"price": i, "cat": f"c{i % 3}"}} for i in range(K)]
    h = hashlib.sha256()
    for t in range(ROUNDS):
        context = {"user": {"tier": f"t{t % 4}", "age": float(rng.integers(18, 70))}}
        X = featurized_rows(featurizer, policy, context, items)
        arms = [f"item{i}" for i in range(K)]
        decision = policy.select(arms, X)
        _feed(h, decision)
        served = arms.index(decision.arm_id)
        row = X.one_row(served) if hasattr(X, "one_row") else X[served]
        policy.update(decision.arm_id, row, float(rng.random() < 0.2 + 0.1 * (served % 3)))
    _feed_stats(h, policy)
    return h.hexdigest()


def default_loop_stream() -> str:
    """The digest of the default Personalizer loop over ``ROUNDS`` requests: the 50
    actions of ``benchmarks.featurizer.request(0)``, a context of ``request(t % 20)``
    each round. The widths are left out: at the loop's ``alpha`` 0 they enter no score,
    and Personalizer's rank response carries none."""
    import service.usecases  # noqa: F401  (first: the loops module alone meets an import cycle)
    from benchmarks.featurizer import request
    from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
    from service.policies import build_policy

    spec = DEFAULT_LOOP_SPEC
    config = spec.featurizer_config
    assert config is not None and spec.dimension is not None
    featurizer = Featurizer(config)
    policy = build_policy(spec)
    rng = np.random.default_rng(SEED)
    _, actions = request(0)
    arms = [a["item"]["id"] for a in actions]
    contexts = [request(seed)[0] for seed in range(20)]
    h = hashlib.sha256()
    for t in range(ROUNDS):
        X = featurized_rows(featurizer, policy, contexts[t % 20], actions)
        decision = policy.select(arms, X)
        _feed(h, decision, widths=False)
        served = arms.index(decision.arm_id)
        reward = float(rng.random() < 0.1 + 0.2 * (served % 4) / 3)
        policy.update(decision.arm_id, X[served], reward)
        if t % 50 == 0:
            _feed_stats(h, policy)
    _feed_stats(h, policy)
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_label_argument(parser, BENCHMARK)
    args = parser.parse_args()
    digests = {name: dense_stream(name) for name in sorted(POLICIES)}
    digests.update(
        {f"{name} (JSON features)": json_stream(name) for name in ("hybrid_linucb", "diag_linucb")}
    )
    digests["personalizer default loop"] = default_loop_stream()
    total = hashlib.sha256(
        "".join(f"{k}={v}\n" for k, v in sorted(digests.items())).encode()
    ).hexdigest()
    for name, digest in sorted(digests.items()):
        print(f"{digest}  {name}")
    print(f"{total}  all")
    write_json(
        BENCHMARK,
        {"K": K, "d": D, "rounds": ROUNDS, "seed": SEED, "digests": digests, "all": total},
        args.label,
    )


if __name__ == "__main__":
    main()
