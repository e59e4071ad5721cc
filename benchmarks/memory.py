"""State size per arm and per policy, in bytes.

For every registered algorithm at the given d: one arm part serialized
(``export_parts``, what a store keeps per arm) and in process (ndarray buffers plus the
Python objects holding them), the shared part, and a whole policy's ``to_bytes``.
LNUCB-TA is measured with an empty kNN memory and with a full ``knn_window``.

Then a 10,000-arm LinUCB policy at d = 32: its in-process footprint (tracemalloc), its
serialized size, the transient memory and time of one ``select`` over all 10,000 arms,
and -- unless ``--no-redis`` -- what Redis reports (``MEMORY USAGE`` per key, and the
``used_memory`` delta) after writing every arm part as one string key into a scratch
database (``--redis-db``, default 13), which is emptied of those keys afterwards.

    python -m benchmarks.memory
    python -m benchmarks.memory --d 32 --arms 10000 --no-redis
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._harness import add_label_argument


def in_process_bytes(state: Any) -> int:
    """ndarray buffers plus the dataclass object, its ``__dict__`` and array headers."""
    total = sys.getsizeof(state) + sys.getsizeof(getattr(state, "__dict__", {}))
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        total += (
            value.nbytes + sys.getsizeof(np.empty(0))
            if isinstance(value, np.ndarray)
            else sys.getsizeof(value)
        )
    return total


def fill_memory(policy: Any, arm: str, d: int, points: int, rng: np.random.Generator) -> None:
    """Fill ``arm``'s kNN memory (LNUCB-TA) with ``points`` random points, via updates."""
    for x in rng.normal(size=(points, d)) / np.sqrt(d):
        policy.update(arm, x, float(rng.random() < 0.3))


def per_algorithm(d: int) -> list[dict[str, Any]]:
    import bandit_core
    from bandit_core.errors import BanditError
    from bandit_core.registry import POLICIES

    rows = []
    rng = np.random.default_rng(0)
    for name in POLICIES:
        try:
            policy = bandit_core.make_policy(name, d=d, seed=0)
            policy.select(["a", "b"], rng.normal(size=(2, d)))
        except (BanditError, TypeError) as exc:  # needs inputs this generic workload cannot give
            rows.append({"algorithm": name, "skipped": f"{type(exc).__name__}: {exc}"})
            continue
        variants = [("prior", 0)]
        window = getattr(policy.config, "knn_window", None)
        if window:
            variants.append((f"knn memory full ({window} points)", window))
        for label, points in variants:
            if points:
                fill_memory(policy, "a", d, points, rng)
            arm = policy.export_parts(["arm:a"]).get("arm:a", b"")  # none in a shared model
            shared = policy.export_parts(["shared"]).get("shared", b"")
            rows.append(
                {
                    "algorithm": name,
                    "state": label,
                    "d": d,
                    "arm part bytes (serialized)": len(arm),
                    "arm bytes (in process)": in_process_bytes(policy.arm_state("a")) if arm else 0,
                    "shared part bytes": len(shared),
                    "2-arm policy to_bytes": len(policy.to_bytes()),
                }
            )
    return rows


def big_policy(d: int, arms: int, redis_url: str | None, redis_db: int) -> dict[str, Any]:
    import bandit_core

    ids = [f"arm{i}" for i in range(arms)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    policy = bandit_core.make_policy("linucb", d=d, seed=0)
    for a in ids:
        policy.add_arm(a)
    resident = tracemalloc.get_traced_memory()[0] - base
    X = np.random.default_rng(0).normal(size=(arms, d)) / np.sqrt(d)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    dec = policy.select(ids, X)
    select_s = time.perf_counter() - t0
    select_peak = tracemalloc.get_traced_memory()[1] - before
    policy.update(dec.arm_id, X[ids.index(dec.arm_id)], 1.0)
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    policy.select(ids, X)
    select2_s = time.perf_counter() - t0
    select2_peak = tracemalloc.get_traced_memory()[1] - before
    retained = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    parts = policy.export_parts(policy.part_names())
    out: dict[str, Any] = {
        "algorithm": "linucb",
        "arms": arms,
        "d": d,
        "in-process bytes after add_arm (tracemalloc)": resident,
        "in-process bytes after two selects (tracemalloc)": retained,
        "in-process bytes per arm": resident / arms,
        "serialized arm parts, total bytes": sum(map(len, parts.values())),
        "whole policy to_bytes": len(policy.to_bytes()),
        "first select over all arms: s": select_s,
        "first select: transient peak bytes": select_peak,
        "second select (after an update): s": select2_s,
        "second select: transient peak bytes": select2_peak,
    }
    if redis_url is not None:
        out.update(redis_usage(parts, redis_url, redis_db))
    return out


def redis_usage(parts: dict[str, bytes], url: str, db: int) -> dict[str, Any]:
    import redis

    r = redis.Redis.from_url(url, db=db)
    prefix = "perfbench:memory:"
    keys = [prefix + name for name in parts]
    r.delete(*keys)
    used0 = int(r.info("memory")["used_memory"])
    pipe = r.pipeline(transaction=False)
    for key, blob in zip(keys, parts.values()):
        pipe.set(key, blob)
    pipe.execute()
    used1 = int(r.info("memory")["used_memory"])
    sample = keys[:: max(1, len(keys) // 100)]
    pipe = r.pipeline(transaction=False)
    for key in sample:
        pipe.memory_usage(key, samples=0)
    usage = pipe.execute()
    for i in range(0, len(keys), 1000):
        r.delete(*keys[i : i + 1000])
    return {
        "redis: used_memory delta bytes": used1 - used0,
        "redis: MEMORY USAGE per arm key (mean of sample)": float(np.mean(usage)),
        "redis: keys written": len(keys),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=32)
    parser.add_argument("--arms", type=int, default=10_000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379")
    parser.add_argument("--redis-db", type=int, default=13, help="scratch database (default 13)")
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument(
        "--engine-path", default="", help="import bandit_core from this checkout instead"
    )
    add_label_argument(parser, "memory")
    args = parser.parse_args(argv)
    if args.engine_path:
        sys.path.insert(0, str(Path(args.engine_path).resolve()))
    from benchmarks import _harness as h

    rows = per_algorithm(args.d)
    print(
        h.table(
            rows,
            [
                "algorithm",
                "state",
                "d",
                "arm part bytes (serialized)",
                "arm bytes (in process)",
                "shared part bytes",
                "2-arm policy to_bytes",
                "skipped",
            ],
        )
    )
    big = big_policy(args.d, args.arms, None if args.no_redis else args.redis_url, args.redis_db)
    print()
    for key, value in big.items():
        print(
            f"{key:55s} {value:,.3f}"
            if isinstance(value, float)
            else f"{key:55s} {value:,}"
            if isinstance(value, int)
            else f"{key:55s} {value}"
        )
    path = h.write_json(
        "memory", {"per_arm": rows, "big_policy": big, "load": h.load()}, args.label
    )
    print(f"\nwrote {path.relative_to(h.ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
