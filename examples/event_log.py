"""Fill a service event log to try ``bandit replay/estimate/compare --format eventlog`` on.

Runs the real app in process on the embedded default (in-process state) with its event
log at ``--database`` (default ``sqlite:///events.sqlite3``) and serves ``--events``
decisions, every one rewarded, of one of two environments whose expected rewards are known:

* the default: policy ``home`` (LinUCB, alpha 0, epsilon 0.3: every arm keeps a logged
  propensity of at least 0.1); 3 arms, ``x_a = concat(context on the unit circle, one arm
  feature in [-1, 1])``, Bernoulli rewards with mean ``mu_a = 0.5 + 0.3 theta_a . x_a``, a
  quarter of the requests excluding one arm (docs/offline.md, "Worked example");
* ``--storefront``: policy ``shop`` (``random``, uniform over the offered items: every
  logged propensity is 1/10; ``features`` ``{"bits": 6, "interactions": []}``, so the log
  holds the JSON as sent) serving rounds of :class:`bandit_core.storefront.Storefront`
  (catalog of 100 items, 10 offered a round): the shopper's JSON as ``context``, each
  offered item's JSON as its ``features``, a Bernoulli click with the served item's known
  click rate as the reward (docs/offline.md, "Re-featurizing a logged stream").

Run: ``python examples/event_log.py [--database URL] [--events N] [--seed S] [--storefront]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bandit_core.storefront import Storefront
from service.api.app import create_app
from service.settings import Settings

ARMS = ("a", "b", "c")
POLICY = "home"
SPEC = {
    "algorithm": "linucb",
    "dimension": 3,
    "params": {"alpha": 0.0},
    "epsilon": 0.3,
    "arms": list(ARMS),
    "reward_range": [0.0, 1.0],
    "reward_wait_seconds": 600,
}
STOREFRONT_POLICY = "shop"
STOREFRONT_SPEC = {
    "algorithm": "random",
    "features": {"bits": 6, "interactions": []},
    "reward_range": [0.0, 1.0],
    "reward_wait_seconds": 600,
}


async def _serve(
    http: httpx.AsyncClient, body: dict[str, Any], mu: dict[str, float], rng: np.random.Generator
) -> None:
    """One ``/recommend`` and its ``/reward``: a click with the served arm's ``mu``."""
    answer = await http.post("/recommend", json=body)
    answer.raise_for_status()
    decision = answer.json()
    reward = {
        "event_id": decision["event_id"],
        "reward": float(rng.random() < mu[decision["arm_id"]]),
    }
    (await http.post("/reward", json=reward)).raise_for_status()


async def serve_synthetic(http: httpx.AsyncClient, events: int, seed: int) -> None:
    """``events`` decisions of policy ``home`` in the synthetic environment."""
    (await http.put(f"/policies/{POLICY}", json=SPEC)).raise_for_status()
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(len(ARMS), 3))
    theta /= np.linalg.norm(theta, axis=1, keepdims=True)
    for _ in range(events):
        angle = rng.uniform(0, 2 * np.pi)
        context = [float(np.cos(angle)), float(np.sin(angle))]
        own = rng.uniform(-1, 1, size=len(ARMS))
        exclude = [ARMS[rng.integers(len(ARMS))]] if rng.random() < 0.25 else []
        body = {
            "policy": POLICY,
            "context": context,
            "arms": [{"id": a, "features": [float(f)]} for a, f in zip(ARMS, own)],
            "exclude": exclude,
        }
        mu = {a: 0.5 + 0.3 * float(theta[k] @ [*context, own[k]]) for k, a in enumerate(ARMS)}
        await _serve(http, body, mu, rng)


async def serve_storefront(http: httpx.AsyncClient, events: int, seed: int) -> None:
    """``events`` storefront rounds of policy ``shop``."""
    (await http.put(f"/policies/{STOREFRONT_POLICY}", json=STOREFRONT_SPEC)).raise_for_status()
    world, clicks = np.random.default_rng(seed).spawn(2)
    for r in Storefront().rounds(events, replace_at=None, rng=world):
        arms = [{"id": i, "features": f} for i, f in zip(r.item_ids, r.actions, strict=True)]
        body = {"policy": STOREFRONT_POLICY, "context": r.context, "arms": arms}
        await _serve(http, body, dict(zip(r.item_ids, r.mu.tolist(), strict=True)), clicks)


async def fill(database_url: str, events: int, seed: int, storefront: bool = False) -> int:
    """Serve and reward ``events`` decisions (of ``shop`` with ``storefront``, else of
    ``home``); return how many the log holds once written."""
    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            database_url=database_url,
            data_dir=Path(data_dir),
            demo_policy=False,
            snapshot_interval_seconds=0,
        )
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                await (serve_storefront if storefront else serve_synthetic)(http, events, seed)
            use_cases = app.state.use_cases
            await asyncio.to_thread(use_cases.sink.flush, 30.0)
            return use_cases.event_log.count(STOREFRONT_POLICY if storefront else POLICY)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="sqlite:///events.sqlite3", help="event log URL")
    parser.add_argument("--events", type=int, default=2000, help="decisions to serve")
    parser.add_argument("--seed", type=int, default=0, help="environment and reward seed")
    parser.add_argument(
        "--storefront",
        action="store_true",
        help="log policy 'shop' (JSON features) on the simulated storefront",
    )
    args = parser.parse_args(argv)
    logged = asyncio.run(fill(args.database, args.events, args.seed, args.storefront))
    policy = STOREFRONT_POLICY if args.storefront else POLICY
    print(f"{logged} decisions of policy {policy!r} in {args.database}")
    return 0 if logged >= args.events else 1


if __name__ == "__main__":
    sys.exit(main())
