"""Migration 0004: the HNSW statement of vector search lives in a generated function (pgmem._knn) whose plan
is cached per connection; a search the generated code does not cover (metadata filter, as-of, a space or
TTL it was not generated for) runs the same statement as dynamic SQL. Every route returns the same rows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from pgvector.psycopg import register_vector

from conftest import as_api, connect
from pgmem.transport import idle_socket_quiet
from pgmem.testing import HashEmbedder
from test_routing_cache import exact, search

EMB = HashEmbedder(64)


def knn_source(admin) -> str:
    return admin.execute("SELECT prosrc FROM pg_proc WHERE oid = 'pgmem._knn'::regproc").fetchone()[0]


def space_id(admin, name: str) -> int:
    return admin.execute("SELECT space_id FROM pgmem.spaces WHERE name = %s", [name]).fetchone()[0]


def test_knn_has_a_branch_per_indexed_space_and_follows_retention(alice, admin):
    alice.space()
    sid = space_id(admin, "t64")
    assert f"p_space_id = {sid} AND p_ttl IS NOT DISTINCT FROM NULL::interval" in knn_source(admin)
    alice.set_retention(timedelta(days=3))
    src = knn_source(admin)
    assert f"p_space_id = {sid} AND p_ttl IS NOT DISTINCT FROM '3 days'::interval" in src
    assert "IS NOT DISTINCT FROM NULL::interval" not in src
    other = alice.create_space("t32", "hash-32", 32)
    assert f"p_space_id = {other.space_id} AND" in knn_source(admin)
    assert "vector(32)" in knn_source(admin) and "vector(64)" in knn_source(admin)
    # A space too wide for an HNSW index gets no branch (it is always scanned exactly).
    wide = alice.create_space("t5000", "hash-5000", 5000)
    assert f"p_space_id = {wide.space_id} AND" not in knn_source(admin)


def test_static_dynamic_and_exact_routes_return_the_same_rows(alice, admin, login_role):
    alice.add_many([f"memory {i} of alice" for i in range(80)])
    want = exact(admin, "alice", 30)
    with connect(admin, login_role("pgmem_gateway")) as gw:
        static = search(gw, 30, threshold=20)                                  # HNSW, generated statement
        dynamic = search(gw, 30, threshold=20, as_of=datetime.now(timezone.utc))  # HNSW, dynamic statement
        by_scan = search(gw, 30, threshold=1000)                              # exact scan
    assert static == dynamic  # one statement, generated or dynamic: the same rows in the same order
    assert by_scan == want
    # HNSW is approximate (ef_search max(40, 2k)); on 80 rows it misses at most a few of the 30.
    assert len(set(static) & set(want)) >= 27 and len(static) == 30


def test_min_similarity_applies_on_the_hnsw_route(alice, admin, login_role):
    alice.add_many([f"memory {i} of alice" for i in range(60)])
    register_vector(admin)
    q = EMB.embed(["query about memory 7"])[0]
    sims = [r[0] for r in admin.execute(
        "SELECT 1 - (embedding <=> %s) FROM pgmem.memories WHERE user_id = 'alice' ORDER BY embedding <=> %s, id LIMIT 40",
        [q, q]).fetchall()]
    cut = (sims[9] + sims[10]) / 2  # between the 10th and 11th nearest
    with connect(admin, login_role("pgmem_gateway")) as gw:
        got = search(gw, 40, threshold=20, min_similarity=cut)
    assert got == exact(admin, "alice", 10)


def test_a_stale_generated_statement_never_shows_expired_rows(alice, admin, login_role):
    """A DBA changes a space's TTL by hand (not through set_retention): pgmem._knn still carries the old TTL,
    so its branch no longer applies and the dynamic statement, which reads the TTL, is used instead."""
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    alice.add_many([{"content": f"old memory {i}", "created_at": old} for i in range(30)])
    fresh = alice.add_many([f"memory {i} of alice" for i in range(30)])
    before = knn_source(admin)
    admin.execute("UPDATE pgmem.spaces SET memory_ttl = '1 hour' WHERE name = 't64'")
    assert knn_source(admin) == before  # not regenerated: stale
    with connect(admin, login_role("pgmem_gateway")) as gw:
        got = search(gw, 30, threshold=20)
    assert sorted(got) == sorted(r.id for r in fresh)


def test_idle_socket_quiet_tells_a_terminated_backend_from_a_live_one(dsn, admin):
    with psycopg.connect(dsn) as live, psycopg.connect(dsn) as doomed:
        live.execute("SELECT 1"); live.commit()
        doomed.execute("SELECT 1"); doomed.commit()
        assert idle_socket_quiet(live) and idle_socket_quiet(doomed)
        pid = doomed.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        for _ in range(100):
            if not admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
                break
            admin.execute("SELECT pg_sleep(0.05)")
        assert not idle_socket_quiet(doomed)
        assert idle_socket_quiet(live)
        live.execute("SELECT 1")  # in a transaction now: not handed out as idle
        assert not idle_socket_quiet(live)


def test_one_statement_calls_wrap_only_plpgsql_functions(admin):
    """pgmem.as_user sets the identity while the call's arguments are evaluated; a scalar SQL function could be
    inlined and read the identity earlier, so only statements of PL/pgSQL functions declare the as_user route
    in queries.sql. The other way round, a PL/pgSQL call with arguments declared act_as pays a transaction
    it does not need, unless it is the HTTP service's own state or an identity statement itself."""
    import re

    from pgmem.queries import AS_USER, statements

    wrapped = 0
    for name, stmt in statements().items():
        fn = re.search(r"pgmem\.(\w+)\(", stmt.plain).group(1)
        rows = admin.execute(
            "SELECT l.lanname, p.pronargs FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang JOIN pg_namespace n"
            " ON n.oid = p.pronamespace WHERE n.nspname = 'pgmem' AND p.proname = %s", [fn]).fetchall()
        assert rows, f"{name}: pgmem.{fn} does not exist"
        langs = {r[0] for r in rows}
        if stmt.route == "as_user":
            wrapped += 1
            assert langs == {"plpgsql"}, f"{name}: pgmem.{fn} is {langs}; declare the act_as route"
            assert stmt.text.count(AS_USER) == 1 and "pgmem.as_user(" not in stmt.plain
        elif stmt.route == "act_as" and langs == {"plpgsql"} and min(r[1] for r in rows) > 0:
            assert name.startswith("service_") or name in ("act_as", "bind_role"), \
                f"{name}: pgmem.{fn} is PL/pgSQL; declare the as_user route (one statement)"
    assert wrapped >= 20  # search, get, list, add, add_batch, ... (26 when written)


