"""The Citus cluster mode as seen from a single PostgreSQL: distribute refuses, doctor says nothing about
Citus, the client reads the recorded mode, and the portable changes behave as before (the live-cluster tests
are in tests/citus, collected only with PGMEM_CITUS_DSN)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from conftest import dsn_for

from pgmem import Memory, citus, doctor
from pgmem.aio import AsyncMemory
from pgmem.errors import SchemaError


def test_distribute_refuses_without_citus(dsn):
    with pytest.raises(SchemaError, match="no Citus") as exc:
        citus.distribute(dsn)
    assert "docs/scaling.md" in (exc.value.hint or "")


def test_distribute_cli_refuses_with_a_clear_error(dsn, capsys):
    from typer.testing import CliRunner

    from pgmem.cli import app

    result = CliRunner().invoke(app, ["distribute", "--dsn", dsn])
    assert result.exit_code != 0
    assert "no Citus" in result.output and "Traceback" not in result.output


def test_doctor_says_nothing_about_citus_on_a_single_node(alice, dsn, embedder):
    alice.add("a memory so that the space exists")
    names = [c.name for c in doctor.run_checks(dsn, space="t64", embedder=embedder)]
    assert "function probe" in names
    assert not [n for n in names if "citus" in n or n == "cluster mode"]


def test_client_reads_the_recorded_mode(admin, make_memory):
    plain = make_memory("alice")
    plain.add("one-statement calls")
    assert plain.cluster is False
    admin.execute(f"ALTER DATABASE \"{admin.info.dbname}\" SET pgmem.cluster = 'citus'")
    clustered = make_memory("alice")
    assert clustered.cluster is True
    # Every call then runs in a transaction block (act_as, the call): the same results.
    mid = clustered.add("carried in a transaction block").id
    assert clustered.get(mid).content == "carried in a transaction block"
    assert clustered.search("transaction block")[0].id == mid
    assert clustered.with_identity(user_id="bob").get(mid) is None


def test_async_client_reads_the_recorded_mode(admin, dsn, embedder):
    admin.execute(f"ALTER DATABASE \"{admin.info.dbname}\" SET pgmem.cluster = 'citus'")

    async def go():
        async with AsyncMemory(dsn, user_id="alice", space="t64", embedder=embedder,
                               role="pgmem_gateway") as m:
            mid = (await m.add("async in a transaction block")).id
            assert m.cluster is True
            assert (await m.get(mid)).content == "async in a transaction block"
            assert await m.with_identity(user_id="bob").get(mid) is None

    asyncio.run(go())


def test_generated_search_statements_follow_the_mode(admin, alice):
    alice.add("so that the space exists")

    def modes() -> set[str]:
        rows = admin.execute("SELECT unnest(proconfig) FROM pg_proc WHERE pronamespace = 'pgmem'::regnamespace"
                             " AND proname IN ('_knn', '_exact_ids')").fetchall()
        return {r[0] for r in rows if r[0].startswith("plan_cache_mode")}

    assert modes() == {"plan_cache_mode=force_generic_plan"}
    # Not the session's setting (migration 0023): only a distributed pgmem.memories (tests/citus) gives custom
    # plans; on one PostgreSQL the statements stay generic whatever a session sets.
    with admin.transaction():
        admin.execute("SET LOCAL pgmem.cluster = 'citus'")
        admin.execute("SELECT pgmem._build_knn()")
    assert modes() == {"plan_cache_mode=force_generic_plan"}


def test_bound_login_sets_its_own_user_for_the_workers(admin, login_role, alice):
    """_require_user sets pgmem.user_id to the user it resolved: a bound login that set another user by hand
    carries its own user to the rest of the transaction (what a Citus worker reads)."""
    alice.add("alice's fact")
    role = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [role])
    with psycopg.connect(dsn_for(admin.info.dbname, user=role)) as conn, conn.transaction():
        conn.execute("SET LOCAL pgmem.user_id = 'bob'")
        rows = conn.execute("SELECT user_id FROM pgmem.list('t64')").fetchall()
        assert rows and {r[0] for r in rows} == {"alice"}
        assert conn.execute("SELECT current_setting('pgmem.user_id')").fetchone()[0] == "alice"


def test_purge_without_row_locks_across_users(admin, make_memory):
    """purge removes expired memories of every user and space, at most p_limit per call."""
    from datetime import datetime, timedelta, timezone

    for user in ("alice", "bob"):
        m = make_memory(user)
        for i in range(3):
            m.add(f"{user} fact {i}", expires_at=datetime.now(timezone.utc) + timedelta(seconds=1))
        m.add(f"{user} keeps this one")
    admin.execute("SELECT pg_sleep(1.2)")
    assert admin.execute("SELECT memories FROM pgmem.purge(4)").fetchone()[0] == 4
    assert admin.execute("SELECT memories FROM pgmem.purge()").fetchone()[0] == 2
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 2
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE event = 'EXPIRE'").fetchone()[0] == 6
