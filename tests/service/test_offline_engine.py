"""The offline engine setting without a cluster: ``ray`` without Ray installed is refused
naming the extra (the settings, and ``--engine ray`` of a command with exit status 2);
the local engine maps in order and reports each finished task; a lost cluster is named
only when its head does not answer."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from service.cli import main
from service.settings import Settings
from service.usecases import offline_engine
from service.usecases.offline_engine import RAY_EXTRA, OfflineEngine


@pytest.fixture
def without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offline_engine, "ray_installed", lambda: False)


@pytest.mark.usefixtures("without_ray")
def test_ray_without_ray_installed_is_a_settings_error_naming_the_extra() -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(offline_engine="ray")
    assert "BANDIT_OFFLINE_ENGINE=ray" in str(raised.value) and RAY_EXTRA in str(raised.value)
    assert Settings(offline_engine="local").offline_engine == "local"


@pytest.mark.usefixtures("without_ray")
@pytest.mark.parametrize("command", ["replay", "compare"])
def test_engine_ray_without_ray_installed_exits_2_naming_the_extra(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [command, "--policy", "linucb", "--rounds", "5", "--engine", "ray", "--no-progress"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"bandit {command}: error: --engine: " in err and RAY_EXTRA in err


def test_the_local_engine_maps_in_order_and_reports_each_task() -> None:
    finished: list[tuple[int, int]] = []
    results = OfflineEngine().map(
        pow, [(2, 3), (3, 2), (5, 0)], lambda i, r: finished.append((i, r))
    )
    assert results == [8, 9, 1] and finished == [(0, 8), (1, 9), (2, 1)]


def test_the_engine_comes_from_the_settings() -> None:
    settings = Settings(offline_engine="local", ray_address="10.0.0.5:6379")
    assert OfflineEngine.from_settings(settings) == OfflineEngine("local", "10.0.0.5:6379")


def test_a_lost_cluster_is_named_only_when_its_head_does_not_answer() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        answering = f"127.0.0.1:{listening.getsockname()[1]}"
        with socket.socket() as closed:  # a port nothing listens on once closed
            closed.bind(("127.0.0.1", 0))
            silent = f"127.0.0.1:{closed.getsockname()[1]}"
        assert OfflineEngine("ray", silent).lost_cluster() == silent
        assert OfflineEngine("ray", answering).lost_cluster() is None
    assert OfflineEngine("ray", None).lost_cluster() is None  # Ray's auto: not known
    assert OfflineEngine("local", silent).lost_cluster() is None
