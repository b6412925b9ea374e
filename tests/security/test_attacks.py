"""Attacks by a login that speaks SQL, one test per family: escalation through definer functions (types
shadowed in pg_temp, functions planted in public, every definer function called directly), probing other
tenants through the shared HNSW index, planner statistics, denial of service, forged history, recycled role
names. Each runs on real LOGIN roles against a database whose schema owner is the superuser (the embedded
default) and against one whose owner is an ordinary role. docs/security.md is the threat model."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from secdb import OWNERS, BenchTemplate, drop_bench, drop_template, make_bench, make_template, vec

SPY = "SPY ran as"


@pytest.fixture(scope="session")
def bench_templates(server_admin) -> Iterator[dict[str, BenchTemplate]]:
    """One migrated template per kind of schema owner, built once per session."""
    made = {kind: make_template(server_admin, kind) for kind in OWNERS}
    yield made
    for template in made.values():
        drop_template(template, server_admin)


@pytest.fixture(params=OWNERS)
def bench(request, server_admin, bench_templates):
    b = make_bench(server_admin, bench_templates[request.param])
    yield b
    drop_bench(b, server_admin)


def spied(err: psycopg.Error | None, login: str) -> bool:
    """Whether a planted spy ran as anyone but the login itself (its own statements may run its own code)."""
    if err is None or SPY not in str(err):
        return False
    return re.search(rf"{SPY} (\S+)", str(err)).group(1) != login


def error_of(conn: psycopg.Connection, sql: str, params=(), act_as: str | None = None) -> psycopg.Error | None:
    """Run ``sql`` (in a transaction acting for ``act_as`` if given); the error it raised, or None."""
    try:
        with conn.transaction():
            if act_as:
                conn.execute("SELECT pgmem.act_as(%s)", [act_as])
            conn.execute(sql, params)
    except psycopg.Error as exc:
        return exc
    return None


def plant_spies(conn: psycopg.Connection) -> None:
    """In the login's own temporary schema: a function that reports the role it runs as, and domains named
    like the built-in types the API uses whose CHECK calls it. Before migration 0007 definer functions
    searched pg_temp first (it was not listed in their search_path), so these domains replaced text, uuid,
    ... inside them and the spy ran as the schema owner."""
    conn.execute(f"""CREATE FUNCTION pg_temp.spy(anyelement) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION '{SPY} %', current_user; END $$""")
    # (integer, boolean, bigint, interval are keywords: the parser maps them to pg_catalog's types directly)
    for typ in ["text", "uuid", "int4", "jsonb", "bool", "timestamptz", "name", "regconfig", "float8", "int8", "bytea"]:
        conn.execute(f"CREATE DOMAIN pg_temp.{typ} AS pg_catalog.{typ} CHECK (pg_temp.spy(VALUE))")
    conn.execute("CREATE DOMAIN pg_temp.vector AS pg_catalog.text CHECK (pg_temp.spy(VALUE))")
    conn.execute("CREATE TEMP TABLE spaces (space_id int, name text)")  # a relation shadow too
    conn.execute("CREATE TEMP TABLE role_bindings (role_name name, user_id text, role_oid oid)")


API_CALLS = [
    ("SELECT pgmem.current_user_id()", []),
    ("SELECT * FROM pgmem.space('t3')", []),
    ("SELECT * FROM pgmem.add('t3', 'planted', %s)", [vec(1, 0, 0)]),
    ("SELECT * FROM pgmem.add_batch('t3', ARRAY['p1', 'p2'], ARRAY[%s, %s]::vector[])", [vec(1, 1, 0), vec(0, 1, 1)]),
    ("SELECT * FROM pgmem.search('t3', %s, 5)", [vec(1, 0, 0)]),
    ("SELECT * FROM pgmem.search('t3', %s, 5, p_filter => '{\"a\": 1}')", [vec(1, 0, 0)]),
    ("SELECT * FROM pgmem.search_hybrid('t3', 'secret', %s, 5)", [vec(1, 0, 0)]),
    ("SELECT * FROM pgmem.list('t3')", []),
    ("SELECT * FROM pgmem.stats()", []),
    ("SELECT * FROM pgmem.context('t3', 's', 'secret', %s)", [vec(1, 0, 0)]),
    ("SELECT * FROM pgmem.append_turn('t3', 's', 'user', 'hello')", []),
    ("SELECT * FROM pgmem.export_user()", []),
    ("SELECT * FROM pgmem.import_user(ARRAY['{\"kind\": \"history\"}']::jsonb[])", []),
    ("SELECT pgmem.delete_all('t3', p_agent_id => 'nobody')", []),
    ("SELECT * FROM pgmem.create_space('t9', 'm', 9)", []),
    ("SELECT * FROM pgmem.set_retention('t3', '30 days')", []),
    ("SELECT * FROM pgmem.purge()", []),
    ("SELECT * FROM pgmem.erase_user('bob')", []),
    ("SELECT pgmem.bind_role(session_user, 'bob')", []),
]


@pytest.mark.parametrize("kind", ["bound", "agent", "gateway"])
def test_definer_functions_never_run_a_callers_temporary_objects(bench, kind):
    role = bench.login(kind)
    with bench.connect(role) as conn:
        plant_spies(conn)
        for sql, params in API_CALLS + [("SELECT pgmem.act_as('alice')", [])]:
            err = error_of(conn, sql, params, act_as="alice" if kind == "gateway" else None)
            assert not spied(err, role), (sql, str(err))
        # and the login is still what it was: no SUPERUSER, nothing of another tenant
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
    # every SECURITY DEFINER function of the schema, called directly by the login with NULL arguments
    with bench.connect(role) as conn:
        definers = conn.execute(
            "SELECT p.oid::regprocedure::text, p.pronargs FROM pg_proc p"
            " WHERE p.pronamespace = 'pgmem'::regnamespace AND p.prosecdef"
            " AND has_function_privilege(p.oid, 'EXECUTE') AND p.prorettype <> 'trigger'::regtype").fetchall()
        assert definers, "the login may execute definer functions"
        plant_spies(conn)
        for sig, nargs in definers:
            name = sig.split("(")[0]
            err = error_of(conn, f"SELECT {name}({', '.join(['NULL'] * nargs)})")
            assert not spied(err, role), (sig, str(err))


def test_every_function_pins_its_search_path(bench):
    """pg_temp last and never public, for every function of the schema (generated ones included); the one
    exception, pgmem._expiry, is an expression over pg_catalog's exact matches, inlined by the planner."""
    rows = bench.admin.execute(
        "SELECT p.oid::regprocedure::text, p.proconfig, p.prosrc FROM pg_proc p"
        " WHERE p.pronamespace = 'pgmem'::regnamespace").fetchall()
    assert len(rows) > 50
    for sig, config, src in rows:
        if sig.startswith("pgmem._expiry("):
            assert config is None
            assert src.strip() == "SELECT coalesce(p_expires_at, p_created_at + p_ttl, 'infinity'::pg_catalog.timestamptz)"
            continue
        assert config and "search_path=pg_catalog, pgmem, pg_temp" in config, (sig, config)


