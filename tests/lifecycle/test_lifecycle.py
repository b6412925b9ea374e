"""Issue #5, memory lifecycle: validity (supersede, invalidate, as-of), retention (TTL, purge), erasure, export and
import, session turns, context assembly within a token budget, consolidation. Time is controlled by writing rows
with a past created_at (imports may) under a space TTL, and by explicit expiries a second ahead."""

from __future__ import annotations

import json
import time
from pathlib import Path
from uuid import UUID
from datetime import datetime, timedelta, timezone

import numpy as np
import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg.types.json import Jsonb

from conftest import run
from pgmem import exports
from pgmem import IdentityError, NotFound, ValidationError, VersionConflict
from pgmem.testing import HashEmbedder

NOW = datetime.now(timezone.utc)
DAY = timedelta(days=1)


@pytest.fixture
def root(make_memory):
    """A superuser client (may purge and erase), acting as alice."""
    return make_memory("alice", "ops", role=None)


def raw_count(admin, table: str, user: str) -> int:
    return admin.execute(f"SELECT count(*) FROM pgmem.{table} WHERE user_id = %s", [user]).fetchone()[0]


def user_tables(admin) -> list[str]:
    return [r[0] for r in admin.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id'"
        " WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'r' ORDER BY 1")]


# --------------------------------------------------------------------------------------------------------
# Validity: supersede, invalidate, chain, as-of
# --------------------------------------------------------------------------------------------------------
def test_supersede_hides_the_old_fact_now_and_keeps_it_as_of_before(alice):
    old = alice.add("Alice lives in Paris", metadata={"topic": "home"}).id
    before = datetime.now(timezone.utc)
    time.sleep(0.01)
    new = alice.supersede(old, "Alice lives in Berlin", metadata={"source": "chat"})
    assert new.id != old and new.valid_to is None and new.metadata == {"topic": "home", "source": "chat"}

    now_hits = [m.content for m in alice.search("where does Alice live", k=10)]
    assert "Alice lives in Berlin" in now_hits and "Alice lives in Paris" not in now_hits
    then_hits = [m.content for m in alice.search("where does Alice live", k=10, as_of=before)]
    assert "Alice lives in Paris" in then_hits and "Alice lives in Berlin" not in then_hits
    vec_then = [m.content for m in alice.search(embedding=alice.embedder.embed(["Alice lives in Paris"])[0],
                                                k=10, as_of=before)]
    assert vec_then == ["Alice lives in Paris"]
    assert [m.content for m in alice.list().items] == ["Alice lives in Berlin"]
    assert [m.content for m in alice.list(as_of=before).items] == ["Alice lives in Paris"]

    got = alice.get(old)  # still readable by id, with its validity
    assert got.valid_to is not None and got.superseded_by == new.id
    events = alice.history(old)
    assert [e.event for e in events] == ["ADD", "SUPERSEDE"] and events[-1].related_id == new.id
    assert alice.stats()[0].memories == 1


def test_supersede_chain_and_conflicts(alice):
    a = alice.add("the build server is jenkins-1").id
    b = alice.supersede(a, "the build server is jenkins-2").id
    c = alice.supersede(b, "the build server is buildkite").id
    for probe in (a, b, c):
        assert [m.id for m in alice.chain(probe)] == [a, b, c]
    chain = alice.chain(a)
    assert chain[0].superseded_by == b and chain[1].superseded_by == c and chain[2].superseded_by is None
    assert chain[0].valid_to == chain[1].valid_from and chain[1].valid_to == chain[2].valid_from
    # A fact that no longer holds cannot be superseded, updated or edited again.
    with pytest.raises(VersionConflict, match="superseded by"):
        alice.supersede(a, "the build server is travis")
    with pytest.raises(VersionConflict):
        alice.update(b, metadata={"x": 1})
    with pytest.raises(VersionConflict):
        alice.edit(a, "jenkins-1", "jenkins-0")
    with pytest.raises(ValidationError):
        alice.supersede(c, "the build server is buildkite")  # same content: nothing to supersede
    with pytest.raises(NotFound):
        alice.supersede("00000000-0000-0000-0000-000000000001", "x")
    # The old content may come back as a new fact: a superseded memory does not block it.
    again = alice.add("the build server is jenkins-1")
    assert again.created and again.id != a
    assert alice.chain("00000000-0000-0000-0000-000000000001") == []


