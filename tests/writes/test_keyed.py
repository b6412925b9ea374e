"""Keyed memories and the reads stores need, as stored functions: pgmem.put_keyed (an upsert by key, atomic
under concurrent writers), get_keyed, set_expiry, metadata_values (distinct label lists with prefix, suffix,
depth and paging) and clear_session; through Memory and AsyncMemory, under row-level security."""

from __future__ import annotations

import asyncio
import itertools
import threading
from datetime import timedelta

import psycopg
import pytest

from pgmem import Memory
from pgmem.aio import AsyncMemory
from pgmem.errors import DuplicateMemory, IdentityError, ValidationError
from conftest import connect


# --- put_keyed / get_keyed ------------------------------------------------------------------------------------
def test_put_keyed_adds_then_updates_in_place_and_deletes(alice):
    [first] = alice.put_keyed([{"key": "k1", "content": "Alice likes tea", "metadata": {"level": 1}}])
    assert first.created
    [again] = alice.put_keyed([{"key": "k1", "content": "Alice likes coffee", "metadata": {"level": 2}}])
    assert again.id == first.id and not again.created
    got = alice.get_keyed(["k1", "missing"])
    assert list(got) == ["k1"]
    rec = got["k1"]
    assert rec.content == "Alice likes coffee" and rec.metadata == {"level": 2, "pgmem:key": "k1"}  # replaced
    assert rec.version == 2
    assert [h.event for h in alice.history(first.id)] == ["ADD", "UPDATE"]
    # the content changed, so the memory was embedded again: search finds it by the new text
    assert alice.search("coffee", k=1, mode="text")[0].id == first.id
    assert alice.put_keyed([{"key": "k1", "content": None}]) == [None]
    assert alice.get_keyed(["k1"]) == {}
    assert [h.event for h in alice.history(first.id)] == ["ADD", "UPDATE", "DELETE"]


def test_put_keyed_batch_is_in_order_and_all_or_nothing(alice):
    res = alice.put_keyed([{"key": "a", "content": "one"}, {"key": "b", "content": "two"},
                           {"key": "a", "content": "three"}])
    assert res[0].created and res[1].created and res[2].id == res[0].id and not res[2].created
    assert alice.get_keyed(["a"])["a"].content == "three"
    with pytest.raises(ValidationError) as err:
        alice.put_keyed([{"key": "c", "content": "four"}, {"key": "", "content": "five"}])
    assert err.value.index == 1
    assert alice.get_keyed(["c"]) == {}  # nothing of the batch was written
    with pytest.raises(ValidationError):
        alice.put_keyed([{"key": "d", "content": "x", "metadata": {"pgmem:key": "e"}}])


def test_put_keyed_content_held_elsewhere_takes_the_alternative(alice):
    other = alice.add("Alice likes green tea")
    [r] = alice.put_keyed([{"key": "k", "content": "Alice likes green tea",
                            "alt_content": "Alice likes green tea\n[k]"}])
    assert r.id != other.id and alice.get_keyed(["k"])["k"].content == "Alice likes green tea\n[k]"
    with pytest.raises(DuplicateMemory):
        alice.put_keyed([{"key": "k2", "content": "Alice likes green tea"}])
    assert alice.get_keyed(["k2"]) == {}
    # the same put again: the stored alternative stays (no change of content, no error)
    [r2] = alice.put_keyed([{"key": "k", "content": "Alice likes green tea",
                             "alt_content": "Alice likes green tea\n[k]"}])
    assert r2.id == r.id


def test_put_keyed_expiry_is_the_items_and_can_be_cleared(alice):
    soon = alice.put_keyed([{"key": "k", "content": "short-lived", "expires_at": _in(timedelta(hours=1))}])[0]
    assert alice.get_keyed(["k"])["k"].expires_at is not None
    alice.put_keyed([{"key": "k", "content": "short-lived"}])
    rec = alice.get_keyed(["k"])["k"]
    assert rec.id == soon.id and rec.expires_at is None


def test_two_connections_putting_the_same_new_key_make_one_memory(make_memory, admin):
    """Two clients (two pools, two connections) put the same new key at the same moment, many times: the
    database serialises them, so each key ends with exactly one memory."""
    a, b = make_memory("alice", "a"), make_memory("alice", "b")
    a.space(), b.space()
    rounds = 15
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def writer(mem: Memory, label: str) -> None:
        try:
            for i in range(rounds):
                barrier.wait()
                mem.put_keyed([{"key": f"race-{i}", "content": f"written by {label} in round {i}"}])
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(m, label)) for m, label in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = admin.execute("SELECT metadata ->> 'pgmem:key', count(*) FROM pgmem.memories"
                           " WHERE user_id = 'alice' GROUP BY 1").fetchall()
    assert sorted(counts) == sorted((f"race-{i}", 1) for i in range(rounds))