def test_planted_functions_in_public_never_run_inside_anothers_calls(bench):
    """Where PUBLIC may create in schema public (the default before PostgreSQL 15), an attacker plants
    exact-match overloads of functions the API calls; a victim's API calls must never run them."""
    bench.admin.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
    try:
        attacker = bench.login("agent")
        with bench.connect(attacker) as conn:
            body = f"BEGIN RAISE EXCEPTION '{SPY} % for %', current_user, session_user; END"
            for args in ["text, text", "text, integer", "text, text, text", "text, integer, text",
                         "text, text, integer", "text, integer, integer", "text, text, text, text"]:
                conn.execute(f"CREATE FUNCTION public.format({args}) RETURNS text LANGUAGE plpgsql AS $${body}$$")
            for fn in ["length(text)", "strpos(text, text)", "char_length(text)", "octet_length(text)"]:
                conn.execute(f"CREATE FUNCTION public.{fn.split('(')[0]}({fn.split('(')[1]} RETURNS integer"
                             f" LANGUAGE plpgsql AS $${body}$$")
        victim = bench.login("gateway")
        with bench.connect(victim) as conn:
            conn.execute("SET search_path = public, pg_catalog")  # a victim's own path, planted schema first
            for sql, params in API_CALLS:
                err = error_of(conn, sql, params, act_as="alice")
                assert err is None or SPY not in str(err), (sql, str(err))  # no planted code runs at all
    finally:
        for sig in bench.admin.execute("SELECT p.oid::regprocedure::text FROM pg_proc p"
                                       " WHERE p.pronamespace = 'public'::regnamespace AND p.prosrc LIKE %s",
                                       [f"%{SPY}%"]).fetchall():
            bench.admin.execute(f"DROP FUNCTION {sig[0]}")
        bench.admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")


@pytest.mark.parametrize("kind", ["bound", "agent", "gateway", "nothing"])
def test_no_login_reads_or_locks_a_table(bench, kind):
    """API only: the shared HNSW index cannot be scanned (and EXPLAIN ANALYZE's rows removed by the RLS filter
    cannot be read), no table can be locked, truncated or written, by any kind of login."""
    role = bench.login(kind)
    tables = [r[0] for r in bench.admin.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'r'")]
    assert "pgmem.memories" in tables
    with bench.connect(role) as conn:
        for table in tables:
            for sql in [f"SELECT * FROM {table} LIMIT 1", f"EXPLAIN ANALYZE SELECT * FROM {table}",
                        f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE", f"LOCK TABLE {table} IN ACCESS SHARE MODE",
                        f"TRUNCATE {table}", f"DELETE FROM {table}", f"INSERT INTO {table} DEFAULT VALUES"]:
                err = error_of(conn, sql, act_as="alice" if kind == "gateway" else None)
                assert err is not None and err.sqlstate == "42501", (sql, err)
        probe = ("EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM pgmem.memories"
                 " ORDER BY embedding <=> '[1, 0, 0]' LIMIT 1")
        assert error_of(conn, probe, act_as="alice" if kind == "gateway" else None).sqlstate == "42501"
        if kind != "nothing":
            # The view for people at psql shows no embedding to order by.
            cols = [r[0] for r in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid ="
                                               " 'pgmem.memories_view'::regclass AND attnum > 0")]
            assert "embedding" not in cols and "content" in cols


def test_planner_statistics_reveal_no_tenant(bench):
    admin = bench.admin
    gw = bench.login("gateway")
    with bench.connect(gw) as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as('bob')")
        conn.execute("SELECT * FROM pgmem.add_batch('t3', ARRAY(SELECT 'bob fact ' || i FROM generate_series(1, 300) i),"
                     " ARRAY(SELECT ('[1,' || i || ',1]')::vector FROM generate_series(1, 300) i))")
    admin.execute("ANALYZE")
    tenant = ["memories", "history", "memory_vectors", "turns", "memory_sources", "tenant_sizes", "role_bindings",
              "key_locks", "memory_terms", "term_stats"]
    assert admin.execute("SELECT count(*) FROM pg_stats WHERE schemaname = 'pgmem' AND tablename = ANY(%s)",
                         [tenant]).fetchone() == (0,)
    # What EXPLAIN tells a tenant about a user it names is the same for a user with 302 rows and for nobody.
    with bench.connect(gw) as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as('alice')")
        est = {}
        for who in ["bob", "nobody"]:
            plan = conn.execute("EXPLAIN (FORMAT JSON) SELECT * FROM pgmem.memories_view WHERE user_id = %s",
                                [who]).fetchone()[0]
            plan = plan if isinstance(plan, list) else json.loads(plan)
            est[who] = plan[0]["Plan"]["Plan Rows"]
        assert est["bob"] == est["nobody"]


def test_sizes_and_filters_are_bounded_in_sql(bench):
    """SQL refuses what would cost every tenant: a huge text before its full-text vector is built, huge
    metadata, filters of thousands of conditions; nothing is written."""
    gw = bench.login("gateway")
    before = bench.admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()
    with bench.connect(gw) as conn:
        big = json.dumps({"k": "x" * (10 * 1024 * 1024)})
        err = error_of(conn, "SELECT * FROM pgmem.add('t3', 'big metadata', %s, p_metadata => %s::jsonb)",
                       [vec(1, 0, 0), big], act_as="alice")
        assert err is not None and err.sqlstate == "PGM08" and "65536" in str(err)
        err = error_of(conn, "SELECT * FROM pgmem.add('t3', repeat('word ', 2000000), %s)", [vec(1, 0, 0)], act_as="alice")
        assert err is not None and err.sqlstate == "PGM08" and "100000" in str(err)
        flt = json.dumps({"$or": [{"k": i} for i in range(4000)]})
        for sql in ["SELECT * FROM pgmem.search('t3', %s, 5, p_filter => %s::jsonb)",
                    "SELECT * FROM pgmem.list('t3', p_filter => %s::jsonb)",
                    "SELECT pgmem.delete_all('t3', p_filter => %s::jsonb)"]:
            params = [vec(1, 0, 0), flt] if "search" in sql else [flt]
            err = error_of(conn, sql, params, act_as="alice")
            assert err is not None and err.sqlstate == "PGM07" and "256" in str(err), sql
        ok = json.dumps({"$or": [{"k": i} for i in range(50)]})
        assert error_of(conn, "SELECT * FROM pgmem.list('t3', p_filter => %s::jsonb)", [ok], act_as="alice") is None
    assert bench.admin.execute("SELECT count(*) FROM pgmem.memories").fetchone() == before


