"""Fill a service event log to try ``bandit replay/estimate --format eventlog`` on.

Runs the real app in process on the embedded default (in-process state) with its event
log at ``--database`` (default ``sqlite:///events.sqlite3``), creates the policy ``home``
(LinUCB, alpha 0, epsilon 0.3: every arm keeps a logged propensity of at least 0.1) and
serves ``--events`` decisions of a synthetic environment whose expected rewards are
known: 3 arms, ``x_a = concat(context on the unit circle, one arm feature in [-1, 1])``,
Bernoulli rewards with mean ``mu_a = 0.5 + 0.3 theta_a . x_a``, a quarter of the requests
excluding one arm. Every decision is rewarded. docs/offline.md, "Worked example".

Run: ``python examples/event_log.py [--database URL] [--events N] [--seed S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np

from service.app import create_app
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


async def fill(database_url: str, events: int, seed: int) -> int:
    """Serve and reward ``events`` decisions of policy ``home``; return how many the log
    holds once written."""
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
                    answer = await http.post("/recommend", json=body)
                    answer.raise_for_status()
                    decision = answer.json()
                    arm = ARMS.index(decision["arm_id"])
                    mu = 0.5 + 0.3 * float(theta[arm] @ [*context, own[arm]])
                    reward = {"event_id": decision["event_id"], "reward": float(rng.random() < mu)}
                    (await http.post("/reward", json=reward)).raise_for_status()
            use_cases = app.state.use_cases
            await asyncio.to_thread(use_cases.sink.flush, 30.0)
            return use_cases.event_log.count(POLICY)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="sqlite:///events.sqlite3", help="event log URL")
    parser.add_argument("--events", type=int, default=2000, help="decisions to serve")
    parser.add_argument("--seed", type=int, default=0, help="environment and reward seed")
    args = parser.parse_args(argv)
    logged = asyncio.run(fill(args.database, args.events, args.seed))
    print(f"{logged} decisions of policy {POLICY!r} in {args.database}")
    return 0 if logged >= args.events else 1


if __name__ == "__main__":
    sys.exit(main())
