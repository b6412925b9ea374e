"""pgmem on a live Citus cluster: the whole API as two users and a bound login, isolation, routing of each
user's call to one shard group, HNSW on the shard, erase on one shard group, purge on all, a migration on
the distributed schema, concurrent writers. Needs PGMEM_CITUS_DSN (see conftest.py)."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timedelta, timezone
from contextlib import contextmanager

import psycopg
import pytest
from pgvector.psycopg import register_vector

from pgmem import Memory, citus, migrations
from pgmem.doctor import run_checks
from pgmem.errors import IdentityError
from pgmem.testing import HashEmbedder

from .citus_helpers import as_login

SPACE = "citus64"
EMB = HashEmbedder(64)
SHARD = re.compile(r"pgmem\.(\w+?)_(\d{6,})\b")


def memory(dsn: str, login: str, user: str | None, options: str | None = None) -> Memory:
    return Memory(as_login(dsn, login, options), user_id=user, space=SPACE, embedder=EMB, role=None, max_size=2)


@contextmanager
def remote_commands(conn: psycopg.Connection):
    """The commands the coordinator sends to workers inside the block (citus.log_remote_commands), as
    (command, detail) pairs; the block runs in one transaction."""
    seen: list[tuple[str, str]] = []

    def handler(diag):
        if (diag.message_primary or "").startswith("issuing "):
            seen.append((diag.message_primary[len("issuing "):], diag.message_detail or ""))

    conn.add_notice_handler(handler)
    try:
        with conn.transaction():
            conn.execute("SET LOCAL citus.log_remote_commands = on")
            conn.execute("SET LOCAL client_min_messages = log")
            yield seen
    finally:
        conn.remove_notice_handler(handler)


def shard_groups(admin: psycopg.Connection, seen: list[tuple[str, str]]) -> set[tuple[str, int]]:
    """The shard groups (hash range start, node port) of the distributed tables' shards named in ``seen``;
    reference tables' shards (no hash range) are left out."""
    ids = {int(m.group(2)) for cmd, _ in seen for m in SHARD.finditer(cmd)}
    if not ids:
        return set()
    rows = admin.execute(
        "SELECT s.shardminvalue, p.nodeport FROM pg_dist_shard s JOIN pg_dist_shard_placement p USING (shardid)"
        " WHERE s.shardid = ANY (%s) AND s.shardminvalue IS NOT NULL", (list(ids),)).fetchall()
    return {(r[0], r[1]) for r in rows}


@pytest.fixture
def two(cluster, gateway, run_id):
    a = memory(cluster, gateway, f"{run_id}-alice")
    b = a.with_identity(user_id=f"{run_id}-bob")
    yield a, b
    a.close()


def test_distribute_recorded_doctor_and_client_see_cluster_mode(cluster, gateway, two):
    a, _ = two
    a.space()
    assert a.cluster is True
    assert citus.state(psycopg.connect(cluster, autocommit=True, row_factory=psycopg.rows.dict_row)).distributed
    assert citus.distribute(cluster) == []  # idempotent: nothing left to do
    checks = {c.name: c for c in run_checks(cluster, space=SPACE, embedder=EMB)}
    for name in ("citus settings", "citus distribution", "citus plans", "citus roles", "citus credentials",
                 "cluster mode"):
        assert checks[name].ok, checks[name]
    assert checks["function probe"].ok, checks["function probe"]


def test_whole_api_as_two_users(two):
    a, b = two
    a1 = a.add("alice drinks green tea every morning", agent_id="ag", session_id="s1").id
    a2 = a.add("alice walks her dog in the park", session_id="s1").id
    b1 = b.add("bob drinks black coffee at night").id
    assert [r.created for r in a.add_many(["alice plays chess", "alice reads novels"])] == [True, True]
    assert a.get(a1).content.startswith("alice drinks")
    assert b.get(a1) is None
    assert {m.id for m in a.list(limit=50).items} >= {a1, a2}
    assert all(m.user_id == b.user_id for m in b.list().items)
    hits = a.search(embedding=EMB.embed(["alice drinks green tea"])[0], k=3, mode="vector")
    assert hits[0].id == a1 and all(h.user_id == a.user_id for h in hits)
    assert a.search("green tea")[0].id == a1
    assert [h.id for h in b.search("green tea")] == [b1]
    assert a.update(a2, metadata={"pet": "dog"}).metadata == {"pet": "dog"}
    assert "puppy" in a.edit(a2, "dog", "puppy").content
    new = a.supersede(a1, "alice now drinks oolong tea")
    assert a.get(a1).superseded_by == new.id
    assert [m.id for m in a.chain(new.id)] == [a1, new.id]
    assert a.invalidate(new.id).valid_to is not None
    assert [e.event for e in a.history(a2)] == ["ADD", "UPDATE", "EDIT"]
    assert a.history(a2)[0].actor_agent_id is None and a.history(a1)[0].actor_agent_id == "ag"
    assert a.stats()[0].memories >= 3 and b.stats()[0].memories == 1
    assert a.delete(a2) is True and a.get(a2) is None
    assert b.delete(a1) is False
    a.append_turn("s9", "user", "I moved to Lisbon last spring")
    a.append_turn("s9", "assistant", "Noted: you live in Lisbon")
    assert [t.role for t in a.recent_turns("s9")] == ["user", "assistant"]
    assert b.recent_turns("s9") == []
    made = a.consolidate("s9", lambda turns: ["alice lives in Lisbon"])
    assert a.sources(made[0].id)
    assert "Lisbon" in a.context("where does alice live", session_id="s9").render()
    assert a.delete_all(agent_id="ag") >= 0
    assert b.get(b1).content.startswith("bob")