def test_an_import_reaches_no_other_tenant_and_forges_no_history(bench):
    """A bound login of alice imports rows that name bob everywhere an export row can: his user id, his memory
    ids (the primary key is (user_id, id)), a history row of his, his memory as superseded_by. Everything
    lands in alice's rows; bob's rows, his history and his view are as they were; history rows are not
    replayed (the import writes its own ADD events)."""
    admin = bench.admin
    bob_id = bench.ids["bob"][0]
    before = admin.execute("SELECT id, content, version FROM pgmem.memories WHERE user_id = 'bob' ORDER BY id").fetchall()
    bob_hist = admin.execute("SELECT count(*) FROM pgmem.history WHERE user_id = 'bob'").fetchone()[0]
    row = {"kind": "memory", "id": str(bob_id), "user_id": "bob", "space": "t3", "content": "imported by alice",
           "embedding": [0.2, 0.4, 1.0], "created_at": "2026-01-02T00:00:00+00:00", "metadata": {},
           "valid_from": "2026-01-02T00:00:00+00:00", "valid_to": "2026-01-03T00:00:00+00:00",
           "superseded_by": str(bench.ids["bob"][1]), "version": 7}
    forged = {"kind": "history", "event_id": 1, "user_id": "bob", "memory_id": str(bob_id), "event": "DELETE",
              "old_content": "bob secret one", "created_at": "2026-01-02T00:00:00+00:00"}
    role = bench.login("bound")
    with bench.connect(role) as conn:
        got = conn.execute("SELECT kind, imported, skipped FROM pgmem.import_user(%s::jsonb[])",
                           [[json.dumps(row), json.dumps(forged)]]).fetchall()
        assert ("memory", 1, 0) in got and ("history", 0, 1) in got
        assert {r[0]["user_id"] for r in conn.execute("SELECT * FROM pgmem.export_user()").fetchall()} == {"alice"}
    assert admin.execute("SELECT user_id FROM pgmem.memories WHERE content = 'imported by alice'").fetchall() == [("alice",)]
    assert admin.execute("SELECT id, content, version FROM pgmem.memories WHERE user_id = 'bob' ORDER BY id"
                         ).fetchall() == before
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE user_id = 'bob'").fetchone()[0] == bob_hist


def test_history_trusts_nothing_a_caller_sets(bench):
    admin = bench.admin
    gw = bench.login("gateway")
    with bench.connect(gw) as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as('alice')")
        # suppress the ADD (ERASE) and name another actor
        conn.execute("SET LOCAL pgmem.event = 'ERASE'")
        conn.execute("SET LOCAL pgmem.actor = 'mallory'")
        one = conn.execute("SELECT id FROM pgmem.add('t3', 'added under ERASE', %s, p_agent_id => 'planner')",
                           [vec(0, 0, 1)]).fetchone()[0]
        two = conn.execute("SELECT id FROM pgmem.add_batch('t3', ARRAY['batch under ERASE'], ARRAY[%s]::vector[],"
                           " p_agent_ids => ARRAY['planner'])", [vec(0, 1, 1)]).fetchone()[0]
        # a delete recorded as an expiry (a tombstone without the content), an update as an edit
        conn.execute("SET LOCAL pgmem.event = 'EXPIRE'")
        conn.execute("SELECT pgmem.delete(%s, 'planner')", [one])
        conn.execute("SET LOCAL pgmem.event = 'EDIT'")
        conn.execute("SELECT * FROM pgmem.update(%s, p_metadata => '{\"x\": 1}', p_agent_id => 'planner')", [two])
    hist = admin.execute("SELECT memory_id, event, actor_agent_id, old_content IS NOT NULL FROM pgmem.history"
                         " WHERE memory_id = ANY(%s) ORDER BY event_id", [[one, two]]).fetchall()
    assert hist == [(one, "ADD", "planner", False), (two, "ADD", "planner", False),
                    (one, "DELETE", "planner", True), (two, "UPDATE", "planner", True)]
    # and no login may write history or memories around the API
    with bench.connect(gw) as conn:
        for sql in ["UPDATE pgmem.memories SET content = 'x'", "INSERT INTO pgmem.history (user_id, memory_id, event)"
                    " VALUES ('alice', gen_random_uuid(), 'ADD')", "DELETE FROM pgmem.history"]:
            assert error_of(conn, sql, act_as="alice").sqlstate == "42501", sql


def test_a_binding_does_not_pass_to_a_new_role_of_the_same_name(bench):
    role = bench.login("bound")
    with bench.connect(role) as conn:
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == ("alice",)
    bench.admin.execute(f'DROP ROLE "{role}"')
    bench.admin.execute(f'CREATE ROLE "{role}" LOGIN')
    bench.admin.execute(f'GRANT pgmem_agent TO "{role}"')
    with bench.connect(role) as conn:
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == (None,)
        assert error_of(conn, "SELECT * FROM pgmem.list('t3')").sqlstate == "PGM01"
        assert conn.execute("SELECT count(*) FROM pgmem.memories_view").fetchone() == (0,)
        assert error_of(conn, "SELECT pgmem.act_as('alice')").sqlstate == "PGM01"


def test_bindings_follow_role_names_that_need_quoting(bench):
    """The identity lookup finds the session's role by its exact name (quoted, never case-folded or split
    at a dot): a bound login named like another, unbound one, differing only in case or quoting, keeps its
    binding, and the other gets none."""
    from conftest import socket_dir

    bound, other = f'Agent "Q" {uuid.uuid4().hex[:6]}.x', None
    other = bound.lower().replace('"', "")
    for name in (bound, other):
        quoted = '"' + name.replace('"', '""') + '"'
        bench.admin.execute(f"CREATE ROLE {quoted} LOGIN")
        bench.admin.execute(f"GRANT pgmem_agent TO {quoted}")
        bench.roles.append(name)
    with psycopg.connect(bench.dsn(bench.owner), autocommit=True) as owner:
        owner.execute("SELECT pgmem.bind_role(%s, 'alice')", [bound])
    with psycopg.connect(host=socket_dir(), dbname=bench.dbname, user=bound, autocommit=True) as conn:
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == ("alice",)
        assert conn.execute("SELECT pgmem.act_as('alice')").fetchone() == ("alice",)
        assert error_of(conn, "SELECT pgmem.act_as('bob')").sqlstate == "PGM01"
        assert sorted(r[0] for r in conn.execute("SELECT content FROM pgmem.list('t3')")) == \
            ["alice secret one", "alice secret two"]
    with psycopg.connect(host=socket_dir(), dbname=bench.dbname, user=other, autocommit=True) as conn:
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone() == (None,)
        assert error_of(conn, "SELECT * FROM pgmem.list('t3')").sqlstate == "PGM01"


