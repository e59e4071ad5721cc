"""``bandit estimate`` over a PostgreSQL log's day partitions on the local engine and on
Ray (docs/offline.md "Estimates over partitions", docs/operations.md "Offline work on a
Ray cluster").

Generates the log of :mod:`benchmarks.ray_offline` (``--decisions`` decisions of a
float-vector policy, uniform logging over ``--arms`` arms, ``--days`` day partitions in a
private PostgreSQL), then runs ``bandit estimate --policy linucb --alpha 0`` on it as a
command of its own, three ways on the same two cores:

* ``local``: the local engine (the partitions' tasks one after the other, in the driver);
* ``ray 1 node``: one Ray task per partition and pass, a one-node cluster of 2 CPUs;
* ``ray 2 nodes``: the same on two nodes of 1 CPU each (this machine, loopback).

and, for comparison, ``whole log``: a process that reads the whole log into memory (what
a driver holding the log would need). Reported per run: the command's wall time (its
``seconds``, the driver's start and Ray's connection excluded), decisions per second per
core, the driver's peak RSS (its ``VmHWM``), and whether the estimates equal the local
engine's. Writes run ``--label`` of ``benchmarks/results/ray_estimate.json``.

    python -m benchmarks.ray_estimate --decisions 100000 --days 8   # docs/operations.md
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import add_label_argument, table, write_json
from benchmarks.ray_offline import POLICY, add_log_arguments, generated_log

WHOLE_LOG = (
    "import sys; from service.cli.log_sources import LogSpec, read_partition; "
    "events, _ = read_partition(LogSpec(sys.argv[1], 'eventlog', sys.argv[2]), 'linucb', {}); "
    "print(len(events))"
)


def peak_mib(pid: int) -> float | None:
    """The peak RSS (MiB) of process ``pid`` so far (``VmHWM``: its own address space
    since its exec, unlike ``ru_maxrss``, which keeps the forked parent's), None once gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kib = [line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")]
    return int(kib[0]) / 1024 if kib else None  # an exited process keeps no address space


def run(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Run ``command``; its peak RSS (MiB, polled every 0.1 s) and stdout. A failure
    raises with its stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=err)
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, peak_mib(proc.pid) or 0.0)
            time.sleep(0.1)
        out.seek(0), err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{command[:4]} failed: {err.read().decode()[-2000:]}")
        return peak, out.read().decode()


def estimate(url: str, out: Path, env: dict[str, str], engine: list[str]) -> dict[str, Any]:
    """``bandit estimate`` on the log with ``engine``'s options; its JSON and driver MiB."""
    command = [sys.executable, "-m", "service.cli", "estimate", "--format", "eventlog"]
    command += ["--data", url, "--log-policy", POLICY, "--policy", "linucb", "--alpha", "0"]
    command += ["--bootstrap", "100", "--json", str(out), *engine]
    mib, _ = run(command, env)
    return {**json.loads(out.read_text()), "driver_mib": mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_log_arguments(parser, decisions=100_000, days=8)
    add_label_argument(parser, "ray_estimate")
    args = parser.parse_args()

    url, generate_seconds = generated_log(args)
    setup = {
        "decisions": args.decisions,
        "days": args.days,
        "arms": args.arms,
        "dimension": args.dimension,
        "generate_seconds": generate_seconds,
    }
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    whole_mib, _ = run([sys.executable, "-c", WHOLE_LOG, url, POLICY], env)
    setup["whole_log_reader_mib"] = whole_mib
    runs: list[dict[str, Any]] = []
    reference: dict[str, Any] | None = None
    work = Path(tempfile.mkdtemp(prefix="ray-estimate-"))

    def record(name: str, cores: int, result: dict[str, Any]) -> None:
        nonlocal reference
        reference = reference or result["estimates"]
        runs.append(
            {
                "engine": name,
                "cores": cores,
                "partitions": result["partitions"],
                "wall_seconds": result["seconds"],
                "decisions_per_second_per_core": args.decisions / result["seconds"] / cores,
                "driver_peak_mib": result["driver_mib"],
                "equal_to_local": result["estimates"] == reference,
            }
        )
        print(f"{name}: {result['seconds']:.1f} s", flush=True)
        write_json("ray_estimate", {**setup, "runs": runs}, args.label)  # kept if a later run fails

    record("local", 1, estimate(url, work / "local.json", env, ["--engine", "local"]))
    from tests.ray_cluster import RayCluster

    for name, nodes in (("ray 1 node", 1), ("ray 2 nodes", 2)):
        cluster = RayCluster(nodes=nodes, cpus=2 // nodes)
        try:
            cluster.start()
            options = ["--engine", "ray", "--ray-address", cluster.address]
            record(name, 2, estimate(url, work / f"{nodes}.json", cluster.env, options))
        finally:
            cluster.destroy()
    columns = ["engine", "cores", "partitions", "wall_seconds", "decisions_per_second_per_core"]
    print(table(runs, [*columns, "driver_peak_mib", "equal_to_local"]))
    print(f"a process holding the whole log: {whole_mib:.0f} MiB")
    print(write_json("ray_estimate", {**setup, "runs": runs}, args.label))


if __name__ == "__main__":
    main()
