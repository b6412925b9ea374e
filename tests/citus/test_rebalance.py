"""Rebalancing (issue #34): a worker added, distribute run again (the new node's pgmem_api), and
citus_rebalance_start moving shard groups to it while two users keep writing and reading; nothing is lost
and each user's rows stay together. Needs PGMEM_CITUS_DSN and PGMEM_CITUS_SPARE (host:port of a server with
citus and vector in the database, the workers' settings and pg_hba.conf, not yet in the cluster); the node
is drained and removed again at the end."""

from __future__ import annotations

import os
import threading
import time

import psycopg
import pytest

from pgmem import citus

from .test_cluster import memory

SPARE = os.environ.get("PGMEM_CITUS_SPARE")


@pytest.mark.skipif(not SPARE, reason="needs PGMEM_CITUS_SPARE, a server to add as a worker")
def test_rebalance_while_users_read_and_write(cluster, gateway, run_id):
    host, port = SPARE.rsplit(":", 1)
    # A connection of its own: the session's may hold a cached connection to a worker another test restarted.
    admin = psycopg.connect(cluster, autocommit=True)
    admin.execute("CALL citus_cleanup_orphaned_resources()")
    users = [memory(cluster, gateway, f"{run_id}-r{i}") for i in range(4)]
    for m in users:
        m.add_many([f"{m.user_id} fact {i} before the move" for i in range(20)])
    admin.execute("SELECT citus_add_node(%s, %s)", (host, int(port)))
    try:
        assert any("log in" in step for step in citus.distribute(cluster))  # the new node's pgmem_api
        stop = threading.Event()
        written: dict[str, list[str]] = {m.user_id: [] for m in users}
        errors: list[BaseException] = []

        def work(m) -> None:
            i = 0
            try:
                while not stop.is_set():
                    text = f"{m.user_id} fact {i} during the move"
                    m.add(text)
                    written[m.user_id].append(text)
                    assert {x.user_id for x in m.list(limit=5).items} == {m.user_id}
                    m.search("fact during the move", k=3)
                    i += 1
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(m,)) for m in users]
        for t in threads:
            t.start()
        time.sleep(1)
        admin.execute("SELECT citus_rebalance_start(shard_transfer_mode => 'auto')")
        deadline = time.monotonic() + 300
        while admin.execute("SELECT state::text FROM citus_rebalance_status()").fetchone()[0] not in (
                "finished", "failed", "cancelled") and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join()
        assert admin.execute("SELECT state::text FROM citus_rebalance_status()").fetchone()[0] == "finished"
        assert errors == []
        moved = admin.execute("SELECT count(*) FROM pg_dist_shard_placement WHERE nodeport = %s", (int(port),)).fetchone()[0]
        assert moved > 0
        for m in users:
            contents = {x.content for x in m.list(limit=1000).items}
            assert {f"{m.user_id} fact {i} before the move" for i in range(20)} <= contents
            assert set(written[m.user_id]) <= contents and written[m.user_id]
            # The user's rows stay together: every table's shard of this user on one node.
            nodes = admin.execute(
                "SELECT DISTINCT p.nodeport FROM pg_dist_partition d JOIN pg_dist_shard_placement p "
                "ON p.shardid = get_shard_id_for_distribution_column(d.logicalrelid, %s::text) "
                "WHERE d.logicalrelid::text LIKE 'pgmem.%%' AND d.partmethod = 'h'", (m.user_id,)).fetchall()
            assert len(nodes) == 1, nodes
    finally:
        for m in users:
            m.close()
        if admin.execute("SELECT state::text FROM citus_rebalance_status()").fetchone()[0] in ("running", "scheduled"):
            admin.execute("SELECT citus_rebalance_stop()")
        admin.execute("SELECT citus_drain_node(%s, %s)", (host, int(port)))
        admin.execute("CALL citus_cleanup_orphaned_resources()")
        admin.execute("SELECT citus_remove_node(%s, %s)", (host, int(port)))
        admin.close()
