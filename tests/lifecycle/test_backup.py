"""The backup and restore drill: memories of two users (with extra vectors and history) written through the
wrapper, `pgmem backup` to a directory, `pgmem restore` into a new database on the same server, verified;
then tampering is caught, a damaged backup and a non-empty target are refused, and a role that row-level
security limits may not back up."""

from __future__ import annotations

import json

import psycopg
import pytest
from conftest import dsn_for
from typer.testing import CliRunner

from pgmem import backup as ops
from pgmem.cli import app
from pgmem.errors import IdentityError, PgmemError

runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def target(admin):
    """The name of a database that does not exist yet on the test server; dropped after the test."""
    name = f"{admin.info.dbname[:40]}_restored"
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    yield name
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _raw_counts(conn: psycopg.Connection) -> dict[str, int]:
    tables = [r[0] for r in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = 'pgmem'::regnamespace AND relkind IN ('r', 'p') "
        "ORDER BY relname").fetchall()]
    return {f"pgmem.{t}": conn.execute(f'SELECT count(*) FROM pgmem."{t}"').fetchone()[0] for t in tables}


@pytest.fixture
def filled(make_memory, admin, login_role):
    """Two users' memories with sentence and context vectors, an edit, a delete (history), and an agent
    login bound to alice. Returns the bound login's name."""
    alice = make_memory("alice", "planner")
    bob = make_memory("bob", "bob-agent")
    first = alice.add("Alice likes green tea. She drinks it every morning.", session_id="s1").id
    alice.add("Alice flies to Lisbon on Monday.", session_id="s1")
    gone = alice.add("Alice's old phone number is 555-0100").id
    alice.edit(first, "green tea", "oolong")
    alice.delete(gone)
    bob.add("Bob's laptop is a ThinkPad. He runs Linux on it.", session_id="b1")
    bob.add("Bob is allergic to cats")
    agent = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", (agent,))
    counts = _raw_counts(admin)
    assert counts["pgmem.memory_vectors"] >= 5 and counts["pgmem.history"] >= 7  # the drill covers them
    return agent