def test_bound_login_and_its_isolation(cluster, admin, gateway, two, run_id):
    a, b = two
    mine = a.add("alice keeps her passport in the desk").id
    theirs = b.add("bob keeps his keys under the mat").id
    login = f"citus_agent_{run_id}"
    admin.execute(f'CREATE ROLE "{login}" LOGIN')
    admin.execute(f'GRANT pgmem_agent TO "{login}"')
    admin.execute("SELECT pgmem.bind_role(%s, %s)", (login, a.user_id))
    try:
        with memory(cluster, login, None) as bound:
            assert bound.get(mine).content.startswith("alice keeps")
            assert bound.get(theirs) is None
            assert bound.add("written by alice's agent").created
            assert {m.user_id for m in bound.list(limit=100).items} == {a.user_id}
        # Naming another user: refused at once.
        with memory(cluster, login, b.user_id) as other, pytest.raises(IdentityError):
            other.get(theirs)
        # Setting another user by hand: the workers still act for the bound user.
        with psycopg.connect(as_login(cluster, login)) as conn, conn.transaction():
            register_vector(conn)
            conn.execute(f"SET LOCAL pgmem.user_id = '{b.user_id}'")
            rows = conn.execute("SELECT id, user_id FROM pgmem.list(%s, p_limit => 100)", (SPACE,)).fetchall()
            assert rows and {r[1] for r in rows} == {a.user_id}
            assert conn.execute("SELECT count(*) FROM pgmem.get(%s)", (theirs,)).fetchone()[0] == 0
    finally:
        admin.execute("SELECT pgmem.unbind_role(%s)", (login,))
        admin.execute(f'DROP ROLE "{login}"')


def test_each_user_call_is_routed_to_one_shard_group(cluster, admin, gateway, two):
    a, b = two
    a.add("alice routes to one shard group")
    b.add("bob routes to one shard group")
    vec = EMB.embed(["one shard group"])[0]
    calls = [
        ("SELECT * FROM pgmem.search(%s, %s, 5)", (SPACE, vec)),
        ("SELECT * FROM pgmem.list(%s)", (SPACE,)),
        ("SELECT * FROM pgmem.add(%s, %s, %s)", (SPACE, "a new one for the router", vec)),
        ("SELECT * FROM pgmem.stats()", ()),
    ]
    groups_by_user = {}
    with psycopg.connect(as_login(cluster, gateway), autocommit=True) as conn:
        register_vector(conn)
        for user in (a.user_id, b.user_id):
            for sql, params in calls:
                with remote_commands(conn) as seen:
                    conn.execute("SELECT pgmem.act_as(%s)", (user,))
                    conn.execute(sql, params).fetchall()
                groups = shard_groups(admin, seen)
                assert len(groups) == 1, (user, sql, groups, seen)
                groups_by_user.setdefault(user, set()).update(groups)
    assert all(len(g) == 1 for g in groups_by_user.values()), groups_by_user