def test_row_level_security_still_decides_inside_the_api(bench):
    """Defence in depth: the API's own role reads under RLS (no BYPASSRLS), so a function that forgot its
    user condition would still see one tenant only. Checked as pgmem_api itself."""
    assert bench.admin.execute("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = 'pgmem_api'").fetchone() == (False,)
    with bench.admin.transaction():
        bench.admin.execute("SET LOCAL ROLE pgmem_api")
        bench.admin.execute("SELECT set_config('pgmem.user_id', 'alice', true)")
        assert bench.admin.execute("SELECT DISTINCT user_id FROM pgmem.memories").fetchall() == [("alice",)]
        assert bench.admin.execute("UPDATE pgmem.memories SET metadata = '{}' WHERE user_id = 'bob'").rowcount == 0
    owners = dict(bench.admin.execute(
        "SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace"
        " AND p.proname IN ('add', 'search', 'search_hybrid', 'list', 'get', 'export_user', 'create_space', 'act_as')"))
    assert {k for k, v in owners.items() if v == "pgmem_api"} == {"add", "search", "search_hybrid", "list", "get",
                                                                   "export_user"}
    assert re.fullmatch(r"postgres|owner_\w+", owners["create_space"]) and owners["act_as"] == owners["create_space"]


# --------------------------------------------------------------------------------------------------------
# Found by a review of 0007 as an attacker with psql (fixed in 0008)
# --------------------------------------------------------------------------------------------------------
def test_no_login_can_hold_the_lock_that_space_creation_waits_for(bench):
    """_build_knn serialised on an advisory lock any role could take; a space being created then held its
    lock on pgmem.memories while waiting, and every tenant's writes queued behind it."""
    squatter = bench.login("nothing")
    gw = bench.login("gateway")
    with bench.connect(squatter) as sq:
        sq.execute("SELECT pg_advisory_lock(hashtext('pgmem._build_knn'))")
        with bench.connect(gw) as conn:
            conn.execute("SET statement_timeout = '10s'")
            conn.execute("SELECT * FROM pgmem.create_space('t4', 'm', 4)")  # does not wait for the squatter
        with bench.connect(bench.login("bound")) as agent:
            agent.execute("SET statement_timeout = '5s'")
            agent.execute("SELECT * FROM pgmem.add('t3', 'still writable', %s)", [vec(1, 2, 3)])


@pytest.mark.parametrize("kind", ["nothing", "gateway"])
def test_no_login_can_hold_the_lock_a_tenants_keyed_put_waits_for(bench, kind):
    """put_keyed serialised two puts of a key on an advisory lock of a hash of (user, key) seeded by the space id:
    any role can take that lock, so a login that knew a tenant's id and key (or guessed the space id, a small
    number) could hold it in an open transaction and stall that tenant's puts. The lock is now a row only the
    API's role writes, one per (user, space), under RLS."""
    space_id = bench.admin.execute("SELECT space_id FROM pgmem.spaces WHERE name = 't3'").fetchone()[0]
    squatter = bench.login(kind)
    with bench.connect(squatter) as sq, sq.transaction():
        sq.execute("SELECT pg_advisory_xact_lock(hashtextextended('alice' || chr(31) || 'k1', %s))", [space_id])
        with bench.connect(bench.login("bound")) as agent:
            agent.execute("SET statement_timeout = '5s'")
            err = error_of(agent, "SELECT * FROM pgmem.put_keyed('t3', ARRAY['k1'], ARRAY['keyed text'], ARRAY[%s])",
                           [vec(1, 1, 2)])
            assert err is None, err
            assert agent.execute("SELECT content FROM pgmem.get_keyed('t3', ARRAY['k1'])").fetchone()[0] == "keyed text"


def test_no_pgmem_function_takes_an_advisory_lock(bench):
    """Advisory locks are one namespace per database that every role may take: a lock any pgmem function waited
    for could be held by a login outside pgmem to stall others (found twice: _build_knn, put_keyed)."""
    assert bench.admin.execute(
        "SELECT array_agg(p.oid::regprocedure::text) FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace"
        " AND p.prosrc ~* 'pg_(try_)?advisory'").fetchone() == (None,)


def test_a_tenants_open_keyed_put_does_not_stall_another_tenant(bench):
    """The lock a keyed put takes is the tenant's own: alice's open transaction does not delay bob's puts of
    the same key name."""
    gw = bench.login("gateway")
    with bench.connect(bench.login("bound")) as alice, alice.transaction():
        alice.execute("SELECT * FROM pgmem.put_keyed('t3', ARRAY['shared-name'], ARRAY['alice keyed'], ARRAY[%s])",
                      [vec(1, 2, 2)])
        with bench.connect(gw) as conn:
            conn.execute("SET statement_timeout = '5s'")
            err = error_of(conn, "SELECT * FROM pgmem.put_keyed('t3', ARRAY['shared-name'], ARRAY['bob keyed'], ARRAY[%s])",
                           [vec(2, 1, 2)], act_as="bob")
            assert err is None, err


def test_space_creation_gives_up_instead_of_blocking_every_tenant(bench):
    """create_space waits at most lock_timeout (5 s) for an open transaction on memories, so tenants'
    writes do not queue behind it for as long as some transaction stays open."""
    holder, gw = bench.login("bound"), bench.login("gateway")
    with bench.connect(holder) as h, h.transaction():
        h.execute("SELECT * FROM pgmem.add('t3', 'held open', %s)", [vec(3, 2, 1)])
        with bench.connect(gw) as conn:
            err = error_of(conn, "SELECT * FROM pgmem.create_space('t5', 'm', 5)")
            assert err is not None and err.sqlstate == "55P03", err  # lock_not_available


def test_retention_of_a_shared_space_is_the_owners(bench):
    """A space-wide TTL applies to every tenant at once: a gateway setting 1 microsecond made everyone's
    memories expire. Only the schema owner sets retention."""
    gw = bench.login("gateway")
    with bench.connect(gw) as conn:
        err = error_of(conn, "SELECT * FROM pgmem.set_retention('t3', '1 microsecond')")
        assert err is not None and err.sqlstate == "42501"
    with psycopg.connect(bench.dsn(bench.owner), autocommit=True) as owner:
        owner.execute("SELECT * FROM pgmem.set_retention('t3', '30 days')")


