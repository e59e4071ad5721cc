"""docker-compose.yml: Debian's docker-compose accepts it, with the secrets set and with
nothing set (local defaults; the api generates its key), and what it references (build context, config files, dashboards) is in the
repository, wired the way Prometheus and Grafana expect."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy import dockerfile
from tests.tools import system_tool

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
SECRETS = {
    "BANDIT_API_KEYS": "k1,k2",
    "POSTGRES_PASSWORD": "pg-secret",
    "GRAFANA_ADMIN_PASSWORD": "gf-secret",
}
SERVICES = {"api", "redis", "postgres", "prometheus", "grafana"}


def compose_config(
    extra_env: dict[str, str] | None = None, compose: Path = COMPOSE
) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` on a compose file of the repository (by default
    docker-compose.yml), in a clean environment."""
    env = {k: v for k, v in os.environ.items() if k not in SECRETS and not k.startswith("COMPOSE_")}
    env.update(extra_env or {})
    return subprocess.run(
        [
            system_tool("docker-compose"),
            "--project-directory",
            str(ROOT),
            "-f",
            str(compose),
            "config",
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict:
    """The configuration as docker-compose resolves it (paths absolute, variables set)."""
    result = compose_config(SECRETS)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_docker_compose_config_accepts_the_file(config: dict) -> None:
    assert set(config["services"]) == SERVICES
    api_env = config["services"]["api"]["environment"]
    assert api_env["BANDIT_API_KEYS"] == "k1,k2"
    assert api_env["BANDIT_DATABASE_URL"] == "postgresql://bandit:pg-secret@postgres:5432/bandit"
    assert api_env["BANDIT_REDIS_URL"] == "redis://redis:6379/0"


def test_compose_starts_with_nothing_set_on_local_defaults() -> None:
    """``docker compose up`` with no variable and no .env: the api gets no key (its
    entrypoint generates one into the data volume), PostgreSQL and Grafana local
    defaults; those two are not published on a public interface."""
    result = compose_config()
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert services["api"]["environment"]["BANDIT_API_KEYS"] in ("", None)
    password = services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert password and password in services["api"]["environment"]["BANDIT_DATABASE_URL"]
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
    assert "ports" not in services["postgres"]
    assert {host for host, _, _ in ports_of(services["grafana"])} == {"127.0.0.1"}
    assert ("volume", "api-data", "/data") in volumes_of(services["api"])


def test_the_env_example_names_every_variable_and_env_is_never_committed() -> None:
    compose_vars = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()))
    example = (ROOT / ".env.example").read_text()
    named = set(re.findall(r"^#? ?([A-Z_][A-Z0-9_]*)=", example, re.MULTILINE))
    assert named == compose_vars
    assert set(SECRETS) <= set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, re.MULTILINE))
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in (ROOT / ".dockerignore").read_text().splitlines()
    # the example, copied to .env as it is, is a valid configuration
    result = subprocess.run(
        [
            system_tool("docker-compose"),
            "--project-directory",
            str(ROOT),
            "-f",
            str(COMPOSE),
            "--env-file",
            str(ROOT / ".env.example"),
            "config",
            "-q",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k not in SECRETS},
    )
    assert result.returncode == 0, result.stderr


def volumes_of(service: dict) -> list[tuple[str, str, str]]:
    """``(type, source, container path)`` of a service's mounts, long or short syntax
    (``bind`` for host paths, ``volume`` for named volumes)."""
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            mounts.append((volume["type"], volume["source"], volume["target"]))
        else:
            source, target = volume.split(":")[:2]
            kind = "bind" if source.startswith(("/", ".")) else "volume"
            mounts.append((kind, source, target))
    return mounts


def ports_of(service: dict) -> list[tuple[str, int, int]]:
    """``(host address, published port, container port)``, long or short syntax."""
    ports = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            ports.append(
                (port.get("host_ip", "0.0.0.0"), int(port["published"]), int(port["target"]))
            )
        else:
            *host, published, target = port.split("/")[0].split(":")
            ports.append((host[0] if host else "0.0.0.0", int(published), int(target)))
    return ports


def _bind_sources(config: dict) -> list[tuple[str, str, str]]:
    """``(service, host path, container path)`` of every bind mount."""
    return [
        (name, source, target)
        for name, service in config["services"].items()
        for kind, source, target in volumes_of(service)
        if kind == "bind"
    ]