def test_put_keyed_removes_extra_copies_of_a_key(alice):
    # written around put_keyed (add with the key in its metadata): the next put of the key keeps one
    alice.add("copy one", metadata={"pgmem:key": "dup"})
    alice.add("copy two", metadata={"pgmem:key": "dup"})
    alice.put_keyed([{"key": "dup", "content": "the only one"}])
    rows = alice.list(filter={"pgmem:key": "dup"}).items
    assert [r.content for r in rows] == ["the only one"]


def test_keyed_memories_are_the_users_own(alice, bob):
    alice.put_keyed([{"key": "k", "content": "Alice's secret"}])
    assert bob.get_keyed(["k"]) == {}
    [b] = bob.put_keyed([{"key": "k", "content": "Bob's own"}])
    assert b.created  # bob's key is another memory; alice's is untouched
    assert alice.get_keyed(["k"])["k"].content == "Alice's secret"
    anonymous = alice.with_identity(user_id=None)
    with pytest.raises(IdentityError):
        anonymous.put_keyed([{"key": "k", "content": "x"}])


# --- set_expiry -------------------------------------------------------------------------------------------------
def test_set_expiry_moves_the_own_expiry_of_live_memories_only(alice, bob):
    a = alice.add("Alice's expiring fact", expires_at=_in(timedelta(minutes=5)))
    b = bob.add("Bob's fact")
    out = alice.set_expiry({a.id: timedelta(days=2), b.id: timedelta(days=2)})
    assert list(out) == [a.id]  # bob's memory is not alice's to change
    assert timedelta(days=2) - timedelta(minutes=1) < out[a.id] - _in(timedelta(0)) <= timedelta(days=2)
    assert bob.get(b.id).expires_at is None
    assert alice.set_expiry({a.id: None})[a.id] is None  # back to the space's TTL (none here)
    with pytest.raises(ValidationError):
        alice.set_expiry({a.id: timedelta(0)})


# --- metadata_values ---------------------------------------------------------------------------------------------
TREE = [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("b", "b"), ("b", "c", "d", "e"),
        ("users", "ünï", "prefs"), ("users", "Zed", "prefs"), ("users", "zed", "notes"), ("a*", "b")]


def _reference(tree, prefixes, suffixes, max_depth, limit, offset):
    """What LangGraph's list_namespaces returns over ``tree`` (its documented semantics, in plain Python)."""
    def ok(ns, path, suffix):
        if len(path) > len(ns):
            return False
        part = ns[len(ns) - len(path):] if suffix else ns[:len(path)]
        return all(p == "*" or p == n for p, n in zip(path, part))

    seen = {ns[:max_depth] if max_depth else ns for ns in tree
            if all(ok(ns, p, False) for p in prefixes) and all(ok(ns, p, True) for p in suffixes)}
    return sorted(seen)[offset:offset + limit]


def test_metadata_values_equals_the_reference_on_a_namespace_tree(alice):
    alice.put_keyed([{"key": f"item-{i}", "content": f"item {i}", "metadata": {"ns": list(ns)}}
                     for i, ns in enumerate(TREE)])
    alice.add("not a namespace", metadata={"ns": "a string"})  # only arrays count
    cases = itertools.product([[], [["a"]], [["a", "*"]], [["*", "b"]], [["users"]], [["a*"]], [["nope"]]],
                              [[], [["c"]], [["*", "prefs"]], [["d", "e"]]],
                              [None, 1, 2], [(100, 0), (2, 1)])
    for prefixes, suffixes, depth, (limit, offset) in cases:
        got = alice.metadata_values("ns", prefixes=prefixes or None, suffixes=suffixes or None, max_depth=depth,
                                    limit=limit, offset=offset)
        assert [tuple(v) for v in got] == _reference(TREE, prefixes, suffixes, depth, limit, offset), \
            (prefixes, suffixes, depth, limit, offset)


def test_metadata_values_leave_out_other_users_expired_and_superseded(alice, bob):
    alice.put_keyed([{"key": "k", "content": "mine", "metadata": {"ns": ["alice", "m"]}}])
    bob.put_keyed([{"key": "k", "content": "bob's", "metadata": {"ns": ["bob", "secrets"]}}])
    old = alice.add("old fact", metadata={"ns": ["alice", "old"]})
    alice.supersede(old.id, "new fact", metadata={"ns": ["alice", "new"]})
    assert alice.metadata_values("ns") == [["alice", "m"], ["alice", "new"]]
    assert alice.metadata_values("ns", prefixes=[["bob"]]) == []
    assert bob.metadata_values("ns") == [["bob", "secrets"]]
    with pytest.raises(ValidationError):
        alice.metadata_values("ns", limit=0)
    with pytest.raises(ValidationError):
        alice.metadata_values("ns", prefixes=["a"])  # a list of strings, not of label lists
    with pytest.raises(ValidationError, match="16 patterns"):
        alice.metadata_values("ns", prefixes=[["alice"]] * 9, suffixes=[["m"]] * 8)
    assert alice.metadata_values("ns", prefixes=[["alice"]] * 8, suffixes=[["m"]] * 8) == [["alice", "m"]]


