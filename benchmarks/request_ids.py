"""What the request ids cost ``POST /recommend``: the app with and without its
``RequestIds`` middleware (service/observability/request_context.py), interleaved in one process.

Both apps are the service on the embedded default (one policy, K candidates, d
features), driven through their ASGI interface directly (no socket, no HTTP parser), so
the difference is the middleware's share of a request's CPU: reading the header (or
drawing an id), the context variable, the response header. The same pair around an
ASGI app that only answers 200 gives the middleware's own cost in microseconds. Without
``--access-log`` no log line is written per request, in either log format.

    python -m benchmarks.request_ids [--rounds 15] [--label latest] [--control]

``--control`` keeps the middleware in both apps: the ratio then measures the setup's own
bias (two apps in one process, created one after the other), against which a
difference between them must stand out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import _harness as h

BENCHMARK = "request_ids"


async def answer_200(_scope: Any, receive: Any, send: Any) -> None:
    """The least an ASGI app can do: read the body, answer 200 with no body."""
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def recommend_runner(app: Any, loop: asyncio.AbstractEventLoop, body: bytes) -> h.Runner:
    """``run(n)``: ``n`` sequential ``POST /recommend`` of ``body`` to the ASGI ``app``."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/recommend",
        "raw_path": b"/recommend",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"bench")],
        "client": ("127.0.0.1", 50000),
        "server": ("bench", 80),
    }

    async def one() -> None:
        sent = False
        status = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]

        await app(dict(scope), receive, send)
        assert status == 200, status

    async def many(n: int) -> None:
        for _ in range(n):
            await one()

    return lambda n: loop.run_until_complete(many(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--arms", type=int, default=10, help="candidates per decision (default 10)")
    parser.add_argument("--dim", type=int, default=8, help="features per candidate (default 8)")
    parser.add_argument(
        "--control", action="store_true", help="keep the middleware in both apps (A/A)"
    )
    h.add_label_argument(parser, BENCHMARK)
    args = parser.parse_args(argv)

    from service.api.app import create_app
    from service.observability.request_context import RequestIds
    from service.settings import Settings

    spec = {"algorithm": "linucb", "dimension": args.dim, "epsilon": 0.0}
    arms = [{"id": f"arm{i}"} for i in range(args.arms)]
    context = np.random.default_rng(0).normal(size=args.dim).round(3).tolist()
    body = json.dumps({"policy": "p", "context": context, "arms": arms}).encode()
    loop = asyncio.new_event_loop()
    apps = {}
    with tempfile.TemporaryDirectory() as tmp:
        stack = AsyncExitStack()
        for name in ("with_request_ids", "without"):
            policies = Path(tmp) / f"{name}.json"
            policies.write_text(json.dumps({"p": spec}))
            settings = Settings(
                data_dir=Path(tmp) / name,
                policies_file=policies,
                demo_policy=False,
                personalizer_loop=False,
                snapshot_interval_seconds=0,
                log_upkeep_interval_seconds=0,
            )
            app = create_app(settings)
            if name == "without" and not args.control:
                app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestIds]
            loop.run_until_complete(stack.enter_async_context(app.router.lifespan_context(app)))
            apps[name] = app
        try:
            runners = {name: recommend_runner(app, loop, body) for name, app in apps.items()}
            before = h.load()
            results = h.interleave(runners, rounds=args.rounds, slice_s=0.5)
            alone = h.interleave(
                {
                    "middleware": recommend_runner(RequestIds(answer_200), loop, body),
                    "bare": recommend_runner(answer_200, loop, body),
                },
                rounds=args.rounds,
                slice_s=0.2,
            )
            after = h.load()
        finally:
            loop.run_until_complete(stack.aclose())
            loop.close()
    with_ids, without = results["with_request_ids"], results["without"]
    payload = {
        "arms": args.arms,
        "dim": args.dim,
        "rounds": args.rounds,
        "control": args.control,
        "load_before": before,
        "load_after": after,
        "us_per_request_cpu": {name: round(1e6 / m.cpu_median, 1) for name, m in results.items()},
        "throughput_ratio_cpu": round(h.ratio(with_ids, without, "cpu"), 4),
        "throughput_ratio_wall": round(h.ratio(with_ids, without, "wall"), 4),
        "middleware_alone_us_cpu": round(
            1e6 / alone["middleware"].cpu_median - 1e6 / alone["bare"].cpu_median, 2
        ),
    }
    path = h.write_json(BENCHMARK, payload, args.label)
    print(json.dumps(payload, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
