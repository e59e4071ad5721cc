"""Cost of the state format's CRC-32 on a part load.

A LinUCB policy at (K, d) = (50, 32) learns from 500 decisions; its 50 arm parts (what a
service process loads from Redis for a 50-candidate request on a cold cache) are then
loaded with ``import_parts`` as written (format version 2: the checksum is verified)
and as the same bytes in version 1 (no checksum field, nothing to verify), interleaved
round by round (:func:`benchmarks._harness.interleave`). The ratio of the two is the
checksum's share of a part load; ``zlib.crc32`` alone over the same bytes is timed too.

    python -m benchmarks.state_load [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import zlib

import numpy as np

import bandit_core
from bandit_core.state import MAGIC_V1
from benchmarks._harness import interleave, load, ratio


def parts_50x32() -> dict[str, bytes]:
    """The 50 arm parts of a LinUCB policy at d = 32 after 500 decisions."""
    K, d = 50, 32
    policy = bandit_core.make_policy("linucb", d=d, seed=0)
    rng = np.random.default_rng(0)
    ids = [f"arm{i}" for i in range(K)]
    for _ in range(500):
        X = rng.random((K, d))
        dec = policy.select(ids, X)
        policy.update(dec.arm_id, X[ids.index(dec.arm_id)], float(rng.random()))
    return policy.export_parts(policy.part_names())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds (default 9)")
    args = parser.parse_args(argv)
    v2 = parts_50x32()
    v1 = {name: MAGIC_V1 + blob[8:] for name, blob in v2.items()}  # the same part, no CRC
    target = bandit_core.make_policy("linucb", d=32, seed=0)

    def loader(parts: dict[str, bytes]):
        def run(n: int) -> None:
            for _ in range(n):
                target.import_parts(parts)

        return run

    def crc_only(n: int) -> None:
        for _ in range(n):
            for blob in v2.values():
                zlib.crc32(memoryview(blob)[8:])

    before = load()
    rates = interleave(
        {"v2 (CRC)": loader(v2), "v1 (no CRC)": loader(v1), "crc32 only": crc_only},
        rounds=args.rounds,
    )
    size = sum(map(len, v2.values()))
    print(
        f"50 LinUCB arm parts at d = 32: {size:,} bytes; load {before['loadavg']} at {before['utc']}"
    )
    for name, m in rates.items():
        us = 1e6 / statistics.median(m.cpu)
        print(f"  {name:12s} {us:9.1f} us CPU per 50-part load (median of {args.rounds} rounds)")
    share = 1.0 - ratio(rates["v2 (CRC)"], rates["v1 (no CRC)"])
    print(f"  v2 / v1 load rate: {1.0 - share:.3f} (checksum share of a load: {share:.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
