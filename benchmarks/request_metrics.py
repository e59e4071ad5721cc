"""What the per-request metrics cost on the /recommend and /reward hot paths: the
requests-in-flight gauge (inc and dec), the 404 check and the state-store latency
histogram (one ``read`` and one ``transact`` observation per decision).

* the instrumentation alone: microseconds per request of exactly the calls added, in one
  process and in multi-process mode (``PROMETHEUS_MULTIPROC_DIR``: values in mmap files,
  as ``bandit serve --workers N`` runs);
* before/after: CPU microseconds per ``/recommend`` (embedded default, LinUCB, K = 10,
  d = 8, through httpx's ASGI transport, no network) of the code at ``--before`` and at
  ``--after``, each round in a fresh process, the two alternating, median over rounds.

    git archive <commit before> | tar -x -C /tmp/before
    python -m benchmarks.request_metrics --before /tmp/before [--after .] [--rounds 6]

Results: ``benchmarks/results/request_metrics.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import _harness as h
from benchmarks._harness import ROOT

INSTRUMENTATION = """
import time
from service.observability import metrics
n = 200_000
start = time.process_time()
for _ in range(n):
    metrics.REQUESTS_IN_FLIGHT.inc()
    metrics.STORE_LATENCY.labels("read").observe(0.0003)
    metrics.STORE_LATENCY.labels("transact").observe(0.0004)
    metrics.REQUESTS_IN_FLIGHT.dec()
    if 200 == 404:
        pass
print((time.process_time() - start) / n * 1e6)
"""

RECOMMEND = """
import asyncio, sys, tempfile, time
from pathlib import Path
import httpx
from service.api.app import create_app
from service.settings import Settings

async def main(n):
    with tempfile.TemporaryDirectory() as d:
        settings = Settings(data_dir=Path(d), demo_policy=False, personalizer_loop=False,
                            snapshot_interval_seconds=0, api_keys=["k"])
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5))
            async with httpx.AsyncClient(transport=transport, base_url="http://a",
                                         headers={"Authorization": "Bearer k"}) as http:
                spec = {"algorithm": "linucb", "dimension": 8,
                        "arms": [f"a{i}" for i in range(10)]}
                assert (await http.put("/policies/p", json=spec)).status_code == 200
                body = {"policy": "p", "context": [0.1] * 8}
                for _ in range(200):  # warm up
                    await http.post("/recommend", json=body)
                start = time.process_time()
                for _ in range(n):
                    r = await http.post("/recommend", json=body)
                    assert r.status_code == 200
                print((time.process_time() - start) / n * 1e6)

asyncio.run(main(int(sys.argv[1])))
"""


def _run(code: str, path: Path, *args: str, multiproc: str | None = None) -> float:
    env = {**os.environ, "PYTHONPATH": str(path.resolve()), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if multiproc is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = multiproc
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the code before")
    parser.add_argument("--after", type=Path, default=ROOT, help="code after")
    parser.add_argument("--rounds", type=int, default=6, help="before/after rounds (default 6)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    h.add_label_argument(parser, "request_metrics")
    args = parser.parse_args(argv)

    single = _run(INSTRUMENTATION, args.after)
    with tempfile.TemporaryDirectory() as directory:
        multi = _run(INSTRUMENTATION, args.after, multiproc=directory)
    print(f"instrumentation per request: {single:.2f} us (one process), {multi:.2f} us (files)")

    before: list[float] = []
    after: list[float] = []
    for i in range(args.rounds):
        pair = [(before, args.before), (after, args.after)]
        for out, path in pair if i % 2 == 0 else reversed(pair):
            out.append(_run(RECOMMEND, path, str(args.requests)))
        print(f"round {i + 1}: before {before[-1]:.0f} us, after {after[-1]:.0f} us CPU/request")
    ratios = [a / b for a, b in zip(after, before, strict=True)]
    result = {
        "instrumentation_us_per_request": {"one_process": single, "multiprocess": multi},
        "recommend_cpu_us_before": before,
        "recommend_cpu_us_after": after,
        "median_before_us": statistics.median(before),
        "median_after_us": statistics.median(after),
        "median_ratio_after_over_before": statistics.median(ratios),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    h.write_json("request_metrics", result, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
