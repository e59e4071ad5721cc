"""The migration guide's start command (docs/personalizer.md, "Starting the service"),
run as written but on a free port: it listens beyond 127.0.0.1 (it is called at
127.0.0.2, which a server bound to 127.0.0.1 refuses; the tests send traffic to loopback
addresses only) and ranks and rewards with the key the command sets; without the key a
reward is 401."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.servers import ROOT, free_port, wait_until_serving

GUIDE = ROOT / "docs" / "personalizer.md"


def start_command() -> tuple[dict[str, str], list[str]]:
    """The guide's ``$ NAME=value ... bandit serve ...`` line: its variables and argv."""
    (line,) = re.findall(
        r"^\$ ((?:BANDIT_\w+=\S+ )+bandit serve .*)$", GUIDE.read_text(), re.MULTILINE
    )
    words = shlex.split(line)
    env = dict(w.split("=", 1) for w in words if re.match(r"BANDIT_\w+=", w))
    return env, words[len(env) :]


OTHER_ADDRESS = "127.0.0.2"  # reached only by a server bound beyond 127.0.0.1


@pytest.mark.slow
def test_the_guides_start_command_serves_other_hosts_with_its_key(tmp_path: Path) -> None:
    env, argv = start_command()
    assert argv[:4] == ["bandit", "serve", "--host", "0.0.0.0"] and "BANDIT_API_KEYS" in env
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    bandit = shutil.which("bandit")
    assert bandit is not None
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BANDIT_")}
    clean.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = subprocess.Popen(
        [bandit, *argv[1:]],
        cwd=tmp_path,
        env={**clean, **env, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.DEVNULL,
    )
    base = f"http://{OTHER_ADDRESS}:{port}"
    key = env["BANDIT_API_KEYS"].split(",")[0]
    try:
        wait_until_serving(server, f"{base}/healthz")
        with httpx.Client(base_url=f"{base}/personalizer/v1.0", timeout=10) as http:
            body = {
                "contextFeatures": [{"user": {"tier": "gold"}}],
                "actions": [
                    {"id": "news", "features": [{"item": {"topic": "news"}}]},
                    {"id": "sports", "features": [{"item": {"topic": "sports"}}]},
                ],
            }
            headers = {"Ocp-Apim-Subscription-Key": key}
            ranked = http.post("/rank", json=body, headers=headers)
            assert ranked.status_code == 201, ranked.text
            reward = f"/events/{ranked.json()['eventId']}/reward"
            assert (
                http.post(reward, json={"value": 1.0}).status_code == 401
            )  # keys set: no key, no reward
            assert http.post(reward, json={"value": 1.0}, headers=headers).status_code == 204
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (tmp_path / "bandit-data" / "events.sqlite3").exists()
