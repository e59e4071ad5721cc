"""docker-compose.cluster.yml, the example deployment on a Redis Cluster: Debian's
docker-compose accepts it with the secrets set and with nothing set; the api lists
every node of a three-master, three-replica cluster in its ``redis+cluster://`` URL and
starts once the one-shot ``redis-cluster-init`` has joined them; each node keeps its
data and cluster identity in its own volume; only the api is published; the rest of
the api's configuration is docker-compose.yml's."""

from __future__ import annotations

import re

import pytest
import yaml

from service.storage.redis_urls import parse_redis_url
from tests.deploy.test_compose import (
    COMPOSE,
    ROOT,
    SECRETS,
    compose_config,
    ports_of,
    volumes_of,
)

CLUSTER_COMPOSE = ROOT / "docker-compose.cluster.yml"
NODES = [f"redis-{n}" for n in range(1, 7)]


@pytest.fixture(scope="module")
def config() -> dict:
    result = compose_config(SECRETS, CLUSTER_COMPOSE)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def _command(service: dict) -> str:
    command = service["command"]
    return " ".join(command) if isinstance(command, list) else command


def test_the_api_uses_every_node_of_the_cluster(config: dict) -> None:
    services = config["services"]
    assert set(services) == {"api", "postgres", "redis-cluster-init", *NODES}
    target = parse_redis_url(services["api"]["environment"]["BANDIT_REDIS_URL"])
    assert target.kind == "cluster"
    assert list(target.nodes) == [(node, 6379) for node in NODES]
    init = _command(services["redis-cluster-init"])
    assert "--cluster create" in init and "--cluster-replicas 1" in init
    assert "for n in 1 2 3 4 5 6" in init  # every node of the URL joins


def test_each_node_is_a_persistent_cluster_node_named_by_its_host(config: dict) -> None:
    for node in NODES:
        service = config["services"][node]
        command = _command(service)
        for option in (
            "--cluster-enabled yes",
            "--cluster-config-file nodes.conf",
            "--appendonly yes",
            "--cluster-preferred-endpoint-type hostname",
        ):
            assert option in command, (node, option)
        assert service["hostname"] == node
        assert ("volume", f"{node}-data", "/data") in volumes_of(service)
        assert "healthcheck" in service


def test_start_order_and_published_ports(config: dict) -> None:
    services = config["services"]
    conditions = {
        (name, dependency): condition["condition"]
        for name, service in services.items()
        for dependency, condition in service.get("depends_on", {}).items()
    }
    assert conditions == {
        ("api", "redis-cluster-init"): "service_completed_successfully",
        ("api", "postgres"): "service_healthy",
        **{("redis-cluster-init", node): "service_healthy" for node in NODES},
    }
    assert services["redis-cluster-init"]["restart"] == "no"
    published = {name: ports_of(s) for name, s in services.items() if ports_of(s)}
    assert published == {"api": [("0.0.0.0", 8000, 8000)]}


def test_the_api_is_configured_as_in_the_main_compose_file(config: dict) -> None:
    main = compose_config(SECRETS)
    assert main.returncode == 0, main.stderr
    main_api = yaml.safe_load(main.stdout)["services"]["api"]
    api = config["services"]["api"]
    differs = {
        k for k in api["environment"] if api["environment"][k] != main_api["environment"].get(k)
    }
    assert differs == {"BANDIT_REDIS_URL"}
    assert set(api["environment"]) == set(main_api["environment"])
    assert api["build"] == main_api["build"] and api["image"] == main_api["image"]
    # the same .env serves both files
    variables = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", CLUSTER_COMPOSE.read_text()))
    assert variables <= set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", COMPOSE.read_text()))


def test_nothing_set_is_a_valid_local_configuration() -> None:
    result = compose_config(compose=CLUSTER_COMPOSE)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert services["api"]["environment"]["BANDIT_API_KEYS"] in ("", None)