def test_as_user_keeps_act_as_checks(alice, admin, login_role):
    """A login that is not a gateway cannot name a user through as_user either (PGM01), and the identity set
    by a one-statement call does not outlive it."""
    alice.space()
    with connect(admin, login_role("pgmem_agent")) as agent:
        agent.autocommit = True
        try:
            agent.execute("SELECT * FROM pgmem.stats(p_space => pgmem.as_user('alice', 't64'::text))")
            raise AssertionError("an agent login named a user")
        except psycopg.Error as exc:
            assert exc.sqlstate == "PGM01"
    with connect(admin, login_role("pgmem_gateway")) as gw:
        gw.autocommit = True
        gw.execute("SELECT * FROM pgmem.stats(p_space => pgmem.as_user('alice', 't64'::text))")
        assert gw.execute("SELECT pgmem.current_user_id()").fetchone()[0] is None


def test_ef_search_setting(alice, admin, login_role):
    """pgmem.hnsw_ef_search sets HNSW's candidate list (default 100); k rows come back whatever it is; a bad
    value is a clear PGM08, not a cast error."""
    alice.add_many([f"memory {i} of alice" for i in range(60)])
    want = exact(admin, "alice", 10)
    with connect(admin, login_role("pgmem_gateway")) as gw:
        for ef in ("1", "40", "1000"):
            gw.execute("SELECT set_config('pgmem.hnsw_ef_search', %s, false)", [ef])
            got = search(gw, 10, threshold=20)
            assert len(got) == 10 and len(set(got) & set(want)) >= 8
        for bad in ("0", "abc", "1001", "-5"):
            gw.execute("SELECT set_config('pgmem.hnsw_ef_search', %s, false)", [bad])
            try:
                search(gw, 10, threshold=20)
                raise AssertionError(f"accepted ef_search {bad!r}")
            except psycopg.Error as exc:
                assert exc.sqlstate == "PGM08" and "hnsw_ef_search" in str(exc)


# --------------------------------------------------------------------------------------------------------
# Migration 0006: the exact route (a tenant, or a subset, of at most pgmem.exact_search_max_rows rows) also
# runs a generated static statement: pgmem._exact_ids (the capped count and the k nearest ids, one pass).
# --------------------------------------------------------------------------------------------------------
def source(admin, fn: str) -> str:
    return admin.execute(f"SELECT prosrc FROM pg_proc WHERE oid = 'pgmem.{fn}'::regproc").fetchone()[0]


def test_exact_ids_has_a_branch_per_indexed_space_and_follows_retention(alice, admin):
    alice.space()
    sid = space_id(admin, "t64")
    assert f"p_space_id = {sid} AND p_ttl IS NOT DISTINCT FROM NULL::interval" in source(admin, "_exact_ids")
    alice.set_retention(timedelta(days=3))
    assert f"p_space_id = {sid} AND p_ttl IS NOT DISTINCT FROM '3 days'::interval" in source(admin, "_exact_ids")
    other = alice.create_space("t32", "hash-32", 32)
    assert f"p_space_id = {other.space_id} AND" in source(admin, "_exact_ids")
    # Not generated for a space or TTL: o_rows NULL, so search takes the dynamic statements.
    register_vector(admin)
    q = EMB.embed(["x"])[0]
    assert admin.execute("SELECT * FROM pgmem._exact_ids('alice', NULL, NULL, NULL, NULL, NULL, NULL, NULL, %s, 10, 100,"
                         " %s, NULL)", [q, sid]).fetchone() == (None, None)


