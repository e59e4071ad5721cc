"""Rank latency while an offline evaluation runs (the goal: evaluations never slow rank).

An in-process app (embedded default) serves ``--rounds`` storefront rounds through
Personalizer's ``rank`` and ``reward`` to fill its log, then measures the latency of
``--calls`` ``rank`` calls in slices of 50, alternating between slices with no
evaluation running and slices while an evaluation with offline experimentation (Online,
interactions and the 8-setting grid over the whole log) runs in its worker process. The
machine has 2 cores shared with other work: the worker takes one of them, which is what
a deployment with ``BANDIT_EVALUATION_WORKERS=1`` costs. Writes run ``--label`` of
``benchmarks/results/evaluation_latency.json``.

    python -m benchmarks.evaluation_latency

``--job feature-importance`` measures the same while a feature-importance job (leave one
feature out over the whole log; ``featureImportances``) runs instead: such a job cannot
be stopped, so the ranks are measured in slices of 50 while it runs, then as many after
it finished (run ``--label`` beside ``--job``'s default label).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import numpy as np
from fastapi import FastAPI

from bandit_core.storefront import Storefront
from benchmarks._harness import add_label_argument, write_json
from service.api.app import create_app
from service.settings import Settings

WHOLE_LOG = {"startTime": "2020-01-01T00:00:00Z", "endTime": "2100-01-01T00:00:00Z"}


def body(r) -> dict:
    context = [{ns: v} for ns, v in r.context.items()]
    return {
        "contextFeatures": context,
        "actions": [{"id": i, "features": [f]} for i, f in zip(r.item_ids, r.actions, strict=True)],
    }


async def feature_importance_slices(
    http: httpx.AsyncClient, pending: list, calls: int
) -> tuple[list[float], list[float], int]:
    """Rank latencies while one feature-importance job over the whole log runs (in
    slices of 50, while it is still ``Running`` at the slice's end), then as many after
    it finished; and how many slices ran during the job."""
    path = "/personalizer/featureImportances/load?api-version=2022-09-01-preview"
    created = await http.put(path, json={"name": "load", **WHOLE_LOG})
    assert created.status_code == 200, created.text
    busy: list[float] = []
    slices = 0
    for s in range(0, calls, 50):
        times = await timed_ranks(http, pending[s : s + 50])
        if (await http.get(path)).json()["status"] != "Running":
            break
        busy += times
        slices += 1
    while (await http.get(path)).json()["status"] == "Running":
        await asyncio.sleep(0.1)
    assert (await http.get(path)).json()["status"] == "Succeeded"
    idle = await timed_ranks(http, pending[: max(len(busy), 50)])
    return idle, busy, slices


async def timed_ranks(http: httpx.AsyncClient, rounds: list) -> list[float]:
    times = []
    for r in rounds:
        t = time.perf_counter()
        await http.post("/personalizer/v1.0/rank", json=body(r))
        times.append(time.perf_counter() - t)
    return times


@asynccontextmanager
async def embedded_app() -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The service's app on the embedded default in a temporary data directory, started
    (its lifespan entered), and an in-process client holding its one API key."""
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(
            data_dir=Path(data), demo_policy=False, snapshot_interval_seconds=0, api_keys=["k"]
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 1))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://app", headers={"Authorization": "Bearer k"}
            ) as http:
                yield app, http


async def run(rounds: int, calls: int, job: str = "evaluation") -> dict:
    rng = np.random.default_rng(0)
    shop = list(Storefront().rounds(rounds + calls, replace_at=None, rng=rng))
    async with embedded_app() as (app, http):
        for r in shop[:rounds]:
            ranked = (await http.post("/personalizer/v1.0/rank", json=body(r))).json()
            k = r.item_ids.index(ranked["rewardActionId"])
            await http.post(
                f"/personalizer/v1.0/events/{ranked['eventId']}/reward",
                json={"value": float(rng.random() < r.mu[k])},
            )
        await asyncio.sleep(1.0)
        idle, busy, evaluations = [], [], 0
        pending = shop[rounds:]
        if job == "feature-importance":
            idle, busy, evaluations = await feature_importance_slices(http, pending, calls)
        for s in range(0, calls if job == "evaluation" else 0, 50):
            slice_ = pending[s : s + 50]
            running = (s // 50) % 2 == 1
            if running:
                created = await http.post(
                    "/personalizer/v1.0/evaluations",
                    json={
                        "name": "load",
                        **WHOLE_LOG,
                        "enableOfflineExperimentation": True,
                        "policies": [
                            {
                                "name": "interactions",
                                "arguments": "--cb_explore_adf --epsilon 0.2 -q ::",
                            }
                        ],
                    },
                )
                location = created.headers["location"]
                while (await http.get(location)).json()["status"] == "pending":
                    view = app.state.use_cases.evaluations.store.get(
                        "personalizer", created.json()["id"]
                    )
                    if view is not None and view.status == "running":
                        break
                    await asyncio.sleep(0.05)
                evaluations += 1
            times = await timed_ranks(http, slice_)
            if running:
                still = app.state.use_cases.evaluations.store.get(
                    "personalizer", created.json()["id"]
                )
                assert still is not None and still.status == "running", (
                    "the evaluation ended inside the slice"
                )
                await http.delete(location)
                busy += times
            else:
                idle += times

    def stats(xs: list[float]) -> dict:
        xs = sorted(xs)
        return {
            "calls": len(xs),
            "p50_ms": 1000 * statistics.median(xs),
            "p99_ms": 1000 * xs[int(0.99 * (len(xs) - 1))],
            "mean_ms": 1000 * statistics.fmean(xs),
        }

    return {
        "job": job,
        "idle": stats(idle),
        "while_evaluating": stats(busy),
        "evaluations_started" if job == "evaluation" else "slices_during_the_job": evaluations,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=2000, help="rounds logged first (default %(default)s)"
    )
    parser.add_argument(
        "--calls", type=int, default=600, help="rank calls measured (default %(default)s)"
    )
    parser.add_argument(
        "--job",
        choices=["evaluation", "feature-importance"],
        default="evaluation",
        help="the background work ranks are measured beside (default %(default)s)",
    )
    add_label_argument(parser, "evaluation_latency")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args.rounds, args.calls, args.job))
    for k in ("idle", "while_evaluating"):
        print(k, {m: round(v, 3) for m, v in result[k].items()})
    write_json("evaluation_latency", {"rounds": args.rounds, **result}, args.label)


if __name__ == "__main__":
    main()
