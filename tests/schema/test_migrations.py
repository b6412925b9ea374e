"""Migrations: applied from empty, idempotent, reversible one step at a time, the same through the plain yoyo
command line, and refused before any DDL when pgvector is missing. (That they equal the current SQL source,
sql/current, is checked in test_schema_source.py.)

Every test here makes its own empty databases (not the session's migrated template).
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgmem import migrations
from pgmem.errors import SchemaError

from conftest import dsn_for, socket_dir
from schema_source import dump_schema as _dump


def dump_schema(dsn: str) -> str:
    """The normalised pg_dump of schema pgmem without owners and privileges."""
    return _dump(dsn, privileges=False)

REPO = Path(__file__).resolve().parents[2]
SQL_DIR = REPO / "sql"
NAME = re.compile(r"^\d{4}\.[a-z0-9.-]+\.sql$")
# Migration numbers reserved for migrations on other branches; empty once they are merged.
RESERVED_NUMBERS: tuple[int, ...] = ()


def migration_ids() -> list[str]:
    """The forward migrations in the repository's sql/ directory, in file name order (yoyo's order)."""
    return sorted(p.name[: -len(".sql")] for p in SQL_DIR.glob("*.sql") if not p.name.endswith(".rollback.sql"))


@pytest.fixture
def new_db(server_admin: psycopg.Connection, login_role):
    """new_db(owner=None) -> name: a fresh empty database (from template1, no pgvector), dropped after the
    test. Depends on login_role so that it is dropped before the roles that may own it."""
    made: list[str] = []

    def make(owner: str | None = None) -> str:
        name = f"pgmem_mig_{uuid.uuid4().hex[:10]}"
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if owner:
            stmt += sql.SQL(" OWNER {}").format(sql.Identifier(owner))
        server_admin.execute(stmt)
        made.append(name)
        return name

    yield make
    for name in made:
        server_admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def one(dsn: str, query: str, params: tuple = ()):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, params).fetchone()[0]


def yoyo_rows(dsn: str) -> tuple[list, int]:
    """yoyo's bookkeeping: the applied migration ids in order, and the number of log entries."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        applied = [r[0] for r in conn.execute("SELECT migration_id FROM _yoyo_migration ORDER BY applied_at_utc, migration_id")]
        log = conn.execute("SELECT count(*) FROM _yoyo_log").fetchone()[0]
    return applied, log


