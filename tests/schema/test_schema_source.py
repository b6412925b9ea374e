"""The current SQL source (sql/current) against the migrations: the same function texts without a database,
the same schema (pg_dump with owners and privileges) when a database is built from each, and the developer
tool that turns a change of sql/current into the next migration and its rollback."""

from __future__ import annotations

import re

import shutil
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

import schema_source as src
import sqlgen
from conftest import dsn_for

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def empty_db(server_admin: psycopg.Connection):
    """empty_db() -> dsn: a fresh empty database (from template1), dropped after the test."""
    made: list[str] = []

    def make() -> str:
        name = f"pgmem_src_{uuid.uuid4().hex[:10]}"
        server_admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        made.append(name)
        return dsn_for(name)

    yield make
    for name in made:
        server_admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def migrated(server_admin: psycopg.Connection):
    """DSN of a database built by the migrations alone (yoyo from empty, as a DBA's ``yoyo apply`` does), once
    per session: what sql/current is compared with (the session's template is loaded from sql/current)."""
    name = f"pgmem_migrated_{uuid.uuid4().hex[:8]}"
    server_admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    apply_migrations(dsn_for(name), src.SQL_DIR)
    yield dsn_for(name)
    server_admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def built_from_current(dsn: str, current_dir: Path = src.CURRENT_DIR) -> str:
    with psycopg.connect(dsn) as conn:
        src.load_current(conn, current_dir)
    return dsn


def apply_migrations(dsn: str, sql_dir: Path) -> None:
    from yoyo import get_backend, read_migrations

    from pgmem import migrations

    backend = get_backend(migrations.yoyo_url(dsn))
    with backend, backend.lock():
        backend.apply_migrations(backend.to_apply(read_migrations(str(sql_dir))))


def rollback_one(dsn: str, sql_dir: Path) -> None:
    from yoyo import get_backend, read_migrations

    from pgmem import migrations

    backend = get_backend(migrations.yoyo_url(dsn))
    with backend, backend.lock():
        applied = backend.to_rollback(read_migrations(str(sql_dir)))
        backend.rollback_migrations(applied[:1])


def assert_same(expected: str, got: str, what: str) -> None:
    import difflib

    if expected != got:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True), "migrations", what))
        pytest.fail(diff[:20000], pytrace=False)


def copy_sources(tmp_path: Path) -> Path:
    """A copy of sql/ (migrations and current source) to change in a test."""
    dest = tmp_path / "sql"
    shutil.copytree(REPO / "sql", dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def release_sources(tmp_path: Path) -> Path:
    """A copy of sql/ as the last release left it: without the pending migration, and sql/current as of the
    commit that recorded the release (sql/releases.toml), when a pending migration exists in the checkout."""
    import subprocess

    dest = copy_sources(tmp_path)
    releases = (REPO / "sql" / "releases.toml").read_text(encoding="utf-8")
    last_released = max(int(p.name[:4]) for p in dest.glob("*.sql") if p.name.split(".rollback")[0].removesuffix(".sql")
                        in releases)
    pending = [p for p in dest.glob("*.sql") if int(p.name[:4]) > last_released]
    if pending:
        for p in pending:
            p.unlink()
        commit = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%H", "--", "sql/releases.toml"],
                                capture_output=True, text=True, check=True).stdout.strip()
        shutil.rmtree(dest / "current")
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "sql/current"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "x", "-C", str(tmp_path)], input=archive, check=True)  # into dest (tmp_path/sql)
    return dest


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not in {path.name} exactly once"
    path.write_text(text.replace(old, new), encoding="utf-8")


# ------------------------------------------------------------------------------------------------------------
# Without a database
# ------------------------------------------------------------------------------------------------------------
def test_every_function_the_migrations_leave_has_the_same_text_in_sql_current():
    released = src.last_definitions(src.migration_files())
    assert len(released) > 50  # the reader found the functions (wrapped in pgmem._define or not)
    assert ("pgmem.search", 11) in released and released[("pgmem.search", 11)].wrapped
    assert src.mismatches() == []


def test_a_changed_body_or_a_missing_function_is_reported(tmp_path):
    sql_dir = copy_sources(tmp_path)
    edit(sql_dir / "current" / "60-search.sql", "    v_static boolean := p_as_of IS NULL", "    v_static boolean := p_as_of IS NOT DISTINCT FROM NULL")
    edit(sql_dir / "current" / "70-reads.sql", "CREATE FUNCTION pgmem.chain(", "CREATE FUNCTION pgmem.chain_renamed(")
    found = src.mismatches(sql_dir)
    # (reported against the last migration that defines it, whichever that is)
    assert any(re.match(r"pgmem\.search \(11 inputs\): \d{4}\.pgmem-[a-z0-9-]+\.sql", m) for m in found), found
    assert any(m.startswith("pgmem.chain (1 inputs):") and "missing from sql/current" in m for m in found), found
    assert any(m.startswith("pgmem.chain_renamed (1 inputs):") and "no migration defines it" in m for m in found), found