def test_hnsw_index_used_on_the_shard(cluster, admin, gateway, run_id):
    user = f"{run_id}-large"
    # The exact route below 50 rows, so that 120 rows take the HNSW route: a setting of the login (Citus sends
    # ALTER ROLE ... SET to the workers), since a call delegated to a worker runs in the login's session there,
    # not in the client's session on the coordinator.
    login = f"citus_hnsw_{run_id}"
    admin.execute(f'CREATE ROLE "{login}" LOGIN IN ROLE pgmem_gateway')
    admin.execute(f'ALTER ROLE "{login}" SET pgmem.exact_search_max_rows = 50')
    with memory(cluster, login, user) as m:
        m.add_many([f"fact {i} about topic {i % 7} and colour {i % 5}" for i in range(120)])

        def scans() -> int:
            rows = admin.execute("SELECT result FROM run_command_on_workers($$SELECT coalesce(sum(idx_scan), 0) "
                                 "FROM pg_stat_user_indexes WHERE indexrelname LIKE 'memories_space_%_hnsw_%'$$)"
                                 ).fetchall()
            return sum(int(r[0]) for r in rows)

        before = scans()
        hits = m.search(embedding=EMB.embed(["fact about topic 3 and colour 2"])[0], k=10, mode="vector")
        assert len(hits) == 10 and all(h.user_id == user for h in hits)
        deadline = time.monotonic() + 10
        while scans() == before and time.monotonic() < deadline:  # statistics reach the view within a second
            time.sleep(0.2)
        assert scans() > before
    admin.execute(f'DROP ROLE "{login}"')


def test_erase_touches_one_shard_group_and_purge_all(cluster, admin, gateway, two):
    a, b = two
    a.add("alice's memory to erase")
    b.add("bob's memory stays")
    with remote_commands(admin) as seen:
        admin.execute("SELECT * FROM pgmem.erase_user(%s)", (a.user_id,)).fetchall()
    assert len(shard_groups(admin, seen)) == 1, seen
    assert a.list().items == [] and len(b.list().items) == 1
    with remote_commands(admin) as seen:
        admin.execute("SELECT * FROM pgmem.purge()").fetchall()
    groups = shard_groups(admin, seen)
    nodes = {port for _, port in groups}
    assert len(nodes) >= 2 and len(groups) > 2, groups


def test_expired_memories_purged_across_workers(cluster, admin, gateway, two):
    a, b = two
    for m in (a, b):
        m.add("expires in a moment", expires_at=datetime.now(timezone.utc) + timedelta(seconds=1.5))
    time.sleep(2)
    assert a.list().items == []
    admin.execute("SELECT * FROM pgmem.purge()").fetchall()
    left = admin.execute("SELECT count(*) FROM pgmem.memories WHERE user_id = ANY (%s)",
                         ([a.user_id, b.user_id],)).fetchone()[0]
    assert left == 0
    events = admin.execute("SELECT event FROM pgmem.history WHERE user_id = ANY (%s) ORDER BY event",
                           ([a.user_id, b.user_id],)).fetchall()
    assert [e[0] for e in events] == ["EXPIRE", "EXPIRE"]


def test_migration_applied_to_the_distributed_schema(cluster, two):
    a, _ = two
    mid = a.add("written before the migration ran again").id
    last = migrations.applied(cluster)[-1]
    assert migrations.rollback(cluster, 1) == [last]
    # The rolled-back schema is usable as it stands: the rollback ran distribute's steps again (a restored
    # search_hybrid forced generic plans: 0A000 "could not create distributed plan" on every hybrid search).
    checks = {c.name: c for c in run_checks(cluster, space=SPACE, embedder=EMB)}
    assert checks["citus plans"].ok, checks["citus plans"]
    assert a.search("written before the migration")[0].id == mid
    assert migrations.migrate(cluster) == [last]  # on a distributed schema it runs distribute's steps again
    assert citus.distribute(cluster) == []
    checks = {c.name: c for c in run_checks(cluster, space=SPACE, embedder=EMB)}
    assert checks["citus plans"].ok and checks["function probe"].ok, checks
    assert a.get(mid).content == "written before the migration ran again"
    assert a.add("written after it").created