def test_supersede_with_valid_from_in_the_past_and_invalidate(alice):
    t0 = NOW - timedelta(days=30)
    old = alice.add_many([{"content": "Bob works at Acme", "created_at": t0}])[0].id
    moved = NOW - timedelta(days=10)
    new = alice.supersede(old, "Bob works at Globex", valid_from=moved)
    assert new.valid_from == moved
    q = alice.embedder.embed(["Bob works at"])[0]
    assert [m.content for m in alice.search(embedding=q, k=5, as_of=NOW - timedelta(days=20))] == ["Bob works at Acme"]
    assert [m.content for m in alice.search(embedding=q, k=5, as_of=NOW - timedelta(days=5))] == ["Bob works at Globex"]
    with pytest.raises(ValidationError):
        alice.supersede(new.id, "Bob works at Initech", valid_from=NOW - timedelta(days=40))  # before it began
    gone = alice.invalidate(new.id)
    assert gone.valid_to is not None and gone.superseded_by is None
    assert alice.search(embedding=q, k=5) == []
    assert [e.event for e in alice.history(new.id)] == ["ADD", "INVALIDATE"]
    with pytest.raises(VersionConflict, match="invalidated"):
        alice.invalidate(new.id)


def test_superseded_memories_stay_private(alice, bob):
    a = alice.add("alice secret plan A").id
    alice.supersede(a, "alice secret plan B")
    assert bob.chain(a) == [] and bob.get(a) is None
    with pytest.raises(NotFound):
        bob.supersede(a, "bob takes over")


# --------------------------------------------------------------------------------------------------------
# Retention: TTL, expiry visible at once, purge
# --------------------------------------------------------------------------------------------------------
def test_space_ttl_expires_old_memories_at_once_everywhere(alice, root, admin):
    ids = alice.add_many([{"content": "three days old", "created_at": NOW - 3 * DAY},
                          {"content": "one hour old", "created_at": NOW - timedelta(hours=1)},
                          {"content": "kept forever", "created_at": NOW - 3 * DAY,
                           "expires_at": datetime(9999, 1, 1, tzinfo=timezone.utc)}])
    assert alice.stats()[0].memories == 3
    space = root.set_retention(2 * DAY)
    assert space.memory_ttl == 2 * DAY and space.turn_ttl == timedelta(days=7)
    # Invisible at once, through every read path.
    assert alice.get(ids[0].id) is None
    assert {m.content for m in alice.list().items} == {"one hour old", "kept forever"}
    assert "three days old" not in [m.content for m in alice.search("three days old", k=10)]
    assert "three days old" not in [m.content for m in alice.search("three days old", k=10, mode="text")]
    assert "three days old" not in [m.content for m in alice.search(embedding=alice.embedder.embed(["three days old"])[0])]
    assert alice.stats()[0].memories == 2
    assert run(admin, "SELECT count(*) FROM pgmem.memories_view") == [(2,)]
    with pytest.raises(NotFound):
        alice.update(ids[0].id, metadata={"a": 1})
    got = alice.get(ids[1].id)
    assert got.expires_at == got.created_at + 2 * DAY  # the effective expiry is reported
    # Lifting the policy brings them back (nothing was removed yet)...
    root.set_retention(None)
    assert alice.get(ids[0].id) is not None
    # ...until a purge runs.
    root.set_retention(2 * DAY)
    assert root.purge().memories == 1
    assert raw_count(admin, "memories", "alice") == 2


def test_purge_counts_and_leaves_only_tombstones(alice, bob, root, admin):
    old = alice.add_many([{"content": f"old note {i}", "created_at": NOW - 10 * DAY} for i in range(3)])
    edited = old[0].id
    alice.update(edited, metadata={"v": 2})
    alice.add("fresh note")
    bob.add_many([{"content": "bob old note", "created_at": NOW - 10 * DAY}])
    soon = alice.add("expires in a moment", expires_at=datetime.now(timezone.utc) + timedelta(seconds=1)).id
    alice.append_turn("s1", "user", "an old turn", created_at=NOW - 30 * DAY)
    alice.append_turn("s1", "user", "a new turn")
    root.set_retention(7 * DAY)
    time.sleep(1.1)
    assert alice.get(soon) is None
    result = root.purge()
    # alice: 3 old + 1 explicit; bob: 1 old. Turns: one past the 7-day default. History: ADD of each
    # purged memory + the UPDATE of the edited one (their EXPIRE tombstones stay).
    assert (result.memories, result.turns, result.history) == (5, 1, 6)
    assert root.purge() == type(result)(0, 0, 0)
    assert raw_count(admin, "memories", "alice") == 1 and raw_count(admin, "memories", "bob") == 0
    assert raw_count(admin, "turns", "alice") == 1
    assert [e.event for e in alice.history(edited)] == ["EXPIRE"]
    assert all(e.old_content is None and e.new_content is None for e in alice.history(edited))
    # No content of a purged memory is left in any table.
    for table, col in [("history", "coalesce(old_content, '') || coalesce(new_content, '')"), ("memories", "content")]:
        assert admin.execute(f"SELECT count(*) FROM pgmem.{table} WHERE {col} LIKE '%old note%'").fetchone()[0] == 0