def test_a_space_names_only_a_text_search_configuration_of_pg_catalog(bench):
    gw = bench.login("gateway")
    with bench.connect(gw) as conn:
        conn.execute("CREATE TEXT SEARCH CONFIGURATION pg_temp.evil (COPY = pg_catalog.simple)")
        err = error_of(conn, "SELECT * FROM pgmem.create_space('tsx', 'm', 3, p_text_config => 'pg_temp.evil')")
        assert err is not None and err.sqlstate == "PGM08" and "pg_catalog" in str(err)
        assert error_of(conn, "SELECT * FROM pgmem.create_space('tsy', 'm', 3, p_text_config => 'simple')") is None


def test_edit_costs_linear_time_on_a_long_repetitive_text(bench):
    """edit needs to know whether the text occurs once; it counted every occurrence, copying the rest of
    the content each time (100,000 'a's took 15 s of CPU). Now it counts at most 100."""
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        conn.execute("SET statement_timeout = '3s'")
        mid = conn.execute("SELECT id FROM pgmem.add('t3', repeat('a', 100000), %s)", [vec(1, 0.3, 0)]).fetchone()[0]
        err = error_of(conn, "SELECT * FROM pgmem.edit(%s, 'a', 'b', %s)", [mid, vec(1, 0.3, 0)])
        assert err is not None and err.sqlstate == "PGM05" and "at least 100" in str(err), err


def test_hnsw_indexes_keep_no_statistics_of_embeddings(bench):
    bench.admin.execute("ANALYZE pgmem.memories")
    rows = bench.admin.execute(
        "SELECT count(*) FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid"
        " WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'i'").fetchone()
    assert rows == (0,)


def test_an_expiry_records_no_actor_a_caller_set(bench):
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        old = conn.execute("SELECT id FROM pgmem.add('t3', 'exp me', %s, p_expires_at => now() + interval '1 second')",
                           [vec(1, 0, 0.5)]).fetchone()[0]
        import time
        time.sleep(1.2)
        conn.execute("SET pgmem.actor = 'FORGED-ACTOR'")
        conn.execute("SELECT * FROM pgmem.add_batch('t3', ARRAY['exp me'], ARRAY[%s]::vector[])", [vec(1, 0, 0.5)])
        assert conn.execute("SELECT event, actor_agent_id FROM pgmem.history(%s)", [old]).fetchall()[-1] == ("EXPIRE", None)


# --------------------------------------------------------------------------------------------------------
# Found by a review of 0016 and 0017 as an attacker with psql (fixed in 0019)
# --------------------------------------------------------------------------------------------------------
PUT = "SELECT * FROM pgmem.put_keyed('t3', {keys}, {contents}, {embeddings}{extra})"


def put_sql(keys="ARRAY['k']", contents="ARRAY['keyed']", embeddings="ARRAY['[1,2,3]']::vector[]", extra=""):
    return PUT.format(keys=keys, contents=contents, embeddings=embeddings, extra=extra)


def alice_rows(bench) -> list:
    return bench.admin.execute("SELECT id, content, metadata, version, expires_at FROM pgmem.memories"
                               " WHERE user_id = 'alice' ORDER BY id").fetchall()


@pytest.mark.parametrize("keys, contents", [
    ("ARRAY['k']", "'[0:0]={other}'::text[]"),            # contents[1] is NULL: read as "delete the key"
    ("ARRAY['k', 'k2']", "ARRAY[['other', 'more']]"),      # a 2-D array: contents[i] is NULL for every i
    ("'[0:1]={k,k2}'::text[]", "ARRAY['other', 'more']"),  # keys[2] is NULL: a memory without a key
    ("ARRAY[['k'], ['k2']]", "ARRAY['other', 'more']"),
])
def test_a_keyed_put_refuses_arrays_it_would_misread(bench, keys, contents):
    """put_keyed indexed its arrays from 1 along one dimension: an array of another shape or lower bound (from
    SQL) read as NULL elements, so a write silently deleted the key or stored a memory without one."""
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        conn.execute(put_sql())
        before = alice_rows(bench)
        err = error_of(conn, put_sql(keys=keys, contents=contents,
                                     embeddings="ARRAY['[1,2,4]', '[1,2,5]']::vector[]" if "k2" in keys else
                                     "ARRAY['[1,2,4]']::vector[]"))
        assert err is not None and err.sqlstate == "PGM08" and "one-dimensional" in str(err), err
        assert alice_rows(bench) == before
        assert conn.execute("SELECT content FROM pgmem.get_keyed('t3', ARRAY['k'])").fetchall() == [("keyed",)]


@pytest.mark.parametrize("extra, message", [
    (", p_vector_items => array_fill(0, ARRAY[1001]), p_vector_kinds => array_fill('sentence'::text, ARRAY[1001]),"
     " p_vectors => array_fill('[1,1,1]'::vector, ARRAY[1001])", "at most 1000 extra vectors"),
    (", p_vector_items => array_fill(0, ARRAY[40000]), p_vector_kinds => array_fill('sentence'::text, ARRAY[40000]),"
     " p_vectors => array_fill('[1,1,1]'::vector, ARRAY[40000])", "at most 1000 extra vectors"),
    (", p_vector_items => ARRAY[0], p_vector_kinds => ARRAY[NULL::text], p_vectors => ARRAY['[1,1,1]']::vector[]",
     "sentence or context"),
    (", p_vector_items => ARRAY[0], p_vector_kinds => ARRAY['summary'], p_vectors => ARRAY['[1,1,1]']::vector[]",
     "sentence or context"),
    (", p_vector_items => ARRAY[0], p_vector_kinds => ARRAY['sentence'], p_vectors => ARRAY[NULL]::vector[]",
     "extra vector is NULL"),
])
def test_a_keyed_put_bounds_and_checks_its_extra_vectors(bench, extra, message):
    """put_keyed had no cap on a memory's extra vectors (add's is 1000): 40,000 for one item failed with a raw
    'smallint out of range' after writing them one by one; a NULL kind or vector hit a NOT NULL constraint."""
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        before = alice_rows(bench)
        err = error_of(conn, put_sql(extra=extra))
        assert err is not None and err.sqlstate == "PGM08" and message in str(err), err
        assert alice_rows(bench) == before