def test_concurrent_writers_for_two_users(cluster, gateway, two):
    a, b = two
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def write(m: Memory, tag: str) -> None:
        try:
            barrier.wait()
            for i in range(40):
                m.add(f"{tag} concurrent fact {i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(m, tag)) for m, tag in ((a, "alice"), (b, "bob"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for m, tag in ((a, "alice"), (b, "bob")):
        items = m.list(limit=1000).items
        assert len([x for x in items if "concurrent" in x.content]) == 40
        assert {x.user_id for x in items} == {m.user_id}


def test_concurrent_keyed_puts_of_one_key_make_one_memory(cluster, admin, gateway, two):
    """put_keyed serialises on the tenant's row of pgmem.key_locks (distributed with the user's other tables):
    two threads putting one key 20 times each leave one live memory of it, and bob's puts are not blocked."""
    a, b = two
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []

    def put(m: Memory, tag: str) -> None:
        try:
            barrier.wait()
            for i in range(20):
                m.put_keyed([{"key": "profile", "content": f"{m.user_id} profile {tag} {i}"}])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=put, args=args) for args in ((a, "x"), (a, "y"), (b, "z"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for m in (a, b):
        live = [x for x in m.list(limit=1000).items if (x.metadata or {}).get("pgmem:key") == "profile"]
        assert len(live) == 1 and live[0].content.startswith(f"{m.user_id} profile")
        assert m.get_keyed(["profile"])["profile"].id == live[0].id
    # The other keyed functions of the adapters run on the cluster too.
    [made] = a.put_keyed([{"key": "ns-item", "content": "alice item in a namespace",
                           "metadata": {"ns": ["alice", "notes"]}, "ttl": timedelta(hours=1)}])
    assert a.get_keyed(["ns-item"])["ns-item"].expires_at is not None
    assert set(a.set_expiry({made.id: timedelta(hours=2)})) == {made.id}
    assert a.metadata_values("ns", prefixes=[["alice"]]) == [["alice", "notes"]]
    assert b.metadata_values("ns") == []
    a.append_turn("keyed-s", "user", "a turn to clear")
    a.clear_session("keyed-s")
    assert a.recent_turns("keyed-s") == []
    assert a.put_keyed([{"key": "ns-item", "content": None}]) == [None] and a.get_keyed(["ns-item"]) == {}
    assert admin.execute("SELECT partmethod FROM pg_dist_partition WHERE logicalrelid = 'pgmem.key_locks'::regclass"
                         ).fetchone() == ("h",)
    assert admin.execute("SELECT count(*) FROM pgmem.key_locks WHERE user_id = ANY(%s)",
                         [[a.user_id, b.user_id]]).fetchone() == (2,)


def test_each_users_call_is_one_remote_command_to_one_worker(cluster, admin, gateway, two):
    """Function call delegation (issue #34): each *_for call, as the client sends it in cluster mode (one
    statement outside a transaction block), reaches the worker holding its user's shard group in one remote
    command, and its writes commit there (no PREPARE TRANSACTION)."""
    from pgmem.transport import DelegatedIdentity

    a, b = two
    a.add("alice's memory to edit and route")
    assert type(a._transport.identity) is DelegatedIdentity
    vec = EMB.embed(["route me"])[0]
    for m in (a, b):
        mid = m.add(f"{m.user_id} routes this memory").id
        port = admin.execute("SELECT p.nodeport FROM pg_dist_shard_placement p WHERE p.shardid = "
                             "get_shard_id_for_distribution_column('pgmem.memories', %s::text)", (m.user_id,)).fetchone()[0]
        calls = [
            ("SELECT * FROM pgmem.search_for(%s::text, %s::text, %s::vector, 5)", (m.user_id, SPACE, vec)),
            ("SELECT * FROM pgmem.search_hybrid_for(%s::text, %s::text, %s::text, %s::vector, 5)",
             (m.user_id, SPACE, "routes memory", vec)),
            ("SELECT * FROM pgmem.list_for(%s::text, %s::text)", (m.user_id, SPACE)),
            ("SELECT * FROM pgmem.get_for(%s::text, %s::uuid)", (m.user_id, mid)),
            ("SELECT * FROM pgmem.add_for(%s::text, %s::text, %s::text, %s::vector)",
             (m.user_id, SPACE, f"{m.user_id} adds one more", vec)),
            ("SELECT * FROM pgmem.add_batch_for(%s::text, %s::text, %s::text[], %s::vector[])",
             (m.user_id, SPACE, [f"{m.user_id} batch 1", f"{m.user_id} batch 2"], [vec, vec])),
            ("SELECT * FROM pgmem.edit_for(%s::text, %s::uuid, 'routes', 'sends', %s::vector)", (m.user_id, mid, vec)),
        ]
        with psycopg.connect(as_login(cluster, gateway), autocommit=True) as conn:
            register_vector(conn)
            seen: list[tuple[str, str]] = []
            conn.add_notice_handler(lambda d: seen.append((d.message_primary or "", d.message_detail or "")))
            conn.execute("SET citus.log_remote_commands = on")
            conn.execute("SET client_min_messages = log")
            for sql, params in calls:
                seen.clear()
                rows = conn.execute(sql, params).fetchall()
                issued = [(c, d) for c, d in seen if c.startswith("issuing ")]
                assert len(issued) == 1 and "_for(" in issued[0][0], (sql, seen)
                assert issued[0][1].split("@")[-1].split()[0] == f"127.0.0.1:{port}", (sql, issued)
                assert rows or "get_for" not in sql