def test_purge_and_erase_need_a_role_that_sees_every_row(alice):
    with pytest.raises(IdentityError, match="BYPASSRLS"):
        alice.purge()
    with pytest.raises(IdentityError, match="BYPASSRLS"):
        alice.erase_user("bob")


def test_explicit_expiry_must_be_in_the_future(alice):
    with pytest.raises(ValidationError, match="not in the future"):
        alice.add("already gone", expires_at=NOW - DAY)
    with pytest.raises(ValidationError, match="item 1"):
        alice.add_many(["fine", {"content": "gone", "expires_at": NOW - DAY}])
    assert alice.stats()[0].memories == 0


def test_adding_the_content_of_an_expired_memory_stores_it_visibly(alice, root):
    first = alice.add_many([{"content": "the wifi password is hunter2", "created_at": NOW - 10 * DAY}])[0].id
    root.set_retention(DAY)
    again = alice.add("the wifi password is hunter2")
    assert again.created and again.id != first
    assert alice.get(again.id) is not None
    assert [e.event for e in alice.history(first)] == ["ADD", "EXPIRE"]
    batch = alice.add_many([{"content": "batch twin", "created_at": NOW - 10 * DAY}])
    assert alice.get(batch[0].id) is None
    assert alice.add_many(["batch twin"])[0].created


def test_schedule_purge_without_pg_cron_says_what_to_do(admin):
    with pytest.raises(psycopg.Error) as exc:
        admin.execute("SELECT pgmem.schedule_purge()")
    assert exc.value.sqlstate == "PGM00" and "pgmem purge" in exc.value.diag.message_hint


# --------------------------------------------------------------------------------------------------------
# Erasure and export
# --------------------------------------------------------------------------------------------------------
def _populate(m, who: str) -> None:
    ids = m.add_many([f"{who} likes tea", f"{who} has a cat named Tom. The cat is grey."], session_id="s")
    m.update(ids[0].id, metadata={"checked": True})
    m.supersede(ids[0].id, f"{who} likes coffee")
    m.append_turn("s", "user", f"{who}: hello")
    m.append_turn("s", "assistant", "hi there", embed=True)
    m.consolidate("s", lambda turns: [f"{who} greeted the assistant"])
    m.put_keyed([{"key": "profile", "content": f"{who}'s profile"}])  # its lock row in pgmem.key_locks
    # A search routed as for a large tenant (threshold 1) leaves its size in pgmem.tenant_sizes.
    with psycopg.connect(m.dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as(%s), set_config('pgmem.exact_search_max_rows', '1', true)", [who])
        assert conn.execute("SELECT count(*) FROM pgmem.search('t64', %s::vector, 3)",
                            [str(HashEmbedder(64).embed([who])[0].tolist())]).fetchone()[0] == 3


def _populate_service(admin) -> None:
    """What the HTTP service keeps about alice and bob (migration 0010): a key each, their entries in its
    user list, an export record and request-log rows."""
    account = admin.execute("INSERT INTO pgmem.service_accounts (username, password_hash) VALUES ('admin', '$argon2id$x')"
                            " RETURNING account_id").fetchone()[0]
    for who in ("alice", "bob"):
        admin.execute("INSERT INTO pgmem.service_keys (prefix, key_hash, label, kind, user_id, scope)"
                      " VALUES (%s, sha256(%s::bytea), 'k', 'user', %s, 'write')", [f"pgm_{who}", who.encode(), who])
        admin.execute("INSERT INTO pgmem.service_users (user_id) VALUES (%s)", [who])
        admin.execute("INSERT INTO pgmem.service_exports (account_id, user_id) VALUES (%s, %s)", [account, who])
        admin.execute("INSERT INTO pgmem.service_audit (at, method, route, status, latency_ms, key_prefix, user_id)"
                      " VALUES (now(), 'GET', '/v1/memories', 200, 1, %s, %s)", [f"pgm_{who}", who])


def test_erase_user_leaves_nothing_of_theirs_and_touches_nobody_else(alice, bob, root, admin, login_role):
    _populate(alice, "alice")
    _populate(bob, "bob")
    _populate_service(admin)
    agent = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [agent])
    tables = user_tables(admin)
    assert {"memories", "memory_vectors", "turns", "memory_sources", "history", "role_bindings", "tenant_sizes",
            "key_locks"} <= set(tables)
    bob_before = {t: raw_count(admin, t, "bob") for t in tables}
    assert all(raw_count(admin, t, "alice") > 0 for t in tables)

    counts = root.erase_user("alice")
    assert set(counts) == set(tables) and all(n > 0 for n in counts.values())
    # Raw tables, read as the superuser past RLS: no row of alice anywhere, no history of the erasure.
    assert {t: raw_count(admin, t, "alice") for t in tables} == {t: 0 for t in tables}
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE coalesce(old_content, new_content, '') LIKE 'alice%'"
                         ).fetchone()[0] == 0
    assert {t: raw_count(admin, t, "bob") for t in tables} == bob_before
    assert alice.list().items == [] and alice.recent_turns("s") == [] and alice.export() == []
    assert len(bob.search("bob likes", k=10)) > 0


