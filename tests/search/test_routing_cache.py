"""Search routes by a tenant's size kept in pgmem.tenant_sizes for pgmem.route_cache_seconds
instead of counting on every call. A stale size may cost speed, never rows: both routes return min(k, n)."""

from __future__ import annotations

import json

import psycopg
import pytest
from pgvector.psycopg import register_vector

from conftest import as_api, connect
from pgmem.testing import HashEmbedder

EMB = HashEmbedder(64)


def search(conn, k: int, threshold: int, *, cache_seconds: int | None = None, read_only: bool = False,
           user: str = "alice", **kw) -> list:
    with conn.transaction():
        if read_only:
            conn.execute("SET TRANSACTION READ ONLY")
        conn.execute("SELECT pgmem.act_as(%s)", [user])
        conn.execute("SELECT set_config('pgmem.exact_search_max_rows', %s, true)", [str(threshold)])
        if cache_seconds is not None:
            conn.execute("SELECT set_config('pgmem.route_cache_seconds', %s, true)", [str(cache_seconds)])
        q = EMB.embed(["query about memory 7"])[0]
        args = ", ".join(f"p_{k_} => %({k_})s" for k_ in kw)
        sql = "SELECT id FROM pgmem.search('t64', %(q)s, %(k)s" + (", " + args if args else "") + ")"
        return [r[0] for r in conn.execute(sql, {"q": q, "k": k, **kw}).fetchall()]


def exact(admin, user: str, k: int) -> list:
    register_vector(admin)
    q = EMB.embed(["query about memory 7"])[0]
    return [r[0] for r in admin.execute(
        "SELECT id FROM pgmem.memories WHERE user_id = %s AND valid_to IS NULL ORDER BY embedding <=> %s, id LIMIT %s",
        [user, q, k]).fetchall()]


def cached(admin, user: str, scope: str = ""):
    return admin.execute("SELECT rows, complete FROM pgmem.tenant_sizes WHERE user_id = %s AND scope = %s",
                         [user, scope]).fetchone()


def scope_key(admin, agent_id=None, session_id=None, created_after=None, created_before=None, filter=None) -> str:
    return admin.execute("SELECT pgmem._scope_key(%s, %s, %s, %s, %s::jsonb)",
                         [agent_id, session_id, created_after, created_before,
                          None if filter is None else json.dumps(filter)]).fetchone()[0]


def hybrid(conn, k: int, threshold: int, *, user: str = "alice", **kw) -> list:
    with conn.transaction():
        conn.execute("SELECT pgmem.act_as(%s)", [user])
        conn.execute("SELECT set_config('pgmem.exact_search_max_rows', %s, true)", [str(threshold)])
        q = EMB.embed(["query about memory 7"])[0]
        args = ", ".join(f"p_{k_} => %({k_})s" for k_ in kw)
        sql = "SELECT id FROM pgmem.search_hybrid('t64', 'memory 7', %(q)s, %(k)s" + (", " + args if args else "") + ")"
        return [r[0] for r in conn.execute(sql, {"q": q, "k": k, **kw}).fetchall()]


def test_a_search_stores_a_large_tenant_size_and_later_searches_use_it(alice, bob, admin, login_role):
    alice.add_many([f"memory {i} of alice" for i in range(30)])
    bob.add_many([f"memory {i} of bob" for i in range(5)])
    with connect(admin, login_role("pgmem_gateway")) as gw:
        assert len(search(gw, 10, threshold=20)) == 10
        assert cached(admin, "alice") == (21, False)  # capped at threshold + 1: "large"
        # A small tenant is counted on each search, so that its searches stay reads (no commit flush).
        assert len(search(gw, 10, threshold=20, user="bob")) == 5
        assert cached(admin, "bob") is None
        # Filters never store a size (they count their own subset).
        admin.execute("DELETE FROM pgmem.tenant_sizes")
        search(gw, 10, threshold=20, agent_id="nobody")
        assert cached(admin, "alice") is None
        # A read-only transaction (a standby) searches without storing.
        assert len(search(gw, 10, threshold=20, read_only=True)) == 10
        assert cached(admin, "alice") is None
        assert len(search(gw, 10, threshold=20)) == 10 and cached(admin, "alice") == (21, False)


def test_a_stale_size_costs_speed_never_rows(alice, admin, login_role):
    alice.add_many([f"memory {i} of alice" for i in range(60)])
    with connect(admin, login_role("pgmem_gateway")) as gw:
        assert search(gw, 50, threshold=20) == exact(admin, "alice", 50)
        assert cached(admin, "alice") == (21, False)
        # The tenant shrinks below k while the cache still says "large": the HNSW route finds fewer than k
        # and falls back to the exact scan; every row comes back.
        alice.delete_all(confirm=True)
        keep = alice.add_many(["memory 7 of alice", "memory 8 of alice", "memory 9 of alice"])
        assert sorted(search(gw, 10, threshold=20)) == sorted(r.id for r in keep)
        assert cached(admin, "alice") == (21, False)  # fresh: not recounted
        # Recounted (window 0): small now, so the stored size is removed.
        assert sorted(search(gw, 10, threshold=20, cache_seconds=0)) == sorted(r.id for r in keep)
        assert cached(admin, "alice") is None
        # The tenant grows past the threshold again: counted, stored, all rows right.
        alice.add_many([f"memory {i} of alice" for i in range(10, 60)])
        assert search(gw, 50, threshold=20) == exact(admin, "alice", 50)
        assert cached(admin, "alice") == (21, False)


