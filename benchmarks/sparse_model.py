"""The large-space shared model, diag_linucb (issue 18, item 3): cost and what it gives up.

**Cost.** For each ``bits`` (2^12 to 2^20 buckets) the featurizer's sparse rows of the
benchmark request of :mod:`benchmarks.featurizer` (15 context features in 3 namespaces,
50 actions of 6 features, every context x action interaction: about 110 nonzeros a
row) are fed to ``diag_linucb``, pre-featurized (a pool of ``POOL`` requests, so the
featurizer's own cost is not counted: it is in ``benchmarks/featurizer.py``). One unit is
one ``select`` over the K = 50 candidates and one ``update`` of the served row; the
bits are measured interleaved in one process (:mod:`benchmarks._harness`). After the
runs, the ``shared`` part's size and ``to_bytes`` cost, next to what a dense diagonal
(two float64 arrays of ``2**bits + 1``) would weigh.

**Reward.** A small seeded storefront (shoppers of 4 segments, items of 5 categories
with prices and tags, click probabilities by segment x category, segment x tag and
price; JSON features, every context x action interaction): per round a shopper, 20
candidates drawn from a catalog of 300 items, the policy picks one, a Bernoulli click
follows. ``hybrid_linucb`` (the full matrix, ``context_dim`` 0) at ``bits`` 8 (d = 257,
feasible) against ``diag_linucb`` on the same rows, and at ``bits`` 18 (both fits, UCB
and epsilon-greedy); random and the best item as bounds. The figure is the mean click
probability of the chosen items.

    python -m benchmarks.sparse_model                       # writes results/sparse_model.json
    python -m benchmarks.sparse_model --rounds 3 --steps 1000 --seeds 1
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

K = 50
POOL = 16
WARM_UPDATES = 2000
SEGMENTS = ("student", "parent", "foodie", "techie")
CATEGORIES = ("books", "food", "electronics", "toys", "garden")
TAGS = ("vegan", "new", "sale", "premium", "eco", "kids")
# affinity[segment][category] and tag_affinity[segment][tag] on the logit scale
AFFINITY = np.array(
    [[1.2, 0.3, 0.6, -0.8, -0.6], [0.0, 0.8, -0.6, 1.4, 0.5], [-0.4, 1.6, -0.5, -0.6, 0.4], [0.3, -0.6, 1.6, 0.1, -0.8]]
)
TAG_AFFINITY = np.array(
    [[0.2, 0.5, 0.8, -0.6, 0.1, -0.4], [0.0, 0.1, 0.5, 0.2, 0.3, 0.9], [0.9, 0.3, 0.0, 0.6, 0.5, -0.2],
     [-0.3, 0.9, 0.2, 0.5, -0.2, -0.3]]
)
PRICE_SENSITIVITY = np.array([1.5, 1.0, 0.3, 0.5])
BASE_LOGIT = -2.0


def _storefront(seed: int, steps: int, catalog_size: int = 300, offered: int = 20):
    """Rounds of the seeded storefront: (context JSON, actions JSON, click probabilities)."""
    rng = np.random.default_rng(seed)
    cats = rng.integers(len(CATEGORIES), size=catalog_size)
    prices = np.round(20 * np.exp(rng.normal(0, 0.6, size=catalog_size)), 2)
    tags = rng.uniform(size=(catalog_size, len(TAGS))) < 0.3
    items = [
        {"item": {"category": CATEGORIES[c], "price": float(p), "tags": [TAGS[t] for t in np.flatnonzero(tg)]}}
        for c, p, tg in zip(cats, prices, tags)
    ]
    for _ in range(steps):
        s = int(rng.integers(len(SEGMENTS)))
        context = {
            "user": {"segment": SEGMENTS[s], "tenureYears": int(rng.integers(0, 6))},
            "device": {"type": str(rng.choice(["mobile", "desktop"]))},
        }
        shown = rng.choice(catalog_size, offered, replace=False)
        logit = BASE_LOGIT + AFFINITY[s, cats[shown]] + tags[shown] @ TAG_AFFINITY[s]
        logit -= PRICE_SENSITIVITY[s] * prices[shown] / 50
        yield context, [items[i] for i in shown], 1.0 / (1.0 + np.exp(-logit)), rng


def reward_comparison(steps: int, seeds: int, alpha: float) -> list[dict[str, Any]]:
    """Mean click probability of the chosen items per contender, over ``seeds`` runs."""
    import bandit_core
    from bandit_core.features import Featurizer, FeaturizerConfig, SparseRows

    small = Featurizer(FeaturizerConfig(bits=8, output="dense"))
    large = Featurizer(FeaturizerConfig(bits=18, output="sparse"))
    names = ["best item", "hybrid_linucb (full matrix), bits 8", "diag_linucb joint, bits 8",
             "diag_linucb joint, bits 18", "diag_linucb joint, bits 18, epsilon 0.2 (alpha 0)",
             "diag_linucb per_feature, bits 18", "random"]
    totals: dict[str, list[float]] = {n: [] for n in names}
    late: dict[str, list[float]] = {n: [] for n in names}
    seconds: dict[str, float] = {n: 0.0 for n in names}
    for seed in range(seeds):
        diag = {"d": large.config.dim, "seed": seed}
        policies = {
            names[1]: (bandit_core.make_policy("hybrid_linucb", d=small.config.dim, alpha=alpha, seed=seed), "small"),
            names[2]: (
                bandit_core.make_policy("diag_linucb", d=small.config.dim, alpha=alpha, seed=seed), "small_sparse"
            ),
            names[3]: (bandit_core.make_policy("diag_linucb", alpha=alpha, **diag), "large"),
            names[4]: (bandit_core.make_policy("diag_linucb", alpha=0.0, epsilon=0.2, **diag), "large"),
            names[5]: (bandit_core.make_policy("diag_linucb", alpha=alpha, fit="per_feature", **diag), "large"),
        }
        got: dict[str, list[float]] = {n: [] for n in names}
        for context, actions, mu, rng in _storefront(seed, steps):
            ids = [f"i{k}" for k in range(len(actions))]
            rows: dict[str, Any] = {"small": small.featurize(context, actions).actions}
            rows["small_sparse"] = SparseRows.from_dense(rows["small"])
            rows["large"] = large.featurize(context, actions).actions
            got["best item"].append(float(mu.max()))
            got["random"].append(float(mu.mean()))
            for name, (policy, kind) in policies.items():
                t0 = time.process_time()
                X = rows[kind]
                k = ids.index(policy.select(ids, X).arm_id)
                click = float(rng.uniform() < mu[k])
                x = X[k] if kind == "small" else X.one_row(k)
                policy.update(ids[k], x, click)
                seconds[name] += time.process_time() - t0
                got[name].append(float(mu[k]))
        for name in names:
            totals[name].append(float(np.mean(got[name])))
            late[name].append(float(np.mean(got[name][-steps // 3 :])))
    random_mean = float(np.mean(totals["random"]))
    full = float(np.mean(totals[names[1]]))
    return [
        {
            "contender": name,
            "mean click prob": float(np.mean(totals[name])),
            "last third": float(np.mean(late[name])),
            "lift over random": float(np.mean(totals[name])) - random_mean,
            "share of full-matrix lift": (float(np.mean(totals[name])) - random_mean) / (full - random_mean),
            "us/decision+update (cpu)": 1e6 * seconds[name] / (steps * seeds) if seconds[name] else None,
            "per seed": totals[name],
        }
        for name in names
    ]


def cost_runner(bits: int):
    """A runner doing ``n`` decisions + updates of diag_linucb at ``bits``, and its policy."""
    import bandit_core
    from bandit_core.features import Featurizer, FeaturizerConfig
    from benchmarks.featurizer import request

    featurizer = Featurizer(FeaturizerConfig(bits=bits, output="sparse"))
    pool = [featurizer.featurize(*request(seed)).actions for seed in range(POOL)]
    ids = [f"sku-{k}" for k in range(K)]
    policy = bandit_core.make_policy("diag_linucb", d=featurizer.config.dim, alpha=0.5, seed=0)
    rng = np.random.default_rng(bits)
    for i in range(WARM_UPDATES):  # a state with the touched entries of many rewards
        policy.update("warm", pool[i % POOL].one_row(int(rng.integers(K))), float(rng.uniform() < 0.1))
    served = [rows.one_row(k) for rows in pool for k in range(K)]
    step = [0]

    def run(n: int) -> None:
        for _ in range(n):
            i = step[0] = step[0] + 1
            dec = policy.select(ids, pool[i % POOL])
            policy.update(dec.arm_id, served[(i % POOL) * K + ids.index(dec.arm_id)], float(i % 10 == 0))

    return run, policy


def state_cost(policy: Any, bits: int, repeats: int = 20) -> dict[str, Any]:
    """Bytes and to_bytes / from_bytes time of the sparse ``shared`` part, and of a dense
    diagonal of the same dimension (two float64 arrays of ``2**bits + 1``)."""
    from bandit_core.diag_linucb import DiagSharedState
    from bandit_core.state import pack, unpack

    def timed(f) -> float:
        t0 = time.process_time()
        for _ in range(repeats):
            f()
        return 1e6 * (time.process_time() - t0) / repeats

    shared = policy.shared_state
    data = shared.to_bytes()
    dense = {"sum_sq": np.zeros((1 << bits) + 1), "b": np.zeros((1 << bits) + 1)}
    dense["sum_sq"][shared.index] = shared.sum_sq
    dense["b"][shared.index] = shared.b
    dense_data = pack("dense_diag", {"n": shared.n}, dense)
    return {
        "touched entries": len(shared.index),
        "sparse part bytes": len(data),
        "sparse to_bytes us": timed(shared.to_bytes),
        "sparse from_bytes us": timed(lambda: DiagSharedState.from_bytes(data)),
        "dense part bytes": len(dense_data),
        "dense to_bytes us": timed(lambda: pack("dense_diag", {"n": shared.n}, dense)),
        "dense from_bytes us": timed(lambda: unpack(dense_data)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bits", default="12,14,16,18,20", help="comma-separated bits (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument("--slice", type=float, default=0.1, help="seconds per contender per round")
    parser.add_argument("--steps", type=int, default=3000, help="storefront rounds per seed (default 3000)")
    parser.add_argument("--seeds", type=int, default=3, help="storefront seeds (default 3)")
    parser.add_argument("--alpha", type=float, default=0.5, help="UCB alpha of the storefront runs (default 0.5)")
    parser.add_argument(
        "--label", default="latest",
        help="label of this run in results/sparse_model.json; a run replaces the one of the same label (default latest)",
    )
    args = parser.parse_args(argv)

    from benchmarks import _harness as h

    bits_list = [int(v) for v in args.bits.split(",")]
    built = {b: cost_runner(b) for b in bits_list}
    before = h.load()
    m = h.interleave({f"bits {b}": built[b][0] for b in bits_list}, rounds=args.rounds, slice_s=args.slice)
    after = h.load()
    first = m[f"bits {bits_list[0]}"]
    cost_rows = [
        {
            "bits": b,
            "us/decision+update (cpu)": 1e6 / m[f"bits {b}"].cpu_median,
            f"x bits {bits_list[0]} time (cpu)": h.ratio(first, m[f"bits {b}"]),
            **state_cost(built[b][1], b),
            "cpu_rounds": m[f"bits {b}"].cpu,
        }
        for b in bits_list
    ]
    print(f"\ndiag_linucb, K = {K}, ~110 nonzeros a row   load before {before['loadavg']} after {after['loadavg']}")
    print(h.table(cost_rows, ["bits", "us/decision+update (cpu)", f"x bits {bits_list[0]} time (cpu)",
                              "touched entries", "sparse part bytes", "sparse to_bytes us", "dense part bytes",
                              "dense to_bytes us"]))
    reward_rows = reward_comparison(args.steps, args.seeds, args.alpha)
    print(f"\nstorefront, {args.seeds} seeds x {args.steps} rounds, 20 candidates, alpha {args.alpha}")
    print(h.table(reward_rows, ["contender", "mean click prob", "last third", "share of full-matrix lift",
                                "us/decision+update (cpu)"]))
    path = h.write_json(
        "sparse_model",
        {"K": K, "rounds": args.rounds, "slice_s": args.slice, "load_before": before, "load_after": after,
         "cost": cost_rows, "storefront": {"steps": args.steps, "seeds": args.seeds, "alpha": args.alpha,
                                            "rows": reward_rows}},
        args.label,
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