def test_export_then_erase_then_import_round_trips(alice, root, admin):
    _populate(alice, "alice")
    before = alice.export()
    kinds = {r["kind"] for r in before}
    assert kinds == {"memory", "turn", "history"}
    mems = {r["id"]: r for r in before if r["kind"] == "memory"}
    assert any(r["valid_to"] is not None for r in mems.values())  # the superseded fact is exported too
    assert all(len(r["embedding"]) == 64 for r in mems.values())
    root.erase_user("alice")
    counts = alice.import_rows(before)
    assert counts["memory"] == {"imported": len(mems), "skipped": 0}
    assert counts["turn"]["imported"] == 2 and counts["history"]["imported"] == 0
    after = alice.export()
    mems_after = {r["id"]: r for r in after if r["kind"] == "memory"}
    assert set(mems_after) == set(mems)
    for k, r in mems.items():
        a = mems_after[k]
        for field in ("content", "metadata", "created_at", "valid_from", "valid_to", "superseded_by", "session_id"):
            assert a[field] == r[field], field
        assert np.allclose(a["embedding"], r["embedding"])
        assert len(a["vectors"]) == len(r["vectors"]) and len(a["sources"]) == len(r["sources"])
    summary = next(r for r in mems_after.values() if r["content"] == "alice greeted the assistant")
    assert [s.content for s in alice.sources(summary["id"])] == ["alice: hello", "hi there"]
    assert alice.search("where does coffee", k=1)[0].content == "alice likes coffee"
    # Importing again skips what is there: nothing doubles.
    again = alice.import_rows(before)
    assert again["memory"] == {"imported": 0, "skipped": len(mems)}
    assert again["turn"] == {"imported": 0, "skipped": 2}
    assert len(alice.recent_turns("s")) == 2


@pytest.mark.parametrize("kind, typo, field", [("memory", "contnet", "content"), ("memory", "meta_data", "metadata"),
                                               ("turn", "sesion_id", "session_id"), ("history", "evnt", "event")])
def test_import_refuses_a_row_with_an_unknown_key_and_writes_nothing(alice, root, admin, tmp_path, kind, typo, field):
    """A misspelt key in an export row was ignored: the memory came in without its metadata, the turn without
    its session. Now the whole import fails naming the key, through the wrapper and in SQL alike."""
    _populate(alice, "alice")
    rows = alice.export()
    root.erase_user("alice")
    bad = [dict(r) for r in rows]
    i = next(i for i, r in enumerate(bad) if r["kind"] == kind)
    bad[i][typo] = bad[i].pop(field)
    with pytest.raises(ValidationError, match=f"^row {i + 1}: unknown key '{typo}'") as e:  # numbered from 1, as in SQL
        alice.import_rows(bad)
    assert field in str(e.value)  # the accepted keys are listed
    # An export file (pgmem import FILE) names the file's line.
    path = tmp_path / "alice.jsonl"
    path.write_text("".join(exports.jsonl_lines(bad)), encoding="utf-8")
    with pytest.raises(ValidationError, match=f"alice.jsonl line {i + 1}: unknown key '{typo}'"):
        exports.read_export(path)
    assert alice.export() == []
    # The same rows through SQL (a DBA in psql, any other client): the function refuses them itself.
    with pytest.raises(psycopg.Error, match=f"row {i + 1}: unknown key \"{typo}\"") as e:
        run(admin, "SELECT * FROM pgmem.import_user(%s::jsonb[])", ([Jsonb(r) for r in bad],))
    assert e.value.sqlstate == "PGM08"
    assert alice.export() == []
    # A known key the import does not read (user_id: the rows go to the importing user) is accepted.
    assert alice.import_rows(rows)["memory"]["imported"] > 0