def test_a_ttl_past_the_last_timestamp_is_a_clear_error(bench):
    """now() + ttl beyond PostgreSQL's last timestamp (294276 AD) failed with a raw 'timestamp out of range'
    (a Python timedelta.max is 999,999,999 days); an infinite ttl stays 'never expires'."""
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        mid = conn.execute(put_sql()).fetchone()[1]
        before = alice_rows(bench)
        for sql in [put_sql(extra=", p_ttls => ARRAY[interval '999999999 days']"),
                    put_sql(extra=", p_ttls => ARRAY[interval '294276 years']"),
                    f"SELECT * FROM pgmem.set_expiry(ARRAY['{mid}']::uuid[], ARRAY[interval '999999999 days'])"]:
            err = error_of(conn, sql)
            assert err is not None and err.sqlstate == "PGM08" and "294276" in str(err), (sql, err)
        assert alice_rows(bench) == before
        assert conn.execute(put_sql(extra=", p_ttls => ARRAY['infinity'::interval]")).fetchone()[1] == mid
        assert conn.execute("SELECT expires_at FROM pgmem.get_keyed('t3', ARRAY['k'])").fetchone() == (None,)


def test_hybrid_search_bounds_its_query_text(bench):
    """search_hybrid took any query: 25,000 distinct words (0.8 MB) cost 9 s of CPU on a 3,000-memory tenant
    (each term is matched against every candidate), and a longer text failed with a raw 'string is too long for
    tsvector'. A query is now at most 100,000 characters and 256 distinct terms, as context()'s query too."""
    agent = bench.login("bound")
    words = lambda n: " ".join(f"w{i}x" for i in range(n))  # noqa: E731
    with bench.connect(agent) as conn:
        for sql, params in [("SELECT * FROM pgmem.search_hybrid('t3', %s, %s, 5)", [words(257), vec(1, 0, 0)]),
                            ("SELECT * FROM pgmem.search_hybrid('t3', %s, NULL, 5)", [words(257)]),
                            ("SELECT * FROM pgmem.context('t3', 's', %s, %s)", [words(257), vec(1, 0, 0)])]:
            err = error_of(conn, sql, params)
            assert err is not None and err.sqlstate == "PGM08" and "256 distinct terms" in str(err), (sql, err)
        err = error_of(conn, "SELECT * FROM pgmem.search_hybrid('t3', %s, %s, 5)", ["a " * 50001, vec(1, 0, 0)])
        assert err is not None and err.sqlstate == "PGM08" and "100000" in str(err), err
        # the limits themselves are allowed; stop words and repeats do not count
        assert error_of(conn, "SELECT * FROM pgmem.search_hybrid('t3', %s, %s, 5)",
                        [words(256) + " the and of " + words(256), vec(1, 0, 0)]) is None


def test_metadata_values_bounds_its_patterns(bench):
    """metadata_values matched every value against every pattern: 20,000 prefixes of '*' labels (0.3 MB) cost
    48 s of CPU on a tenant with 2,000 namespaces. Prefixes and suffixes are now at most 16 patterns in all."""
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        conn.execute("SELECT * FROM pgmem.add('t3', 'ns item', %s, p_metadata => '{\"ns\": [\"a\", \"b\"]}')",
                     [vec(2, 1, 1)])
        many = json.dumps([["*"]] * 9)
        err = error_of(conn, "SELECT * FROM pgmem.metadata_values('t3', 'ns', %s::jsonb, %s::jsonb)", [many, many])
        assert err is not None and err.sqlstate == "PGM08" and "16 patterns" in str(err), err
        err = error_of(conn, "SELECT * FROM pgmem.metadata_values('t3', 'ns', %s::jsonb)", [json.dumps([["*"]] * 20000)])
        assert err is not None and err.sqlstate == "PGM08" and "16 patterns" in str(err), err
        ok = json.dumps([["*"]] * 8)
        assert conn.execute("SELECT value FROM pgmem.metadata_values('t3', 'ns', %s::jsonb, %s::jsonb)",
                            [ok, ok]).fetchall() == [(["a", "b"],)]


@pytest.mark.parametrize("sql, sqlstate, message", [
    (put_sql(keys="ARRAY[repeat('k', 1025)]"), "PGM08", "at most 1024 characters"),
    (put_sql(keys="ARRAY[NULL::text]"), "PGM08", "non-empty text"),
    (put_sql(keys="ARRAY['']"), "PGM08", "non-empty text"),
    (put_sql(keys="array_fill('k'::text, ARRAY[10001])", contents="array_fill('c'::text, ARRAY[10001])",
             embeddings="array_fill('[1,2,3]'::vector, ARRAY[10001])"), "PGM08", "at most 10000"),
    (put_sql(contents="ARRAY['a', 'b']"), "PGM08", "must all have 1 items"),
    (put_sql(embeddings="ARRAY[NULL]::vector[]"), "PGM08", "an embedding is required"),
    (put_sql(extra=", p_expires_at => ARRAY[now() - interval '1 second']"), "PGM08", "not in the future"),
    (put_sql(extra=", p_expires_at => ARRAY[now() + interval '1 hour'], p_ttls => ARRAY[interval '1 hour']"),
     "PGM08", "not both"),
    (put_sql(extra=", p_ttls => ARRAY[interval '-1 hour']"), "PGM08", "positive"),
    (put_sql(extra=", p_metadata => ARRAY['[1]'::jsonb]"), "PGM08", "JSON object"),
    (put_sql(extra=", p_metadata => ARRAY[jsonb_build_object('x', repeat('a', 70000))]"), "PGM08", "65536"),
    (put_sql(contents="ARRAY[repeat('a', 100001)]", embeddings="ARRAY['[3,2,1]']::vector[]"), "PGM08", "100000"),
    (put_sql(embeddings="ARRAY['[1,2]']::vector[]"), "PGM02", "expected 3 dimensions"),
    # the second item fails after the first was written: nothing of the call stays
    (put_sql(keys="ARRAY['new1', 'new2']", contents="ARRAY['first', 'second']",
             embeddings="ARRAY['[1,1,2]', '[0,0,0]']::vector[]"), "PGM08", "zero vector"),
])
def test_a_keyed_put_refuses_bad_input_and_writes_nothing(bench, sql, sqlstate, message):
    agent = bench.login("bound")
    with bench.connect(agent) as conn:
        conn.execute(put_sql())
        before = alice_rows(bench)
        err = error_of(conn, sql)
        assert err is not None and err.sqlstate == sqlstate and message in str(err), err
        assert alice_rows(bench) == before


def test_a_keyed_put_of_one_key_twice_keeps_one_memory(bench):
    """Duplicate keys in one call are applied in order: one memory, the last content."""
    with bench.connect(bench.login("bound")) as conn:
        rows = conn.execute(put_sql(keys="ARRAY['d', 'd']", contents="ARRAY['d1', 'd2']",
                                    embeddings="ARRAY['[1,2,3]', '[1,2,7]']::vector[]")).fetchall()
        assert rows[0][1] == rows[1][1] and [r[2] for r in rows] == [True, False]
        assert conn.execute("SELECT content FROM pgmem.get_keyed('t3', ARRAY['d'])").fetchall() == [("d2",)]


