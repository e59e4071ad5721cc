"""docker-compose.ray.yml, the Ray cluster beside the service: with docker-compose.yml,
Debian's docker-compose accepts it; the api is built with the distributed extra and
sends its offline work to the head, which the worker joins; nothing of Ray is published."""

from __future__ import annotations

import os
import subprocess

import yaml

from tests.deploy.test_compose import COMPOSE, ROOT, SECRETS
from tests.tools import system_tool

RAY_COMPOSE = ROOT / "docker-compose.ray.yml"


def test_the_api_sends_offline_work_to_the_ray_head_the_worker_joins() -> None:
    env = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("COMPOSE_")}
    result = subprocess.run(
        [
            system_tool("docker-compose"),
            "--project-directory",
            str(ROOT),
            "-f",
            str(COMPOSE),
            "-f",
            str(RAY_COMPOSE),
            "config",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    api, head, worker = services["api"], services["ray-head"], services["ray-worker"]
    assert "distributed" in api["build"]["args"]["EXTRAS"].split(",")
    assert api["environment"]["BANDIT_OFFLINE_ENGINE"] == "ray"
    host, _, port = api["environment"]["BANDIT_RAY_ADDRESS"].partition(":")
    assert host == "ray-head" and ["--head", "--block", "--port", port] == head["entrypoint"][2:6]
    joined = worker["entrypoint"]
    assert joined[joined.index("--address") + 1] == f"ray-head:{port}"
    assert {head["image"], worker["image"]} == {api["image"]}
    assert "ports" not in head and "ports" not in worker
