"""``bandit model`` and ``bandit features`` against a real server: the key they send is
``--api-key``, else ``$BANDIT_API_KEY``, else the first of ``$BANDIT_API_KEYS`` (what the
server reads), else the image's generated ``$BANDIT_DATA_DIR/api-key``; a model import
into a loop that does not exist says how to create it (CLI and both APIs)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.cli.features import api_key
from tests.servers import ROOT, AppProcess

# One worker runs every test of this module, so its module-scoped servers start once.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(__name__)]

ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.py"
KEYS = "first-key,second-key"
# the guide's "Creating a loop" spec
LOOP_SPEC = {
    "algorithm": "hybrid_linucb",
    "params": {"alpha": 0.0, "context_dim": 0},
    "features": {"bits": 8, "interactions": [["*", "*"]]},
    "reward_range": [-1, 1],
    "epsilon": 0.2,
}


def _image_key(data_dir: Path) -> str:
    """The key the image's entrypoint generates into ``data_dir`` (its own code)."""
    spec = importlib.util.spec_from_file_location("bandit_image_entrypoint", ENTRYPOINT)
    assert spec is not None and spec.loader is not None
    entrypoint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entrypoint)
    env = {"BANDIT_DATA_DIR": str(data_dir)}
    assert entrypoint.ensure_api_keys(env) == data_dir / "api-key"
    return env["BANDIT_API_KEYS"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A server whose keys are KEYS and the image's generated key; yields its URL and
    the image's data directory."""
    tmp = tmp_path_factory.mktemp("cli-server")
    image_data = tmp / "image-data"
    env = {
        "BANDIT_API_KEYS": f"{KEYS},{_image_key(image_data)}",
        "BANDIT_DATA_DIR": str(tmp / "data"),
    }
    app = AppProcess(env).start()
    try:
        yield app.url, image_data
    finally:
        app.stop()


def bandit(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``bandit ARGV`` with no BANDIT_* variable but ``env``'s."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BANDIT_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *argv],
        env={**clean, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "flag", "status"),
    [
        ({"BANDIT_API_KEYS": KEYS}, [], 0),  # the server's variable: its first key
        ({"BANDIT_API_KEYS": " second-key , other"}, [], 0),
        ({"BANDIT_API_KEY": "second-key", "BANDIT_API_KEYS": "wrong"}, [], 0),
        ({"BANDIT_API_KEYS": "wrong"}, ["--api-key", "first-key"], 0),
        ({"BANDIT_DATA_DIR": "IMAGE"}, [], 0),  # the image's generated key
        ({}, [], 1),  # no key: 401
        ({"BANDIT_API_KEYS": "wrong,first-key"}, [], 1),  # only the first is sent
    ],
)
def test_the_model_command_sends_the_key_operators_set(
    server: tuple[str, Path], env: dict[str, str], flag: list[str], status: int
) -> None:
    url, image_data = server
    env = {k: str(image_data) if v == "IMAGE" else v for k, v in env.items()}
    done = bandit("model", "properties", "--policy", "personalizer", "--url", url, *flag, env=env)
    assert done.returncode == status, done.stderr
    if status:
        assert done.stderr.startswith("bandit model properties: HTTP 401")
    else:
        assert done.stdout.startswith("created ")


def test_the_features_command_sends_the_key_of_bandit_api_keys(server: tuple[str, Path]) -> None:
    url, _ = server
    argv = ("features", "--policy", "demo", "--url", url, "--top", "2")
    done = bandit(*argv, env={"BANDIT_API_KEYS": KEYS})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("policy demo (linucb)")
    refused = bandit(*argv)
    assert refused.returncode == 1 and refused.stderr.startswith("bandit features: HTTP 401")


def test_api_key_order(tmp_path: Path) -> None:
    (tmp_path / "api-key").write_text("from-file\n")
    data = {"BANDIT_DATA_DIR": str(tmp_path)}
    assert api_key("flag", {"BANDIT_API_KEY": "one", **data}) == "flag"
    assert api_key(None, {"BANDIT_API_KEY": "one", "BANDIT_API_KEYS": "two", **data}) == "one"
    assert api_key(None, {"BANDIT_API_KEY": "", "BANDIT_API_KEYS": ", two,three", **data}) == "two"
    assert api_key(None, {"BANDIT_API_KEYS": " , ", **data}) == "from-file"
    assert api_key(None, {"BANDIT_DATA_DIR": str(tmp_path / "none")}) is None
    assert api_key(None, {}) is None


def test_a_model_import_into_a_missing_loop_says_how_to_create_it(
    server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = server
    model = tmp_path / "loop.model"
    env = {"BANDIT_API_KEYS": KEYS}
    export = ("model", "export", "--policy", "personalizer", "--url", url, "--file", str(model))
    assert bandit(*export, env=env).returncode == 0
    create = "create it first (PUT /policies/other-loop with a policy spec"
    into_missing = ("model", "import", "--policy", "other-loop", "--url", url, "--file", str(model))
    refused = bandit(*into_missing, env=env)
    assert refused.returncode == 2
    assert refused.stderr.startswith("bandit model import: HTTP 404: policy 'other-loop' does not")
    assert create in refused.stderr and refused.stderr.count("\n") == 1
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer first-key"}) as http:
        answer = http.put(
            "/loops/other-loop/personalizer/v1.0/model",
            content=model.read_bytes(),
            headers={"Ocp-Apim-Subscription-Key": "first-key"},
        )
        assert answer.status_code == 404
        error = answer.json()["error"]
        assert error["code"] == "ResourceNotFound" and create in error["message"]
        native = http.put("/policies/other-loop/model", content=model.read_bytes())
        assert native.status_code == 404 and create in native.json()["detail"]
        assert http.put("/policies/other-loop", json=LOOP_SPEC).status_code == 200
    imported = bandit(*into_missing, env=env)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout == f"imported {model} into other-loop (hybrid_linucb)\n"
