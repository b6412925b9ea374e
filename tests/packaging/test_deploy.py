"""deploy/compose.yaml: it parses, every image is pinned, the API image is built from a pinned revision, the
migrate service runs `pgmem migrate` (the same command as the CLI) before the API starts, and health checks
call /readyz. No Docker engine is needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text(encoding="utf-8"))
PINNED = re.compile(r"^[\w./-]+:(?!latest$)[\w.-]*\d[\w.-]*(@sha256:[0-9a-f]{64})?$")


def test_compose_parses_with_the_three_services():
    assert set(COMPOSE["services"]) == {"db", "migrate", "api"}
    assert set(COMPOSE["volumes"]) == {"pgdata", "modelcache"}


@pytest.mark.parametrize("name", ["db", "migrate", "api"])
def test_every_image_is_pinned(name):
    image = COMPOSE["services"][name]["image"]
    if "${PGMEM_REVISION" in image:  # built here from the required git revision
        assert image.startswith("pgmem-api:${PGMEM_REVISION:?")
    else:
        assert PINNED.match(image), f"{name}: {image} is not pinned to a version"
    assert "latest" not in image


def test_the_api_image_is_built_from_a_pinned_revision():
    build = COMPOSE["services"]["migrate"]["build"]
    assert build["args"]["PGMEM_REVISION"].startswith("${PGMEM_REVISION:?")
    dockerfile = (REPO / "deploy" / build["dockerfile"]).read_text(encoding="utf-8")
    assert "grep -Eq '^[0-9a-f]{40}$'" in dockerfile and "@${PGMEM_REVISION}" in dockerfile
    base = re.search(r"^FROM (\S+)", dockerfile, re.M).group(1)
    assert PINNED.match(base), base


def test_migrate_runs_the_cli_migrate_command_before_the_api():
    from pgmem.cli import app

    migrate = COMPOSE["services"]["migrate"]
    assert migrate["command"] == ["pgmem", "migrate"]
    assert migrate["restart"] == "no" and migrate["depends_on"]["db"]["condition"] == "service_healthy"
    assert "PGMEM_DSN" in migrate["environment"]  # the CLI's own variable for --dsn
    # `pgmem migrate` is a command of this CLI, and reads PGMEM_DSN.
    result = CliRunner().invoke(app, ["migrate", "--help"])
    assert result.exit_code == 0 and "--dsn" in result.output
    api = COMPOSE["services"]["api"]
    assert api["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert api["command"][:2] == ["pgmem", "serve"] and "migrate" not in " ".join(api["command"])


def test_health_checks_call_readyz_and_nothing_is_published_beyond_loopback():
    api = COMPOSE["services"]["api"]
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    assert all(p.startswith("127.0.0.1:") for p in api["ports"])
    assert COMPOSE["services"]["db"].get("ports") is None


def test_secrets_are_files_not_environment_values():
    for svc in COMPOSE["services"].values():
        for key, value in (svc.get("environment") or {}).items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), key
            assert ":" not in str(value).split("@")[0].split("//")[-1], f"{key} holds a password"


def test_no_deployment_file_makes_the_function_owner_a_login():
    """The initdb script created pgmem_api as the service's LOGIN and compose connected as it: the owner of
    every SECURITY DEFINER function, so the service's login could read every tenant's rows. pgmem_api stays
    NOLOGIN (granted to the schema owner, as migration 0007 needs); the service logs in as pgmem_service."""
    roles = (REPO / "deploy" / "initdb" / "10-roles.sh").read_text(encoding="utf-8")
    statements = [s.strip() for s in roles.split(";")]
    assert "CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS" in "\n".join(statements)
    assert not re.search(r"CREATE ROLE pgmem_api\b[^;]*\bLOGIN", roles.replace("NOLOGIN", ""))
    assert "GRANT pgmem_api TO pgmem_owner" in roles and "GRANT CREATE ON SCHEMA public TO pgmem_owner" in roles
    assert "GRANT pgmem_gateway TO pgmem_service" in roles
    assert COMPOSE["services"]["api"]["environment"]["PGMEM_DSN"].startswith("postgresql://pgmem_service@")
    for doc in ("README.md", "docs/service.md", "docs/deployment.md"):
        assert "postgresql://pgmem_api@" not in (REPO / doc).read_text(encoding="utf-8"), doc
