"""The ``--engine`` and ``--ray-address`` options of the offline commands: where their
independent runs go (:mod:`service.usecases.offline_engine`; docs/operations.md
"Offline work on a Ray cluster"). Unset, they take ``BANDIT_OFFLINE_ENGINE`` and
``BANDIT_RAY_ADDRESS`` from the service's settings."""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from bandit_core.errors import ConfigError
from service.usecases.offline_engine import ENGINES, OfflineEngine


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--engine`` and ``--ray-address`` to ``parser``."""
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="where the runs go: 'local' (this machine) or 'ray' (the Ray cluster at "
        "--ray-address: a learning replay is an actor reading the log's partitions in time "
        "order, additive work a task per partition; needs the distributed extra) (default: "
        "BANDIT_OFFLINE_ENGINE, else local)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="HOST:PORT",
        help="the Ray cluster's head with --engine ray (default: BANDIT_RAY_ADDRESS, else "
        "RAY_ADDRESS, else the cluster started on this machine)",
    )


def engine_of(args: argparse.Namespace) -> OfflineEngine:
    """The engine the options (over the settings) ask for; a missing Ray is a
    :class:`ConfigError` naming the extra to install."""
    from service.settings import Settings

    overrides = {"offline_engine": args.engine, "ray_address": args.ray_address}
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        error = exc.errors()[0]
        where = (
            "--engine" if error["loc"] == ("offline_engine",) else ".".join(map(str, error["loc"]))
        )
        raise ConfigError(f"{where}: {error['msg'].removeprefix('Value error, ')}") from None
    return OfflineEngine.from_settings(settings)