# ------------------------------------------------------------------------------------------------------------
def test_migrate_from_empty_applies_every_migration_in_order(new_db):
    dsn = dsn_for(new_db())
    ids = migration_ids()
    assert len(ids) >= 2
    assert migrations.pending(dsn) == ids
    assert migrations.applied(dsn) == []
    assert migrations.migrate(dsn) == ids
    assert migrations.pending(dsn) == []
    assert migrations.applied(dsn) == ids
    assert yoyo_rows(dsn)[0] == ids
    assert one(dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmem'") == 1
    assert one(dsn, "SELECT extversion FROM pg_extension WHERE extname = 'vector'") is not None


def test_migrate_twice_changes_nothing(new_db):
    dsn = dsn_for(new_db())
    migrations.migrate(dsn)
    before, bookkeeping = dump_schema(dsn), yoyo_rows(dsn)
    assert migrations.migrate(dsn) == []
    assert dump_schema(dsn) == before
    assert yoyo_rows(dsn) == bookkeeping
    assert one(dsn, "SELECT count(*) FROM yoyo_lock") == 0


def test_rollback_to_empty_then_reapply(new_db):
    dsn = dsn_for(new_db())
    ids = migration_ids()
    migrations.migrate(dsn)
    first = dump_schema(dsn)
    assert migrations.rollback(dsn) == ids[::-1]
    assert migrations.applied(dsn) == []
    assert migrations.pending(dsn) == ids
    assert one(dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmem'") == 0
    # Nothing of pgmem is left in any other schema either (the vector extension may stay: others may use it).
    assert one(dsn, "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                    "WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND p.proname ~ 'pgmem'") == 0
    assert one(dsn, "SELECT count(*) FROM pg_class WHERE relname ~ '^(memories|history|spaces|role_bindings)'") == 0
    assert migrations.migrate(dsn) == ids
    assert dump_schema(dsn) == first


def _yoyo_command() -> list[str]:
    probe = subprocess.run([sys.executable, "-m", "yoyo", "--help"], capture_output=True, text=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "yoyo"]
    exe = shutil.which("yoyo")
    assert exe, "neither `python -m yoyo` nor a yoyo console script is available"
    return [exe]


def test_plain_yoyo_command_line_gives_the_same_schema(new_db, tmp_path):
    """The DBA path: yoyo itself, no pgmem code, then pgmem sees nothing pending."""
    by_api, by_cli = dsn_for(new_db()), new_db()
    migrations.migrate(by_api)
    url = f"postgresql+psycopg://postgres@/{by_cli}?host={socket_dir()}"
    proc = subprocess.run([*_yoyo_command(), "apply", "--batch", "--no-config-file", "--database", url, str(SQL_DIR)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(tmp_path.iterdir()), "yoyo wrote a config file"
    assert dump_schema(dsn_for(by_cli)) == dump_schema(by_api)
    assert migrations.pending(dsn_for(by_cli)) == []
    assert migrations.applied(dsn_for(by_cli)) == migration_ids()


def test_migration_files_are_well_formed():
    files = sorted(p.name for p in SQL_DIR.iterdir() if p.is_file() and p.name != "releases.toml")
    forward = [f for f in files if not f.endswith(".rollback.sql")]
    rollbacks = [f for f in files if f.endswith(".rollback.sql")]
    assert forward, "no migrations in sql/"
    assert sorted(f[: -len(".rollback.sql")] + ".sql" for f in rollbacks) == forward, "every migration needs exactly one .rollback.sql"
    ids = [f[: -len(".sql")] for f in forward]
    numbers = [int(f[:4]) for f in forward]
    assert numbers[0] == 1 and len(set(numbers)) == len(numbers), "migrations are numbered 0001, 0002, ..., once each"
    for i, name in enumerate(forward):
        assert NAME.match(name), f"{name}: migration file names look like 0003.short-name.sql"
        # A number may be skipped while a migration numbered before it is on another branch (merged later).
        assert i == 0 or numbers[i] > numbers[i - 1], f"{name}: migrations are numbered in increasing order"
        lines = (SQL_DIR / name).read_text(encoding="utf-8").splitlines()
        assert re.fullmatch(r"-- \S.*", lines[0]) and not lines[0].startswith("-- depends:"), \
            f"{name}: the first line is a one-line '-- ' description"
        depends = [ln for ln in lines if ln.startswith("-- depends:")]
        assert len(depends) == 1, f"{name}: needs exactly one '-- depends:' directive"
        deps = depends[0][len("-- depends:"):].split()
        assert set(deps) <= set(ids[:i]), f"{name}: depends on {deps}, not all of them earlier migrations"
        if i > 0:
            assert ids[i - 1] in deps, f"{name}: should depend on the previous migration {ids[i - 1]}"
        rollback = (SQL_DIR / f"{ids[i]}.rollback.sql").read_text(encoding="utf-8")
        assert rollback.strip(), f"{ids[i]}.rollback.sql is empty"


def test_missing_extension_is_refused_before_any_ddl(new_db, login_role, admin):
    """A non-superuser database owner cannot create pgvector: migrate names the DBA's command and leaves
    no trace of pgmem behind (only yoyo's own bookkeeping tables)."""
    role = login_role()
    name = new_db(owner=role)
    with pytest.raises(SchemaError) as err:
        migrations.migrate(dsn_for(name, user=role))
    assert "CREATE EXTENSION vector" in str(err.value)
    assert err.value.sqlstate == "PGM00"

    superuser = dsn_for(name)
    assert one(superuser, "SELECT count(*) FROM pg_extension WHERE extname = 'vector'") == 0
    assert one(superuser, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmem'") == 0
    user_objects = """
        SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
          AND c.relname !~ '^(_yoyo_|yoyo_lock)'"""
    assert one(superuser, user_objects) == 0
    for catalog, column, namespace in (("pg_proc", "proname", "pronamespace"), ("pg_type", "typname", "typnamespace")):
        assert one(superuser, f"SELECT count(*) FROM {catalog} x JOIN pg_namespace n ON n.oid = x.{namespace} "
                              f"WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') "
                              f"AND x.{column} !~ '^_?_?yoyo'") == 0
    assert migrations.applied(superuser) == []
    assert one(superuser, "SELECT count(*) FROM yoyo_lock") == 0, "a failed migrate left yoyo's lock behind"

    # The DBA follows the hint; then the migration goes through.
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    assert migrations.migrate(superuser) == migration_ids()


def test_sql_path_holds_every_migration_where_a_wheel_puts_them(tmp_path):
    repo_files = sorted(p.name for p in SQL_DIR.iterdir())
    assert sorted(p.name for p in migrations.sql_path().iterdir()) == repo_files

    # The wheel maps sql/ to pgmem/sql (pyproject's force-include): lay out a package that way and check that
    # sql_path() finds the copy inside the package (a wheel has no ../sql).
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    force = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force.get("sql") == "pgmem/sql"
    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "pgmem", site / "pgmem", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SQL_DIR, site / "pgmem" / "sql")
    proc = subprocess.run(
        [sys.executable, "-c", "from pgmem.migrations import sql_path; import os; p = sql_path(); "
                               "print(p); print('\\n'.join(sorted(os.listdir(p))))"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(site)}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    where, *listed = proc.stdout.splitlines()
    assert Path(where) == site / "pgmem" / "sql"
    assert listed == repo_files


def test_0003_upgrades_data_written_under_0002_and_rolls_back(new_db):
    """Memories written before the lifecycle migration keep working: valid_from is backfilled from created_at
    without history events, the data stays searchable, and rolling 0003 back returns to 0002's shape."""
    from yoyo import get_backend, read_migrations

    dsn = dsn_for(new_db())
    backend = get_backend(migrations.yoyo_url(dsn))
    everything = read_migrations(str(SQL_DIR))
    with backend, backend.lock():
        backend.apply_migrations(backend.to_apply(type(everything)([m for m in everything if m.id <= "0002.pgmem-core"])))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmem.create_space('t3', 'm', 3)")
        with conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            conn.execute("SELECT * FROM pgmem.add('t3', 'old fact', '[1,0,0]', p_session_id => 's')")
            conn.execute("SELECT * FROM pgmem.add('t3', 'other fact', '[0,1,0]')")
    assert migrations.migrate(dsn) == [i for i in migration_ids() if i > "0002.pgmem-core"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.memories WHERE valid_from = created_at AND valid_to IS NULL"
                            ).fetchone() == (2,)
        assert conn.execute("SELECT event, count(*) FROM pgmem.history GROUP BY 1").fetchall() == [("ADD", 2)]
        with conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            hit = conn.execute("SELECT id, content FROM pgmem.search('t3', '[1,0.1,0]', 1)").fetchone()
            assert hit[1] == "old fact"
            conn.execute("SELECT * FROM pgmem.supersede(%s, 'new fact', '[0,0,1]')", [hit[0]])
            assert [r[0] for r in conn.execute("SELECT content FROM pgmem.list('t3')")] == ["other fact", "new fact"]
            conn.execute("SELECT * FROM pgmem.append_turn('t3', 's', 'user', 'hello')")
    # Back to 0002: the superseded fact and the turn go (0002 cannot hold them); the rest works as before.
    later = [i for i in migration_ids() if i >= "0003.pgmem-lifecycle"]
    assert migrations.rollback(dsn, len(later)) == later[::-1]
    with psycopg.connect(dsn, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            assert sorted(r[0] for r in conn.execute("SELECT content FROM pgmem.list('t3')")) == ["new fact", "other fact"]
            assert conn.execute("SELECT content FROM pgmem.search('t3', '[0,0,1]', 1)").fetchone() == ("new fact",)
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname = 'turns'").fetchone() == (0,)
    assert migrations.migrate(dsn) == later


def _apply_up_to(dsn: str, last: str) -> None:
    """Apply the repository's migrations up to and including ``last`` (yoyo's order)."""
    from yoyo import get_backend, read_migrations

    backend = get_backend(migrations.yoyo_url(dsn))
    everything = read_migrations(str(SQL_DIR))
    with backend, backend.lock():
        backend.apply_migrations(backend.to_apply(type(everything)([m for m in everything if m.id <= last])))


def _full_dump(dsn: str) -> str:
    """pg_dump of schema pgmem with owners and privileges (grants, ACLs, ownership all compared)."""
    from pgmem import embedded as server

    if one(dsn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmem'") == 0:
        return ""  # before 0002 there is no schema (pg_dump refuses a pattern that matches nothing)
    proc = subprocess.run([str(server.bin_dir() / "pg_dump"), "--schema-only", "--schema=pgmem", f"--dbname={dsn}"],
                          capture_output=True, text=True, check=True)
    return re.sub(r"^\\(un)?restrict .*$", "", proc.stdout, flags=re.M)


class Levels:
    """One database migrated one step at a time, a copy of it saved at every level (``level(n)``: the name of a
    database at the first ``n`` migrations) and the pg_dump of each level, made once: the per-step rollback
    test costs one migration run per migration, not N^2/2."""

    def __init__(self, admin: psycopg.Connection) -> None:
        self.admin = admin
        self.ids = migration_ids()
        self.names: dict[int, str] = {}
        self.dumps: dict[int, str] = {}
        self.copies: list[str] = []
        self.work = f"pgmem_lvl_{uuid.uuid4().hex[:8]}"
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.work)))
        self.done = 0

    def level(self, n: int) -> str:
        """A database at the first ``n`` migrations, migrated up to there on first use."""
        from yoyo import get_backend, read_migrations

        while self.done < n:
            backend = get_backend(migrations.yoyo_url(dsn_for(self.work)))
            everything = read_migrations(str(SQL_DIR))
            step = [m for m in everything if m.id == self.ids[self.done]]
            with backend, backend.lock():
                backend.apply_migrations(backend.to_apply(type(everything)(step)))
            self.done += 1
            name = f"{self.work}_{self.done}"
            self.admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.work)))
            self.names[self.done] = name
        return self.names[n]

    def dump(self, n: int) -> str:
        if n not in self.dumps:
            self.dumps[n] = _full_dump(dsn_for(self.level(n)))
        return self.dumps[n]

    def copy(self, n: int) -> str:
        """A throwaway copy of level ``n``."""
        name = f"{self.work}_c{n}"
        self.admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(self.level(n))))
        self.copies.append(name)
        return name

    def close(self) -> None:
        for name in [self.work, *self.names.values(), *self.copies]:
            self.admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def levels(server_admin: psycopg.Connection) -> Iterator[Levels]:
    made = Levels(server_admin)
    yield made
    made.close()


