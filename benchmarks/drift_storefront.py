"""The storefront with drifting tastes, served: click rate after a change of tastes and
the detector's delay, through the service on Redis + PostgreSQL (docs/algorithms.md
section 10.7).

The world is :class:`bandit_core.storefront.Storefront` (JSON shoppers and items,
closed-form click rates) whose tastes change at round ``--change-at``: from then on every
segment likes each category as it liked the next one before (``books`` as ``food``,
``food`` as ``electronics``, ..., ``garden`` as ``books``); tags, prices, tenure and
devices keep their effect and the catalog stays. Every round one shopper sees
``--offered`` items of the catalog; each policy of the comparison decides with ``POST
/recommend`` and learns from the Bernoulli click with ``POST /reward``:

* per-arm ``linucb`` and ``discounted_linucb`` (``half_life_seconds``) over the
  featurized context (``--context-bits``), each item its own arm;
* the shared model, ``hybrid_linucb`` over each item's featurized row (context, item,
  every context x item interaction, ``--bits``), plain and with ``half_life_seconds``.

Every policy has the UCB width ``--alpha``, the service's default epsilon (0.05) and the
service's detector (``drift_detection`` defaults: delta 0.005, threshold 50). The app is
the service's own (``service.api.app.create_app``: routers, use cases, the Redis state
store and the PostgreSQL event log on private servers), driven in process over ASGI,
with the decisions' and rewards' clock set to one second per round from a fixed origin,
so a half-life of ``--half-life`` seconds is that many rounds whatever the machine's
speed. Each round's shopper, offer and click draws are the same for every policy.

Reports, per policy: the click rate in the ``--span`` rounds before the change and in
the ``--span`` rounds after it, the expected click rate of its choices (and of the best
offered item) there, and the rounds from the change to the detector's first alert after
it (read from the service's ``DriftWatch``; alerts before the change are counted as
false alarms). Writes run ``--label`` of ``benchmarks/results/drift_storefront.json``.

    python -m benchmarks.drift_storefront                 # the numbers of docs/algorithms.md 10.7
    python -m benchmarks.drift_storefront --rounds 1200 --change-at 600 --span 300 --label quick
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument, load, table, write_json

T0 = 1_800_000_000.0  # the clock's origin (Unix time); round t is decided at T0 + t


@dataclass(frozen=True)
class Contender:
    """A policy of the comparison: ``shared`` says which rows it scores."""

    name: str
    algorithm: str
    shared: bool
    params: dict[str, Any]


def contenders(alpha: float, half_life: float) -> list[Contender]:
    """Per-arm and shared, each plain and with the half-life."""
    forget = {"half_life_seconds": half_life}
    return [
        Contender("linucb", "linucb", False, {"alpha": alpha}),
        Contender("discounted-linucb", "discounted_linucb", False, {"alpha": alpha, **forget}),
        Contender("shared", "hybrid_linucb", True, {"alpha": alpha}),
        Contender("shared-half-life", "hybrid_linucb", True, {"alpha": alpha, **forget}),
    ]


def drifted(item: Any) -> Any:
    """``item`` as the changed tastes see it: its category read as the next one."""
    from bandit_core.storefront import CATEGORIES

    following = CATEGORIES[(CATEGORIES.index(item.category) + 1) % len(CATEGORIES)]
    return dataclasses.replace(item, category=following)


async def drive(
    args: argparse.Namespace, redis_url: str, database_url: str
) -> list[dict[str, Any]]:
    """Run every contender through one app, once per seed; per seed and policy, the
    per-round clicks, expected click rates and the rounds of the detector's alerts."""
    from bandit_core.storefront import Storefront
    from service.settings import Settings
    from tests.service.conftest import API_KEY, running

    shop = Storefront(catalog_size=args.catalog_size, offered=args.offered)
    settings = Settings(
        redis_url=redis_url,
        database_url=database_url,
        api_keys=[API_KEY],
        data_dir=Path(tempfile.mkdtemp(prefix="bandit-drift-")),
        demo_policy=False,
        personalizer_loop=False,
        snapshot_interval_seconds=0,
    )
    runs = []
    now = [T0]
    async with running(settings) as (app, http, _):
        use_cases = app.state.use_cases
        for case in (use_cases.recommender, use_cases.rewards):
            case.clock = lambda: now[0]
        for seed in range(args.seeds):
            chosen = [
                dataclasses.replace(c, name=f"{c.name}-seed{seed}")
                for c in contenders(args.alpha, args.half_life)
            ]
            runs.append(await drive_seed(args, http, use_cases, now, shop, chosen, seed))
    return runs


