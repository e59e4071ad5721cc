"""``BANDIT_CORS_ORIGINS`` holds origins as browsers send them: a trailing slash (and an
upper-case host) is normalized, so the origin a page sends matches; a value that could
never match (a path, no scheme) stops ``bandit serve`` with exit 2 naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from service.settings import Settings
from tests.service.conftest import POLICY, running

ROOT = Path(__file__).resolve().parents[2]
SHOP = "https://shop.example"
PREFLIGHT = {"Origin": SHOP, "Access-Control-Request-Method": "POST"}


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["embedded"])
async def test_an_origin_with_a_trailing_slash_matches_what_the_browser_sends(
    make_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BANDIT_CORS_ORIGINS", "https://Shop.example/, http://localhost:3000/ ,*")
    assert Settings().cors_origins == [SHOP, "http://localhost:3000", "*"]
    monkeypatch.delenv("BANDIT_CORS_ORIGINS")
    async with running(make_settings(cors_origins=[f"{SHOP}/"])) as (_app, http, _):
        assert (await http.put("/policies/p", json=POLICY)).status_code == 200
        preflight = await http.options("/recommend", headers=PREFLIGHT)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == SHOP
        served = await http.post(
            "/recommend", json={"policy": "p", "context": [0.1, 0.2, 0.3]}, headers={"Origin": SHOP}
        )
        assert served.status_code == 200 and served.headers["access-control-allow-origin"] == SHOP


@pytest.mark.parametrize(
    "value",
    ["shop.example", "https://shop.example/app", "ftp://shop.example", "https://a@b.example"],
)
def test_an_origin_that_never_matches_stops_the_start_naming_it(value: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BANDIT_")}
    env.update(PYTHONPATH=str(ROOT), BANDIT_CORS_ORIGINS=f"{SHOP},{value}")
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", "1"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("invalid BANDIT_CORS_ORIGINS:") and done.stderr.count("\n") <= 1
    assert f"{value!r} is not an origin" in done.stderr
    assert not (tmp_path / "bandit-data").exists()  # refused before anything started
