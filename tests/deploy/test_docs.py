"""docs/operations.md stays true: its configuration reference is what the Settings model
generates and names every field; every variable the image and the compose file read,
every alert and the operator's procedures are documented."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from service.settings import Settings
from tests.deploy import dockerfile, promql

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "config_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _reference_rows() -> dict[str, list[str]]:
    """Environment variable -> the other cells of its row in the generated table."""
    gen = _generator()
    block = DOC.read_text().split(gen.BEGIN, 1)[1].split(gen.END, 1)[0]
    rows = {}
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_the_configuration_reference_is_what_the_settings_model_generates() -> None:
    gen = _generator()
    current = DOC.read_text()
    assert gen.rendered_doc(current, gen.render_table()) == current, (
        "docs/operations.md is stale: run python docs/config_reference.py"
    )


def test_every_settings_field_appears_with_its_env_var_and_default() -> None:
    rows = _reference_rows()
    assert len(rows) == len(Settings.model_fields)
    for name, field in Settings.model_fields.items():
        env = f"BANDIT_{name.upper()}"
        assert env in rows, f"{name} ({env}) missing from the configuration reference"
        default = rows[env][1].strip("`")
        assert default == _generator().default_text(field)
    assert rows["BANDIT_MAX_CANDIDATES"][1] == f"`{Settings().max_candidates}`"
    assert rows["BANDIT_RUN_MIGRATIONS"][1] == f"`{str(Settings().run_migrations).lower()}`"


class _Example(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EX_")
    plain: int = Field(3, gt=0, description="a | pipe")
    aliased: str | None = Field(None, validation_alias="OTHER_NAME")
    listed: list[str] = Field(default_factory=list)
    required: float


def test_the_generator_renders_names_types_defaults_and_bounds() -> None:
    table = _generator().render_table(_Example).splitlines()
    assert table[2:] == [
        "| `EX_PLAIN` | `int` | `3` | a \\| pipe (> 0) |",
        "| `OTHER_NAME` | `str \\| None` | `unset` |  |",
        "| `EX_LISTED` | `list[str]` | `empty` |  |",
        "| `EX_REQUIRED` | `float` | `(required)` |  |",
    ]


def test_the_generator_refuses_a_document_without_markers() -> None:
    with pytest.raises(ValueError, match="must contain the markers"):
        _generator().rendered_doc("# no markers here\n", "| table |")


def _documented_variables() -> set[str]:
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", DOC.read_text(), re.MULTILINE))


def test_every_variable_of_the_image_and_the_compose_file_is_documented() -> None:
    image_env = set(dockerfile.stages()[-1].env()) - {
        "PATH",
        "PYTHONUNBUFFERED",
        "PYTHONDONTWRITEBYTECODE",
    }
    compose_vars = set(
        re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", (ROOT / "docker-compose.yml").read_text())
    )
    undocumented = (image_env | compose_vars) - _documented_variables()
    assert not undocumented, f"undocumented variables: {sorted(undocumented)}"


def test_every_alert_has_a_runbook_row() -> None:
    alerts = {rule["alert"] for rule in promql.alert_rules() if "alert" in rule}
    documented = set(re.findall(r"^\| `(Bandit\w+)` \|", DOC.read_text(), re.MULTILINE))
    assert documented == alerts


@pytest.mark.parametrize(
    "section, needles",
    [
        (
            "Backup and restore",
            ["appendonly yes", "pg_dump", "pg_restore", "bandit rebuild --all"],
        ),
        ("Upgrading", ["alembic", "upgrade head", "BANDIT_RUN_MIGRATIONS"]),
        ("Scaling out", ["--scale api=", "Redis Cluster", "PARTITION BY RANGE", "hash tag"]),
        (
            "Security",
            [
                "BANDIT_API_KEYS",
                "Authorization: Bearer",
                "BANDIT_RECOMMEND_REQUIRES_KEY",
                "/metrics",
            ],
        ),
        ("Deployment with compose", ["docker compose up", "curl", "/recommend", "/reward"]),
    ],
)
def test_the_operator_procedures_are_documented(section: str, needles: list[str]) -> None:
    text = DOC.read_text()
    assert f"\n## {section}\n" in text
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    for needle in needles:
        assert needle in body, f"section {section!r} does not mention {needle!r}"


@pytest.mark.parametrize("document", ["README.md", "docs/operations.md", "docs/architecture.md"])
def test_relative_links_resolve(document: str) -> None:
    path = ROOT / document
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text())
    local = [link for link in links if not re.match(r"\w+://", link)]
    if document == "README.md":
        assert {"docs/operations.md", "docs/architecture.md"} <= set(local)
    for link in local:
        assert (path.parent / link).exists(), f"{document} links {link}, which does not exist"


def test_every_repository_file_the_guide_names_exists() -> None:
    named = set(
        re.findall(
            r"`((?:deploy|docs|migrations|service)/[\w./-]+|Dockerfile|docker-compose\.yml)`",
            DOC.read_text(),
        )
    )
    assert {"Dockerfile", "docker-compose.yml", "deploy/prometheus/alerts.yml"} <= named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/operations.md names files that do not exist: {missing}"


def test_the_architecture_page_names_existing_files_and_every_use_case_module() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:bandit_core|service|migrations|openapi|tests)/[\w./-]+)`", text))
    named |= {
        "service/" + path for path in re.findall(r"`((?:usecases|storage|routers)/[\w./-]+)`", text)
    }
    assert "bandit_core/registry.py" in named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"
    modules = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "service" / "usecases").glob("*.py")
        if path.name != "__init__.py"
    }
    assert modules <= named, f"docs/architecture.md omits {sorted(modules - named)}"


def test_the_rebuild_command_in_the_docs_parses() -> None:
    from service.cli import build_parser

    args = build_parser().parse_args(["rebuild", "--policy", "news"])
    assert args.command == "rebuild" and args.policy == "news"
    args = build_parser().parse_args(["rebuild", "--all"])
    assert args.command == "rebuild" and args.all and args.policy is None
