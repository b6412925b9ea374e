"""Workers trust only the coordinator, by credentials (issue #34, item 8): pgmem_api proves itself to a worker
with a password only the coordinator keeps (pg_dist_authinfo), and an agent login connected straight to a
worker reaches only its own user's rows. Needs PGMEM_CITUS_DSN and workers whose pg_hba.conf asks pgmem_api
for scram-sha-256 (docs/scaling.md); doctor's "citus credentials" says when they do not."""

from __future__ import annotations

import psycopg
import pytest

from pgmem.doctor import run_checks

from .citus_helpers import as_login, node_url, worker_nodes
from .test_cluster import EMB, SPACE, two  # noqa: F401 (a fixture)


def test_doctor_checks_the_credentials(cluster):
    check = {c.name: c for c in run_checks(cluster, space=SPACE, embedder=EMB)}["citus credentials"]
    assert check.ok, check


def test_a_worker_refuses_pgmem_api_without_the_coordinators_password(cluster, admin, two):
    a, _ = two
    a.add("the coordinator still reaches the workers as pgmem_api")  # with the password it keeps
    assert a.list().items
    for host, port in worker_nodes(admin):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(as_login(node_url(cluster, host, port), "pgmem_api"), connect_timeout=5)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(as_login(node_url(cluster, host, port), "pgmem_api") + "?password=guess",
                            connect_timeout=5)
    # The secret is on the coordinator only, where only superusers read it.
    assert admin.execute("SELECT count(*) FROM pg_dist_authinfo WHERE rolename = 'pgmem_api'").fetchone()[0] == 1
    for r in admin.execute("SELECT result FROM run_command_on_workers("
                           "$$SELECT count(*) FROM pg_dist_authinfo WHERE rolename = 'pgmem_api'$$)").fetchall():
        assert r[0] == "0"
    assert admin.execute("SELECT has_table_privilege('pgmem_gateway', 'pg_dist_authinfo', 'SELECT')").fetchone()[0] \
        is False


def test_an_agent_login_on_a_worker_reaches_only_its_users_rows(cluster, admin, two, run_id):
    a, b = two
    mine = a.add("alice's row, read on her worker").id
    theirs = b.add("bob's row, not for alice's agent").id
    login = f"citus_agent_w_{run_id}"
    admin.execute(f'CREATE ROLE "{login}" LOGIN')
    admin.execute(f'GRANT pgmem_agent TO "{login}"')
    admin.execute("SELECT pgmem.bind_role(%s, %s)", (login, a.user_id))
    try:
        bob_port = admin.execute(
            "SELECT p.nodeport FROM pg_dist_shard_placement p "
            "WHERE p.shardid = get_shard_id_for_distribution_column('pgmem.memories', %s::text)", (b.user_id,)).fetchone()[0]
        shard = admin.execute("SELECT shard_name('pgmem.memories', get_shard_id_for_distribution_column("
                              "'pgmem.memories', %s::text))", (b.user_id,)).fetchone()[0]
        host = dict((p, h) for h, p in worker_nodes(admin))[bob_port]
        with psycopg.connect(as_login(node_url(cluster, host, bob_port), login), autocommit=True) as conn:
            # No table privileges: the shard itself is out of reach.
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"SELECT content FROM {shard}")
            # Through the API on the worker, naming bob by hand: never bob. (The binding is keyed by the role's
            # OID, which differs from node to node: on a worker the bound login is no one and sees no rows.)
            with conn.transaction():
                conn.execute(f"SET LOCAL pgmem.user_id = '{b.user_id}'")
                assert conn.execute("SELECT pgmem.current_user_id()").fetchone()[0] in (None, a.user_id)
                conn.execute("SAVEPOINT read")
                try:
                    assert conn.execute("SELECT count(*) FROM pgmem.get(%s::uuid)", (theirs,)).fetchone()[0] == 0
                except psycopg.Error as exc:  # no one: no identity at all
                    assert "no pgmem identity" in str(exc)
                    conn.execute("ROLLBACK TO SAVEPOINT read")
            with pytest.raises(psycopg.Error, match="bound to one pgmem user|may not name the user"):
                conn.execute("SELECT pgmem.act_as(%s)", (b.user_id,))
        assert mine
    finally:
        admin.execute("SELECT pgmem.unbind_role(%s)", (login,))
        admin.execute(f'DROP ROLE "{login}"')