def test_keyed_and_lifecycle_calls_never_reach_another_tenant(bench):
    """alice's bound login names bob's key, ids, session and metadata key: get_keyed finds nothing, put_keyed
    writes alice's own memory, set_expiry and clear_session skip bob's rows, metadata_values lists alice's."""
    gw, agent = bench.login("gateway"), bench.login("bound")
    with bench.connect(gw) as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as('bob')")
        conn.execute(put_sql(keys="ARRAY['bob-key']", contents="ARRAY['bob keyed']", extra=", p_metadata =>"
                             " ARRAY['{\"ns\": [\"bob\", \"private\"]}'::jsonb]"))
        conn.execute("SELECT * FROM pgmem.append_turn('t3', 'bob-session', 'user', 'bob turn')")
    bob_before = bench.admin.execute("SELECT id, content, metadata, version, expires_at FROM pgmem.memories"
                                     " WHERE user_id = 'bob' ORDER BY id").fetchall()
    bob_ids = [r[0] for r in bob_before]
    with bench.connect(agent) as conn:
        assert conn.execute("SELECT * FROM pgmem.get_keyed('t3', ARRAY['bob-key'])").fetchall() == []
        assert conn.execute("SELECT * FROM pgmem.set_expiry(%s, %s)",
                            [bob_ids, ["1 second"] * len(bob_ids)]).fetchall() == []
        assert conn.execute("SELECT pgmem.clear_session('t3', 'bob-session')").fetchone() == (0,)
        assert conn.execute("SELECT * FROM pgmem.metadata_values('t3', 'ns')").fetchall() == []
        row = conn.execute(put_sql(keys="ARRAY['bob-key']", contents="ARRAY['alice keyed']")).fetchone()
        assert row[1] not in bob_ids and row[2] is True
        conn.execute(put_sql(keys="ARRAY['bob-key']", contents="ARRAY[NULL::text]"))  # deletes alice's key only
    assert bench.admin.execute("SELECT id, content, metadata, version, expires_at FROM pgmem.memories"
                               " WHERE user_id = 'bob' ORDER BY id").fetchall() == bob_before
    assert bench.admin.execute("SELECT count(*) FROM pgmem.turns WHERE user_id = 'bob'").fetchone() == (1,)
    assert bench.admin.execute("SELECT user_id FROM pgmem.key_locks ORDER BY 1").fetchall() == [("alice",), ("bob",)]


@pytest.mark.parametrize("kind", ["bound", "agent", "gateway", "nothing"])
def test_key_locks_is_reachable_only_through_put_keyed(bench, kind):
    """No login reads, writes or locks pgmem.key_locks (so none can hold another tenant's lock row), and the
    keyed functions run as pgmem_api with the pinned search_path."""
    role = bench.login(kind)
    with bench.connect(role) as conn:
        for sql in ["SELECT * FROM pgmem.key_locks", "SELECT * FROM pgmem.key_locks FOR UPDATE",
                    "INSERT INTO pgmem.key_locks VALUES ('bob', 1)", "LOCK TABLE pgmem.key_locks",
                    "DELETE FROM pgmem.key_locks", "TRUNCATE pgmem.key_locks"]:
            err = error_of(conn, sql, act_as="bob" if kind == "gateway" else None)
            assert err is not None and err.sqlstate == "42501", (sql, err)
    rows = bench.admin.execute(
        "SELECT p.proname, pg_get_userbyid(p.proowner), p.prosecdef, p.proconfig FROM pg_proc p"
        " WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = ANY(%s)",
        [["put_keyed", "get_keyed", "set_expiry", "metadata_values", "clear_session", "search_hybrid"]]).fetchall()
    assert len(rows) == 6
    for name, owner, definer, config in rows:
        assert owner == "pgmem_api" and definer and "search_path=pg_catalog, pgmem, pg_temp" in config, name


@pytest.mark.parametrize("sql, message", [
    ("SELECT * FROM pgmem.add_batch('t3', ARRAY['ab'], ARRAY['[5,2,3]']::vector[], p_vector_items => array_fill(0, ARRAY[40000]),"
     " p_vector_kinds => array_fill('sentence'::text, ARRAY[40000]), p_vectors => array_fill('[1,1,1]'::vector, ARRAY[40000]))",
     "at most 1000 extra vectors"),
    ("SELECT * FROM pgmem.add_batch('t3', ARRAY['ab'], ARRAY['[5,2,3]']::vector[], p_vector_items => ARRAY[0],"
     " p_vector_kinds => ARRAY[NULL::text], p_vectors => ARRAY['[1,1,1]']::vector[])", "sentence or context"),
    ("SELECT * FROM pgmem.add_batch('t3', '[0:0]={ab}'::text[], ARRAY['[5,2,3]']::vector[])", "one-dimensional"),
])
def test_a_batch_add_checks_its_extra_vectors_and_arrays(bench, sql, message):
    """add_batch had put_keyed's gaps: 40,000 extra vectors for one item ended in a raw 'smallint out of range',
    a NULL kind or an array from index 0 in raw NOT NULL violations."""
    with bench.connect(bench.login("bound")) as conn:
        before = alice_rows(bench)
        err = error_of(conn, sql)
        assert err is not None and err.sqlstate == "PGM08" and message in str(err), err
        assert alice_rows(bench) == before


# --------------------------------------------------------------------------------------------------------
# Found by an attack review as agent and gateway logins with psql (2 December 2026; fixed in 0022)
# --------------------------------------------------------------------------------------------------------
def test_another_tenants_vectors_never_empty_a_users_hybrid_candidates(bench):
    """Above pgmem.exact_search_max_rows hybrid search takes its vector candidates from the shared HNSW index,
    whose scan stops after hnsw.max_scan_tuples (20,000) entries: when another tenant held more than that many
    vectors nearer the query, bob's pool came back empty and his best match fell out of the results (the exact
    route was taken only when both pools together held fewer than k). The pool now falls back to an exact
    scan of the user's rows when the index returns fewer rows than the pool asks for."""
    gw = bench.login("gateway")
    with bench.connect(gw) as conn:
        conn.execute("SELECT * FROM pgmem.create_space('h8', 'm', 8)")
        with conn.transaction():  # bob: 40 fillers far from e1 that hold the query's words, and his one match
            conn.execute("SELECT pgmem.act_as('bob')")
            conn.execute("SELECT count(*) FROM pgmem.add_batch('h8', ARRAY(SELECT 'filler report ' || g FROM generate_series(1, 40) g),"
                         " ARRAY(SELECT format('[%s,1,1,1,1,1,1,1]', -1 - g)::vector FROM generate_series(1, 40) g))")
            conn.execute("SELECT * FROM pgmem.add('h8', 'The quarterly budget review moved to Tuesday', '[1,0.3,0,0,0,0,0,0]')")
        for batch in range(3):  # alice: 21,000 vectors nearer e1 than bob's match
            with conn.transaction():
                conn.execute("SELECT pgmem.act_as('alice')")
                conn.execute("SELECT count(*) FROM pgmem.add_batch('h8', ARRAY(SELECT 'alice decoy ' || %s || '-' || g"
                             " FROM generate_series(1, 7000) g), ARRAY(SELECT format('[1,%%s,%%s,0,0,0,0,0]', (g %% 97) * 0.0001,"
                             " (g / 97) * 0.0001)::vector FROM generate_series(1, 7000) g))", [batch])

        def top(threshold: int) -> list[str]:
            with conn.transaction():
                conn.execute("SELECT pgmem.act_as('bob')")
                conn.execute("SELECT set_config('pgmem.exact_search_max_rows', %s, true)", [str(threshold)])
                return [r[0] for r in conn.execute(
                    "SELECT content FROM pgmem.search_hybrid('h8', 'filler report', '[1,0,0,0,0,0,0,0]', 5)").fetchall()]

        exact = top(5000)  # bob's 41 rows: the exact route
        assert "The quarterly budget review moved to Tuesday" in exact
        assert top(10) == exact  # the pooled route (41 > 10) finds the same


