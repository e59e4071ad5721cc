"""Feature importance by the model's weights against leave-one-feature-out, on the
simulated storefront with a context feature the clicks ignore (docs/personalizer.md,
"Feature importances").

Each seed logs ``--rounds`` storefront rounds (:class:`bandit_core.storefront.Storefront`,
10 items offered) served by the default Personalizer loop's model (``hybrid_linucb`` over
the featurized JSON, every context x item interaction, epsilon-greedy at 20%), each
context carrying ``session.tab``, drawn uniformly from three values the click model never
reads. Then, per feature (a JSON key of a namespace):

* ``weights``: the linear model's ``|w_i| * deviation_i`` over the logged candidate rows
  (``bandit_core.importance.feature_importance``, what ``GET /policies/{name}/features``
  ranks), each column's importance shared among the features of the names seen in it
  (an interaction ``a ^ b`` half to each side), summed by feature, the top one 1;
* ``lofo``: the SNIPS value the replayed learning policy loses without the feature
  (``bandit_core.evaluation.lofo.leave_one_feature_out``, what the service's feature
  importance jobs compute) and its time.

Writes run ``--label`` of ``benchmarks/results/feature_importance.json`` and prints, per
rounds and seed, both rankings.

    python -m benchmarks.feature_importance                      # docs/personalizer.md
    python -m benchmarks.feature_importance --rounds 400 --seeds 5 --label quick
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bandit_core.evaluation.lofo import JsonEvent, leave_one_feature_out
from bandit_core.features import BIAS_NAME, BucketNames, Featurizer
from bandit_core.featurized import featurized_rows, named_columns
from bandit_core.importance import feature_importance
from bandit_core.storefront import Storefront
from benchmarks._harness import add_label_argument, write_json
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
from service.policies import build_policy

TABS = ("home", "deals", "search")


def feature_of(name: str) -> tuple[str, str]:
    """``(namespace, key)`` of a featurizer name: ``user|segment=a`` -> ``(user, segment)``."""
    namespace, _, rest = name.partition("|")
    return namespace, rest.split("=", 1)[0].split("[", 1)[0]


def log_traffic(rounds: int, seed: int) -> tuple[Featurizer, list[JsonEvent], dict[str, float]]:
    """The logged events of one seed and the weights ranking of the model that logged them."""
    rng = np.random.default_rng(seed)
    config = DEFAULT_LOOP_SPEC.featurizer_config
    assert config is not None  # the default loop declares JSON features
    featurizer = Featurizer(config)
    policy = build_policy(DEFAULT_LOOP_SPEC)
    names, rows, events = BucketNames(), [], []
    for r in Storefront().rounds(rounds, replace_at=None, rng=rng):
        context = [{k: v} for k, v in r.context.items()]
        context.append({"session": {"tab": TABS[int(rng.integers(3))]}})
        actions = [[a] for a in r.actions]
        X = featurized_rows(featurizer, policy, context, actions)
        assert isinstance(X, np.ndarray)  # the default loop's hybrid model takes dense rows
        decision = policy.select(r.item_ids, X)
        k = r.item_ids.index(decision.arm_id)
        click = float(rng.random() < r.mu[k])
        policy.update(decision.arm_id, X[k], click)
        rows.append(X)
        names.observe(named_columns(featurizer, policy, context, actions[k]))
        events.append(
            JsonEvent(
                context, r.item_ids, actions, decision.arm_id, float(decision.propensity), click
            )
        )
    weights = policy.feature_weights()
    assert weights is not None  # a linear model
    ranked = feature_importance(weights, np.vstack(rows))
    totals: dict[str, float] = {}
    for column, importance in zip(ranked.columns.tolist(), ranked.importance, strict=True):
        seen = [n for n in names.names(column) if n != BIAS_NAME]
        for name in seen:
            sides = name.split(" ^ ")
            for side in sides:
                key = ".".join(feature_of(side))
                totals[key] = totals.get(key, 0.0) + float(importance) / len(seen) / len(sides)
    top = max(totals.values())
    return (
        featurizer,
        events,
        {k: v / top for k, v in sorted(totals.items(), key=lambda kv: -kv[1])},
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, nargs="+", default=[400, 1000, 2000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 6, 7])
    add_label_argument(parser, "feature_importance")
    args = parser.parse_args(argv)
    runs: list[dict[str, Any]] = []
    for rounds in args.rounds:
        for seed in args.seeds:
            featurizer, events, weights = log_traffic(rounds, seed)
            start = time.perf_counter()
            value, effects = leave_one_feature_out(
                lambda: build_policy(DEFAULT_LOOP_SPEC), featurizer, events
            )
            seconds = time.perf_counter() - start
            lofo = {".".join(e.feature): round(e.drop, 4) for e in effects}
            runs.append(
                {
                    "rounds": rounds,
                    "seed": seed,
                    "weights": {k: round(v, 3) for k, v in weights.items()},
                    "weights_rank_of_session_tab": list(weights).index("session.tab") + 1,
                    "lofo_value": round(value, 4),
                    "lofo_drop": lofo,
                    "lofo_rank_of_session_tab": list(lofo).index("session.tab") + 1,
                    "lofo_seconds": round(seconds, 1),
                }
            )
            print(f"rounds {rounds} seed {seed}")
            print(f"  weights (top 1): {runs[-1]['weights']}")
            print(f"  lofo (value {value:.4f}, {seconds:.1f} s): {lofo}")
    path = write_json("feature_importance", {"runs": runs}, args.label)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
