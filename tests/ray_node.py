"""``ray start`` for the test clusters (``tests.ray_cluster``), waiting up to three
minutes instead of Ray's fixed 30 s for the node's raylet to register with the head: a
test machine under load takes longer, and Ray then gives the node up. A node whose
raylet or GCS server exits while it waits gives up at once (the process exits, and the
cluster starts the node again) instead of waiting out the three minutes for a
registration that cannot come."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ray._private import services
from ray._private.state import GlobalState
from ray.scripts.scripts import main

REGISTER_SECONDS = 180.0
ESSENTIAL = ("raylet", "gcs_server")
"""The node's processes without which it never registers (``ray start`` starts them)."""
_get_node = services.get_node


class EssentialProcessExited(Exception):
    """Not a RuntimeError: Ray's start loop retries those for 30 s; this one ends it."""


def exited_essential() -> str | None:
    """The name of an :data:`ESSENTIAL` process this process started that has exited
    (a zombie: ``ray start`` reaps its children only once it blocks), else None."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        state, parent = text.rpartition(")")[2].split()[:2]
        if parent == me and name in ESSENTIAL and state == "Z":
            return name
    return None


def registered(gcs_address: str, node_id: str) -> bool:
    """Whether the head lists node ``node_id`` (an answer at once, where Ray's
    ``get_node`` blocks up to ``raylet_start_wait_time_s`` for a node not yet there)."""
    state = GlobalState()
    state._initialize_global_state(services._get_gcs_client_options(gcs_address))
    try:
        return any(node["NodeID"] == node_id for node in state.node_table())
    finally:
        state.disconnect()


def patient_get_node(gcs_address: str, node_id: str) -> Any:
    """Ray's ``get_node`` once the node is registered, waiting up to
    :data:`REGISTER_SECONDS`; :class:`EssentialProcessExited` at once when one of the
    node's essential processes has exited while it waits."""
    deadline = time.monotonic() + REGISTER_SECONDS
    while not registered(gcs_address, node_id):
        if (name := exited_essential()) is not None:
            raise EssentialProcessExited(f"the node's {name} exited before it registered")
        if time.monotonic() > deadline:
            raise RuntimeError(f"node {node_id} not registered after {REGISTER_SECONDS} s")
        time.sleep(0.5)
    return _get_node(gcs_address, node_id)


if __name__ == "__main__":
    services.get_node = patient_get_node
    main()
