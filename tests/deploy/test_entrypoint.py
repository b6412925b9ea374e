"""deploy/entrypoint.py, the image's entrypoint, run here with this Python against the test server: bad input
(a missing or readable-by-others secret, a revision that is not a 40-hex commit or not the image's, a
database without pgvector, an API login that may not execute the API or may do more) stops it before pgmem
starts, exit 78 with one line on stderr; good input runs the command. tests/deploy/test_image.py runs the
same cases inside the built image."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from conftest import dsn_for

ENTRYPOINT = Path(__file__).resolve().parents[2] / "deploy" / "entrypoint.py"
REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def env(tmp_path):
    """A container's environment: the image's revision file, PGMEM_REVISION as compose sets it."""
    (tmp_path / "REVISION").write_text(REV + "\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PGMEM_", "PGPASS"))}
    return {**base, "PGMEM_REVISION_FILE": str(tmp_path / "REVISION"), "PGMEM_REVISION": REV}


def pgpass(tmp_path: Path, user: str, mode: int = 0o600) -> str:
    path = tmp_path / f"pgpass_{user}_{mode:o}"
    path.write_text(f"db:5432:pgmem:{user}:{uuid.uuid4().hex}\n")
    path.chmod(mode)
    return str(path)


def run(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ENTRYPOINT), *argv], env=env, capture_output=True, text=True,
                          timeout=120)


def stopped(r: subprocess.CompletedProcess, *words: str) -> str:
    """The one line a stopped entrypoint printed; each of ``words`` is in it."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 78 and len(lines) == 1 and lines[0].startswith("pgmem-entrypoint: "), r
    assert r.stdout == ""
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_good_input_runs_the_command(env, dsn, login_role, tmp_path):
    login = login_role("pgmem_gateway")
    env |= {"PGMEM_DSN": dsn_for(conninfo_to_dict(dsn)["dbname"], user=login), "PGPASSFILE": pgpass(tmp_path, login)}
    r = run(env, "pgmem", "serve", "--help")  # every check of serve, then the command itself
    assert r.returncode == 0 and "--forwarded-allow-ips" in r.stdout, r.stderr
    assert run(env, "pgmem", "--version").stdout.startswith("pgmem ")


@pytest.mark.parametrize("revision, words", [
    ("main", ["PGMEM_REVISION='main' is not a 40-hex git commit"]),
    (REV.upper(), ["is not a 40-hex git commit"]),
    ("f" * 40, [f"PGMEM_REVISION={'f' * 40} but this image was built from {REV}"]),
])
def test_a_wrong_revision_stops_it(env, revision, words):
    stopped(run(env | {"PGMEM_REVISION": revision}, "pgmem", "--version"), *words)


def test_an_image_without_a_commit_stops_it(env, tmp_path):
    (tmp_path / "REVISION").write_text("v1.2\n")
    stopped(run(env, "pgmem", "--version"), "this image's revision 'v1.2' is not a 40-hex git commit")
    (tmp_path / "REVISION").unlink()
    stopped(run(env, "pgmem", "--version"), "records no revision")


def test_a_missing_or_unusable_secret_stops_it(env, tmp_path):
    dsn = "postgresql://pgmem_service@db:5432/pgmem"
    missing = str(tmp_path / "pgpass_api")
    stopped(run(env | {"PGMEM_DSN": dsn, "PGPASSFILE": missing}, "pgmem", "serve"),
            f"the secret file {missing} (PGPASSFILE) is missing", "deploy/make-secrets.sh")
    stopped(run(env | {"PGMEM_DSN": dsn, "PGPASSFILE": pgpass(tmp_path, "pgmem_service", 0o644)}, "pgmem", "serve"),
            "has mode 0644", "chmod 600")
    stopped(run(env | {"PGMEM_DSN": dsn, "PGPASSFILE": pgpass(tmp_path, "pgmem_owner")}, "pgmem", "serve"),
            "no password for the login 'pgmem_service'")
    empty = tmp_path / "empty"
    empty.write_text("# nothing\n")
    empty.chmod(0o600)
    stopped(run(env | {"PGMEM_DSN": dsn, "PGPASSFILE": str(empty)}, "pgmem", "migrate"),
            "holds no host:port:database:user:password line")


def test_no_dsn_stops_it_rather_than_start_an_embedded_server(env):
    stopped(run(env, "pgmem", "migrate"), "pgmem migrate in this image needs PGMEM_DSN")


@pytest.fixture
def bare_db(admin):
    """A database without pgvector (and without pgmem's schema)."""
    name = f"pgmem_bare_{uuid.uuid4().hex[:10]}"
    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield name
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_database_without_pgvector_stops_it(env, bare_db, login_role, tmp_path, admin):
    login = login_role("pgmem_gateway")
    admin.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(bare_db), sql.Identifier(login)))
    env |= {"PGMEM_DSN": dsn_for(bare_db, user=login), "PGPASSFILE": pgpass(tmp_path, login)}
    for command in ("migrate", "serve"):  # the owner may not create pgvector (not a trusted extension)
        stopped(run(env, "pgmem", command), f"pgvector is not installed in database {bare_db}", "CREATE EXTENSION vector")
    with psycopg.connect(dsn_for(bare_db), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    stopped(run(env, "pgmem", "serve"), f"database {bare_db}", "has no schema pgmem: run the migrate job first")


def test_an_api_login_that_may_not_execute_the_api_stops_it(env, dsn, login_role, tmp_path):
    db = conninfo_to_dict(dsn)["dbname"]
    nobody = login_role()
    env |= {"PGMEM_DSN": dsn_for(db, user=nobody), "PGPASSFILE": pgpass(tmp_path, nobody)}
    stopped(run(env, "pgmem", "serve"), f"the API's login '{nobody}' cannot SET ROLE pgmem_gateway",
            f'GRANT pgmem_gateway TO "{nobody}";')


def test_an_api_login_that_may_do_more_than_the_api_stops_it(env, dsn, login_role, tmp_path, admin):
    db = conninfo_to_dict(dsn)["dbname"]
    env |= {"PGMEM_DSN": dsn_for(db, user="postgres"), "PGPASSFILE": pgpass(tmp_path, "postgres")}
    stopped(run(env, "pgmem", "serve"), "the API's login 'postgres' is a superuser")
    owner_member = login_role("pgmem_gateway", "pgmem_api")  # the definer functions' owner
    env |= {"PGMEM_DSN": dsn_for(db, user=owner_member), "PGPASSFILE": pgpass(tmp_path, owner_member)}
    stopped(run(env, "pgmem", "serve"), "could read every tenant's rows", "pgmem_service")
    # the migration job may (must) be the owner: it is not refused for it
    r = run(env, "pgmem", "migrate", "--help")
    assert r.returncode == 0, r.stderr
