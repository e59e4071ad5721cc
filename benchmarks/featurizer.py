"""The JSON featurizer: bucket collisions against ``bits``, and its cost per request.

Collisions. Two measures, with the features' real names hashed by
:func:`bandit_core.features.feature_hash` (interactions by ``interaction_hash``):

* *within a request*: of the feature occurrences in one action's vector (15 context
  features, 6 action features, their 90 interactions), the share that lands in a bucket
  holding another feature of the same vector, averaged over the 50 actions of the
  benchmark request;
* *over a vocabulary*: of ``n`` distinct features (a lifetime's worth, e.g. 2,000
  context values x 5,000 items' features gives up to millions of interactions), the share
  sharing a bucket with another one, next to the expectation ``1 - (1 - 2**-bits)**(n - 1)``.

Cost. The request of the performance goal: a context of 15 features in 3
namespaces (``user``, ``device``, ``session``; strings, numbers, booleans, a numeric
and a string array) and 50 actions of 6 features each in namespace ``item``, every
context namespace x every action namespace interacting (4,500 interactions). CPU per
request of ``featurize`` (dense output at ``bits`` = 8, sparse at 18 and 22) and of
``featurize_context`` alone, interleaved in one run (:func:`benchmarks._harness.interleave`),
beside LinUCB's ``select`` at (K, d) = (50, 32) as a yardstick.

    python -m benchmarks.featurizer [--rounds 9]
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks._harness import add_label_argument, interleave, load, table, write_json

BITS = (8, 10, 12, 14, 16, 18, 20, 22, 24)
VOCABULARIES = (1_000, 10_000, 100_000, 1_000_000)
K = 50


def request(seed: int = 0) -> tuple[dict, list[dict]]:
    """The benchmark request: 15 context features in 3 namespaces, 50 actions x 6 features."""
    rng = np.random.default_rng(seed)
    context = {
        "user": {
            "segment": f"s{rng.integers(20)}",
            "interest": str(rng.choice(["tech", "food", "travel", "sport"])),
            "tenureYears": int(rng.integers(1, 10)),
            "premium": True,
            "country": "de",
        },
        "device": {
            "type": "mobile",
            "os": "android",
            "screen": [1080, 2400],  # two positional features
            "darkMode": True,
        },
        "session": {
            "referrer": "search",
            "pages": int(rng.integers(1, 20)),
            "tags": ["sale", "new"],  # two multi-hot features
            "daypart": "evening",
        },
    }
    actions = [
        {
            "item": {
                "id": f"sku-{rng.integers(1_000_000)}",
                "category": f"c{rng.integers(30)}",
                "price": round(float(rng.uniform(1, 200)), 2),
                "rating": round(float(rng.uniform(1, 5)), 1),
                "tags": [f"t{rng.integers(50)}", f"t{50 + rng.integers(50)}"],
            }
        }
        for _ in range(K)
    ]
    return context, actions


def request_collisions(bits: int, context: dict, actions: list[dict]) -> float:
    """Share of one vector's feature occurrences that share their bucket, over the actions."""
    from bandit_core.features import BIAS_NAME, Featurizer, FeaturizerConfig

    featurizer = Featurizer(FeaturizerConfig(bits=bits, output="sparse"))
    shares = []
    for action in actions:
        buckets = np.array(
            [f.bucket for f in featurizer.describe(context, action) if f.name != BIAS_NAME]
        )
        _, inverse, counts = np.unique(buckets, return_inverse=True, return_counts=True)
        shares.append(float(np.mean(counts[inverse] > 1)))
    return float(np.mean(shares))