async def drive_seed(
    args: argparse.Namespace,
    http: Any,
    use_cases: Any,
    now: list[float],
    shop: Any,
    chosen: list[Contender],
    seed: int,
) -> dict[str, Any]:
    """One seed's run of every contender (policies of their own) through the app."""
    from bandit_core.features import Featurizer, FeaturizerConfig

    shared_featurizer = Featurizer(FeaturizerConfig(bits=args.bits, output="dense"))
    context_featurizer = Featurizer(
        FeaturizerConfig(bits=args.context_bits, output="dense", interactions=[])
    )
    out: dict[str, dict[str, Any]] = {
        c.name: {"clicks": [], "chosen_mu": [], "alerts": []} for c in chosen
    }
    best_mu: list[float] = []
    rows_of: dict[str, Any] = {}
    for c in chosen:
        featurizer = shared_featurizer if c.shared else context_featurizer
        rows_of[c.name] = featurizer
        dimension = (
            featurizer.featurize({}, [{}]).actions.shape[1]
            if c.shared
            else featurizer.featurize_context({}).size
        )
        spec = {
            "algorithm": c.algorithm,
            "dimension": int(dimension),
            "params": c.params,
            "reward_wait_seconds": 10 * args.rounds,
        }
        r = await http.put(f"/policies/{c.name}", json=spec)
        r.raise_for_status()
    rng = np.random.default_rng(seed)
    world, clicks_rng = rng.spawn(2)
    for t, offer in enumerate(shop.rounds(args.rounds, None, world)):
        now[0] = T0 + t
        items = offer.items if t < args.change_at else tuple(map(drifted, offer.items))
        mu = np.array([shop.click_probability(offer.shopper, i) for i in items])
        best_mu.append(float(mu.max()))
        click_draw = clicks_rng.random()
        for c in chosen:
            featurizer = rows_of[c.name]
            if c.shared:
                rows = featurizer.featurize(offer.context, offer.actions).actions
                body = {
                    "policy": c.name,
                    "context": [],
                    "arms": [
                        {"id": i, "features": row.tolist()} for i, row in zip(offer.item_ids, rows)
                    ],
                }
            else:
                body = {
                    "policy": c.name,
                    "context": featurizer.featurize_context(offer.context).tolist(),
                    "arms": [{"id": i} for i in offer.item_ids],
                }
            r = await http.post("/recommend", json=body)
            r.raise_for_status()
            decision = r.json()
            k = offer.item_ids.index(decision["arm_id"])
            click = float(click_draw < mu[k])
            r = await http.post("/reward", json={"event_id": decision["event_id"], "reward": click})
            r.raise_for_status()
            record = out[c.name]
            record["clicks"].append(click)
            record["chosen_mu"].append(float(mu[k]))
            if use_cases.rewards.drift.detected_at.get(c.name) == now[0]:
                record["alerts"].append(t)
        if args.progress and t % 100 == 0:
            print(f"seed {seed}: round {t}/{args.rounds}", file=sys.stderr, flush=True)
    return {"policies": out, "best_mu": best_mu, "contenders": chosen}


def summary(run: dict[str, Any], change_at: int, span: int) -> list[dict[str, Any]]:
    """Per policy of one seed's run: the figures of the table (module docstring)."""
    best = np.array(run["best_mu"])
    rows = []
    for c in run["contenders"]:
        record = run["policies"][c.name]
        clicks, mu = np.array(record["clicks"]), np.array(record["chosen_mu"])
        before, after = slice(change_at - span, change_at), slice(change_at, change_at + span)
        alerts = record["alerts"]
        late = [a for a in alerts if a >= change_at]
        rows.append(
            {
                "policy": c.name.rsplit("-seed", 1)[0],
                "algorithm": c.algorithm,
                "params": c.params,
                "click_rate_before": float(clicks[before].mean()),
                "click_rate_after": float(clicks[after].mean()),
                "expected_click_rate_before": float(mu[before].mean()),
                "expected_click_rate_after": float(mu[after].mean()),
                "best_expected_after": float(best[after].mean()),
                "alert_delay_rounds": (late[0] - change_at) if late else None,
                "false_alarms": len(alerts) - len(late),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4000, help="(default %(default)s)")
    parser.add_argument(
        "--change-at", type=int, default=3000, help="round of the change (default %(default)s)"
    )
    parser.add_argument(
        "--span", type=int, default=1000, help="rounds before and after (default %(default)s)"
    )
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1 (default %(default)s)")
    parser.add_argument("--catalog-size", type=int, default=20, help="(default %(default)s)")
    parser.add_argument("--offered", type=int, default=5, help="(default %(default)s)")
    parser.add_argument(
        "--bits", type=int, default=6, help="shared model's hash bits (default %(default)s)"
    )
    parser.add_argument(
        "--context-bits", type=int, default=5, help="per-arm context bits (default %(default)s)"
    )
    parser.add_argument("--alpha", type=float, default=0.5, help="(default %(default)s)")
    parser.add_argument(
        "--half-life",
        type=float,
        default=300.0,
        help="half_life_seconds of the forgetting policies, one round a second (default %(default)s)",
    )
    parser.add_argument("--no-progress", dest="progress", action="store_false")
    add_label_argument(parser, "drift_storefront")
    args = parser.parse_args(argv)
    if not 0 < args.span <= min(args.change_at, args.rounds - args.change_at):
        parser.error("--span must fit before and after --change-at")

    from tests.databases import OWNED

    start, load_before = time.perf_counter(), load()
    runs = asyncio.run(drive(args, OWNED.redis_url(), OWNED.postgres_url()))
    per_seed = [summary(run, args.change_at, args.span) for run in runs]
    rows = []
    for i, first in enumerate(per_seed[0]):
        same = [seed_rows[i] for seed_rows in per_seed]
        row: dict[str, Any] = {"policy": first["policy"], "algorithm": first["algorithm"]}
        row["params"] = first["params"]
        for key in first:
            if key.startswith(("click_rate", "expected", "best")):
                row[key] = float(np.mean([r[key] for r in same]))
        row["alert_delays"] = [r["alert_delay_rounds"] for r in same]
        row["false_alarms"] = sum(r["false_alarms"] for r in same)
        rows.append(row)
    payload = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("progress", "label")},
        "seconds": time.perf_counter() - start,
        "load_before": load_before,
        "load_after": load(),
        "rows": rows,
        "per_seed": per_seed,
    }
    write_json("drift_storefront", payload, args.label)
    print(
        table(
            rows,
            [
                "policy",
                "click_rate_before",
                "click_rate_after",
                "expected_click_rate_after",
                "best_expected_after",
                "alert_delays",
                "false_alarms",
            ],
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