def _memory_row(alice) -> dict:
    alice.add("a fact to export")
    return next(r for r in alice.export() if r["kind"] == "memory")


def test_import_user_checks_the_rows_it_writes_whatever_the_arrays_shape(alice, root, admin):
    """From the attack review of 0024: an array from index 0, or of two dimensions, passed the key check as
    NULLs and was written all the same (misspelt keys lost); unnest reads every element."""
    row = _memory_row(alice)
    root.erase_user("alice")
    bad = {k: v for k, v in row.items() if k != "metadata"} | {"metdata": {"lost": True}}
    for literal in ("'[0:0]={%s}'::jsonb[]", "ARRAY[ARRAY[%s]]"):
        elem = "'" + json.dumps(bad).replace("'", "''") + "'::jsonb"
        arg = literal % (json.dumps(json.dumps(bad)) if literal.startswith("'[0") else elem)
        with pytest.raises(psycopg.Error, match="one-dimensional array starting at index 1") as e:
            run(admin, f"SELECT * FROM pgmem.import_user({arg})")
        assert e.value.sqlstate == "PGM08"
    assert alice.export() == []


@pytest.mark.parametrize("change, message", [
    (lambda r: r.update(vectors=[{"kind": "sentence", "embedding": r["embedding"]}] * 1001), "a memory holds at most 1000 extra vectors"),
    (lambda r: r.update(vectors=[5]), "an extra vector is an object of kind sentence or context"),
    (lambda r: r.update(vectors=[{"kind": "bogus", "embedding": r["embedding"]}]), "an extra vector is an object of kind sentence or context"),
    (lambda r: r.update(vectors={"kind": "sentence"}), "vectors and sources must be arrays"),
    (lambda r: r.update(sources=7), "vectors and sources must be arrays"),
    (lambda r: r.update(version=2147483647), "version must be a whole number from 1 to 2147483646"),
    (lambda r: r.update(version=0), "version must be a whole number"),
    (lambda r: r.update(version=1.5), "version must be a whole number"),
    (lambda r: r.update(version="3"), "version must be a whole number"),
])
def test_import_refuses_what_add_refuses_in_sql_and_in_python(alice, root, admin, change, message):
    """An export row was a way around add's limits: 32,767 extra vectors a memory (a raw smallint error past
    that), a version that made every later update fail (integer out of range)."""
    row = _memory_row(alice)
    root.erase_user("alice")
    change(row)
    with pytest.raises(ValidationError, match=f"^row 1: {message}"):
        alice.import_rows([row])
    with pytest.raises(psycopg.Error, match=f"row 1: {message}") as e:
        run(admin, "SELECT * FROM pgmem.import_user(%s::jsonb[])", ([Jsonb(row)],))
    assert e.value.sqlstate == "PGM08"
    assert alice.export() == []


