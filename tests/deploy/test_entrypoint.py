"""The image's entrypoint without a Docker engine: with no ``BANDIT_API_KEYS`` it
generates one key into the data volume on the first start and keeps using it, so a
``docker compose up`` with nothing set protects the api published on every interface."""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path
from types import ModuleType

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "docker" / "entrypoint.py"


@pytest.fixture(scope="module")
def entrypoint() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bandit_image_entrypoint", ENTRYPOINT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_keys_generates_one_into_the_data_dir_once(
    entrypoint: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"BANDIT_DATA_DIR": str(tmp_path / "data"), "BANDIT_API_KEYS": ""}
    path = entrypoint.ensure_api_keys(env)
    assert path == tmp_path / "data" / "api-key"
    key = path.read_text().strip()
    assert len(key) >= 40 and env["BANDIT_API_KEYS"] == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert str(path) in capsys.readouterr().err
    # the next start (or a second replica on the same volume) uses the same key
    again = {"BANDIT_DATA_DIR": str(tmp_path / "data")}
    assert entrypoint.ensure_api_keys(again) == path
    assert again["BANDIT_API_KEYS"] == key
    assert [p.name for p in path.parent.iterdir()] == ["api-key"]  # no draft left behind


def test_keys_that_are_set_are_used_as_they_are(entrypoint: ModuleType, tmp_path: Path) -> None:
    env = {"BANDIT_DATA_DIR": str(tmp_path), "BANDIT_API_KEYS": "mine,rotated"}
    assert entrypoint.ensure_api_keys(env) is None
    assert env["BANDIT_API_KEYS"] == "mine,rotated"
    assert not (tmp_path / "api-key").exists()


def test_an_existing_key_file_is_never_overwritten(entrypoint: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "api-key").write_text("chosen-by-the-operator\n")
    env = {"BANDIT_DATA_DIR": str(tmp_path)}
    entrypoint.ensure_api_keys(env)
    assert env["BANDIT_API_KEYS"] == "chosen-by-the-operator"
    (tmp_path / "api-key").write_text("\n")
    with pytest.raises(SystemExit, match="api-key is empty"):
        entrypoint.ensure_api_keys({"BANDIT_DATA_DIR": str(tmp_path)})


def test_the_server_the_entrypoint_execs_gets_the_generated_key(
    entrypoint: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``main`` puts the key into the environment the exec'd server inherits."""
    monkeypatch.setenv("BANDIT_API_KEYS", "")  # set, so the key main writes is undone
    monkeypatch.setenv("BANDIT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("BANDIT_RUN_MIGRATIONS", "false")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    executed: list[tuple[str, list[str], str]] = []

    def fake_execvp(file: str, args: list[str]) -> None:
        executed.append((file, args, entrypoint.os.environ["BANDIT_API_KEYS"]))

    monkeypatch.setattr(entrypoint.os, "execvp", fake_execvp)
    assert entrypoint.main([sys.executable, "-c", "pass"]) == 0
    ((file, args, key),) = executed
    assert (file, args) == (sys.executable, [sys.executable, "-c", "pass"])
    assert key == (tmp_path / "api-key").read_text().strip()