def test_every_file_the_compose_file_references_exists(config: dict) -> None:
    binds = _bind_sources(config)
    assert binds, "expected config files mounted into prometheus and grafana"
    for service, source, _ in binds:
        assert Path(source).exists(), f"{service} mounts {source}, which is not in the repository"
        assert Path(source).resolve().is_relative_to(ROOT), (
            f"{service} mounts {source} from outside the repo"
        )
    build = config["services"]["api"]["build"]
    assert Path(build["context"]).resolve() == ROOT
    assert (ROOT / build.get("dockerfile", "Dockerfile")).is_file()


def _container_to_host(config: dict, service: str) -> dict[str, Path]:
    return {
        target: Path(source) for name, source, target in _bind_sources(config) if name == service
    }


def test_prometheus_gets_its_config_and_rules_where_it_reads_them(config: dict) -> None:
    mounts = _container_to_host(config, "prometheus")
    command = config["services"]["prometheus"]["command"]
    config_file = next(arg.split("=", 1)[1] for arg in command if arg.startswith("--config.file="))
    assert mounts[config_file] == ROOT / "deploy" / "prometheus" / "prometheus.yml"
    prometheus_yml = yaml.safe_load(mounts[config_file].read_text())
    for rule_file in prometheus_yml["rule_files"]:
        in_container = str(Path(config_file).parent / rule_file)
        assert in_container in mounts, f"rule file {rule_file} is not mounted at {in_container}"
        assert mounts[in_container].is_file()
    # the scrape job reaches the api service on the port it listens on
    job = next(j for j in prometheus_yml["scrape_configs"] if j["job_name"] == "bandit-api")
    target = job["dns_sd_configs"][0]
    assert target["names"] == ["api"] and "api" in config["services"]
    api_port = dockerfile.stages()[-1].env()["PORT"]
    assert str(target["port"]) == api_port
    assert {target for _, _, target in ports_of(config["services"]["api"])} == {int(api_port)}


def test_grafana_provisioning_and_dashboards_are_mounted_where_grafana_reads_them(
    config: dict,
) -> None:
    mounts = _container_to_host(config, "grafana")
    provisioning = mounts["/etc/grafana/provisioning"]
    assert provisioning == ROOT / "deploy" / "grafana" / "provisioning"
    providers = yaml.safe_load((provisioning / "dashboards" / "bandit.yml").read_text())[
        "providers"
    ]
    for provider in providers:
        host_dir = mounts[provider["options"]["path"]]
        assert list(host_dir.glob("*.json")), f"no dashboard JSON in {host_dir}"
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ][0]
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", datasource["url"]).groups()
    assert host in config["services"] and port == "9090"


def test_redis_keeps_the_model_across_restarts(config: dict) -> None:
    redis = config["services"]["redis"]
    command = redis["command"]
    command = command if isinstance(command, list) else command.split()
    assert command[command.index("--appendonly") + 1] == "yes"
    assert ("volume", "redis-data", "/data") in volumes_of(redis)
    postgres = config["services"]["postgres"]
    assert ("volume", "postgres-data", "/var/lib/postgresql/data") in volumes_of(postgres)


def test_healthchecks_gate_startup(config: dict) -> None:
    services = config["services"]
    healthy = {name for name, s in services.items() if "healthcheck" in s}
    # the api's healthcheck is the image's HEALTHCHECK
    assert "healthcheck" not in services["api"] and dockerfile.stages()[-1].all("HEALTHCHECK")
    healthy.add("api")
    assert healthy == SERVICES
    # (service, dependency) -> condition; Prometheus must not wait for a healthy api,
    # or an api that never gets healthy would go unreported.
    expected = {
        ("api", "redis"): "service_healthy",
        ("api", "postgres"): "service_healthy",
        ("prometheus", "api"): "service_started",
        ("grafana", "prometheus"): "service_healthy",
    }
    actual = {
        (name, dependency): condition["condition"]
        for name, service in services.items()
        for dependency, condition in service.get("depends_on", {}).items()
    }
    assert actual == expected


def test_only_the_api_is_published_on_all_interfaces(config: dict) -> None:
    published = {
        name: (host, port)
        for name, service in config["services"].items()
        for host, port, _ in ports_of(service)
    }
    assert published == {
        "api": ("0.0.0.0", 8000),
        "prometheus": ("127.0.0.1", 9090),
        "grafana": ("127.0.0.1", 3000),
    }
    docs = (ROOT / "docs" / "operations.md").read_text()
    for name, (_, port) in published.items():
        assert re.search(rf"\|\s*`?{name}`?\s*\|\s*{port}\b", docs), (
            f"port {port} of {name} undocumented"
        )