def test_ttls_and_queries_past_the_limits_are_validation_errors(alice):
    """A ttl past PostgreSQL's last timestamp and a query beyond 100,000 characters or 256 distinct terms are
    refused with a ValidationError (the database's PGM08), never a raw database error; nothing changes."""
    a = alice.put_keyed([{"key": "k", "content": "kept"}])[0]
    with pytest.raises(ValidationError, match="294276"):
        alice.set_expiry({a.id: timedelta.max})
    with pytest.raises(ValidationError, match="294276"):
        alice.put_keyed([{"key": "k", "content": "changed", "ttl": timedelta.max}])
    assert [(m.content, m.expires_at) for m in alice.get_keyed(["k"]).values()] == [("kept", None)]
    with pytest.raises(ValidationError, match="100000"):
        alice.search("a " * 50001, mode="hybrid")
    with pytest.raises(ValidationError, match="256 distinct terms"):
        alice.search(" ".join(f"w{i}x" for i in range(257)), mode="hybrid")
    assert alice.search(" ".join(f"w{i}x" for i in range(255)) + " kept", mode="hybrid")[0].id == a.id


# --- clear_session -----------------------------------------------------------------------------------------------
def test_clear_session_deletes_only_that_sessions_turns_of_the_user(alice, bob):
    for i in range(3):
        alice.append_turn("s1", "user", f"turn {i}")
    alice.append_turn("s2", "user", "other session")
    bob.append_turn("s1", "user", "bob's turn")
    assert alice.clear_session("s1") == 3
    assert alice.recent_turns("s1") == []
    assert [t.content for t in alice.recent_turns("s2")] == ["other session"]
    assert [t.content for t in bob.recent_turns("s1")] == ["bob's turn"]
    assert alice.clear_session("s1") == 0
    with pytest.raises(ValidationError):
        alice.clear_session("")


# --- privileges ----------------------------------------------------------------------------------------------------
def test_an_agent_login_executes_the_functions_but_reads_no_table(admin, login_role, alice):
    alice.put_keyed([{"key": "k", "content": "Alice's fact", "metadata": {"ns": ["alice"]}}])
    role = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [role])
    with connect(admin, role) as conn:
        rows = conn.execute("SELECT (pgmem.get_keyed('t64', ARRAY['k'])).content").fetchall()
        assert rows == [("Alice's fact",)]
        assert conn.execute("SELECT value FROM pgmem.metadata_values('t64', 'ns')").fetchall() == [(["alice"],)]
        assert conn.execute("SELECT pgmem.clear_session('t64', 's')").fetchone() == (0,)
        for table in ("memories", "turns"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT 1 FROM pgmem.{table} LIMIT 1")
    definer = admin.execute(
        "SELECT p.proname, p.prosecdef, pg_get_userbyid(p.proowner), p.proconfig FROM pg_proc p"
        " WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = ANY (%s) ORDER BY 1",
        [["put_keyed", "get_keyed", "set_expiry", "metadata_values", "clear_session"]]).fetchall()
    assert [(n, d, o) for n, d, o, _ in definer] == [(n, True, "pgmem_api") for n in
                                                     sorted(["put_keyed", "get_keyed", "set_expiry",
                                                             "metadata_values", "clear_session"])]
    assert all(c == ["search_path=pg_catalog, pgmem, pg_temp"] for *_, c in definer)


# --- async ------------------------------------------------------------------------------------------------------------
def test_async_memory_has_the_same_methods(dsn, embedder):
    async def main():
        async with AsyncMemory(dsn, user_id="alice", role="pgmem_gateway", space="t64", embedder=embedder) as m:
            [r] = await m.put_keyed([{"key": "k", "content": "async fact", "metadata": {"ns": ["x", "y"]}}])
            assert (await m.get_keyed(["k"]))["k"].id == r.id
            assert await m.metadata_values("ns", max_depth=1) == [["x"]]
            assert list(await m.set_expiry({r.id: timedelta(hours=1)})) == [r.id]
            await m.append_turn("s", "user", "hello")
            assert await m.clear_session("s") == 1
            assert await m.put_keyed([{"key": "k", "content": None}]) == [None]
    asyncio.run(main())


def _in(delta: timedelta):
    from datetime import datetime, timezone

    return datetime.now(timezone.utc) + delta
