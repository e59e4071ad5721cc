"""Interval coverage of offline evaluations on the simulated storefront.

For each seed, the default Personalizer loop *without* interactions (VW ``--cb_explore_adf
--epsilon E``, no ``-q``) serves ``--rounds`` storefront rounds (bandit_core/storefront.py:
100 items, 10 offered, Bernoulli clicks) and logs them as the service does (the JSON
context and actions as sent, the served action, its propensity, its reward). The log is
then evaluated as an evaluation of the service evaluates it
(``service.usecases.evaluations.evaluate``): ``Online`` (the loop's own settings) and
``interactions`` (``-q ::``, the same epsilon), both replayed with progressive validation.

Because the simulation knows every offered item's click rate ``mu``, each evaluated
setting has a known true value: ``(1/n) sum_t sum_a pi_t(a) mu_t(a)``, its action
distributions along the replay against the true click rates, what IPS and SNIPS estimate.
The script reports, over the seeds, how often the 95% Gaussian IPS and SNIPS intervals
cover it, how often the ``Online`` interval covers the realised average reward, the mean
interval widths, and how often ``interactions`` is estimated above ``Online``.
Writes run ``--label`` of ``benchmarks/results/evaluations.json``.

    python -m benchmarks.evaluations                    # the numbers of docs/offline.md
    python -m benchmarks.evaluations --seeds 5 --rounds 1000 --label quick
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bandit_core.evaluation import WindowSums, importance_weights, progressive_distribution
from bandit_core.storefront import Storefront
from benchmarks._harness import add_label_argument, table, write_json
from service.api.app import LEARNING_SETTINGS
from service.personalizer.loop_policy import DEFAULT_LOOP_SPEC
from service.policies import build_policy
from service.schemas import PolicySpec
from service.storage.base import DecisionRecord, LoggedDecision, RewardRecord
from service.usecases.evaluations import (
    Candidate,
    LogArrays,
    logged_events,
    rows_function,
    spec_from_arguments,
    total,
)


def loop_spec(arguments: str) -> PolicySpec:
    return spec_from_arguments(LEARNING_SETTINGS, DEFAULT_LOOP_SPEC, arguments, ["arguments"])


def log_storefront(
    spec: PolicySpec, rounds: int, seed: int
) -> tuple[list[LoggedDecision], list[np.ndarray]]:
    """``rounds`` storefront rounds served by a loop of ``spec`` (learning from each click)
    as logged decisions, and each round's true click rates ``mu`` (K,)."""
    rng = np.random.default_rng(seed)
    policy = build_policy(spec)
    rows = rows_function(spec)
    logged, mus = [], []
    for t, r in enumerate(Storefront().rounds(rounds, replace_at=None, rng=rng)):
        context = [{ns: value} for ns, value in r.context.items()]
        candidates = [
            {"id": i, "features": [f]} for i, f in zip(r.item_ids, r.actions, strict=True)
        ]
        record = DecisionRecord(
            event_id=f"{seed}-{t}",
            policy="loop",
            created_at=1.7e9 + t,
            context=context,
            candidates=candidates,
            arm_id="",
            propensity=1.0,
            scores=[],
            model_version=0,
        )
        X = rows(record)
        decision = policy.select(r.item_ids, X)
        k = r.item_ids.index(decision.arm_id)
        reward = float(rng.random() < r.mu[k])
        policy.update(decision.arm_id, X[k], reward)
        record = DecisionRecord(
            **{**record.__dict__, "arm_id": decision.arm_id, "propensity": decision.propensity}
        )
        logged.append(
            LoggedDecision(
                record,
                RewardRecord(
                    record.event_id, "loop", decision.arm_id, reward, "explicit", record.created_at
                ),
            )
        )
        mus.append(np.asarray(r.mu))
    return logged, mus


def one_seed(seed: int, rounds: int, epsilon: float) -> dict[str, Any]:
    online = f"--cb_explore_adf --epsilon {epsilon:g}"
    logged, mus = log_storefront(loop_spec(online), rounds, seed)
    arrays = LogArrays(logged)
    mu = np.zeros((len(mus), max(arrays.sizes)))
    for i, m in enumerate(mus):
        mu[i, : m.size] = m
    realised = float(arrays.reward.mean())
    out: dict[str, Any] = {"seed": seed, "realised": realised}
    for c in (
        Candidate("Online", online, "Online", loop_spec(online)),
        Candidate("interactions", online + " -q ::", "Custom", loop_spec(online + " -q ::")),
    ):
        assert c.spec is not None
        dist = progressive_distribution(
            build_policy(c.spec), logged_events(logged, rows_function(c.spec)), mu.shape[1]
        )
        truth = float((dist * mu).sum(axis=1).mean())
        w = importance_weights(arrays.action, arrays.pscore, dist)
        sums = WindowSums.from_terms(w, arrays.reward)
        assert np.isclose(total(arrays.periods(dist)).ips, sums.ips)
        ips_h, snips_h = sums.ips_half_width(), sums.snips_half_width()
        out[c.name] = {
            "truth": truth,
            "ips": sums.ips,
            "ips_half_width": ips_h,
            "ips_covers": abs(sums.ips - truth) <= ips_h,
            "snips": sums.snips,
            "snips_half_width": snips_h,
            "snips_covers": abs(sums.snips - truth) <= snips_h,
            "covers_realised": abs(sums.ips - realised) <= ips_h,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=30, help="seeds 0..S-1 (default %(default)s)")
    parser.add_argument(
        "--rounds", type=int, default=2000, help="logged rounds per seed (default %(default)s)"
    )
    parser.add_argument(
        "--epsilon", type=float, default=0.3, help="the loop's exploration (default %(default)s)"
    )
    add_label_argument(parser, "evaluations")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    per_seed = [one_seed(s, args.rounds, args.epsilon) for s in range(args.seeds)]
    rows = []
    for name in ("Online", "interactions"):
        runs = [r[name] for r in per_seed]
        rows.append(
            {
                "policy": name,
                "truth": float(np.mean([r["truth"] for r in runs])),
                "ips": float(np.mean([r["ips"] for r in runs])),
                "ips 95% covers": f"{sum(r['ips_covers'] for r in runs)}/{len(runs)}",
                "ips half-width": float(np.mean([r["ips_half_width"] for r in runs])),
                "snips": float(np.mean([r["snips"] for r in runs])),
                "snips 95% covers": f"{sum(r['snips_covers'] for r in runs)}/{len(runs)}",
                "snips half-width": float(np.mean([r["snips_half_width"] for r in runs])),
                "covers realised": f"{sum(r['covers_realised'] for r in runs)}/{len(runs)}",
            }
        )
    higher = sum(r["interactions"]["ips"] > r["Online"]["ips"] for r in per_seed)
    print(table(rows, list(rows[0])))
    print(
        f"interactions estimated above Online (IPS) in {higher}/{len(per_seed)} seeds; "
        f"realised mean reward {np.mean([r['realised'] for r in per_seed]):.4f}"
    )
    write_json(
        "evaluations",
        {
            "seeds": args.seeds,
            "rounds": args.rounds,
            "epsilon": args.epsilon,
            "summary": rows,
            "interactions_above_online": higher,
            "seconds": time.perf_counter() - started,
            "per_seed": per_seed,
        },
        args.label,
    )


if __name__ == "__main__":
    main()
