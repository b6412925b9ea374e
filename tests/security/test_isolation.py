"""Tenant isolation: one user never reads, counts, changes or deletes another user's memories or history,
through the Python client, the stored functions, or plain SQL on the tables. Login roles bound to a user
cannot shed their binding; unbound agent logins have no identity; gateway identities do not leak across
transactions or pooled connections; row-level security is enabled, forced and evaluated once per statement."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from conftest import as_api, connect, dsn_for

from pgmem import IdentityError, NotFound, PermissionDenied, PgmemError
from pgmem.testing import HashEmbedder

EMB = HashEmbedder(64)


# --------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------

# Statements on the tables themselves: since migration 0007 agents and gateways may run none of them.
TABLE_STATEMENTS = [
    ("SELECT count(*) FROM pgmem.memories", []), ("SELECT count(*) FROM pgmem.history", []),
    ("SELECT count(*) FROM pgmem.memory_vectors", []), ("SELECT count(*) FROM pgmem.turns", []),
    ("SELECT count(*) FROM pgmem.memory_sources", []), ("SELECT count(*) FROM pgmem.tenant_sizes", []),
    ("SELECT count(*) FROM pgmem.key_locks", []),
    ("SELECT count(*) FROM pgmem.memory_terms", []), ("SELECT count(*) FROM pgmem.term_stats", []),
    ("SELECT count(*) FROM pgmem.spaces", []), ("SELECT count(*) FROM pgmem.role_bindings", []),
    ("UPDATE pgmem.memories SET metadata = '{}'", []), ("DELETE FROM pgmem.memories", []),
    ("LOCK TABLE pgmem.memories IN ACCESS EXCLUSIVE MODE", []), ("LOCK TABLE pgmem.spaces IN SHARE MODE", []),
    ("TRUNCATE pgmem.memories", []), ("SELECT nextval('pgmem.memories_seq')", []),
]

def vec(text: str):
    return EMB.embed([text])[0]


def snapshot(admin: psycopg.Connection, user_id: str) -> tuple[list, list]:
    """Every raw memories and history row of one user (admin bypasses RLS)."""
    mems = admin.execute("SELECT id, agent_id, session_id, content, embedding::text, metadata, created_at, updated_at,"
                         " expires_at, version FROM pgmem.memories WHERE user_id = %s ORDER BY id", [user_id]).fetchall()
    hist = admin.execute("SELECT * FROM pgmem.history WHERE user_id = %s ORDER BY event_id", [user_id]).fetchall()
    return mems, hist


def sql_error(conn: psycopg.Connection, sql: str, params=(), act_as: str | None = None) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        with conn.transaction():
            if act_as:
                conn.execute("SELECT pgmem.act_as(%s)", [act_as])
            conn.execute(sql, params)
    return info.value


def rows(conn: psycopg.Connection, sql: str, params=(), act_as: str | None = None) -> list[tuple]:
    with conn.transaction():
        if act_as:
            conn.execute("SELECT pgmem.act_as(%s)", [act_as])
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else [("rowcount", cur.rowcount)]


@pytest.fixture
def seeded(alice, bob) -> dict:
    """alice and bob (gateway clients) with two memories each, sharing agent, session, metadata and one text."""
    a1 = alice.add("alice's secret plan", agent_id="shared", session_id="s1", metadata={"owner": "alice", "n": 1})
    a2 = alice.add_many([{"content": "the shared sentence", "agent_id": "shared", "session_id": "s1",
                          "metadata": {"owner": "alice", "n": 2}}])[0]
    alice.update(a1.id, metadata={"seen": True})
    b1 = bob.add("bob's note", agent_id="shared", session_id="s1", metadata={"owner": "bob", "n": 1})
    b2 = bob.add("the shared sentence", agent_id="shared", session_id="s1", metadata={"owner": "bob", "n": 2})
    assert b2.created and b2.id != a2.id  # identical text of another user is never deduplicated against alice's
    return {"alice": [a1.id, a2.id], "bob": [b1.id, b2.id]}


@pytest.fixture
def bound(admin, login_role, seeded) -> Iterator[tuple[str, psycopg.Connection]]:
    """(role, connection) of a fresh login in pgmem_agent, bound to alice."""
    role = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [role])
    with connect(admin, role) as conn:
        yield role, conn


# --------------------------------------------------------------------------------------------------------
# User B cannot reach user A's rows, through every API function
# --------------------------------------------------------------------------------------------------------
def test_other_user_cannot_reach_rows_through_memory(alice, bob, admin, seeded):
    a1, a2 = seeded["alice"]
    alice_before = snapshot(admin, "alice")
    for mid in (a1, a2):
        assert bob.get(mid) is None
        assert bob.history(mid) == []
        with pytest.raises(NotFound):
            bob.update(mid, metadata={"owner": "bob"})
        with pytest.raises(NotFound):
            bob.update(mid, content="overwritten by bob")
        with pytest.raises(NotFound):
            bob.update(mid, metadata={"x": 1}, expected_version=1)  # NotFound, not a version oracle
        with pytest.raises(NotFound):
            bob.edit(mid, "secret", "public")
        with pytest.raises(NotFound):
            bob.edit(mid, "text that is in neither", "x")  # NotFound, not a needle oracle
        assert bob.delete(mid) is False
    bob_ids = set(seeded["bob"])
    for kw in [{}, {"filter": {"owner": "alice"}}, {"agent_id": "shared"}, {"session_id": "s1"},
               {"contains": "secret"}, {"contains": "shared"}, {"filter": {"$or": [{"owner": "alice"}, {"n": 1}]}},
               {"filter": {"$not": {"owner": "bob"}}}]:
        assert {r.id for r in bob.list(limit=1000, **kw).items} <= bob_ids, kw
    for q in ["alice's secret plan", "the shared sentence"]:
        assert {r.id for r in bob.search(q, k=1000, min_similarity=-1.0)} <= bob_ids
        assert {r.id for r in bob.search(embedding=vec(q), k=1000, filter={"owner": "alice"})} == set()
    assert [(s.memories, s.agents, s.sessions) for s in bob.stats()] == [(2, 1, 1)]
    assert sum(s.memories for s in bob.stats(all_spaces=True)) == 2
    assert bob.delete_all(filter={"owner": "alice"}) == 0
    assert bob.delete_all(agent_id="shared", session_id="s1", filter={"n": 1}) == 1
    # Adding alice's texts as bob creates bob's own rows.
    assert bob.add("alice's secret plan").id not in (a1, a2)
    assert all(r.id not in (a1, a2) for r in bob.add_many(["alice's secret plan", "the shared sentence"]))
    assert bob.delete_all(confirm=True, all_spaces=True) == 2
    assert snapshot(admin, "alice") == alice_before
    assert {r.id for r in alice.list().items} == {a1, a2}


def test_other_user_cannot_reach_rows_through_sql(admin, login_role, seeded):
    a1, a2 = seeded["alice"]
    alice_before = snapshot(admin, "alice")
    with connect(admin, login_role("pgmem_gateway")) as gw:
        calls = [
            ("SELECT * FROM pgmem.get(%s)", [a1], []),
            ("SELECT * FROM pgmem.history(%s)", [a1], []),
            ("SELECT pgmem.delete(%s)", [a1], [(False,)]),
            ("SELECT content FROM pgmem.list('t64', p_limit => 1000) WHERE user_id <> 'bob'", [], []),
            ("SELECT content FROM pgmem.list('t64', p_filter => '{\"owner\": \"alice\"}')", [], []),
            ("SELECT content FROM pgmem.search('t64', %s::vector, 1000, p_min_similarity => -1) WHERE user_id <> 'bob'",
             [vec("alice's secret plan")], []),
            ("SELECT memories FROM pgmem.stats('t64')", [], [(2,)]),
            ("SELECT pgmem.delete_all('t64', p_filter => '{\"owner\": \"alice\"}')", [], [(0,)]),
            ("SELECT user_id, content FROM pgmem.memories_view WHERE user_id = 'alice'", [], []),
            ("SELECT count(*) FROM pgmem.memories_view", [], [(2,)]),
            ("SELECT count(*) FROM pgmem.memories_view WHERE user_id <> 'bob'", [], [(0,)]),
            ("SELECT (pgmem.add('t64', 'the shared sentence', %s::vector)).id = %s", [vec("shared"), a2], [(False,)]),
            ("SELECT bool_or(id = ANY(%s)) FROM pgmem.add_batch('t64', ARRAY['alice''s secret plan', 'x'],"
             " ARRAY[%s, %s]::vector[])", [[a1, a2], vec("a"), vec("x")], [(False,)]),
        ]
        for sql, params, expected in calls:
            assert rows(gw, sql, params, act_as="bob") == expected, sql
        for sql, params in [("SELECT * FROM pgmem.update(%s, p_metadata => '{\"owner\": \"bob\"}')", [a1]),
                            ("SELECT * FROM pgmem.update(%s, 'overwritten', %s::vector)", [a2, vec("o")]),
                            ("SELECT * FROM pgmem.edit(%s, 'secret', 'public', %s::vector)", [a1, vec("p")]),
                            ("SELECT * FROM pgmem.edit(%s, 'absent text', 'x', %s::vector)", [a1, vec("p")])]:
            assert sql_error(gw, sql, params, act_as="bob").sqlstate == "PGM03", sql
        # The tables themselves are closed to gateways (API only, migration 0007).
        for sql, params in TABLE_STATEMENTS:
            assert sql_error(gw, sql, params, act_as="bob").sqlstate == "42501", sql
        err = sql_error(gw, "INSERT INTO pgmem.memories (user_id, space_id, content, embedding)"
                            " SELECT 'alice', space_id, 'forged', %s::vector FROM pgmem.spaces", [vec("f")], act_as="bob")
        assert err.sqlstate == "42501"
        err = sql_error(gw, "UPDATE pgmem.memories SET user_id = 'alice' WHERE user_id = 'bob'", act_as="bob")
        assert err.sqlstate in ("42501", "PGM08")
    assert snapshot(admin, "alice") == alice_before


# --------------------------------------------------------------------------------------------------------
# A login bound to alice cannot act as bob
# --------------------------------------------------------------------------------------------------------
def test_bound_login_cannot_switch_user(admin, bound, seeded):
    role, conn = bound
    visible = "SELECT DISTINCT user_id FROM pgmem.memories_view"
    assert rows(conn, "SELECT pgmem.current_user_id()") == [("alice",)]
    assert rows(conn, visible) == [("alice",)]
    conn.execute("SET pgmem.user_id = 'bob'")
    assert rows(conn, visible) == [("alice",)]
    conn.execute("SELECT set_config('pgmem.user_id', 'bob', false)")
    assert rows(conn, "SELECT pgmem.current_user_id()") == [("alice",)]
    with conn.transaction():
        conn.execute("SELECT set_config('pgmem.user_id', 'bob', true)")
        assert conn.execute(visible).fetchall() == [("alice",)]
        assert conn.execute("SELECT count(*) FROM pgmem.get(%s)", [seeded["bob"][0]]).fetchone() == (0,)
    conn.execute("RESET pgmem.user_id")
    err = sql_error(conn, "SELECT pgmem.act_as('bob')")
    assert err.sqlstate == "PGM01"
    assert rows(conn, "SELECT pgmem.act_as('alice')") == [("alice",)]
    for sql in ["SET ROLE pgmem_gateway", "SET ROLE postgres", "SET SESSION AUTHORIZATION postgres",
                "SELECT set_config('role', 'pgmem_gateway', false)"]:
        assert sql_error(conn, sql).sqlstate == "42501", sql
    assert rows(conn, "SELECT current_user, session_user") == [(role, role)]
    assert rows(conn, visible) == [("alice",)]


def test_bound_login_sees_and_writes_only_its_user(admin, bound, seeded):
    role, conn = bound
    a1, _ = seeded["alice"]
    b1, b2 = seeded["bob"]
    bob_before = snapshot(admin, "bob")
    assert {r[0] for r in rows(conn, "SELECT id FROM pgmem.memories_view")} == set(seeded["alice"])
    assert {r[0] for r in rows(conn, "SELECT user_id FROM pgmem.memories_view")} == {"alice"}
    assert rows(conn, "SELECT count(*) FROM pgmem.get(%s)", [b1]) == [(0,)]
    assert rows(conn, "SELECT count(*) FROM pgmem.history(%s)", [b1]) == [(0,)]
    assert rows(conn, "SELECT pgmem.delete(%s)", [b1]) == [(False,)]
    assert sql_error(conn, "SELECT * FROM pgmem.update(%s, p_metadata => '{}')", [b2]).sqlstate == "PGM03"
    insert = ("INSERT INTO pgmem.memories (user_id, space_id, content, embedding)"
              " SELECT %s, space_id, %s, %s::vector FROM pgmem.spaces WHERE name = 't64'")
    # No statement of its own reaches a table, not even for its own user (API only, migration 0007).
    assert sql_error(conn, insert, ["bob", "forged for bob", vec("forged")]).sqlstate == "42501"
    assert sql_error(conn, insert, ["alice", "inserted directly", vec("direct")]).sqlstate == "42501"
    for sql, params in TABLE_STATEMENTS:
        assert sql_error(conn, sql, params).sqlstate == "42501", sql
    assert sql_error(conn, "UPDATE pgmem.memories SET user_id = 'bob' WHERE id = %s", [a1]).sqlstate == "42501"
    assert snapshot(admin, "bob") == bob_before
    # History is append-only for agents, and the pgmem schema is closed to them.
    for sql in ["UPDATE pgmem.history SET new_content = 'rewritten'", "DELETE FROM pgmem.history",
                "INSERT INTO pgmem.history (user_id, memory_id, event) VALUES ('alice', gen_random_uuid(), 'ADD')",
                "TRUNCATE pgmem.history", "TRUNCATE pgmem.memories",
                "SELECT * FROM pgmem.role_bindings", "INSERT INTO pgmem.role_bindings VALUES (session_user, 'bob')",
                "UPDATE pgmem.role_bindings SET user_id = 'bob'", "SELECT pgmem.bind_role(session_user, 'bob')",
                "SELECT pgmem.unbind_role(session_user)", "SELECT pgmem.create_space('x64', 'm', 64)",
                "INSERT INTO pgmem.spaces (name, model, dims, index_kind) VALUES ('x', 'm', 3, 'exact')",
                "CREATE TABLE pgmem.x ()", "CREATE VIEW pgmem.v AS SELECT 1",
                "CREATE FUNCTION pgmem.current_user_id(p text) RETURNS text LANGUAGE sql AS 'SELECT p'",
                "ALTER TABLE pgmem.memories DISABLE ROW LEVEL SECURITY", "ALTER TABLE pgmem.memories NO FORCE ROW LEVEL SECURITY",
                "DROP POLICY memories_tenant ON pgmem.memories", "ALTER TABLE pgmem.history DISABLE TRIGGER USER",
                "CREATE POLICY open ON pgmem.memories USING (true)", "DROP TABLE pgmem.history"]:
        assert sql_error(conn, sql).sqlstate == "42501", sql
    assert snapshot(admin, "bob") == bob_before


def test_bound_login_through_memory(admin, bound, make_memory, seeded):
    role, _ = bound
    dsn = dsn_for(admin.info.dbname, user=role)
    me = make_memory(None, "agent-x", dsn=dsn, role=None)
    assert me.whoami() == "alice"
    added = me.add("written by the bound agent")
    assert added.created
    assert {r.id for r in me.list().items} == set(seeded["alice"]) | {added.id}
    assert {r.user_id for r in me.search("the shared sentence", k=100)} == {"alice"}
    assert me.get(seeded["bob"][0]) is None
    # Naming its own user is fine; naming another is refused on every call.
    assert make_memory("alice", dsn=dsn, role=None).whoami() == "alice"
    as_bob = make_memory("bob", dsn=dsn, role=None)
    for call in [as_bob.whoami, as_bob.list, lambda: as_bob.add("x"), lambda: as_bob.get(seeded["bob"][0]),
                 lambda: as_bob.search("x"), as_bob.stats, lambda: as_bob.delete_all(confirm=True)]:
        with pytest.raises(IdentityError):
            call()
    with pytest.raises(PermissionDenied):
        make_memory(None, dsn=dsn, role=None, space="fresh-space").add("needs a new space")


def test_bound_gateway_member_is_still_bound(admin, login_role, seeded):
    role = login_role("pgmem_agent", "pgmem_gateway")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [role])
    with connect(admin, role) as conn:
        assert sql_error(conn, "SELECT pgmem.act_as('bob')").sqlstate == "PGM01"
        conn.execute("SET pgmem.user_id = 'bob'")
        assert rows(conn, "SELECT DISTINCT user_id FROM pgmem.memories_view") == [("alice",)]


# --------------------------------------------------------------------------------------------------------
# Logins without an identity
# --------------------------------------------------------------------------------------------------------
def test_unbound_agent_login_has_no_identity(admin, login_role, make_memory, seeded):
    role = login_role("pgmem_agent")
    with connect(admin, role) as conn:
        for sql in ["SELECT count(*) FROM pgmem.memories_view"]:
            assert rows(conn, sql) == [(0,)]
            conn.execute("SET pgmem.user_id = 'alice'")
            assert rows(conn, sql) == [(0,)]
            conn.execute("RESET pgmem.user_id")
        for sql, params in TABLE_STATEMENTS:
            assert sql_error(conn, sql, params).sqlstate == "42501", sql
        assert rows(conn, "SELECT pgmem.current_user_id()") == [(None,)]
        assert sql_error(conn, "SELECT pgmem.act_as('alice')").sqlstate == "PGM01"
        for sql, params in [("SELECT * FROM pgmem.get(%s)", [seeded["alice"][0]]),
                            ("SELECT * FROM pgmem.list('t64')", []), ("SELECT * FROM pgmem.stats()", []),
                            ("SELECT * FROM pgmem.history(%s)", [seeded["alice"][0]]),
                            ("SELECT * FROM pgmem.search('t64', %s::vector)", [vec("x")]),
                            ("SELECT * FROM pgmem.add('t64', 'x', %s::vector)", [vec("x")]),
                            ("SELECT pgmem.delete(%s)", [seeded["alice"][0]]),
                            ("SELECT pgmem.delete_all(p_confirm => true)", [])]:
            assert sql_error(conn, sql, params).sqlstate == "PGM01", sql
        err = sql_error(conn, "INSERT INTO pgmem.memories (user_id, space_id, content, embedding)"
                              " SELECT 'alice', space_id, 'forged', %s::vector FROM pgmem.spaces", [vec("f")])
        assert err.sqlstate == "42501"
    dsn = dsn_for(admin.info.dbname, user=role)
    for user_id in [None, "alice"]:
        m = make_memory(user_id, dsn=dsn, role=None)
        for call in [m.list, lambda: m.get(seeded["alice"][0]), lambda: m.add("x"), lambda: m.search("x"), m.stats]:
            with pytest.raises(IdentityError):
                call()
    # A login without any pgmem role cannot even reach the schema.
    stranger = login_role()
    with connect(admin, stranger) as conn:
        for sql in ["SELECT count(*) FROM pgmem.memories", "SELECT pgmem.current_user_id()"]:
            assert sql_error(conn, sql).sqlstate == "42501"
    with pytest.raises(PgmemError):
        make_memory("alice", dsn=dsn_for(admin.info.dbname, user=stranger), role=None).list()


# --------------------------------------------------------------------------------------------------------
# Gateway identities are per transaction: no leak across transactions or pooled connections
# --------------------------------------------------------------------------------------------------------
def test_gateway_identity_does_not_leak_across_pooled_transactions(admin, login_role, make_memory):
    admin.execute("SELECT pgmem.create_space('t64', %s, 64)", [EMB.model_name])
    role = login_role("pgmem_gateway")
    alice = make_memory("alice", "gw", dsn=dsn_for(admin.info.dbname, user=role), role=None, min_size=1, max_size=1)
    bob = alice.with_identity(user_id="bob")
    nobody = alice.with_identity(user_id=None)
    for i in range(8):
        client, other = (alice, bob) if i % 2 == 0 else (bob, alice)
        client.add(f"{client.user_id} fact {i}")
        assert nobody.whoami() is None
        with pytest.raises(IdentityError):
            nobody.list()
        assert {r.user_id for r in other.list(limit=1000).items} <= {other.user_id}
        assert other.whoami() == other.user_id
        with pytest.raises(NotFound):
            client.update(uuid.uuid4(), metadata={"x": 1})  # a failed call leaves nothing behind either
        assert nobody.whoami() is None
    assert [r.content for r in alice.list().items] == [f"alice fact {i}" for i in range(0, 8, 2)]
    assert [r.content for r in bob.list().items] == [f"bob fact {i}" for i in range(1, 8, 2)]
    assert alice.pool.get_stats()["pool_max"] == 1  # every call above shared one connection
    # The same on a raw connection: act_as lasts until commit or rollback, never longer.
    with connect(admin, role) as conn:
        with conn.transaction():
            assert conn.execute("SELECT pgmem.act_as('alice')").fetchone() == ("alice",)
            assert conn.execute("SELECT count(*) FROM pgmem.memories_view").fetchone() == (4,)
        assert rows(conn, "SELECT pgmem.current_user_id(), count(*) FROM pgmem.memories_view") == [(None, 0)]
        with pytest.raises(ZeroDivisionError), conn.transaction():
            conn.execute("SELECT pgmem.act_as('bob')")
            raise ZeroDivisionError
        assert rows(conn, "SELECT pgmem.current_user_id(), count(*) FROM pgmem.memories_view") == [(None, 0)]
        conn.autocommit = False
        conn.execute("SELECT pgmem.act_as('bob')")
        conn.commit()
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == (None,)
        conn.rollback()


# --------------------------------------------------------------------------------------------------------
# The catalogue: RLS enabled and forced, no bypass, no DDL for runtime roles, definer functions pinned
# --------------------------------------------------------------------------------------------------------
def test_rls_is_enabled_and_forced_and_roles_are_unprivileged(admin):
    # Every table that holds user data (has a user_id column), not a fixed list: a new table cannot slip by.
    user_tables = [r[0] for r in admin.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped"
        " WHERE n.nspname = 'pgmem' AND c.relkind = 'r' AND c.relname <> 'role_bindings' ORDER BY 1").fetchall()]
    assert {"memories", "history", "memory_vectors"} <= set(user_tables), user_tables
    # The HTTP service's state (migration 0010) names users but is granted to nobody at all: the service
    # reaches it only through gateway-only SECURITY DEFINER functions, so no role reads its rows directly.
    service = [t for t in user_tables if t.startswith("service_")]
    for table in service:
        grants = admin.execute("SELECT count(*) FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = %s::regclass"
                               " AND a.grantee <> c.relowner", [f"pgmem.{table}"]).fetchone()[0]
        assert grants == 0, f"{table} is granted to a role"
    user_tables = [t for t in user_tables if t not in service]
    for table in user_tables:
        assert admin.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class"
                             " WHERE oid = %s::regclass", [f"pgmem.{table}"]).fetchone() == (True, True), table
        policies = admin.execute("SELECT qual, with_check FROM pg_policies WHERE schemaname = 'pgmem' AND tablename = %s",
                                 [table]).fetchall()
        assert policies and all("current_user_id()" in q and "current_user_id()" in c for q, c in policies), policies
    for role in ["pgmem_agent", "pgmem_gateway"]:
        assert admin.execute("SELECT rolbypassrls, rolsuper, rolcreaterole, rolcreatedb FROM pg_roles"
                             " WHERE rolname = %s", [role]).fetchone() == (False, False, False, False), role
        assert admin.execute("SELECT has_schema_privilege(%s, 'pgmem', 'CREATE')", [role]).fetchone() == (False,)
        owned = admin.execute("SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                              " WHERE n.nspname = 'pgmem' AND pg_get_userbyid(c.relowner) = %s", [role]).fetchone()
        assert owned == (0,), role
    assert admin.execute("SELECT has_table_privilege('pgmem_agent', 'pgmem.history', 'UPDATE, DELETE, INSERT, TRUNCATE')"
                         ).fetchone() == (False,)
    assert admin.execute("SELECT has_table_privilege('pgmem_agent', 'pgmem.role_bindings', 'SELECT')").fetchone() == (False,)
    # Nothing in the schema is granted to PUBLIC, and every SECURITY DEFINER function pins its search_path.
    public = admin.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, aclexplode(c.relacl) a"
        " WHERE n.nspname = 'pgmem' AND a.grantee = 0").fetchall()
    assert public == []
    public_fns = admin.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'pgmem' AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a"
        " WHERE a.grantee = 0))").fetchall()
    assert public_fns == []
    unpinned = admin.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'pgmem' AND p.prosecdef"
        " AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')").fetchall()
    assert unpinned == []


def plan_nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def test_policy_evaluates_identity_once_per_statement(admin, bound, alice):
    role, conn = bound
    alice.add_many([f"bulk fact {i}" for i in range(200)])
    # The API's role reads the tables (agents may not since migration 0007): as pgmem_api, under RLS.
    admin.execute("SET ROLE pgmem_api")
    for table in ["memories", "history"]:
        plan = admin.execute(f"EXPLAIN (FORMAT JSON, VERBOSE) SELECT * FROM pgmem.{table}").fetchone()[0]
        plan = plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"]
        nodes = list(plan_nodes(plan))
        init = [n for n in nodes if n.get("Parent Relationship") == "InitPlan"]
        assert init and any("current_user_id()" in " ".join(n.get("Output", [])) for n in init), plan
        for n in nodes:
            if n.get("Parent Relationship") != "InitPlan":
                for key in ("Filter", "Index Cond", "Recheck Cond"):
                    assert "current_user_id()" not in n.get(key, ""), (key, n[key])
    admin.execute("RESET ROLE")
    # And at run time: once per statement over 200+ rows, not once per row (through the view: its own
    # condition and the policy, each an InitPlan).
    admin.execute(f"ALTER ROLE \"{role}\" SET track_functions = 'all'")
    with connect(admin, role) as fresh, fresh.transaction():
        assert fresh.execute("SELECT count(*) FROM pgmem.memories_view").fetchone()[0] >= 200
        calls = fresh.execute("SELECT calls FROM pg_stat_xact_user_functions"
                              " WHERE schemaname = 'pgmem' AND funcname = 'current_user_id'").fetchone()
        assert calls == (2,)
        fresh.execute("SELECT count(*) FROM pgmem.list('t64', p_limit => 1000)")
        calls = fresh.execute("SELECT calls FROM pg_stat_xact_user_functions"
                              " WHERE schemaname = 'pgmem' AND funcname = 'current_user_id'").fetchone()
        assert calls[0] <= 4  # the function's own check plus the policy, not one per row


# --------------------------------------------------------------------------------------------------------
# The lifecycle functions (migration 0003) keep the same wall
# --------------------------------------------------------------------------------------------------------
def test_lifecycle_functions_do_not_cross_users(admin, login_role, alice, seeded):
    a1, _ = seeded["alice"]
    alice.append_turn("s1", "user", "alice's private turn about the secret plan")
    made = alice.consolidate("s1", lambda turns: ["alice summary of the secret plan"])
    alice_turn = alice.recent_turns("s1")[0].turn_id
    alice_before = snapshot(admin, "alice")
    turns_before = admin.execute("SELECT * FROM pgmem.turns WHERE user_id = 'alice' ORDER BY turn_id").fetchall()
    with connect(admin, login_role("pgmem_gateway")) as gw:
        calls = [
            ("SELECT * FROM pgmem.chain(%s)", [a1], []),
            ("SELECT * FROM pgmem.sources(%s)", [made[0].id], []),
            ("SELECT * FROM pgmem.recent_turns('t64', 's1')", [], []),
            ("SELECT * FROM pgmem.pending_turns('t64', 's1')", [], []),
            ("SELECT count(*) FROM pgmem.export_user() r WHERE r ->> 'user_id' <> 'bob'", [], [(0,)]),
            ("SELECT count(*) FROM pgmem.context('t64', 's1', 'secret plan', p_budget_tokens => 5000)"
             " WHERE content LIKE 'alice%%'", [], [(0,)]),
            ("SELECT content FROM pgmem.search('t64', %s::vector, 100, p_as_of => now() + interval '1 day')"
             " WHERE content LIKE 'alice%%'", [vec("alice's secret plan")], []),
        ]
        for sql, params, expected in calls:
            assert rows(gw, sql, params, act_as="bob") == expected, sql
        for sql, params, state in [
            ("SELECT * FROM pgmem.supersede(%s, 'bob rewrites it', %s::vector)", [a1, vec("b")], "PGM03"),
            ("SELECT * FROM pgmem.invalidate(%s)", [a1], "PGM03"),
            ("SELECT * FROM pgmem.consolidate('t64', 's1', %s, ARRAY['x'], ARRAY[%s]::vector[])",
             [[alice_turn], vec("x")], "PGM03"),
            ("SELECT * FROM pgmem.purge()", [], "PGM01"),
            ("SELECT * FROM pgmem.erase_user('alice')", [], "PGM01"),
            ("INSERT INTO pgmem.turns (user_id, space_id, session_id, role, content)"
             " SELECT 'alice', space_id, 's1', 'user', 'forged' FROM pgmem.spaces", [], "42501"),
        ]:
            assert sql_error(gw, sql, params, act_as="bob").sqlstate == state, sql
    # A bound agent may not change retention (owner and gateways only).
    agent = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'bob')", [agent])
    with connect(admin, agent) as conn:
        assert sql_error(conn, "SELECT pgmem.set_retention('t64', interval '1 day')").sqlstate == "42501"
    assert snapshot(admin, "alice") == alice_before
    assert admin.execute("SELECT * FROM pgmem.turns WHERE user_id = 'alice' ORDER BY turn_id").fetchall() == turns_before


# --------------------------------------------------------------------------------------------------------
# The text side's postings and statistics (migration 0025): per user, under row-level security
# --------------------------------------------------------------------------------------------------------
def test_one_users_text_statistics_never_reveal_anothers(make_memory, admin):
    """BM25's statistics (pgmem.term_stats) and postings (pgmem.memory_terms) are kept per user: alice's scores on the
    route that reads them do not move when bob writes hundreds of memories holding her query's terms, and the API
    acting for alice sees none of bob's rows in either table, not even through pgmem._text_top."""
    alice = make_memory("alice", "planner")
    bob = make_memory("bob", "bob-agent")
    alice.add_many([f"garden note {i}: tomatoes and basil" for i in range(12)] + ["the violin recital is on Friday",
                                                                                  "violin strings from the garden shop"])
    space = admin.execute("SELECT space_id FROM pgmem.spaces WHERE name = 't64'").fetchone()[0]

    def alice_text_search() -> list[tuple]:
        with as_api(admin, "alice"):
            admin.execute("SET LOCAL pgmem.exact_search_max_rows = 5")  # the route whose text pool is the postings'
            return admin.execute("SELECT id, text_score, score FROM pgmem.search_hybrid('t64', 'violin garden recital',"
                                 " NULL, 5)").fetchall()

    before = alice_text_search()
    assert before and before[0][1] > 0
    bob.add_many([f"violin garden recital {i}" for i in range(300)])
    assert alice_text_search() == before
    with as_api(admin, "alice"):
        assert admin.execute("SELECT count(*) FROM pgmem.term_stats WHERE user_id = 'bob'").fetchone() == (0,)
        assert admin.execute("SELECT count(*) FROM pgmem.memory_terms WHERE user_id = 'bob'").fetchone() == (0,)
        assert admin.execute("SELECT count(DISTINCT user_id) FROM pgmem.term_stats").fetchone() == (1,)
        assert admin.execute("SELECT o_ids FROM pgmem._text_top('bob', %s, '{violin}', 10, 10, 100)",
                             [space]).fetchone() == (None,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):  # the policy's check: no row written for bob
            with admin.transaction():
                admin.execute("INSERT INTO pgmem.term_stats VALUES ('bob', %s, 'violin', 1, 1)", [space])
    # Superuser view: bob's statistics are his own 300 memories, alice's her 14.
    assert admin.execute("SELECT docs FROM pgmem.term_stats WHERE user_id = 'bob' AND lexeme = ''").fetchone() == (300,)
    assert admin.execute("SELECT docs FROM pgmem.term_stats WHERE user_id = 'alice' AND lexeme = ''").fetchone() == (14,)
