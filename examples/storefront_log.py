"""Fill a service event log with JSON-featured decisions of the simulated storefront, to
try re-featurizing a logged stream with ``bandit replay/estimate/compare --features``.

Runs the real app in process on the embedded default (in-process state) with its event
log at ``--database`` (default ``sqlite:///storefront.sqlite3``), creates the policy
``shop`` (``random``, uniform over the offered items: every logged propensity is 1/10;
``features`` ``{"bits": 6, "interactions": []}``, so the log holds the JSON as sent) and
serves ``--events`` rounds of :class:`bandit_core.storefront.Storefront` (catalog of 100
items, 10 offered a round): the shopper's JSON as ``context``, each offered item's JSON
as its ``features``, a Bernoulli click with the served item's known click rate as the
reward. docs/offline.md, "Re-featurizing a logged stream".

Run: ``python examples/storefront_log.py [--database URL] [--events N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np

from bandit_core.storefront import Storefront
from service.app import create_app
from service.settings import Settings

POLICY = "shop"
SPEC = {
    "algorithm": "random",
    "features": {"bits": 6, "interactions": []},
    "reward_range": [0.0, 1.0],
    "reward_wait_seconds": 600,
}


async def fill(database_url: str, events: int, seed: int) -> int:
    """Serve and reward ``events`` storefront rounds of policy ``shop``; return how many
    decisions the log holds once written."""
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
                (await http.put(f"/policies/{POLICY}", json=SPEC)).raise_for_status()
                world, clicks = np.random.default_rng(seed).spawn(2)
                for r in Storefront().rounds(events, replace_at=None, rng=world):
                    body = {
                        "policy": POLICY,
                        "context": r.context,
                        "arms": [
                            {"id": i, "features": f}
                            for i, f in zip(r.item_ids, r.actions, strict=True)
                        ],
                    }
                    answer = await http.post("/recommend", json=body)
                    answer.raise_for_status()
                    decision = answer.json()
                    mu = r.mu[r.item_ids.index(decision["arm_id"])]
                    reward = {"event_id": decision["event_id"], "reward": float(clicks.random() < mu)}
                    (await http.post("/reward", json=reward)).raise_for_status()
            use_cases = app.state.use_cases
            await asyncio.to_thread(use_cases.sink.flush, 30.0)
            return use_cases.event_log.count(POLICY)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="sqlite:///storefront.sqlite3", help="event log URL")
    parser.add_argument("--events", type=int, default=3000, help="rounds to serve")
    parser.add_argument("--seed", type=int, default=0, help="storefront and click seed")
    args = parser.parse_args(argv)
    logged = asyncio.run(fill(args.database, args.events, args.seed))
    print(f"{logged} decisions of policy {POLICY!r} in {args.database}")
    return 0 if logged >= args.events else 1


if __name__ == "__main__":
    sys.exit(main())
