"""deploy/compose.yaml without a container engine: it parses, every image is pinned, the pgmem image is the one
deploy/build-image.sh builds from a commit, each service's command takes only options pgmem's real CLI has
(read from the console script's --help, so a renamed flag fails here), the migration job runs as the schema
owner before the API, which logs in as pgmem_service behind a proxy it trusts by address, health checks call
/readyz, and every secret compose names is written by deploy/make-secrets.sh, 0600, with random values."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import stat
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
SERVICES = COMPOSE["services"]
PINNED = re.compile(r"^[\w./-]+:(?!latest$)[\w.-]*\d[\w.-]*(@sha256:[0-9a-f]{64})?$")
PGMEM_IMAGE = "pgmem-api:${PGMEM_REVISION:?"


@lru_cache(maxsize=None)
def cli_options(*command: str) -> frozenset[str]:
    """The options ``pgmem COMMAND --help`` lists, from the installed console script (the CLI as users run it)."""
    exe = shutil.which("pgmem")
    assert exe, "the pgmem console script is not installed"
    env = {**os.environ, "COLUMNS": "300", "TERM": "dumb", "NO_COLOR": "1"}
    out = subprocess.run([exe, *command, "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])", out.stdout))


def unknown_options(argv: list[str]) -> list[str]:
    """The options of ``argv`` (``pgmem COMMAND ...``) that ``pgmem COMMAND --help`` does not list."""
    assert argv[0] == "pgmem" and not argv[1].startswith("-"), argv
    known = cli_options(argv[1]) | cli_options()
    return [a.split("=", 1)[0] for a in argv[2:] if a.startswith("-") and a.split("=", 1)[0] not in known]


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_compose_parses_with_its_services_networks_and_volumes():
    assert set(SERVICES) == {"db", "migrate", "api", "proxy"}
    assert set(COMPOSE["volumes"]) == {"pgdata", "caddydata"}  # no model cache: the weights are in the image
    assert COMPOSE["networks"]["backend"]["internal"] is True
    assert SERVICES["db"]["networks"] == ["backend"] and SERVICES["migrate"]["networks"] == ["backend"]


@pytest.mark.parametrize("name", ["db", "migrate", "api", "proxy"])
def test_every_image_is_pinned(name):
    image = SERVICES[name]["image"]
    if "${PGMEM_REVISION" in image:  # built on this host by deploy/build-image.sh from the required commit
        assert image.startswith(PGMEM_IMAGE) and SERVICES[name]["pull_policy"] == "never"
        assert "build" not in SERVICES[name]  # compose cannot make the context: git archive of the commit
    else:
        assert PINNED.match(image), f"{name}: {image} is not pinned to a version"
    assert "latest" not in image


def test_the_dockerfile_base_is_a_pinned_build_argument_and_the_revision_a_full_commit():
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^ARG BASE=(\S+)$", dockerfile, re.M).group(1)
    assert PINNED.match(base), base
    assert re.findall(r"^FROM (\S+)", dockerfile, re.M) == ["${BASE}", "${BASE}"]
    assert "grep -Eq '^[0-9a-f]{40}$'" in dockerfile and ".pgmem-revision" in dockerfile
    assert "download.pytorch.org" not in dockerfile and not re.search(r"pip install[^\n]*torch", dockerfile)
    assert "[serve,local]" in dockerfile  # the numpy embedder; the image test checks no torch is installed
    assert "ENV PATH" in dockerfile and "PGMEM_EMBED_FETCH=0" in dockerfile
    assert re.search(r"^USER 10001:10001$", dockerfile, re.M)


def test_build_image_refuses_a_revision_that_is_not_a_full_commit(tmp_path):
    for rev in ("HEAD", "main", "abc123", "A" * 40, ""):
        r = subprocess.run([str(DEPLOY / "build-image.sh"), rev], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PGMEM_BUILDER": "/bin/false"})
        assert r.returncode == 1 and r.stdout == "", (rev, r)
        assert r.stderr.strip().splitlines() == [f"build-image.sh: the revision must be a full 40-hex git commit "
                                                 f"(git rev-parse HEAD), got '{rev}'"], r.stderr
    r = subprocess.run([str(DEPLOY / "build-image.sh"), "0" * 40], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PGMEM_BUILDER": "/bin/false"})
    assert r.returncode == 1 and "is not a commit of" in r.stderr


def test_each_service_command_takes_only_options_of_pgmem_cli():
    for name in ("migrate", "api"):
        argv = SERVICES[name]["command"]
        assert unknown_options(argv) == [], (name, argv)
    cmd = re.search(r"^CMD (\[.*\])$", (DEPLOY / "Dockerfile").read_text(encoding="utf-8"), re.M).group(1)
    assert unknown_options(yaml.safe_load(cmd)) == []
    # the check itself: a flag renamed by one letter, or one pgmem serve never had, is caught
    assert unknown_options(["pgmem", "serve", "--forwarded-allow-ip", "10.0.0.1", "--public-url", "x"]) == \
        ["--forwarded-allow-ip"]
    assert unknown_options(["pgmem", "migrate", "--host", "x"]) == ["--host"]


def test_migrate_runs_as_the_schema_owner_before_the_api():
    migrate = SERVICES["migrate"]
    assert migrate["command"] == ["pgmem", "migrate"]
    assert migrate["restart"] == "no" and migrate["depends_on"]["db"]["condition"] == "service_healthy"
    assert migrate["environment"]["PGMEM_DSN"].startswith("postgresql://pgmem_owner@db:5432/")
    assert "--dsn" in cli_options("migrate")  # the CLI's --dsn, read from PGMEM_DSN
    api = SERVICES["api"]
    assert api["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert api["command"][:2] == ["pgmem", "serve"] and "migrate" not in " ".join(api["command"])
    for name in ("migrate", "api"):  # the entrypoint compares it with the image's own revision
        assert SERVICES[name]["environment"]["PGMEM_REVISION"] == "${PGMEM_REVISION}"


def test_the_api_trusts_forwarded_addresses_from_the_proxy_only():
    api, proxy = SERVICES["api"], SERVICES["proxy"]
    trusted = option(api["command"], "--forwarded-allow-ips").split(",")
    address = proxy["networks"]["edge"]["ipv4_address"]
    assert trusted == [address]
    subnet = ipaddress.ip_network(COMPOSE["networks"]["edge"]["ipam"]["config"][0]["subnet"])
    assert ipaddress.ip_address(address) in subnet and "edge" in api["networks"]
    assert option(api["command"], "--public-url") == proxy["environment"]["PGMEM_PUBLIC_URL"]
    caddyfile = (DEPLOY / "Caddyfile").read_text(encoding="utf-8")
    assert "{$PGMEM_PUBLIC_URL} {" in caddyfile and "reverse_proxy api:8080" in caddyfile
    assert "./Caddyfile:/etc/caddy/Caddyfile:ro" in proxy["volumes"]
    assert "trusted_proxies" not in caddyfile  # Caddy then sets X-Forwarded-For itself, from the peer


def test_health_checks_call_readyz_and_only_the_proxy_publishes_beyond_loopback():
    api = SERVICES["api"]
    assert "/readyz" in " ".join(api["healthcheck"]["test"])
    assert all(p.startswith("127.0.0.1:") for p in api["ports"])
    assert SERVICES["db"].get("ports") is None and SERVICES["migrate"].get("ports") is None
    assert SERVICES["proxy"]["depends_on"] == {"api": {"condition": "service_healthy"}}


def test_secrets_are_files_not_environment_values():
    for svc in SERVICES.values():
        for key, value in (svc.get("environment") or {}).items():
            assert "PASSWORD" not in key or key.endswith("_FILE"), key
            assert ":" not in str(value).split("@")[0].split("//")[-1], f"{key} holds a password"


def _make_secrets(target: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(DEPLOY / "make-secrets.sh"), str(target)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PGMEM_SECRETS_CHOWN": "none"})


def test_make_secrets_writes_every_secret_compose_names_private_and_random(tmp_path):
    r = _make_secrets(tmp_path / "secrets")
    assert r.returncode == 0, r.stderr
    written = {p.name: p for p in (tmp_path / "secrets").iterdir()}
    named = {Path(s["file"]).name for s in COMPOSE["secrets"].values()}
    assert {Path(s["file"]).parent for s in COMPOSE["secrets"].values()} == {Path("secrets")}
    used = {s for svc in SERVICES.values() for s in svc.get("secrets", [])}
    assert set(written) == named == used == set(COMPOSE["secrets"])
    for p in written.values():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    text = {name: p.read_text(encoding="utf-8").strip() for name, p in written.items()}
    # the password files hold 256 random bits; the pgpass files the same passwords, for the DSNs' logins
    for name in ("db_superuser_password", "db_owner_password", "db_service_password"):
        assert re.fullmatch(r"[0-9a-f]{64}", text[name]), name
    assert len({text["db_superuser_password"], text["db_owner_password"], text["db_service_password"]}) == 3
    assert text["pgpass_owner"] == f"db:5432:pgmem:pgmem_owner:{text['db_owner_password']}"
    assert text["pgpass_api"] == f"db:5432:pgmem:pgmem_service:{text['db_service_password']}"
    for svc, pgpass in (("migrate", "pgpass_owner"), ("api", "pgpass_api")):
        env = SERVICES[svc]["environment"]
        assert env["PGPASSFILE"] == f"/run/secrets/{pgpass}" and SERVICES[svc]["secrets"] == [pgpass]
        user = re.match(r"postgresql://([^@]+)@db:5432/pgmem$", env["PGMEM_DSN"]).group(1)
        assert text[pgpass].split(":")[:4] == ["db", "5432", "pgmem", user]
    assert SERVICES["db"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/db_superuser_password"
    roles = (DEPLOY / "initdb" / "10-roles.sh").read_text(encoding="utf-8")
    for name in re.findall(r'\$secrets/(\w+)', roles):
        assert name in SERVICES["db"]["secrets"], name
    # another run draws other passwords, and an existing file is never overwritten
    assert _make_secrets(tmp_path / "other").returncode == 0
    assert (tmp_path / "other" / "db_owner_password").read_text() != written["db_owner_password"].read_text()
    again = _make_secrets(tmp_path / "secrets")
    assert again.returncode == 1 and "not overwritten" in again.stderr
    assert written["pgpass_api"].read_text(encoding="utf-8").strip() == text["pgpass_api"]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the containers' uids needs root")
def test_make_secrets_gives_each_file_to_the_uid_of_its_reader(tmp_path):
    r = subprocess.run([str(DEPLOY / "make-secrets.sh"), str(tmp_path / "s")], capture_output=True, text=True,
                       timeout=60, env={k: v for k, v in os.environ.items() if k != "PGMEM_SECRETS_CHOWN"})
    assert r.returncode == 0, r.stderr
    owners = {p.name: p.stat().st_uid for p in (tmp_path / "s").iterdir()}
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    assert "--uid 10001" in dockerfile
    assert owners == {"db_superuser_password": 999, "db_owner_password": 999, "db_service_password": 999,
                      "pgpass_owner": 10001, "pgpass_api": 10001}


def test_no_deployment_file_makes_the_function_owner_a_login():
    """The initdb script created pgmem_api as the service's LOGIN and compose connected as it: the owner of
    every SECURITY DEFINER function, so the service's login could read every tenant's rows. pgmem_api stays
    NOLOGIN (granted to the schema owner, as migration 0007 needs); the service logs in as pgmem_service."""
    roles = (DEPLOY / "initdb" / "10-roles.sh").read_text(encoding="utf-8")
    statements = [s.strip() for s in roles.split(";")]
    assert "CREATE ROLE pgmem_api NOLOGIN NOINHERIT NOBYPASSRLS" in "\n".join(statements)
    assert not re.search(r"CREATE ROLE pgmem_api\b[^;]*\bLOGIN", roles.replace("NOLOGIN", ""))
    assert "GRANT pgmem_api TO pgmem_owner" in roles and "GRANT CREATE ON SCHEMA public TO pgmem_owner" in roles
    assert "GRANT pgmem_gateway TO pgmem_service" in roles
    assert SERVICES["api"]["environment"]["PGMEM_DSN"].startswith("postgresql://pgmem_service@")
    for doc in ("README.md", "docs/service.md", "docs/deployment.md"):
        assert "postgresql://pgmem_api@" not in (REPO / doc).read_text(encoding="utf-8"), doc


def test_the_deployment_docs_use_real_commands_and_options():
    """Every ``pgmem COMMAND --option`` docs/deployment.md shows exists, and its quick start makes the secrets,
    builds the image and starts compose with the scripts and file of this repository."""
    doc = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    calls = re.findall(r"\bpgmem ((?:migrate|rollback|serve|backup|restore|doctor)\b[^`\n]*)", doc)
    assert calls
    for call in calls:
        argv = ["pgmem", *call.split()]
        assert unknown_options(argv) == [], call
    quick = doc[doc.index("## Quick start"):doc.index("## Roles and secrets")]
    for step in ("deploy/make-secrets.sh", "deploy/build-image.sh \"$PGMEM_REVISION\"",
                 "docker compose -f deploy/compose.yaml up -d", "one-time link", "/v1/search"):
        assert step in quick, step
    assert "one-time link" in (REPO / "pgmem" / "service" / "app.py").read_text(encoding="utf-8")
