"""Files that hold memories: backups (modes, restore from a tampered backup), the writer's journal (owner,
mode, symbolic links, lines of another user) and exports. Every test here failed on the code before the
file checks existed: backups were 0644 in a 0755 directory, roles.sql was executed verbatim, the journal
accepted any directory and replayed every line's user."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import uuid
from pathlib import Path

import psycopg
import pytest
from conftest import dsn_for

from pgmem import backup as ops
from pgmem.errors import PgmemError, UnsafePath, ValidationError
from pgmem.journal import Journal, erase_user

OTHER_UID = 65534  # nobody


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def owned_by_someone_else(path: Path, monkeypatch) -> None:
    """Make ``path`` belong to another uid than the one pgmem checks against: chown as root, else pretend
    the process runs as another uid (the check compares ``st_uid`` with ``os.geteuid()``)."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
    else:
        real = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: real + 1)


@pytest.fixture
def target(admin):
    """The name of a database that does not exist yet on the test server; dropped after the test."""
    name = f"{admin.info.dbname[:40]}_sec_restored"
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    yield name
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def evil_roles(admin):
    """Names of roles a tampered backup tries to create; asserted absent, dropped if a test failed."""
    names = [f"evil_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    yield names
    for n in names:
        admin.execute(f'DROP ROLE IF EXISTS "{n}"')


def role(admin, name: str):
    return admin.execute("SELECT rolsuper, rolcanlogin, rolbypassrls, rolcreaterole FROM pg_roles WHERE rolname = %s",
                         (name,)).fetchone()


def rehash(out: Path, name: str) -> None:
    """What an attacker does after editing a file: recompute its hash in the manifest."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"][name] = {"sha256": hashlib.sha256((out / name).read_bytes()).hexdigest(),
                               "bytes": (out / name).stat().st_size}
    (out / "manifest.json").write_text(json.dumps(manifest))


def target_exists(name: str) -> bool:
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


# --------------------------------------------------------------------------------------------------------
# Backups
# --------------------------------------------------------------------------------------------------------
def test_backup_directory_is_0700_and_every_file_0600(alice, dsn, tmp_path, monkeypatch):
    alice.add("Alice's passport number is X1234567")
    monkeypatch.setattr(os, "umask", os.umask)  # restored after the test
    old = os.umask(0o022)  # the usual umask: files would be 0644, directories 0755
    try:
        result = ops.backup(dsn, tmp_path / "nightly")
    finally:
        os.umask(old)
    out = result.path
    assert mode(out) == 0o700
    names = sorted(p.name for p in out.iterdir())
    assert names == ["db.dump", "manifest.json", "roles.json"]
    assert {n: mode(out / n) for n in names} == {n: 0o600 for n in names}

    # an existing empty directory is narrowed to 0700; one owned by someone else or a link is refused
    mine = tmp_path / "empty"
    mine.mkdir(mode=0o755)
    ops.backup(dsn, mine)
    assert mode(mine) == 0o700 and mode(mine / "db.dump") == 0o600
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(UnsafePath, match="symbolic link"):
        ops.backup(dsn, link)
    assert list((tmp_path / "elsewhere").iterdir()) == []
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    owned_by_someone_else(theirs, monkeypatch)
    with pytest.raises(UnsafePath, match="owned by uid"):
        ops.backup(dsn, theirs)


def test_restore_refuses_roles_data_asking_for_superuser_and_creates_nothing(alice, admin, dsn, target, tmp_path,
                                                                              evil_roles):
    alice.add("Alice's bank is in Porto")
    out = ops.backup(dsn, tmp_path / "b").path
    good = json.loads((out / "roles.json").read_text())
    attempts = {
        "superuser attribute": {"name": evil_roles[0], "login": True, "member_of": [], "superuser": True},
        "foreign membership": {"name": evil_roles[0], "login": True, "member_of": ["pg_execute_server_program"]},
        "attributes as text": {"name": evil_roles[0], "login": "LOGIN SUPERUSER", "member_of": []},
        "a group role": {"name": "pgmem_gateway", "login": True, "member_of": []},
    }
    for what, forged in attempts.items():
        (out / "roles.json").write_text(json.dumps({**good, "roles": good["roles"] + [forged]}))
        rehash(out, "roles.json")  # the hash is no defence: an attacker recomputes it
        with pytest.raises(PgmemError, match="was altered") as info:
            ops.restore(out, dsn_for(target))
        assert "nothing was restored" in info.value.message, what
        assert role(admin, evil_roles[0]) is None, what
        assert not target_exists(target), what
    # SQL smuggled into a field is data: a role with that exact (odd) name, nothing else
    odd = f'{evil_roles[0]}"; CREATE ROLE {evil_roles[1]} SUPERUSER; --'
    (out / "roles.json").write_text(json.dumps({**good, "roles": good["roles"] + [
        {"name": odd, "login": False, "member_of": ["pgmem_agent"]}]}))
    rehash(out, "roles.json")
    try:
        result = ops.restore(out, dsn_for(target))
        assert odd in result.roles_created
        assert role(admin, odd) == (False, False, False, False)
        assert role(admin, evil_roles[1]) is None
    finally:
        with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{target}" WITH (FORCE)')
        admin.execute(psycopg.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg.sql.Identifier(odd)))


def test_restore_never_executes_roles_sql_of_an_old_backup(alice, admin, dsn, target, tmp_path, evil_roles):
    """A format-1 backup (roles.sql) whose roles.sql was given statements of the attacker's, hash recomputed:
    restore runs none of them."""
    alice.add("Alice's PIN is 0000")
    out = ops.backup(dsn, tmp_path / "old").path
    manifest = json.loads((out / "manifest.json").read_text())
    if (out / "roles.json").exists():  # written by this pgmem: make it the older format
        (out / "roles.json").unlink()
        manifest["files"].pop("roles.json")
        manifest["format"] = 1
    # the roles that must exist: none beyond the cluster's own (the server is shared, and roles of other test
    # runs come and go)
    manifest["roles"] = []
    roles_sql = out / "roles.sql"
    text = roles_sql.read_text() if roles_sql.exists() else ""
    roles_sql.write_text(text + f"CREATE ROLE {evil_roles[0]} LOGIN SUPERUSER;\n"
                                f"CREATE ROLE {evil_roles[1]} BYPASSRLS;\n")
    (out / "manifest.json").write_text(json.dumps(manifest))
    rehash(out, "roles.sql")
    try:
        result = ops.restore(out, dsn_for(target))
        assert any("roles.sql" in n and "not executed" in n for n in result.notes)
    finally:
        assert role(admin, evil_roles[0]) is None
        assert role(admin, evil_roles[1]) is None

    # a format-1 backup naming a role that does not exist is refused before anything is created
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["roles"] = [evil_roles[0]]
    (out / "manifest.json").write_text(json.dumps(manifest))
    with psycopg.connect(dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{target}" WITH (FORCE)')
    with pytest.raises(PgmemError, match=f"roles {evil_roles[0]} do not exist"):
        ops.restore(out, dsn_for(target))
    assert not target_exists(target)


def test_a_symlinked_file_in_a_backup_is_refused(alice, dsn, target, tmp_path):
    out = ops.backup(dsn, tmp_path / "b").path
    (out / "db.dump").rename(tmp_path / "db.dump")  # same bytes, same hash: only the link is wrong
    (out / "db.dump").symlink_to(tmp_path / "db.dump")
    with pytest.raises(PgmemError, match="not a regular file"):
        ops.restore(out, dsn_for(target))
    assert not target_exists(target)


# --------------------------------------------------------------------------------------------------------
# The writer's journal
# --------------------------------------------------------------------------------------------------------
def test_journal_directory_of_another_uid_world_writable_or_a_link_is_refused(tmp_path, monkeypatch):
    writable = tmp_path / "writable"
    writable.mkdir()
    os.chmod(writable, 0o777)
    with pytest.raises(UnsafePath, match=f"{writable} is writable by its group and others") as info:
        Journal("w", writable)
    assert info.value.hint == f"chmod 700 {writable}"
    assert list(writable.iterdir()) == []  # nothing created in it

    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UnsafePath, match=f"{link} is a symbolic link"):
        Journal("w", link)
    monkeypatch.setenv("PGMEM_JOURNAL_DIR", str(link))
    with pytest.raises(UnsafePath, match="symbolic link"):
        Journal("w")
    with pytest.raises(UnsafePath, match="symbolic link"):
        erase_user("alice", link)
    assert list(real.iterdir()) == []

    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    owned_by_someone_else(theirs, monkeypatch)
    with pytest.raises(UnsafePath, match="owned by uid"):
        Journal("w", theirs)


def test_journal_files_that_are_links_or_someone_elses_are_refused(tmp_path, monkeypatch):
    # what pgmem creates: the directory 0700, every file 0600 (this part held before the checks too)
    j = Journal("w", tmp_path / "new" / "journal")
    j.append([{"id": str(uuid.uuid4()), "user_id": "alice", "content": "x"}])
    j.reject([{"id": str(uuid.uuid4()), "user_id": "alice", "content": "y"}], "refused")
    j.close()
    made = tmp_path / "new" / "journal"
    assert mode(made) == 0o700
    assert {p.name: mode(p) for p in made.iterdir()} == {"w.jsonl": 0o600, "w.lock": 0o600,
                                                          "w.rejected.jsonl": 0o600}

    d = tmp_path / "j"
    d.mkdir(mode=0o700)
    secret = tmp_path / "elsewhere.jsonl"
    secret.write_text('{"id": "1", "user_id": "bob", "content": "planted"}\n')
    (d / "w.jsonl").symlink_to(secret)
    with pytest.raises(UnsafePath, match="w.jsonl is a symbolic link"):
        Journal("w", d)
    (d / "w.jsonl").unlink()
    (d / "w.lock").unlink()  # the lock is taken before the journal is opened
    (d / "w.lock").symlink_to(tmp_path / "lock-target")
    with pytest.raises(UnsafePath, match="w.lock is a symbolic link"):
        Journal("w", d)
    assert not (tmp_path / "lock-target").exists()  # not created through the link
    (d / "w.lock").unlink()
    (d / "w.offset").symlink_to(tmp_path / "offset-target")
    with pytest.raises(UnsafePath, match="w.offset is a symbolic link"):
        Journal("w", d)
    (d / "w.offset").unlink()

    Journal("w", d).close()
    os.chmod(d / "w.jsonl", 0o666)
    with pytest.raises(UnsafePath, match="w.jsonl is writable by its group and others"):
        Journal("w", d)
    os.chmod(d / "w.jsonl", 0o644)  # readable by others (made by hand): narrowed to 0600
    Journal("w", d).close()
    assert mode(d / "w.jsonl") == 0o600
    if os.geteuid() == 0:  # a file of another uid in our directory (only root can make one)
        os.chown(d / "w.jsonl", OTHER_UID, OTHER_UID)
        with pytest.raises(UnsafePath, match="w.jsonl is owned by uid"):
            Journal("w", d)


def test_a_journal_line_for_another_user_is_not_replayed(make_memory, admin, tmp_path):
    mine, planted = str(uuid.uuid4()), str(uuid.uuid4())
    line = {"space": "t64", "agent_id": "planner", "metadata": {}}
    j = Journal("alice.planner", tmp_path)
    j.append([{**line, "id": mine, "user_id": "alice", "content": "Alice likes tea"},
              {**line, "id": planted, "user_id": "bob", "content": "Bob wired money to the attacker"}])
    j.close()

    alice = make_memory("alice", "planner")
    acks = []
    writer = alice.writer(client_name="alice.planner", journal_dir=tmp_path, flush_interval=0.01,
                          on_durable=acks.extend)
    report = writer.close()
    assert (report.committed, report.replayed, report.rejected, report.journaled) == (1, 1, 1, 0)
    assert admin.execute("SELECT user_id, content FROM pgmem.memories ORDER BY user_id").fetchall() == \
        [("alice", "Alice likes tea")]
    rejected = [json.loads(ln) for ln in (tmp_path / "alice.planner.rejected.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejected] == [planted]
    assert "names user 'bob'" in rejected[0]["error"]
    assert {(str(a.id), a.status) for a in acks} == {(mine, "committed"), (planted, "rejected")}

    # a writer of one user cannot be handed another user's write either
    with make_memory("alice", "planner").writer(client_name="w2", journal_dir=tmp_path) as w:
        with pytest.raises(ValidationError, match="writes for user 'alice' only"):
            w.submit("for bob", user_id="bob")

    # a gateway writer, opened for many users, replays every user's lines
    j = Journal("gw", tmp_path)
    j.append([{**line, "id": str(uuid.uuid4()), "user_id": "carol", "content": "Carol's note"}])
    j.close()
    gateway = make_memory(None, "gateway")
    report = gateway.writer(client_name="gw", journal_dir=tmp_path, many_users=True).close()
    assert (report.replayed, report.rejected) == (1, 0)
    assert admin.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = 'carol'").fetchone()[0] == 1


# --------------------------------------------------------------------------------------------------------
# Exports: one place writes private files
# --------------------------------------------------------------------------------------------------------
def test_private_files_are_written_0600_never_through_a_link_or_over_a_file(tmp_path, monkeypatch):
    from pgmem import files

    monkeypatch.setattr(os, "umask", os.umask)
    old = os.umask(0o022)
    try:
        files.write_private(tmp_path / "export.jsonl", ['{"a": 1}\n'])
    finally:
        os.umask(old)
    assert mode(tmp_path / "export.jsonl") == 0o600
    with pytest.raises(FileExistsError):
        files.write_private(tmp_path / "export.jsonl", ["again\n"])
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (tmp_path / "dangling").symlink_to(victim)
    with pytest.raises(FileExistsError):  # a link is a name that exists: never written through
        files.write_private(tmp_path / "dangling", ["x\n"])
    files.write_private(tmp_path / "dangling", ["replaced\n"], force=True)  # the link is replaced, not followed
    assert victim.read_text() == "keep me" and not (tmp_path / "dangling").is_symlink()
    assert (tmp_path / "export.jsonl").read_text() == '{"a": 1}\n'
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
