"""Packaging: bandit_core needs numpy, mmh3 and scipy only, the service's dependencies are extras, and a
``bandit`` subcommand whose extra is missing says which one to install."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from service.cli import EXTRA_OF_MODULE, main, missing_extra_message

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_base_install_is_numpy_mmh3_and_scipy_and_every_optional_module_has_its_extra() -> None:
    assert PROJECT["dependencies"] == ["numpy>=1.26", "mmh3>=4.0", "scipy>=1.11"]
    extras = PROJECT["optional-dependencies"]
    assert {"server", "offline", "client", "dev"} <= set(extras)
    assert extras["dev"][0] == "bandit-service[server,offline,client,distributed]"
    assert {"tqdm>=4.66", "matplotlib>=3.8"} == set(extras["offline"])
    assert any(req.startswith("httpx") for req in extras["client"])
    assert not any(req.startswith(("fastapi", "redis", "sqlalchemy")) for req in extras["client"])


def test_redis_is_bounded_below_its_next_major() -> None:
    import redis

    (req,) = [r for r in PROJECT["optional-dependencies"]["server"] if r.startswith("redis")]
    upper = int(req.split("<", 1)[1])
    assert upper == int(redis.__version__.split(".")[0]) + 1, (req, redis.__version__)


def test_importing_all_of_bandit_core_loads_no_optional_dependency() -> None:
    probe = (
        "import pkgutil, sys, importlib, bandit_core\n"
        "for m in pkgutil.walk_packages(bandit_core.__path__, 'bandit_core.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(' '.join(sorted({n.split('.')[0] for n in sys.modules})))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    loaded = set(out.stdout.split())
    assert {"bandit_core", "numpy", "mmh3", "scipy"} <= loaded
    assert not loaded & (set(EXTRA_OF_MODULE) | {"service"})


@pytest.mark.parametrize(
    ("argv", "blocked", "extra"),
    [
        (["serve"], "uvicorn", "server"),
        (
            [
                "replay",
                "--format",
                "eventlog",
                "--data",
                "sqlite:///unused.sqlite3",
                "--log-policy",
                "p",
                "--policy",
                "linucb",
            ],
            "sqlalchemy",
            "server",
        ),
        (["replay", "--policy", "linucb", "--rounds", "5"], "tqdm", "offline"),
    ],
)
def test_a_missing_extra_is_named_in_one_line_with_status_2(
    argv: list[str],
    blocked: str,
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in [n for n in sys.modules if n == blocked or n.startswith(blocked + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)  # import blocked: ModuleNotFoundError
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"bandit {argv[0]}: needs the '{extra}' extra (module '{blocked}' is not installed); "
        f"install it with: pip install 'bandit-service[{extra}]'\n"
    )


def test_a_missing_module_that_no_extra_provides_gets_no_hint() -> None:
    """main() re-raises it: a missing module outside the extras is a bug, not a set-up step."""
    assert missing_extra_message("serve", ModuleNotFoundError(name="not_a_dependency")) is None
    assert missing_extra_message("serve", ModuleNotFoundError(name="redis.asyncio")) == (
        "bandit serve: needs the 'server' extra (module 'redis' is not installed); "
        "install it with: pip install 'bandit-service[server]'"
    )


def test_the_server_extra_installs_what_the_commands_asking_a_server_need() -> None:
    """``bandit model`` and ``bandit features`` (service.client: the client extra's
    dependencies) work after the README's install and in the image, which both install the
    server extra."""

    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in requirements}

    extras = PROJECT["optional-dependencies"]
    assert names(extras["client"]) <= names(extras["server"])
    assert 'pip install -e ".[server]"' in (ROOT / "README.md").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text().splitlines()
    installs = [line for line in dockerfile if "pip install" in line]
    # the image's extras are a build argument whose default is the server extra
    assert "ARG EXTRAS=server" in dockerfile
    assert installs and all('".[${EXTRAS}]"' in line for line in installs)