def test_cache_rows_are_private_and_erased(alice, bob, admin, login_role):
    alice.add_many(["a1", "a2"])
    bob.add_many(["b1", "b2"])
    with connect(admin, login_role("pgmem_gateway")) as gw:
        search(gw, 2, threshold=1)
        search(gw, 2, threshold=1, user="bob")
        with pytest.raises(psycopg.Error) as info, gw.transaction():
            gw.execute("SELECT pgmem.act_as('bob')")
            gw.execute("SELECT user_id FROM pgmem.tenant_sizes")
        assert info.value.sqlstate == "42501"  # API only (migration 0007)
    with as_api(admin, "bob") as api:
        assert api.execute("SELECT user_id FROM pgmem.tenant_sizes").fetchall() == [("bob",)]
    assert sorted(r[0] for r in admin.execute("SELECT user_id FROM pgmem.tenant_sizes").fetchall()) == ["alice", "bob"]
    admin.execute("SELECT * FROM pgmem.erase_user('alice')")
    assert cached(admin, "alice") is None and cached(admin, "bob") == (2, False)


def test_an_embedding_read_back_from_postgresql_can_be_searched_with(alice, admin):
    """pgvector's Vector (what a vector column reads back as) is accepted where an embedding is expected."""
    ids = alice.add_many(["the red bicycle", "the blue car"])
    register_vector(admin)
    stored = admin.execute("SELECT embedding FROM pgmem.memories WHERE id = %s", [ids[0].id]).fetchone()[0]
    assert type(stored).__name__ == "Vector"
    assert alice.search(embedding=stored, k=1)[0].id == ids[0].id


def test_a_large_filtered_scope_keeps_its_own_count(alice, admin, login_role):
    """A filtered search of a large tenant counted up to threshold + 1 rows through its filter on every call
    (most of a LangGraph-store search, which filters by namespace). A scope holding more rows than the
    threshold now keeps its count under its key, beside the whole-space row; small scopes and as-of searches
    are still counted each time; stale counts of other scopes go when one is stored."""
    alice.add_many([{"content": f"memory {i} of alice", "metadata": {"ns": "a"}} for i in range(40)])
    alice.add_many([{"content": f"other {i} of alice", "metadata": {"ns": "b"}} for i in range(5)])
    ns_a, ns_b = json.dumps({"ns": "a"}), json.dumps({"ns": "b"})
    key_a, key_b = scope_key(admin, filter={"ns": "a"}), scope_key(admin, filter={"ns": "b"})
    assert key_a != key_b and "" not in (key_a, key_b)
    assert scope_key(admin, filter={}) == "" and scope_key(admin) == ""
    with connect(admin, login_role("pgmem_gateway")) as gw:
        assert len(search(gw, 10, threshold=20, filter=ns_a)) == 10
        assert cached(admin, "alice", key_a) == (21, False)
        assert cached(admin, "alice") is None  # the whole space is a scope of its own
        assert len(search(gw, 10, threshold=20, filter=ns_b)) == 5
        assert cached(admin, "alice", key_b) is None  # small: counted each time, the search stays a read
        # A fresh count serves the next searches: a changed stored count is not recounted.
        admin.execute("UPDATE pgmem.tenant_sizes SET rows = 777 WHERE scope = %s", [key_a])
        assert len(search(gw, 10, threshold=20, filter=ns_a)) == 10
        assert cached(admin, "alice", key_a) == (777, False)
        # search_hybrid reads and stores the same counts.
        assert len(hybrid(gw, 10, threshold=20, filter=ns_a)) == 10
        assert cached(admin, "alice", key_a) == (777, False)
        admin.execute("DELETE FROM pgmem.tenant_sizes")
        assert len(hybrid(gw, 10, threshold=20, filter=ns_a)) == 10
        assert cached(admin, "alice", key_a) == (21, False)
        # An as-of search is counted each time.
        admin.execute("DELETE FROM pgmem.tenant_sizes")
        assert len(search(gw, 10, threshold=20, filter=ns_a, as_of=alice.list(limit=1).items[0].created_at)) <= 10
        assert admin.execute("SELECT count(*) FROM pgmem.tenant_sizes").fetchone() == (0,)
        # Another scope stored while key_a's count is stale removes it; the whole-space row stays.
        assert len(search(gw, 10, threshold=20, filter=ns_a)) == 10
        assert len(search(gw, 10, threshold=20)) == 10
        admin.execute("UPDATE pgmem.tenant_sizes SET counted_at = now() - interval '1 hour'")
        agent_key = scope_key(admin, agent_id="nobody")
        alice.add_many([f"agent memory {i}" for i in range(30)], agent_id="ag")
        ag_key = scope_key(admin, agent_id="ag")
        assert agent_key != ag_key
        assert len(search(gw, 10, threshold=20, agent_id="ag")) == 10
        assert cached(admin, "alice", ag_key) == (21, False)
        assert cached(admin, "alice", key_a) is None
        assert cached(admin, "alice") is not None
        # Rows never cross tenants, and erase removes them all.
    admin.execute("SELECT * FROM pgmem.erase_user('alice')")
    assert admin.execute("SELECT count(*) FROM pgmem.tenant_sizes WHERE user_id = 'alice'").fetchone() == (0,)


def test_the_scope_key_does_not_depend_on_the_sessions_time_zone(admin):
    from datetime import datetime, timezone

    when = datetime(2026, 5, 1, 12, 0, tzinfo=timezone.utc)
    admin.execute("SET TimeZone = 'UTC'")
    utc = scope_key(admin, created_after=when)
    admin.execute("SET TimeZone = 'Asia/Tokyo'")
    tokyo = scope_key(admin, created_after=when)
    admin.execute("RESET TimeZone")
    assert utc == tokyo != ""