@pytest.mark.parametrize("n", range(2, len(migration_ids()) + 1))
def test_rolling_back_one_step_gives_the_previous_schema(levels, n):
    """For every migration N: migrating to N then rolling back one step equals migrating to N-1 (pg_dump with
    owners and privileges)."""
    ids = levels.ids
    after = dsn_for(levels.copy(n))
    assert migrations.rollback(after, 1) == [ids[n - 1]]
    expected, got = levels.dump(n - 1), _full_dump(after)
    if ids[n - 1] == "0003.pgmem-lifecycle":
        # Released, so left as it is: 0003's rollback restores the view under 0003's comment, not 0002's.
        got = got.replace("'The current user''s live memories that hold now: SET pgmem.user_id",
                          "'The current user''s live memories, newest age last: SET pgmem.user_id")
    if expected != got:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), got.splitlines(keepends=True),
                                            fromfile=f"migrated to {ids[n - 2]}", tofile=f"{ids[n - 1]} rolled back"))
        pytest.fail(diff[:20000], pytrace=False)


def test_0007_upgrades_a_populated_0006_database_and_rolls_back(new_db, login_role):
    """Data and bindings written under 0006 keep working under API-only access: a bound login still acts as
    its user (binding moved to the role's OID), history continues, no table is readable any more, and
    rolling back gives agents their table privileges again."""
    dsn = dsn_for(new_db())
    _apply_up_to(dsn, "0006.pgmem-exact-plans")
    agent = login_role("pgmem_agent")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmem.create_space('t3', 'm', 3)")
        conn.execute("SELECT pgmem.bind_role(%s, 'alice')", [agent])
        with conn.transaction():
            conn.execute("SELECT pgmem.act_as('alice')")
            conn.execute("SELECT * FROM pgmem.add('t3', 'written under 0006', '[1,0,0]', p_agent_id => 'old')")
    later = [i for i in migration_ids() if i > "0006.pgmem-exact-plans"]
    assert migrations.migrate(dsn) == later
    agent_dsn = dsn_for(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"], user=agent)
    with psycopg.connect(agent_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == ("alice",)
        assert [r[0] for r in conn.execute("SELECT content FROM pgmem.search('t3', '[1,0,0]', 5)")] == ["written under 0006"]
        conn.execute("SELECT * FROM pgmem.add('t3', 'written under 0007', '[0,1,0]', p_agent_id => 'new')")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM pgmem.memories")
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT event, actor_agent_id FROM pgmem.history ORDER BY event_id").fetchall() == [
            ("ADD", "old"), ("ADD", "new")]
    assert migrations.rollback(dsn, len(later)) == later[::-1]
    with psycopg.connect(agent_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == ("alice",)
        assert conn.execute("SELECT count(*) FROM pgmem.memories").fetchone() == (2,)
