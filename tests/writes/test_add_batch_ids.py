"""add_batch maps each item to its memory: from RETURNING when every item is new (migration 0004), through the
general lookup otherwise (repeated content, content already stored, client ids). Both give the same answer."""

from __future__ import annotations

import uuid


def test_every_item_new_maps_ids_in_item_order(alice):
    texts = [f"fact number {i}" for i in range(25)]
    got = alice.add_many(texts)
    assert [r.created for r in got] == [True] * 25
    assert [alice.get(r.id).content for r in got] == texts
    assert len({r.id for r in got}) == 25


def test_mixed_batch_uses_the_general_mapping(alice):
    old = alice.add("already stored")
    cid = uuid.uuid4()
    got = alice.add_many(["new one", "already stored", "new one", {"content": "with client id", "id": str(cid)},
                          "another new"])
    assert [r.created for r in got] == [True, False, False, True, True]
    assert got[1].id == old.id and got[2].id == got[0].id and got[3].id == cid
    assert [alice.get(r.id).content for r in got] == ["new one", "already stored", "new one", "with client id",
                                                      "another new"]
    # the same batch again: nothing new, every id found again
    again = alice.add_many(["new one", "already stored", "new one", {"content": "with client id", "id": str(cid)},
                            "another new"])
    assert [r.id for r in again] == [r.id for r in got] and not any(r.created for r in again)


# --------------------------------------------------------------------------------------------------------
# Many users in one statement (p_user_ids): a gateway's batch, each item written acting as its user
# --------------------------------------------------------------------------------------------------------
def owners(admin, ids) -> list[str]:
    found = dict(admin.execute("SELECT id, user_id FROM pgmem.memories WHERE id = ANY(%s)", [list(ids)]).fetchall())
    return [found[i] for i in ids]


def test_a_gateway_writes_for_many_users_in_one_call(make_memory, admin):
    gw = make_memory(None)  # a gateway client that acts for no user of its own
    items = [{"content": "alice likes tea", "user_id": "alice"}, {"content": "bob likes coffee", "user_id": "bob"},
             {"content": "alice likes tea", "user_id": "bob"},  # same text, another user: a memory of its own
             {"content": "alice likes tea", "user_id": "alice"},  # repeated within alice's items
             {"content": "carol rides", "user_id": "carol"}]
    got = gw.add_many(items)
    assert [r.created for r in got] == [True, True, True, False, True]
    assert got[3].id == got[0].id and got[2].id != got[0].id
    assert owners(admin, [r.id for r in got]) == ["alice", "bob", "bob", "alice", "carol"]
    alice, bob = gw.with_identity(user_id="alice"), gw.with_identity(user_id="bob")
    assert sorted(m.content for m in alice.list().items) == ["alice likes tea"]
    assert sorted(m.content for m in bob.list().items) == ["alice likes tea", "bob likes coffee"]
    # history names the right owner for every event
    assert admin.execute("SELECT count(*) FROM pgmem.history h JOIN pgmem.memories m ON m.id = h.memory_id"
                         " WHERE h.user_id <> m.user_id").fetchone()[0] == 0


def test_a_client_with_a_user_can_add_for_others_and_keeps_its_identity(make_memory, admin):
    alice = make_memory("alice")
    got = alice.add_many(["mine", {"content": "for bob", "user_id": "bob"}])
    assert owners(admin, [r.id for r in got]) == ["alice", "bob"]
    with alice.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pgmem.act_as('carol')")
        alice.with_identity(user_id="carol").add_many([{"content": "x", "user_id": "dave"}, "carol's"], conn=conn)
        assert conn.execute("SELECT pgmem.current_user_id()").fetchone()[0] == "carol"


def test_a_bound_agent_cannot_write_for_another_user(admin, login_role, dsn):
    from conftest import dsn_for
    from pgmem import Memory
    from pgmem.errors import IdentityError
    from pgmem.testing import HashEmbedder

    role = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [role])
    admin.execute("SELECT pgmem.create_space('t64', %s, 64)", [HashEmbedder(64).model_name])
    with Memory(dsn_for(admin.info.dbname, user=role), embedder=HashEmbedder(64), space="t64", role=None) as agent:
        assert agent.add_many([{"content": "her own", "user_id": "alice"}])[0].created
        try:
            agent.add_many([{"content": "ok", "user_id": "alice"}, {"content": "smuggled", "user_id": "bob"}])
            raise AssertionError("a bound login wrote for another user")
        except IdentityError:
            pass
    assert admin.execute("SELECT count(*) FROM pgmem.memories WHERE content IN ('ok', 'smuggled')").fetchone()[0] == 0


def test_items_must_all_name_a_user_when_the_client_has_none(make_memory):
    from pgmem.errors import ValidationError

    gw = make_memory(None)
    try:
        gw.add_many([{"content": "a", "user_id": "alice"}, "no user"])
        raise AssertionError("accepted an item without a user")
    except ValidationError as exc:
        assert exc.index == 1


def test_concurrent_batches_for_the_same_users_do_not_deadlock(make_memory, admin):
    """C23 for batches naming many users: two gateways write the same texts for the same users, the users in
    opposite orders, at the same moment. Users are taken in sorted order, so one waits for the other instead
    of a deadlock; each (user, text) is stored once and exactly one of the two calls created it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    one, two = make_memory(None, max_size=1), make_memory(None, max_size=1)
    one.space()
    barrier = threading.Barrier(2)

    def add(client, items):
        barrier.wait(timeout=30)
        return client.add_many(items)

    with ThreadPoolExecutor(2) as pool:
        for i in range(10):
            items = [{"content": f"shared fact {i}.{j}", "user_id": u} for u in ("alice", "bob", "carol")
                     for j in range(3)]
            a = pool.submit(add, one, items)
            b = pool.submit(add, two, items[::-1])
            ra, rb = a.result(), b.result()[::-1]
            for x, y in zip(ra, rb):
                assert x.id == y.id, i
                assert sorted([x.created, y.created]) == [False, True], i
    assert admin.execute("SELECT count(*), count(DISTINCT (user_id, content)) FROM pgmem.memories").fetchone() == (90, 90)
