"""The storefront's click rate around an applied evaluation, with the new model relearned
from the log (``modelRetrainDays`` 2) and started from scratch (``modelRetrainDays`` 0).

An in-process app (embedded default) serves ``--rounds`` storefront rounds
(bandit_core/storefront.py) through Personalizer's ``rank`` and ``reward`` on the
default loop with ``--cb_explore_adf --epsilon 0.2 -q :: -b 6``, evaluates the same
setting with 7 hash bits (``-b 7``: another engine, so a new model), applies it, and
serves ``--after`` more rounds while ranking goes on. The figures are the expected click
rates (the simulation's click probability of each served item) of the ``--after``
rounds before the apply and the ``--after`` rounds after it, and the relearned model's
switch (rounds served before it, events learned). The same rounds and draws for both
settings of ``modelRetrainDays``. Writes run ``--label`` of
``benchmarks/results/retrain_storefront.json``.

    python -m benchmarks.retrain_storefront
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import httpx
import numpy as np

from bandit_core.storefront import Storefront, StorefrontRound
from benchmarks._harness import add_label_argument, write_json
from benchmarks.evaluation_latency import embedded_app

SERVED = "--cb_explore_adf --epsilon 0.2 -q :: -b 6"
APPLIED = "--cb_explore_adf --epsilon 0.2 -q :: -b 7"
BASE = "/personalizer/v1.0"


def body(r: StorefrontRound) -> dict[str, Any]:
    context = [{ns: v} for ns, v in r.context.items()]
    actions = [{"id": i, "features": [f]} for i, f in zip(r.item_ids, r.actions, strict=True)]
    return {"contextFeatures": context, "actions": actions}


async def serve(
    http: httpx.AsyncClient, rounds: list[StorefrontRound], draws: np.ndarray
) -> list[float]:
    """The expected click rate of each served item."""
    rates = []
    for r, draw in zip(rounds, draws, strict=True):
        ranked = (await http.post(f"{BASE}/rank", json=body(r))).json()
        mu = float(r.mu[r.item_ids.index(ranked["rewardActionId"])])
        answer = await http.post(
            f"{BASE}/events/{ranked['eventId']}/reward", json={"value": float(draw < mu)}
        )
        assert answer.status_code == 204, answer.text
        rates.append(mu)
    return rates


async def retrain_state(http: httpx.AsyncClient) -> dict[str, Any] | None:
    return (await http.get(f"{BASE}/model/properties")).json().get("retrain")


async def run(retrain_days: int, rounds: int, after: int) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    shop = list(Storefront().rounds(rounds + after, replace_at=None, rng=rng))
    draws = rng.random(rounds + after)
    async with embedded_app() as (app, http):
        config = (await http.get(f"{BASE}/configurations/service")).json()
        config["modelRetrainDays"] = retrain_days
        assert (await http.put(f"{BASE}/configurations/service", json=config)).is_success
        policy = {"name": "served", "arguments": SERVED}
        assert (await http.put(f"{BASE}/configurations/policy", json=policy)).is_success
        before = await serve(http, shop[:rounds], draws[:rounds])
        log = app.state.use_cases.event_log
        while log.count("personalizer") != (rounds, rounds):
            await asyncio.sleep(0.1)
        evaluation = {
            "name": "bits",
            "startTime": "2020-01-01T00:00:00Z",
            "endTime": "2100-01-01T00:00:00Z",
            "policies": [{"name": "bits7", "arguments": APPLIED}],
        }
        created = await http.post(f"{BASE}/evaluations", json=evaluation)
        location = created.headers["location"]
        while (await http.get(location)).json()["status"] == "pending":
            await asyncio.sleep(0.2)
        applied = await http.post(
            f"{BASE}/configurations/applyFromEvaluation",
            json={"evaluationId": created.json()["id"], "policyName": "bits7"},
        )
        assert applied.status_code == 204, applied.text
        started = time.perf_counter()
        rates, switched_after = [], None
        for i in range(after):
            rates += await serve(
                http, shop[rounds + i : rounds + i + 1], draws[rounds + i : rounds + i + 1]
            )
            state = await retrain_state(http)
            if switched_after is None and (state is None or state["state"] != "running"):
                switched_after = i + 1
        state = await retrain_state(http)
        return {
            "model_retrain_days": retrain_days,
            "click_rate_before": float(np.mean(before[-after:])),
            "click_rate_after": float(np.mean(rates)),
            "ratio": float(np.mean(rates) / np.mean(before[-after:])),
            "retrain": state,
            "rounds_before_switch": switched_after,
            "seconds_after_apply": time.perf_counter() - started,
        }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2000, help="rounds before the apply")
    parser.add_argument("--after", type=int, default=500, help="rounds compared on each side")
    add_label_argument(parser, "retrain_storefront")
    args = parser.parse_args(argv)
    results = [asyncio.run(run(days, args.rounds, args.after)) for days in (2, 0)]
    for r in results:
        print(
            f"modelRetrainDays {r['model_retrain_days']}: click rate {r['click_rate_before']:.4f} "
            f"before, {r['click_rate_after']:.4f} after ({r['ratio']:.3f}x); switch after "
            f"{r['rounds_before_switch']} rounds"
        )
    write_json(
        "retrain_storefront",
        {"rounds": args.rounds, "after": args.after, "results": results},
        args.label,
    )


if __name__ == "__main__":
    main()
