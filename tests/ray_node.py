"""``ray start`` for the test clusters (``tests.ray_cluster``), waiting up to three
minutes instead of Ray's fixed 30 s for the node's raylet to register with the head: a
test machine under load takes longer, and Ray then gives the node up."""

from __future__ import annotations

import time
from typing import Any

from ray._private import services
from ray.scripts.scripts import main

REGISTER_SECONDS = 180.0
_get_node = services.get_node


def patient_get_node(*args: Any, **kwargs: Any) -> Any:
    """Ray's ``get_node``, retried until the node is registered or the deadline."""
    deadline = time.monotonic() + REGISTER_SECONDS
    while True:
        try:
            return _get_node(*args, **kwargs)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


if __name__ == "__main__":
    services.get_node = patient_get_node
    main()