@pytest.mark.parametrize("kind, change, message", [
    ("memory", lambda r: r.pop("content"), "content"),
    ("memory", lambda r: r.update(content=""), "memories_content_check"),
    ("memory", lambda r: r.update(created_at="garbage"), "garbage"),
    ("memory", lambda r: r.update(id="not-a-uuid"), "uuid"),
    ("memory", lambda r: r.update(metadata=None), "metadata"),
    ("memory", lambda r: r.update(sources=["abc"]), "abc"),
    ("turn", lambda r: r.update(role="robot"), "role"),
    ("turn", lambda r: r.pop("session_id"), "session_id"),
    ("turn", lambda r: r.update(turn_id="abc"), "turn_id must be a whole number"),
])
def test_import_names_the_row_of_a_value_the_tables_refuse(alice, root, admin, kind, change, message):
    """From the attack review: a missing or malformed field failed with the table's or the cast's own error
    (23502, 23514, 22P02, 22007: DatabaseError or a message naming no row); now PGM08 naming the row, and
    nothing is written."""
    _populate(alice, "alice")
    rows = alice.export()
    root.erase_user("alice")
    i = next(i for i, r in enumerate(rows) if r["kind"] == kind)
    change(rows[i])
    with pytest.raises(ValidationError, match=f"^row {i + 1}: .*{message}"):
        alice.import_rows(rows)
    with pytest.raises(psycopg.Error, match=f"row {i + 1}: .*{message}") as e:
        run(admin, "SELECT * FROM pgmem.import_user(%s::jsonb[])", ([Jsonb(r) for r in rows],))
    assert e.value.sqlstate == "PGM08"
    assert alice.export() == []


def test_import_rows_reads_python_values_and_names_the_row_of_a_bad_one(alice, root):
    """Rows built in Python: a datetime or UUID value is written as export_user writes it (ISO 8601, text);
    a kind that is not text, or a NaN, is a ValidationError naming the row (were TypeError, and a JSON error
    naming nothing)."""
    row = _memory_row(alice)
    root.erase_user("alice")
    with pytest.raises(ValidationError, match="^row 1: expected an object of kind"):
        alice.import_rows([{"kind": ["memory"]}])
    with pytest.raises(ValidationError, match="^row 2: .*NaN"):
        alice.import_rows([row, dict(row, metadata={"x": float("nan")})])
    assert alice.export() == []
    typed = dict(row, id=UUID(row["id"]), created_at=datetime.fromisoformat(row["created_at"]))
    assert alice.import_rows([typed])["memory"] == {"imported": 1, "skipped": 0}
    assert alice.get(row["id"]).created_at == datetime.fromisoformat(row["created_at"])


def test_the_import_accepts_exactly_the_keys_the_export_writes(alice):
    """pgmem.validation.EXPORT_KEYS (the wrapper's check) and pgmem.import_user's lists (SQL) name the keys
    pgmem.export_user writes: a key added to the export must be added to both, or its rows would be refused."""
    from pgmem.validation import EXPORT_KEYS
    _populate(alice, "alice")
    rows = alice.export()
    assert {r["kind"] for r in rows} == set(EXPORT_KEYS)
    for r in rows:
        assert set(r) == set(EXPORT_KEYS[r["kind"]]), r["kind"]
    sql = (Path(__file__).resolve().parents[2] / "sql" / "current" / "90-retention-erasure.sql").read_text()
    body = sql[sql.index("CREATE FUNCTION pgmem.import_user"):]
    for kind, keys in EXPORT_KEYS.items():
        listed = body[body.index(f"WHEN '{kind}' THEN ARRAY["):]
        listed = listed[:listed.index("]")]
        assert [k.strip().strip("'") for k in listed.split("ARRAY[", 1)[1].split(",")] == list(keys), kind


def test_export_without_embeddings_cannot_be_imported(alice):
    alice.add("a fact")
    rows = alice.export(embeddings=False)
    assert rows[0]["embedding"] is None
    with pytest.raises(ValidationError, match="no embedding"):
        alice.import_rows(rows)


# --------------------------------------------------------------------------------------------------------
# Session turns
# --------------------------------------------------------------------------------------------------------
def test_turns_are_per_user_and_session_in_order(alice, bob):
    for i in range(5):
        alice.append_turn("s1", "user" if i % 2 == 0 else "assistant", f"turn {i}")
    alice.append_turn("s2", "user", "other session")
    bob.append_turn("s1", "user", "bob's turn")
    assert [t.content for t in alice.recent_turns("s1", n=3)] == ["turn 2", "turn 3", "turn 4"]
    assert [t.content for t in bob.recent_turns("s1")] == ["bob's turn"]
    t = alice.recent_turns("s2")[0]
    assert t.expires_at == t.created_at + timedelta(days=7) and t.agent_id == "planner"
    with pytest.raises(ValidationError, match="role"):
        alice.append_turn("s1", "robot", "x")
    with pytest.raises(ValidationError):
        alice.append_turn("s1", "user", "")
    with pytest.raises(ValidationError):
        alice.append_turn(None, "user", "x")