def vocabulary_hashes(n: int, seed: int = 0) -> np.ndarray:
    """32-bit hashes of ``n`` distinct feature names: half interactions of realistic
    context and item names, the rest plain names (``ns|key=value``)."""
    from bandit_core.features import feature_hash, interaction_hash

    plain = np.uint32([feature_hash(f"item|id=sku-{i}") for i in range(n - n // 2)])
    side = int(np.ceil(np.sqrt(n // 2))) + 1
    ctx = np.uint32([feature_hash(f"user|segment=s{i}") for i in range(side)])
    act = np.uint32([feature_hash(f"item|category=c{i}") for i in range(side)])
    pairs = interaction_hash(ctx[:, None], act[None, :]).ravel()[: n // 2]
    return np.concatenate([plain, pairs])


def vocabulary_collisions(hashes: np.ndarray, bits: int) -> float:
    """Share of the distinct features whose bucket holds another one."""
    _, inverse, counts = np.unique(
        hashes & np.uint32((1 << bits) - 1), return_inverse=True, return_counts=True
    )
    return float(np.mean(counts[inverse] > 1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=9, help="interleaved timing rounds (default 9)"
    )
    add_label_argument(parser, "featurizer")
    args = parser.parse_args(argv)

    import bandit_core
    from bandit_core.features import Featurizer, FeaturizerConfig

    context, actions = request()
    before = load()

    per_request = [
        {
            "bits": b,
            "colliding share of a vector's features": request_collisions(b, context, actions),
        }
        for b in BITS
    ]
    print("Collisions inside one action's vector (15 + 6 features, 90 interactions):")
    print(table(per_request, ["bits", "colliding share of a vector's features"]))

    vocab_rows = []
    for n in VOCABULARIES:
        hashes = vocabulary_hashes(n)
        row: dict = {"distinct features": n}
        for b in BITS:
            row[f"{b}"] = vocabulary_collisions(hashes, b)
        vocab_rows.append(row)
    expected = [
        {"distinct features": n, **{f"{b}": 1 - (1 - 2.0**-b) ** (n - 1) for b in BITS}}
        for n in VOCABULARIES
    ]
    print("\nShare of distinct features sharing a bucket (measured), by bits:")
    print(table(vocab_rows, ["distinct features", *map(str, BITS)]))
    print("\nExpected for a uniform hash, 1 - (1 - 2^-bits)^(n - 1):")
    print(table(expected, ["distinct features", *map(str, BITS)]))

    featurizers = {
        "featurize, bits 8 dense": Featurizer(FeaturizerConfig(bits=8, output="dense")),
        "featurize, bits 18 sparse": Featurizer(FeaturizerConfig(bits=18, output="sparse")),
        "featurize, bits 22 sparse": Featurizer(FeaturizerConfig(bits=22, output="sparse")),
    }
    context_only = Featurizer(FeaturizerConfig(bits=18))
    policy = bandit_core.make_policy("linucb", d=32, seed=0)
    arm_ids = [f"arm{i}" for i in range(K)]
    X = np.random.default_rng(1).normal(size=(K, 32))

    def runner(featurizer):
        def run(n: int) -> None:
            for _ in range(n):
                featurizer.featurize(context, actions)

        return run

    def run_context(n: int) -> None:
        for _ in range(n):
            context_only.featurize_context(context)

    def run_select(n: int) -> None:
        for _ in range(n):
            policy.select(arm_ids, X)

    contenders = {name: runner(f) for name, f in featurizers.items()}
    contenders["featurize_context, bits 18"] = run_context
    contenders["LinUCB select (50, 32), yardstick"] = run_select
    measured = interleave(contenders, rounds=args.rounds)
    timing = [
        {
            "what": name,
            "CPU us per request": 1e6 / m.cpu_median,
            "wall us per request": 1e6 / m.wall_median,
        }
        for name, m in measured.items()
    ]
    print("\nCost per request (15 context features, 50 actions x 6 features, 4,500 interactions):")
    print(table(timing, ["what", "CPU us per request", "wall us per request"]))

    path = write_json(
        "featurizer",
        {
            "load_before": before,
            "load_after": load(),
            "request_collisions": per_request,
            "vocabulary_collisions": vocab_rows,
            "vocabulary_collisions_expected": expected,
            "cost_per_request": timing,
        },
        args.label,
    )
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
