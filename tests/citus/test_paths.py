"""The paths of issue #34 on a live cluster: writes with extra vectors (put_keyed through the LangGraph store,
import_user), drop_space, distribute of a populated database with its foreign keys, a user's writes with a
worker that holds none of the user's data stopped, the rollbacks of every migration, and a client that connected
before distribute. Needs PGMEM_CITUS_DSN (see conftest.py)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector

from pgmem import Memory, citus, migrations
from pgmem.integrations.langgraph import PgmemStore
from pgmem.testing import HashEmbedder

from .citus_helpers import as_login, database_url, node_url, worker_nodes
from .test_cluster import EMB, SPACE, memory, remote_commands, shard_groups

SENTENCES = "Alice moved to Lisbon last spring. She works at a bakery near the river. Her dog is called Tom."


def test_langgraph_put_with_extra_vectors(cluster, admin, gateway, run_id):
    """Defect 1: the store's second put in a namespace (and a value of several sentences) carries extra
    vectors; put_keyed stored them with INSERT ... SELECT, which Citus runs as COPY, refused under RLS."""
    for user in (f"{run_id}-alice", f"{run_id}-bob"):
        with memory(cluster, gateway, user) as m:
            store = PgmemStore(m)
            ns = (user, "notes")
            store.put(ns, "home", {"text": SENTENCES})
            store.put(ns, "work", {"text": "She bakes bread. She starts at five in the morning."})
            store.put(ns, "home", {"text": SENTENCES + " Tom is a beagle."})
            assert store.get(ns, "work").value["text"].startswith("She bakes")
            assert store.get(ns, "home").value["text"].endswith("beagle.")
            [hit, *_] = store.search(ns, query="bakery near the river")
            assert hit.namespace == ns
            vectors = admin.execute("SELECT count(*) FROM pgmem.memory_vectors WHERE user_id = %s", (user,)).fetchone()[0]
            assert vectors > 0


def test_import_with_extra_vectors(cluster, admin, gateway, run_id):
    """Defect 2: import_user of memories with extra vectors and sources (INSERT ... SELECT: COPY under RLS)."""
    with memory(cluster, gateway, f"{run_id}-src") as src:
        src.add(SENTENCES)
        src.append_turn("s1", "user", "I bake bread every morning")
        src.consolidate("s1", lambda turns: ["alice bakes bread. Every morning, before dawn."])
        rows = src.export()
        dst = src.with_identity(user_id=f"{run_id}-dst")
        out = dst.import_rows(rows)
        assert out["memory"]["imported"] == 2
        assert {m.content for m in dst.list().items} == {m.content for m in src.list().items}
        n = admin.execute("SELECT count(*) FROM pgmem.memory_vectors WHERE user_id = %s", (dst.user_id,)).fetchone()[0]
        assert n == admin.execute("SELECT count(*) FROM pgmem.memory_vectors WHERE user_id = %s",
                                  (src.user_id,)).fetchone()[0] > 0
        made = [m for m in dst.list().items if m.content.startswith("alice bakes")][0]
        assert dst.sources(made.id)


def test_drop_space(cluster, run_id):
    """Defect 3: drop_space failed on every call ("cannot execute parallel DDL ...")."""
    name = f"drop{run_id[:6]}"
    emb = HashEmbedder(32)
    with Memory(cluster, user_id=f"{run_id}-a", space=name, embedder=emb, role=None, max_size=1) as m:
        m.create_space(name, emb.model_name, 32)
        m.add("a memory in a space that goes")
        m.with_identity(user_id=f"{run_id}-b").add("another user's memory there")
        assert m.drop_space(name) == {"memories": 2, "turns": 0, "history": 2}
    with psycopg.connect(cluster) as conn:
        assert conn.execute("SELECT count(*) FROM pgmem.spaces WHERE name = %s", (name,)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM pgmem.memories m JOIN pgmem.history h USING (user_id) "
                            "WHERE m.user_id = ANY (%s)", ([f"{run_id}-a", f"{run_id}-b"],)).fetchone()[0] == 0


def _pg_ctl(data: str, *args: str) -> None:
    """pg_ctl (PGMEM_CITUS_PGCTL) on a worker's data directory, as the directory's owner."""
    import pwd

    owner = pwd.getpwuid(os.stat(data).st_uid).pw_name
    cmd = " ".join([os.environ["PGMEM_CITUS_PGCTL"], "-D", data, *args])
    run = ["su", owner, "-c", cmd] if os.geteuid() == 0 and owner != "root" else ["sh", "-c", cmd]
    subprocess.run(run, check=True, capture_output=True)


def _port_of_user(admin, user: str) -> int:
    return admin.execute(
        "SELECT p.nodeport FROM pg_dist_shard_placement p "
        "WHERE p.shardid = get_shard_id_for_distribution_column('pgmem.memories', %s::text)", (user,)).fetchone()[0]


@pytest.mark.skipif(not os.environ.get("PGMEM_CITUS_PGCTL"),
                    reason="stopping a worker needs PGMEM_CITUS_PGCTL (the workers' pg_ctl, on this machine)")
def test_one_users_writes_with_an_unrelated_worker_stopped(cluster, admin, gateway, run_id):
    """Defect 5: add_many (one user) and consolidate contacted every worker and committed with 2PC: with a worker
    down that holds none of the user's data, the user's writes failed."""
    m = memory(cluster, gateway, f"{run_id}-w")
    ports = {n[1] for n in worker_nodes(admin)}
    mine = _port_of_user(admin, m.user_id)
    other = (ports - {mine}).pop()
    m.add("warm the pool and the space")
    with psycopg.connect(as_login(cluster, gateway), autocommit=True) as conn:
        register_vector(conn)
        # Without stopping anything: one shard group, one worker, no PREPARE TRANSACTION.
        with remote_commands(conn) as seen:
            conn.execute("SELECT pgmem.act_as(%s)", (m.user_id,))
            conn.execute("SELECT * FROM pgmem.add_batch(%s::text, %s::text[], %s::vector[])",
                         (SPACE, ["one", "two"], list(EMB.embed(["one", "two"])))).fetchall()
        assert len(shard_groups(admin, seen)) == 1, seen
        assert {d.rsplit("@", 1)[-1].split()[0] for c, d in seen if c.startswith("PREPARE TRANSACTION")} <= {
            f"127.0.0.1:{mine}"}, seen
    data = admin.execute("SELECT result FROM run_command_on_workers('SHOW data_directory') WHERE nodeport = %s",
                         (other,)).fetchone()[0]
    _pg_ctl(data, "-m", "fast", "-w", "stop")
    try:
        assert [r.created for r in m.add_many(["alice plays chess", "alice reads novels"])] == [True, True]
        m.append_turn("s1", "user", "I moved to Lisbon")
        assert m.consolidate("s1", lambda turns: ["alice lives in Lisbon. She moved there."])
        assert m.search("Lisbon")[0].content.startswith("alice lives")
    finally:
        _pg_ctl(data, "-l", f"{data}/../{Path(data).name}.log", "-w", "start")
        m.close()


def test_rollback_and_migrate_through_every_migration_text():
    """Defect 6: a rollback must run on every supported server (PostgreSQL 16+): SET STATISTICS DEFAULT is
    PostgreSQL 17's grammar; -1 means the same on 16 to 18. (Rolled back and migrated through every migration
    on PostgreSQL 16.14 by hand, docs/scaling.md; a distributed schema rolls back its newest migrations only,
    test_migration_applied_to_the_distributed_schema: Citus refuses ALTER INDEX ... SET STATISTICS on a
    distributed table, which 0022 and its rollback run.)"""
    rollbacks = sorted(migrations.sql_path().glob("*.rollback.sql"))
    assert len(rollbacks) >= 25
    bad = [p.name for p in rollbacks if "SET STATISTICS DEFAULT" in p.read_text().upper()]
    assert bad == []


@pytest.fixture
def fresh(cluster, admin):
    """A new database on every node of the cluster, with citus and vector, the workers added: a cluster of its
    own that pgmem has not distributed yet. Its pg_dist_authinfo holds the cluster's pgmem_api password (the
    workers' pgmem_api is one role for all databases of a server). Dropped at the end."""
    name = f"pgmem34_{uuid.uuid4().hex[:8]}"
    coord = admin.execute("SELECT nodename, nodeport FROM pg_dist_node WHERE groupid = 0").fetchone()
    nodes = [tuple(coord)] + worker_nodes(admin)
    auth = admin.execute("SELECT authinfo FROM pg_dist_authinfo WHERE rolename = 'pgmem_api'").fetchone()
    for host, port in nodes:
        with psycopg.connect(node_url(cluster, host, port), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(node_url(cluster, host, port, name), autocommit=True) as c:
            c.execute("CREATE EXTENSION citus")
            c.execute("CREATE EXTENSION vector")
    url = database_url(cluster, name)
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT citus_set_coordinator_host(%s, %s)", coord)
        for host, port in worker_nodes(admin):
            c.execute("SELECT citus_add_node(%s, %s)", (host, port))
        if auth:
            c.execute("INSERT INTO pg_dist_authinfo (nodeid, rolename, authinfo) VALUES (0, 'pgmem_api', %s)", auth)
    yield url
    for host, port in nodes:
        with psycopg.connect(node_url(cluster, host, port), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_distribute_a_populated_database_keeps_every_foreign_key(fresh, gateway, run_id):
    """Defect 4: pgmem distribute on a database holding memories stopped (relation "pgmem.history" does not
    exist) after dropping the foreign keys, and a second run never added them again. Defect 7: a client that
    connected before distribute reads and writes correctly afterwards (it follows the cluster mode)."""
    migrations.migrate(fresh)
    before = citus.state(psycopg.connect(fresh, autocommit=True, row_factory=psycopg.rows.dict_row)).foreign_keys
    assert len(before) == 5, before
    early = Memory(fresh, user_id=f"{run_id}-early", space=SPACE, embedder=EMB, role=None, max_size=1)
    early.create_space(SPACE, EMB.model_name, 64)
    kept = early.add(SENTENCES).id
    early.append_turn("s1", "user", "I bake bread")
    early.consolidate("s1", lambda turns: ["early bakes bread. Every day."])
    assert early.cluster is False
    citus.distribute(fresh)
    with psycopg.connect(fresh, autocommit=True, row_factory=psycopg.rows.dict_row) as c:
        st = citus.state(c)
        assert st.distributed
        assert st.foreign_keys == before
        # The keys work: a deleted memory takes its extra vectors and sources with it.
        assert c.execute("SELECT count(*) AS n FROM pgmem.memory_vectors WHERE memory_id = %s", (kept,)).fetchone()["n"] > 0
    assert citus.distribute(fresh) == []
    # The client that connected before: its reads find the rows, its writes land, on the cluster.
    assert early.get(kept).content == SENTENCES
    assert {m.id for m in early.list().items} >= {kept}
    assert early.search("bakery near the river", k=3)[0].id == kept
    assert early.add("written after distribute").created
    assert early.cluster is True
    assert early.delete(kept) is True
    with psycopg.connect(fresh, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM pgmem.memory_vectors WHERE memory_id = %s", (kept,)).fetchone()[0] == 0
    early.close()