def test_turns_expire_with_the_space_turn_ttl(alice, root):
    alice.append_turn("s", "user", "two hours ago", created_at=NOW - timedelta(hours=2))
    alice.append_turn("s", "user", "just now")
    root.set_retention(None, turn_ttl=timedelta(hours=1))
    assert [t.content for t in alice.recent_turns("s")] == ["just now"]


# --------------------------------------------------------------------------------------------------------
# Context assembly
# --------------------------------------------------------------------------------------------------------
def test_context_never_exceeds_the_budget_and_labels_every_item(alice):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()
    alice.add_many([f"note {i}: {' '.join(words[: 1 + i % len(words)])} about the project deadline" for i in range(40)])
    for i in range(30):
        alice.append_turn("s", "user" if i % 2 == 0 else "assistant",
                          f"message {i} " + "about the deadline " * (1 + i % 5))
    for budget in (1, 5, 20, 50, 120, 300, 800, 2000, 10000):
        ctx = alice.context("when is the project deadline?", session_id="s", budget_tokens=budget)
        assert ctx.tokens <= budget
        assert alice.token_count(ctx.render() or "x") <= max(budget, 1)
        for item in ctx.items:
            assert item.tokens == alice.token_count(item.line)
            assert item.line.startswith("[memory " if item.source == "memory" else f"[turn {item.role} ")
            assert item.line.endswith(item.content)
        turns = [i for i in ctx.items if i.source == "turn"]
        memories = [i for i in ctx.items if i.source == "memory"]
        assert ctx.items == memories + turns  # memories first, then the conversation
        # the turns are the most recent ones, contiguous, oldest first
        ids = [t.turn_id for t in turns]
        all_ids = [t.turn_id for t in alice.recent_turns("s", n=30)]
        assert ids == all_ids[len(all_ids) - len(ids):]
        assert sum(t.tokens for t in turns) <= budget // 2
        assert len({i.memory_id for i in memories}) == len(memories)
    big = alice.context("when is the project deadline?", session_id="s", budget_tokens=10000)
    assert len([i for i in big.items if i.source == "turn"]) == 20  # max_turns
    assert len([i for i in big.items if i.source == "memory"]) == 20  # k


def test_context_does_not_repeat_a_turn_or_its_consolidation(alice):
    alice.append_turn("s", "user", "My dentist appointment is on Friday at 3pm")
    alice.add("My dentist appointment is on Friday at 3pm")  # the same text as a long-term memory
    alice.add("The dentist is Dr. Smith on Main Street")
    alice.consolidate("s", lambda turns: ["User has a dentist appointment Friday 3pm"])
    ctx = alice.context("dentist appointment", session_id="s", budget_tokens=500)
    contents = [i.content for i in ctx.items]
    assert contents.count("My dentist appointment is on Friday at 3pm") == 1
    assert "User has a dentist appointment Friday 3pm" not in contents  # summarises only turns shown
    assert "The dentist is Dr. Smith on Main Street" in contents
    # Without turns in the context, the memory and the summary do appear.
    ctx = alice.context("dentist appointment", session_id="s", budget_tokens=500, max_turns=0)
    assert {"My dentist appointment is on Friday at 3pm", "User has a dentist appointment Friday 3pm"} <= {
        i.content for i in ctx.items}


def test_context_input_is_checked(alice):
    for kw in ({"budget_tokens": 0}, {"budget_tokens": 2_000_001}, {"turn_share": 1.5}, {"max_turns": -1}, {"k": 1001}):
        with pytest.raises(ValidationError):
            alice.context("q", session_id="s", **kw)
    assert alice.context(None, session_id="nothing-here").items == []


def test_token_count_estimate(alice):
    cases = {"": 0, "   \n\t": 0, "a": 1, "abcd": 1, "abcde": 2, "hello, world!": 6, "2023-05-08": 5,
             "日本語": 3, "naïve": 3, "don't": 3}
    for text, want in cases.items():
        assert alice.token_count(text) == want, text