def test_exact_route_static_and_dynamic_return_the_same_rows(alice, admin, login_role):
    """The exact route on a small tenant: the generated statements (no metadata filter, no as-of) and the
    dynamic ones (as-of now: the same rows hold) return exactly the rows of a scan written by hand, with agent,
    session, time range and min_similarity applied alike."""
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    alice.add_many([{"content": f"memory {i} of alice", "agent_id": f"agent{i % 2}", "session_id": f"s{i % 3}",
                     "created_at": t0 + timedelta(minutes=i)} for i in range(40)])
    now = datetime.now(timezone.utc)
    register_vector(admin)
    q = EMB.embed(["query about memory 7"])[0]
    cases = [{}, {"agent_id": "agent1"}, {"session_id": "s2"}, {"created_after": t0 + timedelta(minutes=10),
             "created_before": t0 + timedelta(minutes=30)}, {"min_similarity": 0.2}]
    with connect(admin, login_role("pgmem_gateway")) as gw:
        for kw in cases:
            static = search(gw, 12, threshold=1000, **kw)
            dynamic = search(gw, 12, threshold=1000, as_of=now, **kw)
            where = " AND ".join(
                {"agent_id": "agent_id = %(agent_id)s", "session_id": "session_id = %(session_id)s",
                 "created_after": "created_at >= %(created_after)s", "created_before": "created_at < %(created_before)s",
                 "min_similarity": "1 - (embedding <=> %(q)s) >= %(min_similarity)s"}[k] for k in kw) or "true"
            want = [r[0] for r in admin.execute(
                f"SELECT id FROM pgmem.memories WHERE user_id = 'alice' AND valid_to IS NULL AND {where}"
                " ORDER BY embedding <=> %(q)s, id LIMIT 12", {"q": q, **kw}).fetchall()]
            assert static == dynamic == want, kw
            assert want or kw.get("min_similarity"), kw


def test_exact_route_follows_the_threshold_and_stale_ttl(alice, admin, login_role):
    """pgmem.exact_search_max_rows is read per search (the cap is a parameter of the cached plan), and a TTL
    changed by hand makes _exact_ids say 'not generated', so the dynamic statements (which read the TTL) run."""
    old = datetime.now(timezone.utc) - timedelta(hours=2)
    alice.add_many([{"content": f"old memory {i}", "created_at": old} for i in range(20)])
    fresh = alice.add_many([f"memory {i} of alice" for i in range(20)])
    want = exact(admin, "alice", 40)
    with connect(admin, login_role("pgmem_gateway")) as gw:
        assert search(gw, 40, threshold=1000) == want      # 40 rows: exact scan
        got = search(gw, 40, threshold=30)                  # 40 > 30: HNSW (80 rows in the graph: all found)
        assert sorted(got) == sorted(want)
        admin.execute("UPDATE pgmem.spaces SET memory_ttl = '1 hour' WHERE name = 't64'")
        got = search(gw, 40, threshold=1000)
    assert sorted(got) == sorted(r.id for r in fresh)  # the 20 old ones have expired


def test_generated_functions_do_not_cross_tenants(alice, bob, admin, login_role):
    """_knn and _exact_ids take the user as a parameter but run as their caller, under row-level security:
    naming another user finds nothing."""
    alice.add_many([f"memory {i} of alice" for i in range(10)])
    sid = space_id(admin, "t64")
    q = EMB.embed(["memory 3"])[0]
    register_vector(admin)
    with connect(admin, login_role("pgmem_gateway")) as gw:  # internal functions: not callable by gateways (0007)
        register_vector(gw)
        for fn in ["_exact_ids('alice', NULL, NULL, NULL, NULL, NULL, NULL, NULL, %s, 3, 100, %s, NULL)",
                   "_knn('alice', NULL, NULL, NULL, NULL, NULL, NULL, NULL, %s, 10, %s, NULL)"]:
            with pytest.raises(psycopg.Error) as info, gw.transaction():
                gw.execute("SELECT pgmem.act_as('alice')")
                gw.execute(f"SELECT * FROM pgmem.{fn}", [q, sid])
            assert info.value.sqlstate == "42501", fn
    with as_api(admin, "alice") as api:
        rows, ids = api.execute("SELECT * FROM pgmem._exact_ids('alice', NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
                                " %s, 3, 100, %s, NULL)", [q, sid]).fetchone()
        assert rows == 10 and len(ids) == 3
    with as_api(admin, "bob") as api:
        assert api.execute("SELECT * FROM pgmem._exact_ids('alice', NULL, NULL, NULL, NULL, NULL, NULL, NULL, %s,"
                           " 3, 100, %s, NULL)", [q, sid]).fetchone() == (0, [])
        assert api.execute("SELECT pgmem._knn('alice', NULL, NULL, NULL, NULL, NULL, NULL, NULL, %s, 10, %s, NULL)",
                           [q, sid]).fetchone()[0] in (None, [])