def test_a_later_alter_function_volatility_counts_as_the_text():
    """_expiry was written IMMUTABLE in 0003 and made STABLE by ALTER FUNCTION in 0005: its current text
    reads STABLE, and the check applies the ALTER to the released text."""
    released = src.last_definitions(src.migration_files()[:7])[("pgmem._expiry", 3)]  # as 0007 left it
    assert "IMMUTABLE" in released.text and "STABLE" in released.effective_text()
    assert "STABLE" in src.current_definitions()[("pgmem._expiry", 3)].text  # 0008 wrote it STABLE again


def test_each_function_is_defined_once_in_sql_current(tmp_path):
    sql_dir = copy_sources(tmp_path)
    (sql_dir / "current" / "75-extra.sql").write_text(
        "CREATE FUNCTION pgmem.space(p_name text) RETURNS pgmem.spaces LANGUAGE sql AS $$ SELECT NULL::pgmem.spaces $$;\n")
    with pytest.raises(ValueError, match=r"pgmem.space \(1 inputs\) is defined twice in sql/current"):
        src.current_definitions(sql_dir / "current")


def test_yoyo_reads_only_the_migrations():
    """sql/current sits inside the migrations folder: yoyo (files of the folder only) does not see it."""
    from yoyo import read_migrations

    ids = [m.id for m in read_migrations(str(src.SQL_DIR))]
    assert ids == [p.name[:-4] for p in src.migration_files()]
    assert not any("current" in i for i in ids)


# ------------------------------------------------------------------------------------------------------------
# With databases
# ------------------------------------------------------------------------------------------------------------
def test_database_built_from_sql_current_equals_the_migrated_one(migrated, empty_db):
    """pg_dump of schema pgmem, owners and privileges included, of a database built by the migrations and of
    one loaded from sql/current."""
    built = built_from_current(empty_db())
    assert_same(src.dump_schema(migrated), src.dump_schema(built), "sql/current")


def test_the_database_comparison_sees_a_changed_grant(migrated, empty_db, tmp_path):
    sql_dir = copy_sources(tmp_path)
    edit(sql_dir / "current" / "99-privileges.sql", "GRANT SELECT ON pgmem.memories_view TO pgmem_agent;", "")
    built = built_from_current(empty_db(), sql_dir / "current")
    expected, got = src.dump_schema(migrated), src.dump_schema(built)
    assert expected != got
    assert "GRANT SELECT ON TABLE pgmem.memories_view TO pgmem_agent;" in set(expected.splitlines()) - set(got.splitlines())


def test_sqlgen_writes_a_migration_that_equals_sql_current_and_rolls_back(migrated, empty_db, tmp_path):
    """Change three functions in a copy of sql/current (an API definer function over pgvector, a helper of the
    generated statements, and one whose released text predates the pinned search path) and add an API
    function owned by pgmem_api, generate the
    migration, and check: the text check passes, migrating equals loading sql/current, and rolling the new
    migration back equals the database before it."""
    sql_dir = copy_sources(tmp_path)
    cur = sql_dir / "current"
    edit(cur / "60-search.sql", "    v_static boolean := p_as_of IS NULL", "    -- changed by the test\n    v_static boolean := p_as_of IS NULL")
    edit(cur / "60-search.sql", "    -- The query is normalised first", "    -- Changed by the test.\n    -- The query is normalised first")
    edit(cur / "20-spaces.sql", "        RAISE EXCEPTION 'a time-to-live must be positive'",
         "        -- changed by the test\n        RAISE EXCEPTION 'a time-to-live must be positive'")
    with (cur / "20-spaces.sql").open("a", encoding="utf-8") as f:  # a new API function, as a later migration adds
        f.write("\n-- The spaces, by name.\nCREATE FUNCTION pgmem.test_spaces() RETURNS SETOF pgmem.spaces\n"
                "LANGUAGE sql STABLE SECURITY DEFINER\nSET search_path = pg_catalog, pgmem, pg_temp\n"
                "AS $$ SELECT * FROM pgmem.spaces ORDER BY name $$;\n"
                "COMMENT ON FUNCTION pgmem.test_spaces() IS 'Every embedding space, by name.';\n")
    edit(cur / "99-privileges.sql", "GRANT CREATE ON SCHEMA pgmem TO pgmem_api;\n",
         "GRANT CREATE ON SCHEMA pgmem TO pgmem_api;\nALTER FUNCTION pgmem.test_spaces() OWNER TO pgmem_api;\n")
    with (cur / "99-privileges.sql").open("a", encoding="utf-8") as f:
        f.write("\nGRANT EXECUTE ON FUNCTION pgmem.test_spaces() TO pgmem_agent;\n")
    assert len(src.mismatches(sql_dir)) == 4
    assert sqlgen.main(["--sql-dir", str(sql_dir), "--name", "pgmem-test-change",
                        "search", "pgmem._knn_sql", "set_retention", "test_spaces"]) == 0
    released = src.migration_files(sql_dir)
    # the generated one is the last now (numbers may skip one reserved by another branch)
    number, previous = int(released[-1].name[:4]), released[-2].name[: -len(".sql")]
    forward = (sql_dir / f"{number:04d}.pgmem-test-change.sql").read_text(encoding="utf-8")
    assert forward.splitlines()[1] == f"-- depends: {previous}"
    assert "pgmem._build_knn()" in forward  # _knn_sql feeds the generated statements
    assert src.mismatches(sql_dir) == []

    before = migrated
    again = empty_db()
    apply_migrations(again, sql_dir)
    new = src.dump_schema(again)
    assert "changed by the test" in new and "Changed by the test." in new and "pgmem.test_spaces()" in new
    assert_same(src.dump_schema(built_from_current(empty_db(), cur)), new, "sql/current changed")

    rollback_one(again, sql_dir)
    assert_same(src.dump_schema(before), src.dump_schema(again), "the generated migration rolled back")