# --------------------------------------------------------------------------------------------------------
# Consolidation
# --------------------------------------------------------------------------------------------------------
def test_consolidation_is_idempotent_and_links_its_sources(alice, admin):
    for i, text in enumerate(["I moved to Lisbon last month", "Nice! How do you like it?", "I love the food there"]):
        alice.append_turn("trip", "user" if i != 1 else "assistant", text)
    calls = []

    def summarise(turns):
        calls.append([t.content for t in turns])
        return ["User moved to Lisbon last month", {"content": "User loves the food in Lisbon", "metadata": {"k": 1}}]

    made = alice.consolidate("trip", summarise)
    assert [r.created for r in made] == [True, True] and len(calls) == 1
    assert len(calls[0]) == 3
    assert alice.consolidate("trip", summarise) == [] and len(calls) == 1  # nothing pending: not called again
    src = alice.sources(made[1].id)
    assert [s.content for s in src] == ["I moved to Lisbon last month", "Nice! How do you like it?",
                                        "I love the food there"]
    assert all(t.consolidated_at is not None for t in alice.recent_turns("trip"))
    assert alice.get(made[1].id).metadata == {"k": 1} and alice.get(made[0].id).session_id == "trip"
    # A retry of the same statement (an ambiguous commit) returns the same memories, stores nothing twice.
    turn_ids = [t.turn_id for t in alice.recent_turns("trip")]
    register_vector(admin)
    emb = HashEmbedder(64).embed(["different words"])
    again = run(admin, "SELECT id, created FROM pgmem.consolidate('t64', 'trip', %s, ARRAY['different words'], %s::vector[])",
                [turn_ids, list(emb)])
    assert sorted(again) == sorted((r.id, False) for r in made)
    assert raw_count(admin, "memories", "alice") == 2
    # New turns are consolidated on their own; overlapping an older consolidation is a conflict.
    alice.append_turn("trip", "user", "I start a new job in May")
    more = alice.consolidate("trip", lambda turns: [f"{len(turns)} new: user starts a new job in May"])
    assert alice.get(more[0].id).content == "1 new: user starts a new job in May"
    new_turn = alice.recent_turns("trip")[-1].turn_id
    alice.append_turn("trip", "user", "one more")
    last = alice.recent_turns("trip")[-1].turn_id
    with pytest.raises(psycopg.Error) as exc:
        run(admin, "SELECT * FROM pgmem.consolidate('t64', 'trip', %s, '{}', '{}')", [[new_turn, last]])
    assert exc.value.sqlstate == "PGM04"


def test_consolidation_rejects_bad_summaries_and_foreign_turns(alice, bob, admin):
    alice.append_turn("s", "user", "hello")
    for bad in ("just a string", [42], [{"content": "x", "id": "y"}], [""]):
        with pytest.raises(ValidationError):
            alice.consolidate("s", lambda turns, bad=bad: bad)
    assert alice.pending_turns("s")[0].consolidated_at is None  # nothing happened
    turn = alice.recent_turns("s")[0].turn_id
    with pytest.raises(psycopg.Error) as exc:
        run(admin, "SELECT * FROM pgmem.consolidate('t64', 's', %s, '{}', '{}')", [[turn]], user_id="bob")
    assert exc.value.sqlstate == "PGM03"
    assert alice.consolidate("s", lambda turns: []) == []  # an empty summary still marks the turns done
    assert alice.pending_turns("s") == []


# --------------------------------------------------------------------------------------------------------
# Migration 0005: pgmem._expiry is STABLE (timestamptz + interval depends on TimeZone), so PostgreSQL inlines it
# --------------------------------------------------------------------------------------------------------
def test_expiry_is_stable_and_inlined(admin):
    # Why it cannot be IMMUTABLE: the same arguments give another instant under another TimeZone (a day across
    # the change to summer time in Paris lasts 23 hours).
    at = datetime(2026, 3, 28, 12, tzinfo=timezone.utc)
    got = {}
    for zone in ("UTC", "Europe/Paris"):
        admin.execute(f"SET TimeZone = '{zone}'")
        got[zone] = admin.execute("SELECT pgmem._expiry(NULL, %s, interval '1 day')", [at]).fetchone()[0]
    admin.execute("RESET TimeZone")
    assert got["UTC"] - got["Europe/Paris"] == timedelta(hours=1)
    assert admin.execute("SELECT provolatile FROM pg_proc WHERE oid = 'pgmem._expiry'::regproc").fetchone()[0] == "s"
    # Inlined: the plan computes the expression itself instead of calling the function once per row.
    plan = "\n".join(r[0] for r in admin.execute(
        "EXPLAIN (VERBOSE, COSTS OFF) SELECT pgmem._expiry(m.expires_at, m.created_at, s.memory_ttl) > now()"
        " FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)"))
    assert "_expiry" not in plan and "COALESCE" in plan, plan
