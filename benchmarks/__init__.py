"""Benchmarks of the engine, the offline replay and the service.

Run each script as a module from the repository root, e.g.
``python -m benchmarks.engine``; results go to ``benchmarks/results/*.json`` and the
write-up with every command is ``docs/performance.md``.

BLAS is pinned to one thread here, before any script imports numpy: on a small shared
machine extra BLAS threads only contend with the other processes, and one thread makes
a process's CPU time the time of the work.
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
