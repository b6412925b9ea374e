"""The LangGraph store (pgmem.integrations.langgraph.PgmemStore) with LangGraph's own objects: BaseStore's
documented behaviour, a compiled StateGraph whose node uses the runtime's store, LangMem's memory tools, the
async store on AsyncMemory, and isolation between users decided by the database."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from conftest import need  # noqa: E402
from pgmem import Memory  # noqa: E402
from pgmem.aio import AsyncMemory  # noqa: E402
from pgmem.errors import IdentityError, InvalidFilter, ValidationError  # noqa: E402
from pgmem.integrations.langgraph import PgmemStore, item_text, translate_filter  # noqa: E402
from pgmem.testing import HashEmbedder  # noqa: E402


@pytest.fixture
def store(alice) -> PgmemStore:
    return PgmemStore(alice)


# --- BaseStore behaviour ------------------------------------------------------------------------------------
def test_put_get_overwrite_delete(store, alice):
    ns = ("alice", "prefs")
    assert store.get(ns, "food") is None
    store.put(ns, "food", {"text": "Alice is vegetarian", "level": 3})
    first = store.get(ns, "food")
    assert first.value == {"text": "Alice is vegetarian", "level": 3}
    assert first.namespace == ns and first.key == "food"
    time.sleep(0.01)
    store.put(ns, "food", {"text": "Alice eats fish now"})
    second = store.get(ns, "food")
    assert second.value == {"text": "Alice eats fish now"}  # replaced, not merged
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    # one memory per key; its history keeps both versions
    rows = alice.list(filter={"langgraph:key": "food"}).items
    assert len(rows) == 1
    assert [h.event for h in alice.history(rows[0].id)] == ["ADD", "UPDATE"]
    store.put(ns, "food", None)  # LangGraph's delete
    assert store.get(ns, "food") is None
    store.delete(ns, "food")  # deleting again is no error
    store.put(ns, "food", {"text": "Alice is back"})  # a deleted key can be stored again
    assert store.get(ns, "food").value == {"text": "Alice is back"}


def test_same_text_under_two_keys_is_two_items(store):
    store.put(("alice", "a"), "k1", {"text": "Alice likes green tea"})
    store.put(("alice", "b"), "k2", {"text": "Alice likes green tea"})
    store.put(("alice", "a"), "k3", {"text": "Alice likes green tea"})
    assert store.get(("alice", "a"), "k1").value == {"text": "Alice likes green tea"}
    assert store.get(("alice", "b"), "k2").value == {"text": "Alice likes green tea"}
    assert store.get(("alice", "a"), "k3").value == {"text": "Alice likes green tea"}
    # an overwrite onto another item's text too
    store.put(("alice", "a"), "k4", {"text": "Alice likes coffee"})
    store.put(("alice", "a"), "k4", {"text": "Alice likes green tea"})
    assert store.get(("alice", "a"), "k4").value == {"text": "Alice likes green tea"}
    assert {i.key for i in store.search(("alice",), limit=10)} == {"k1", "k2", "k3", "k4"}


def test_search_by_query_is_ordered_by_score_and_pages(store):
    ns = ("alice", "memories")
    texts = {"tea": "Alice drinks green tea every morning", "lisbon": "Alice flies to Lisbon in March",
             "cat": "Alice has a cat called Miso", "peanut": "Alice is allergic to peanuts",
             "job": "Alice works night shifts at the hospital"}
    for key, text in texts.items():
        store.put(ns, key, {"text": text})
    hits = store.search(("alice",), query="what does Alice drink in the morning? tea", limit=5)
    assert hits[0].key == "tea"
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and all(s is not None for s in scores)
    page1 = store.search(("alice",), query="Alice", limit=2)
    page2 = store.search(("alice",), query="Alice", limit=2, offset=2)
    everything = store.search(("alice",), query="Alice", limit=4)
    assert [h.key for h in page1 + page2] == [h.key for h in everything]


def test_search_without_query_newest_first_with_offset(store):
    ns = ("alice", "log")
    for i in range(5):
        store.put(ns, f"k{i}", {"text": f"entry number {i}", "i": i})
        time.sleep(0.005)
    store.put(ns, "k1", {"text": "entry one, edited", "i": 1})
    keys = [h.key for h in store.search(ns, limit=10)]
    assert keys == ["k1", "k4", "k3", "k2", "k0"]
    assert [h.key for h in store.search(ns, limit=2, offset=1)] == ["k4", "k3"]
    assert all(h.score is None for h in store.search(ns))


def test_filters_map_onto_pgmem_operators(store):
    ns = ("alice", "tasks")
    store.put(ns, "a", {"text": "buy milk", "priority": 1, "tags": ["home"], "done": False})
    store.put(ns, "b", {"text": "file taxes", "priority": 5, "tags": ["admin"], "done": False})
    store.put(ns, "c", {"text": "call mum", "priority": 3, "tags": ["home"], "done": True})

    def keys(flt, query=None):
        return sorted(h.key for h in store.search(ns, filter=flt, query=query, limit=10))

    assert keys({"done": False}) == ["a", "b"]
    assert keys({"priority": {"$gte": 3}}) == ["b", "c"]
    assert keys({"priority": {"$gt": 1, "$lt": 5}}) == ["c"]
    assert keys({"priority": {"$ne": 5}}) == ["a", "c"]
    assert keys({"tags": ["home"]}) == ["a", "c"]  # JSON equality of a whole list
    assert keys({"priority": {"$lte": 3}}, query="milk") == ["a", "c"]
    with pytest.raises(InvalidFilter, match=r"\$regex"):
        store.search(ns, filter={"text": {"$regex": "m.*"}})
    with pytest.raises(InvalidFilter, match="needs a number"):  # pgmem ranges compare numbers only
        store.search(ns, filter={"text": {"$gt": "a"}})
    with pytest.raises(InvalidFilter, match="mixes operators"):  # nothing is read as equality by mistake
        store.search(ns, filter={"priority": {"$gt": 1, "max": 5}})


def test_index_false_and_index_fields(store):
    ns = ("alice", "docs")
    store.put(ns, "secret", {"text": "the tea recipe uses jasmine"}, index=False)
    store.put(ns, "titled", {"title": "jasmine tea", "body": "a long story about coffee"}, index=["title"])
    hits = store.search(ns, query="jasmine tea", limit=10)
    assert [h.key for h in hits] == ["titled"]  # an unindexed item is not found by query
    assert {h.key for h in store.search(ns, limit=10)} == {"secret", "titled"}  # but is listed
    assert store.get(ns, "secret").value == {"text": "the tea recipe uses jasmine"}
    assert item_text({"title": "jasmine tea", "body": "coffee"}, ["title"]) == "jasmine tea"
    assert item_text({"a": {"b": "x", "c": ["y", 2]}, "d": "z"}, None) == "x\ny\nz"


def test_list_namespaces(store):
    for ns in [("alice", "a", "x"), ("alice", "a", "y"), ("alice", "b", "x"), ("alice", "c")]:
        store.put(ns, "k", {"text": "/".join(ns)})
    assert store.list_namespaces() == [("alice", "a", "x"), ("alice", "a", "y"), ("alice", "b", "x"), ("alice", "c")]
    assert store.list_namespaces(prefix=("alice", "a")) == [("alice", "a", "x"), ("alice", "a", "y")]
    assert store.list_namespaces(suffix=("x",)) == [("alice", "a", "x"), ("alice", "b", "x")]
    assert store.list_namespaces(prefix=("alice", "*", "x")) == [("alice", "a", "x"), ("alice", "b", "x")]
    assert store.list_namespaces(max_depth=2) == [("alice", "a"), ("alice", "b"), ("alice", "c")]
    assert store.list_namespaces(limit=2, offset=1) == [("alice", "a", "y"), ("alice", "b", "x")]
    assert store.list_namespaces(prefix=("alice", "zzz")) == []


def test_batch_runs_reads_before_puts_and_last_put_wins(store):
    ns = ("alice", "batch")
    out = store.batch([PutOp(ns, "k", {"text": "one"}), GetOp(ns, "k"), PutOp(ns, "k", {"text": "two"}),
                       SearchOp(ns, limit=5)])
    assert out[0] is None and out[1] is None and out[3] == [] and out[2] is None
    assert store.get(ns, "k").value == {"text": "two"}


def test_ttl_expires_and_refresh_extends(store, alice):
    ns = ("alice", "short")
    store.put(ns, "soon", {"text": "a passing thought"}, ttl=0.02)  # minutes: 1.2 s
    store.put(ns, "kept", {"text": "something durable"})
    rec = alice.list(filter={"langgraph:key": "soon"}).items[0]
    assert rec.expires_at is not None
    # created_at is the transaction's start; the expiry counts from the write, a moment later
    assert 1.2 <= (rec.expires_at - rec.created_at).total_seconds() < 3
    time.sleep(0.6)
    assert store.get(ns, "soon", refresh_ttl=True) is not None  # read within the TTL: extended by 1.2 s
    time.sleep(0.8)
    assert store.get(ns, "soon", refresh_ttl=False) is not None  # 1.4 s after the put, alive thanks to the refresh
    time.sleep(1.5)
    assert store.get(ns, "soon") is None
    assert [h.key for h in store.search(ns)] == ["kept"]
    default = PgmemStore(alice, ttl={"default_ttl": 60, "refresh_on_read": False})
    default.put(ns, "hour", {"text": "an hour long"})
    rec = alice.list(filter={"langgraph:key": "hour"}).items[0]
    assert 3600 <= (rec.expires_at - rec.created_at).total_seconds() < 3610


def test_bad_input_gets_pgmem_or_langgraph_errors(store):
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("alice", "a.b"), "k", {"x": "y"})])  # a period would forge another namespace
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "x"), "k", {"x": "y"})
    with pytest.raises(ValidationError, match="reserved"):
        store.put(("alice", "x"), "k", {"langgraph:key": "forged"})
    with pytest.raises(ValidationError, match="must be a dict"):
        store.batch([PutOp(("alice", "x"), "k", ["not", "a", "dict"])])
    with pytest.raises(ValidationError, match="ttl"):
        store.put(("alice", "x"), "k", {"x": "y"}, ttl=-1)
    with pytest.raises(ValidationError, match="64 KiB|65536|limit"):
        store.put(("alice", "x"), "big", {"text": "x" * 70_000})
    with pytest.raises(ValidationError, match="k must be"):
        store.search(("alice",), query="x", limit=2000)
    assert store.get(("alice", "x"), "k") is None  # nothing half-written


# --- isolation ------------------------------------------------------------------------------------------------
def test_store_bound_to_a_user_cannot_read_another_users_namespace(make_memory):
    alice_store = PgmemStore(make_memory("alice", "a"))
    bob_store = PgmemStore(make_memory("bob", "b"))
    bob_store.put(("bob", "secrets"), "pin", {"text": "Bob's PIN is 1234"})
    assert bob_store.get(("bob", "secrets"), "pin") is not None
    assert alice_store.get(("bob", "secrets"), "pin") is None
    assert alice_store.search(("bob",), query="PIN", limit=10) == []
    assert alice_store.search(("bob", "secrets")) == []
    assert alice_store.list_namespaces(prefix=("bob",)) == []
    assert alice_store.list_namespaces() == []
    with pytest.raises(IdentityError, match="acts for user 'alice'"):
        alice_store.put(("bob", "secrets"), "pin", {"text": "overwritten"})
    assert bob_store.get(("bob", "secrets"), "pin").value == {"text": "Bob's PIN is 1234"}
    # user_index=None: the namespace is free-form, everything is alice's
    free = PgmemStore(make_memory("alice", "a"), user_index=None)
    free.put(("bob", "secrets"), "pin", {"text": "alice's own note"})
    assert free.get(("bob", "secrets"), "pin").value == {"text": "alice's own note"}
    assert bob_store.get(("bob", "secrets"), "pin").value == {"text": "Bob's PIN is 1234"}


def test_gateway_store_acts_as_the_namespace_user(make_memory):
    gateway = PgmemStore(make_memory(None, "gw"))  # a gateway login naming no user: the namespace names it
    gateway.put(("alice", "m"), "k", {"text": "alice's fact"})
    gateway.put(("bob", "m"), "k", {"text": "bob's fact"})
    assert gateway.get(("alice", "m"), "k").value == {"text": "alice's fact"}
    assert gateway.list_namespaces(prefix=("bob",)) == [("bob", "m")]
    assert PgmemStore(make_memory("alice")).get(("alice", "m"), "k").value == {"text": "alice's fact"}
    with pytest.raises(ValidationError, match="names no user"):
        gateway.list_namespaces()


def test_login_bound_to_a_user_is_refused_by_the_database(dsn, admin, login_role, embedder):
    from conftest import dsn_for

    role = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.create_space('t64', %s, 64)", [embedder.model_name])
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [role])
    with Memory(dsn_for(admin.info.dbname, user=role), space="t64", embedder=embedder) as m:
        store = PgmemStore(m)  # no user_id: every namespace's user goes to pgmem.act_as
        store.put(("alice", "m"), "k", {"text": "mine"})
        assert store.get(("alice", "m"), "k").value == {"text": "mine"}
        with pytest.raises(IdentityError, match="bound to one pgmem user"):
            store.get(("bob", "m"), "k")
        with pytest.raises(IdentityError, match="bound to one pgmem user"):
            store.put(("bob", "m"), "k", {"text": "forged"})


# --- LangGraph's own objects -------------------------------------------------------------------------------------
class State(TypedDict):
    user: str
    message: str
    recalled: list[str]


def _graph(store):
    def remember_and_recall(state: State, runtime) -> dict:
        ns = (state["user"], "memories")
        runtime.store.put(ns, f"m{len(runtime.store.search(ns, limit=100))}", {"text": state["message"]})
        hits = runtime.store.search(ns, query=state["message"], limit=3)
        return {"recalled": [h.value["text"] for h in hits]}

    builder = StateGraph(State)
    builder.add_node("remember_and_recall", remember_and_recall)
    builder.add_edge(START, "remember_and_recall")
    builder.add_edge("remember_and_recall", END)
    return builder.compile(store=store)


def test_state_graph_node_uses_the_runtime_store(store, make_memory):
    graph = _graph(store)
    graph.invoke({"user": "alice", "message": "Alice is allergic to peanuts", "recalled": []})
    out = graph.invoke({"user": "alice", "message": "peanuts in the curry?", "recalled": []})
    assert "Alice is allergic to peanuts" in out["recalled"]
    # the memories are pgmem memories: other pgmem clients of alice find them
    assert any("peanuts" in r.content for r in make_memory("alice").search("peanut allergy", k=5))


def test_langmem_tools_against_the_store(store):
    langmem = need("langmem", "test-langmem")
    manage = langmem.create_manage_memory_tool(namespace=("alice", "memories"), store=store)
    search = langmem.create_search_memory_tool(namespace=("alice", "memories"), store=store)
    created = manage.invoke({"content": "Alice prefers window seats", "action": "create"})
    assert "created" in created.lower()
    found = search.invoke({"query": "where does Alice like to sit?"})
    text = found if isinstance(found, str) else str(found)
    assert "window seats" in text
    mem_id = store.search(("alice", "memories"))[0].key
    manage.invoke({"content": "Alice prefers aisle seats", "action": "update", "id": mem_id})
    assert store.get(("alice", "memories"), mem_id).value["content"] == "Alice prefers aisle seats"
    manage.invoke({"action": "delete", "id": mem_id})
    assert store.get(("alice", "memories"), mem_id) is None


# --- async ----------------------------------------------------------------------------------------------------
def test_async_store_on_async_memory(dsn):
    async def main():
        async with AsyncMemory(dsn, user_id="alice", agent_id="a", space="t64", embedder=HashEmbedder(64),
                               role="pgmem_gateway") as m:
            store = PgmemStore(m)
            ns = ("alice", "async")
            await store.aput(ns, "k1", {"text": "Alice rides a red bicycle"})
            await store.aput(ns, "k2", {"text": "Alice rides a red bicycle"})
            await store.aput(ns, "k1", {"text": "Alice rides a blue bicycle", "n": 2})
            assert (await store.aget(ns, "k1")).value == {"text": "Alice rides a blue bicycle", "n": 2}
            hits = await store.asearch(("alice",), query="blue bicycle", limit=2)
            assert hits[0].key == "k1"
            assert await store.asearch(ns, filter={"n": {"$gt": 1}}) != []
            assert await store.alist_namespaces() == [ns]
            await store.adelete(ns, "k2")
            assert await store.aget(ns, "k2") is None
            with pytest.raises(asyncio.InvalidStateError):
                store.get(ns, "k1")
            with pytest.raises(IdentityError):
                await store.aput(("bob", "x"), "k", {"text": "no"})
            out = await _graph(store).ainvoke({"user": "alice", "message": "Alice rides bicycles", "recalled": []})
            assert out["recalled"]

    asyncio.run(main())


def test_async_methods_on_a_sync_memory(store):
    async def main():
        await store.aput(("alice", "t"), "k", {"text": "threaded"})
        return await store.aget(("alice", "t"), "k")

    assert asyncio.run(main()).value == {"text": "threaded"}


def test_translate_filter():
    assert translate_filter({"a": 1, "b": {"$gt": 2, "$ne": 3}, "c": {"x": 1}}) == \
        {"a": {"eq": 1}, "b": {"gt": 2, "ne": 3}, "c": {"eq": {"x": 1}}}
    with pytest.raises(InvalidFilter):
        translate_filter({"langgraph:key": "x"})


@pytest.mark.parametrize("flt, message", [
    # operators mixed with plain keys: LangGraph's own stores raise "Unsupported operator: x"; this was read as
    # JSON equality with the object {"$gt": 1, "x": 2}, which no value holds: silently nothing found
    ({"score": {"$gt": 1, "x": 2}},
     "filter on 'score' mixes operators ('$gt') with plain keys ('x'): write {'$eq': {...}} to compare with an "
     "object, or use operators only"),
    ({"score": {"x": 2, "$lt": 5, "$gte": 1}},
     "filter on 'score' mixes operators ('$lt', '$gte') with plain keys ('x'): write {'$eq': {...}} to compare "
     "with an object, or use operators only"),
    # an operator inside an equality value: LangGraph's in-memory store applies it there; pgmem would compare
    # the object {"$gt": 1} literally
    ({"stats": {"score": {"$gt": 1}}},
     "filter on 'stats' has the operator '$gt' inside its value (at stats.score): operators apply only "
     "directly under a top-level key of the value; to compare with an object that holds '$' keys, write "
     "{'$eq': {...}}"),
    ({"tags": [{"name": {"$ne": "x"}}]},
     "filter on 'tags' has the operator '$ne' inside its value (at tags[0].name): operators apply only "
     "directly under a top-level key of the value; to compare with an object that holds '$' keys, write "
     "{'$eq': {...}}"),
])
def test_translate_filter_refuses_operators_mixed_with_plain_keys(flt, message):
    with pytest.raises(InvalidFilter) as info:
        translate_filter(flt)
    assert str(info.value) == message and info.value.field == "filter"


def test_translate_filter_keeps_explicit_object_equality():
    assert translate_filter({"meta": {"$eq": {"a": 1}}, "x": {"$ne": {"b": [1]}}}) == \
        {"meta": {"eq": {"a": 1}}, "x": {"ne": {"b": [1]}}}


def test_concurrent_batches_on_the_same_keys(alice):
    """Threads putting, reading and deleting the same keys (as LangGraph's own large-batch test does): no
    deadlock or race reaches the caller, and no key ends up with two items."""
    from concurrent.futures import ThreadPoolExecutor

    store = PgmemStore(alice, ttl={"default_ttl": 0.5})
    ns = ("alice", "busy")
    calls = []
    for i in range(15):
        calls += [(store.put, ns, f"k{i}", {"text": f"value {i}"}), (store.get, ns, f"k{i}"),
                  (store.search, ("alice",)), (store.put, ns, f"k{i}", {"text": f"value {i}"}),
                  (store.put, ns, f"k{i % 3}", {"text": "the same text"}), (store.delete, ns, f"k{i + 1}")]
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(fn, *args) for fn, *args in calls]
        errors = [f.exception() for f in futures if f.exception() is not None]
    assert errors == []
    keys = [r.metadata["langgraph:key"] for r in alice.list(limit=1000).items]
    assert len(keys) == len(set(keys))
    assert {i.key for i in store.search(ns, limit=100)} == set(keys)


def test_two_stores_on_two_pools_putting_new_keys_make_one_item_each(make_memory, admin):
    """Two processes' stores (each its own pool, so its own connections) put the same new keys at once: the
    database serialises the puts of a key, so no key gets two memories (before, both could be added)."""
    import threading

    stores = [PgmemStore(make_memory("alice", "a")), PgmemStore(make_memory("alice", "b"))]
    for s in stores:
        s.memory.space()
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(store: PgmemStore, label: str) -> None:
        try:
            for i in range(12):
                barrier.wait()
                store.batch([PutOp(("alice", "race"), f"k{i}", {"text": f"{label} {i}"}),
                             PutOp(("alice", "race"), f"k{i + 1}", {"text": f"{label} next {i}"})])
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(s, label)) for s, label in zip(stores, "ab")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = admin.execute("SELECT metadata ->> 'langgraph:key', count(*) FROM pgmem.memories"
                           " WHERE user_id = 'alice' GROUP BY 1").fetchall()
    assert sorted(counts) == sorted((f"k{i}", 1) for i in range(13))


NAMESPACES = [("alice",), ("alice", "a"), ("alice", "a", "x"), ("alice", "a", "y"), ("alice", "b", "x"),
              ("alice", "b", "x", "deep"), ("alice", "c"), ("alice", "ünï", "x"), ("alice", "Zed"), ("alice", "zed"),
              ("alice", "a%", "x"), ("alice", "a_", "y"), ("alice", "x", "a")]


def _listed(namespaces, prefix, suffix, max_depth, limit, offset):
    """LangGraph's documented list_namespaces over ``namespaces`` (what the store returned when it read every
    item and filtered in Python)."""
    def ok(ns, path, from_end):
        if len(path) > len(ns):
            return False
        part = ns[len(ns) - len(path):] if from_end else ns[:len(path)]
        return all(p == "*" or p == n for p, n in zip(path, part))

    seen = {ns[:max_depth] if max_depth else ns for ns in namespaces
            if (prefix is None or ok(ns, prefix, False)) and (suffix is None or ok(ns, suffix, True))}
    return sorted(seen)[offset:offset + limit]


def test_list_namespaces_in_sql_equals_langgraphs_semantics_on_a_tree(store, make_memory):
    for i, ns in enumerate(NAMESPACES):
        store.put(ns, f"k{i}", {"text": f"item {i} in {'/'.join(ns)}"})
        store.put(ns, f"second-{i}", {"text": f"another item {i} in {'/'.join(ns)}"})
    store.put(("alice", "gone"), "k", {"text": "deleted"})
    store.delete(("alice", "gone"), "k")
    PgmemStore(make_memory("bob", "b")).put(("bob", "secret"), "k", {"text": "bob's"})
    import itertools

    for prefix, suffix, depth, (limit, offset) in itertools.product(
            [None, ("alice",), ("alice", "a"), ("alice", "*", "x"), ("alice", "a%"), ("bob",)],
            [None, ("x",), ("*", "y"), ("a", "x")], [None, 1, 2, 3], [(100, 0), (3, 2)]):
        got = store.list_namespaces(prefix=prefix, suffix=suffix, max_depth=depth, limit=limit, offset=offset)
        assert got == _listed(NAMESPACES, prefix, suffix, depth, limit, offset), (prefix, suffix, depth, limit, offset)


def test_namespaces_of_another_user_are_never_listed(make_memory):
    PgmemStore(make_memory("bob", "b")).put(("bob", "secret"), "k", {"text": "bob's"})
    PgmemStore(make_memory("alice", "a")).put(("alice", "notes"), "k", {"text": "alice's"})
    bound = PgmemStore(make_memory("alice", "a"))
    assert bound.list_namespaces() == [("alice", "notes")]
    assert bound.list_namespaces(prefix=("bob",)) == []
    anywhere = PgmemStore(make_memory("alice", "a"), user_index=None)  # namespaces name no user: still alice's
    assert anywhere.list_namespaces() == [("alice", "notes")]
    gateway = PgmemStore(make_memory(None, "gw"))  # acts as the namespace's user
    assert gateway.list_namespaces(prefix=("bob",)) == [("bob", "secret")]
    assert gateway.list_namespaces(prefix=("alice",)) == [("alice", "notes")]
