"""The default Personalizer loop's rank against the dense ``/recommend``, in one process.

The application (``service.api.app.create_app``, embedded backend: in-process state,
SQLite log, under a temporary data directory) is called through httpx's ASGI transport,
no socket and no server: ``POST /personalizer/v1.0/rank`` on the default loop with the
goal's request (:func:`benchmarks.service_load.rank_body`: 15 context features in 3
namespaces, 50 actions of 6 features) and ``POST /recommend`` on a LinUCB policy with
K = 50 registered arms at d = 32, and the default loop's reward route on an event ranked
beforehand (``POST /personalizer/v1.0/events/{id}/reward``, rewarded again each time: the
key, the owner's lookup, the event's read, the answer that a repeat changes nothing),
interleaved (:func:`benchmarks._harness.interleave`). CPU time per request of the whole
process (the client's share included, the same for all), and the ratio to the dense
request's round by round:

    python -m benchmarks.rank_in_process [--rounds 7]
    OPENBLAS_NUM_THREADS=2 python -m benchmarks.rank_in_process --label blas2   # numpy's default threads here

BLAS is pinned to one thread unless ``OPENBLAS_NUM_THREADS`` is set (``benchmarks/__init__.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks._harness import add_label_argument, interleave, load, ratio, table, write_json
from benchmarks.service_load import rank_body

RANK_PATH = "/personalizer/v1.0/rank"
DENSE_POLICY = "bench_k50"
HEADERS = {"Content-Type": "application/json"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    parser.add_argument(
        "--slice", type=float, default=0.5, help="seconds per contender per round (default 0.5)"
    )
    add_label_argument(parser, "rank_in_process")
    args = parser.parse_args(argv)

    import httpx

    from service.api.app import create_app
    from service.settings import Settings

    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp(prefix="bench-rank-"))))
    loop.run_until_complete(stack.enter_async_context(app.router.lifespan_context(app)))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://bench")
    dense_spec = {"algorithm": "linucb", "dimension": 32, "arms": [f"arm{i}" for i in range(50)]}
    put = loop.run_until_complete(client.put(f"/policies/{DENSE_POLICY}", json=dense_spec))
    put.raise_for_status()
    dense_body = json.dumps(
        {"policy": DENSE_POLICY, "context": [0.1 * (i % 7) for i in range(32)]}
    ).encode()
    bodies = {"default-loop rank": (RANK_PATH, rank_body().encode(), 201)}
    bodies["dense /recommend"] = ("/recommend", dense_body, 200)
    ranked = loop.run_until_complete(client.post(RANK_PATH, content=rank_body(), headers=HEADERS))
    reward_path = f"/personalizer/v1.0/events/{ranked.json()['eventId']}/reward"
    bodies["default-loop reward, repeated"] = (reward_path, b'{"value": 1.0}', 204)

    def runner(path: str, body: bytes, status: int) -> Callable[[int], None]:
        async def post(n: int) -> None:
            for _ in range(n):
                response = await client.post(path, content=body, headers=HEADERS)
                if response.status_code != status:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text}")

        return lambda n: loop.run_until_complete(post(n))

    before = load()
    try:
        measured = interleave(
            {name: runner(*spec) for name, spec in bodies.items()},
            rounds=args.rounds,
            slice_s=args.slice,
        )
    finally:
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(stack.aclose())
        loop.close()
    after = load()
    dense = measured["dense /recommend"]
    rows = [
        {
            "request": name,
            "ms CPU/request": 1e3 / m.cpu_median,
            "x dense CPU": ratio(dense, m),
        }
        for name, m in measured.items()
    ]
    print(table(rows, ["request", "ms CPU/request", "x dense CPU"]))
    print(f"load {before['loadavg']} -> {after['loadavg']}")
    payload = {
        "rounds": args.rounds,
        "slice_s": args.slice,
        "load_before": before,
        "load_after": after,
        "rows": rows,
        "cpu_rates": {name: list(np.round(m.cpu, 2)) for name, m in measured.items()},
    }
    print(f"wrote {write_json('rank_in_process', payload, args.label)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