def test_sqlgen_refuses_an_unknown_name(capsys):
    with pytest.raises(SystemExit):
        sqlgen.main(["--name", "x", "--stdout", "pgmem.no_such_function"])
    assert "pgmem.no_such_function is defined neither in sql/current nor in the migrations" in capsys.readouterr().err


def test_sqlgen_pending_keeps_one_migration_per_release(migrated, empty_db, tmp_path):
    """Between releases every change goes into the next release's one pending migration: generated from all
    the functions that differ from the last release, regenerated after each change, its hand-written table
    DDL (and the DDL's undoing) kept; it equals sql/current and rolls back to the release."""
    sql_dir = release_sources(tmp_path)
    cur = sql_dir / "current"
    released = empty_db()
    apply_migrations(released, sql_dir)
    last = int(src.migration_files(sql_dir)[-1].name[:4])
    with pytest.raises(SystemExit):  # nothing differs from the release yet
        sqlgen.main(["--sql-dir", str(sql_dir), "--pending", "--version", "0.2.0"])
    edit(cur / "60-search.sql", "    v_static boolean := p_as_of IS NULL", "    -- first change\n    v_static boolean := p_as_of IS NULL")
    assert sqlgen.main(["--sql-dir", str(sql_dir), "--pending", "--version", "0.2.0"]) == 0
    pending = [p for p in src.migration_files(sql_dir) if "0.2.0" in p.name]
    assert [p.name for p in pending] == [f"{last + 1:04d}.pgmem-0.2.0.sql"]
    forward, undo = pending[0], pending[0].with_name(pending[0].name[:-4] + ".rollback.sql")
    # A table added by hand, in sql/current and in the hand-written parts of both files.
    with (cur / "30-memories.sql").open("a", encoding="utf-8") as f:
        f.write("\nCREATE TABLE pgmem.test_t (x integer);\nCOMMENT ON TABLE pgmem.test_t IS 'A test table.';\n")
    edit(forward, sqlgen.HAND + "\n", sqlgen.HAND + "\nCREATE TABLE pgmem.test_t (x integer);\n"
                                                     "COMMENT ON TABLE pgmem.test_t IS 'A test table.';\n")
    edit(undo, sqlgen.HAND_UNDO + "\n", sqlgen.HAND_UNDO + "\nDROP TABLE pgmem.test_t;\n")
    # A second change, then the file regenerated: both functions in it, the hand-written parts kept.
    edit(cur / "20-spaces.sql", "        RAISE EXCEPTION 'a time-to-live must be positive'",
         "        -- second change\n        RAISE EXCEPTION 'a time-to-live must be positive'")
    assert sqlgen.main(["--sql-dir", str(sql_dir), "--pending"]) == 0
    assert [p.name for p in src.migration_files(sql_dir) if "0.2.0" in p.name] == [forward.name]
    text = forward.read_text(encoding="utf-8")
    assert "first change" in text and "second change" in text and "CREATE TABLE pgmem.test_t" in text
    assert "DROP TABLE pgmem.test_t;" in undo.read_text(encoding="utf-8")
    assert src.mismatches(sql_dir) == []

    again = empty_db()
    apply_migrations(again, sql_dir)
    assert_same(src.dump_schema(built_from_current(empty_db(), cur)), src.dump_schema(again), "the pending migration")
    rollback_one(again, sql_dir)
    assert_same(src.dump_schema(released), src.dump_schema(again), "the pending migration rolled back")

    # A second migration after the release is refused: one per release.
    (sql_dir / "9999.pgmem-extra.sql").write_text("-- extra\n-- depends: x\nSELECT 1;\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        sqlgen.main(["--sql-dir", str(sql_dir), "--pending"])