def test_backup_restore_drill(dsn, admin, filled, target, tmp_path):
    agent = filled
    before = _raw_counts(admin)
    out = tmp_path / "backup"

    result = runner.invoke(app, ["backup", str(out), "--dsn", dsn, "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    manifest = json.loads(result.stdout)
    assert sorted(p.name for p in out.iterdir()) == ["db.dump", "manifest.json", "roles.json"]
    assert manifest["tables"] == before
    probe_user, probe_id = admin.execute("SELECT user_id, id::text FROM pgmem.memories ORDER BY user_id, id "
                                         "LIMIT 1").fetchone()
    assert (manifest["probe"]["user_id"], manifest["probe"]["id"]) == (probe_user, probe_id)
    assert manifest["migrations"] == [r[0] for r in admin.execute(
        "SELECT migration_id FROM _yoyo_migration ORDER BY applied_at_utc").fetchall()]
    roles = json.loads((out / "roles.json").read_text())
    assert {"name": agent, "login": True, "member_of": ["pgmem_agent"]} in roles["roles"]
    assert roles["bindings"] == [{"role": agent, "user_id": "alice"}]
    assert "password" not in (out / "roles.json").read_text().lower()

    # the bound login is gone from the cluster: restore recreates it from roles.json, with its membership
    admin.execute(f'DROP ROLE "{agent}"')

    result = runner.invoke(app, ["restore", str(out), "--dsn", dsn_for(target), "--json"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    report = json.loads(result.stdout)
    assert report["verified"] and report["created"] and report["database"] == target
    assert report["roles_created"] == [agent]
    assert [(c["name"], c["ok"]) for c in report["checks"]] == [("migrations", True), ("row counts", True),
                                                                 ("probe", True)]
    assert admin.execute("SELECT rolcanlogin, pg_has_role(oid, 'pgmem_agent', 'MEMBER') FROM pg_roles "
                         "WHERE rolname = %s", (agent,)).fetchone() == (True, True)

    with psycopg.connect(dsn_for(target), autocommit=True) as restored:
        assert _raw_counts(restored) == before
        # the restored database works for the bound agent login, with its own user's rows only
        with psycopg.connect(dsn_for(target, user=agent)) as conn:
            rows = conn.execute("SELECT DISTINCT user_id FROM pgmem.memories_view").fetchall()
        assert rows == [("alice",)]

        # tampering: one row less than the manifest says
        restored.execute("DELETE FROM pgmem.memories WHERE user_id = 'bob' AND content = 'Bob is allergic to cats'")
        checks = {c.name: c for c in ops.verify(out, dsn_for(target))}
    assert not checks["row counts"].ok
    assert f"pgmem.memories: {before['pgmem.memories']} in the backup, {before['pgmem.memories'] - 1} restored" \
        in checks["row counts"].detail
    assert checks["migrations"].ok and checks["probe"].ok


def test_restore_refuses_damaged_backup_and_non_empty_target(dsn, admin, filled, target, tmp_path):
    out = tmp_path / "backup"
    ops.backup(dsn, out)
    with pytest.raises(PgmemError, match="is not empty") as info:
        ops.restore(out, dsn)  # the source itself has tables
    tables = [r[0] for r in admin.execute(
        "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname IN ('pgmem', 'public') AND c.relkind IN ('r', 'p') ORDER BY 1").fetchall()]
    assert len(tables) > 5  # so the message must say how many it leaves out
    assert f"({', '.join(tables[:5])}, and {len(tables) - 5} more)" in info.value.message
    with open(out / "db.dump", "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(PgmemError, match="damaged"):
        ops.restore(out, dsn_for(target))
    with psycopg.connect(dsn_for("postgres")) as conn:  # refused before anything was created
        assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (target,)).fetchone() is None
    with pytest.raises(PgmemError, match="not an empty directory"):
        ops.backup(dsn, out)


def test_restore_verification_failure_exits_nonzero(dsn, filled, target, tmp_path, monkeypatch):
    out = tmp_path / "backup"
    ops.backup(dsn, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tables"]["pgmem.history"] += 1  # the manifest no longer matches the dump
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = runner.invoke(app, ["restore", str(out), "--dsn", dsn_for(target)])
    assert result.exit_code == 1
    assert "row counts" in result.stdout and "FAIL" in result.stdout
    assert "error: the restored database failed verification: row counts: pgmem.history" in result.stderr


def test_backup_refused_for_a_role_under_row_level_security(admin, login_role, tmp_path):
    gateway = login_role("pgmem_gateway")
    out = tmp_path / "backup"
    with pytest.raises(IdentityError, match="row-level security") as info:
        ops.backup(dsn_for(admin.info.dbname, user=gateway), out)
    assert "BYPASSRLS" in info.value.hint
    assert not out.exists()
    result = runner.invoke(app, ["backup", str(out), "--dsn", dsn_for(admin.info.dbname, user=gateway)])
    assert result.exit_code == 1 and "error: role" in result.stderr and "hint:" in result.stderr


def test_pg_dump_older_than_the_server_is_not_used(dsn, tmp_path):
    old = tmp_path / "bin"
    old.mkdir()
    fake = old / "pg_dump"
    fake.write_text("#!/bin/sh\necho 'pg_dump (PostgreSQL) 12.22'\n")
    fake.chmod(0o755)
    out = tmp_path / "backup"
    expected = r"no usable pg_dump of PostgreSQL 1[4-9] or newer found; tried .*\(version 12\)"
    with pytest.raises(PgmemError, match=expected) as info:
        ops.backup(dsn, out, bin_dir=old)
    assert "--bin-dir" in info.value.hint
    assert not out.exists()
