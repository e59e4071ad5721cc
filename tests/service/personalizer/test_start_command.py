"""The migration guide's start command (docs/personalizer.md, "Starting the service"),
run as written but on a free port: another host reaches it (it is called through this
machine's network address, not the loopback one) and ranks and rewards with the key the
command sets; without the key a reward from that host is 401."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

import httpx

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


def network_address() -> str:
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route is looked up
        address: str = s.getsockname()[0]
    assert not address.startswith("127."), "the machine has no network address to test with"
    return address


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
    base = f"http://{network_address()}:{port}"
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
            assert http.post(reward, json={"value": 1.0}).status_code == 401  # not loopback
            assert http.post(reward, json={"value": 1.0}, headers=headers).status_code == 204
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert (tmp_path / "bandit-data" / "events.sqlite3").exists()