def test_no_index_keeps_statistics_of_a_tenants_values(bench):
    """memories_user_key_idx indexes the expression metadata->>'pgmem:key': ANALYZE (autovacuum runs it
    unasked) kept every tenant's keys in pg_statistic, even after erase_user. Expression columns of indexes on
    tenant tables keep no statistics, as the tables' own columns."""
    gw = bench.login("gateway")
    with bench.connect(gw) as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as('bob')")
        conn.execute("SELECT * FROM pgmem.put_keyed('t3', ARRAY['bob-secret-key'], ARRAY['keyed'], ARRAY[%s])",
                     [vec(1, 2, 2)])
    bench.admin.execute("ANALYZE pgmem.memories")
    rows = bench.admin.execute(
        "SELECT c.relname FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid"
        " WHERE c.relnamespace = 'pgmem'::regnamespace AND c.relkind = 'i'").fetchall()
    assert rows == []
    assert bench.admin.execute(
        "SELECT count(*) FROM pg_attribute a JOIN pg_index i ON i.indexrelid = a.attrelid"
        " WHERE i.indrelid = ANY(ARRAY['pgmem.memories', 'pgmem.history', 'pgmem.memory_vectors', 'pgmem.turns',"
        " 'pgmem.memory_sources']::regclass[]) AND a.attnum > 0 AND a.attstattarget IS DISTINCT FROM 0"
        " AND i.indexprs IS NOT NULL AND a.attnum = ANY (SELECT k + 1 FROM generate_subscripts(i.indkey, 1) k"
        "   WHERE i.indkey[k] = 0)").fetchone() == (0,)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM pgmem.add_batch('t3', ARRAY['far future'], ARRAY['[1,2,3]']::vector[],"
    " p_created_at => ARRAY['10000-01-01 00:00:00+00']::timestamptz[])",
    "SELECT * FROM pgmem.add_batch('t3', ARRAY['long ago'], ARRAY['[1,2,3]']::vector[],"
    " p_created_at => ARRAY['0001-01-01 00:00:00+00']::timestamptz[])",
    "SELECT * FROM pgmem.add('t3', 'expires after year 9999', '[1,2,4]', p_expires_at => '9999-12-31 23:59:59.999999-14:00')",
    "SELECT * FROM pgmem.append_turn('t3', 's1', 'user', 'turn of the far future', p_created_at => '10000-01-01 00:00:00+00')",
    "SELECT * FROM pgmem.append_turn('t3', 's1', 'user', 'turn expiring late', p_expires_at => '10000-01-01 00:00:00+00')",
])
def test_a_time_no_client_can_read_back_is_refused_at_write(bench, sql):
    """A created_at or expires_at past 9999 was stored, and every later read of the user's rows (list, stats,
    the dashboard's page of every user) failed in the client, which cannot represent the year 10000."""
    with bench.connect(bench.login("bound")) as conn:
        before = alice_rows(bench)
        err = error_of(conn, sql)
        assert err is not None and err.sqlstate == "PGM08" and "between" in str(err), err
        assert alice_rows(bench) == before
        assert conn.execute("SELECT count(*) FROM pgmem.append_turn('t3', 's1', 'user', 'never expires',"
                            " p_expires_at => 'infinity')").fetchone() == (1,)  # 'infinity' stays: never


def test_a_memory_created_in_the_future_is_refused(bench):
    """A created_at ahead of the clock made a memory that list and search never showed (it holds from its
    created_at) while its content blocked adding it again ('exists')."""
    with bench.connect(bench.login("bound")) as conn:
        before = alice_rows(bench)
        err = error_of(conn, "SELECT * FROM pgmem.add_batch('t3', ARRAY['made tomorrow'], ARRAY['[1,2,3]']::vector[],"
                             " p_created_at => ARRAY[now() + interval '1 day'])")
        assert err is not None and err.sqlstate == "PGM08" and "in the future" in str(err), err
        assert alice_rows(bench) == before
        assert error_of(conn, "SELECT * FROM pgmem.add_batch('t3', ARRAY['made a minute ahead'], ARRAY['[1,2,3]']::vector[],"
                              " p_created_at => ARRAY[now() + interval '1 minute'])") is None  # clock skew


def test_a_callers_settings_never_reach_the_generated_search_statements(bench):
    """_build_knn (a definer function, run by every create_space) read pgmem.cluster from its caller's
    session: a gateway's SET pgmem.cluster = 'citus' switched every tenant's search statements to custom
    plans (1.5-2.3x slower) until the next rebuild. The plan mode comes from the schema: Citus custom plans
    only when pgmem.memories is a distributed table."""
    def modes(conn) -> set[str]:
        rows = conn.execute("SELECT unnest(proconfig) FROM pg_catalog.pg_proc WHERE pronamespace = 'pgmem'::regnamespace"
                            " AND proname IN ('_knn', '_exact_ids')").fetchall()
        return {r[0] for r in rows if r[0].startswith("plan_cache_mode")}

    gw = bench.login("gateway")
    with bench.connect(gw) as conn:
        conn.execute("SET pgmem.cluster = 'citus'")
        conn.execute("SELECT * FROM pgmem.create_space('t6', 'm', 3)")
    with psycopg.connect(bench.dsn(bench.owner), autocommit=True) as owner:
        assert modes(owner) == {"plan_cache_mode=force_generic_plan"}
