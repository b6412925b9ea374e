"""AsyncMemory (pgmem.aio): the API of Memory for asyncio, on psycopg's AsyncConnectionPool. Round trips of
every method, the same results and errors as the sync client (both build their statements with
pgmem.client.MemoryBase), isolation between users, shared transactions, and broken connections.
Run with asyncio.run; the real per-test database of tests/conftest.py."""

from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from pgmem import (
    AmbiguousEdit,
    AsyncMemory,
    DimensionMismatch,
    InvalidFilter,
    NeedleNotFound,
    ScopeRequired,
    ValidationError,
    VersionConflict,
)
from pgmem.testing import HashEmbedder


def amemory(dsn: str, user_id: str | None = "alice", agent_id: str | None = "planner", **kw) -> AsyncMemory:
    kw.setdefault("embedder", HashEmbedder(64))
    kw.setdefault("space", "t64")
    kw.setdefault("role", "pgmem_gateway")
    kw.setdefault("max_size", 4)
    return AsyncMemory(dsn, user_id=user_id, agent_id=agent_id, **kw)


def test_round_trip_of_every_method(dsn, admin):
    async def main():
        async with amemory(dsn) as mem:
            assert await mem.whoami() == "alice"
            first = await mem.add("Alice is vegetarian. She is allergic to peanuts.", metadata={"topic": "food"},
                                  session_id="chat")
            assert first.created and (await mem.add("Alice is vegetarian. She is allergic to peanuts.")).id == first.id
            ids = [uuid.uuid4(), uuid.uuid4()]
            batch = await mem.add_many([{"id": ids[0], "content": "Alice flies to Lisbon on 3 March"},
                                        {"id": ids[1], "content": "Alice prefers window seats",
                                         "metadata": {"topic": "travel"}}], session_id="chat")
            assert [r.id for r in batch] == ids and all(r.created for r in batch)
            again = await mem.add_many([{"id": ids[0], "content": "Alice flies to Lisbon on 3 March"}])
            assert [(r.id, r.created) for r in again] == [(ids[0], False)]
            got = await mem.get(first.id)
            assert got.content.startswith("Alice is vegetarian") and got.metadata == {"topic": "food"}
            assert got.agent_id == "planner" and got.version == 1

            hybrid = await mem.search("what can Alice not eat?", k=2)
            assert hybrid[0].id == first.id and hybrid[0].score is not None
            vector = await mem.search(embedding=HashEmbedder(64).embed(["Alice prefers window seats"])[0], k=1)
            assert vector[0].id == ids[1] and vector[0].similarity == pytest.approx(1.0, abs=1e-5)
            text = await mem.search("Lisbon", mode="text", k=3)
            assert text[0].id == ids[0] and text[0].text_score > 0  # session neighbours follow, lower

            page = await mem.list(limit=2)
            assert len(page.items) == 2 and page.next_cursor
            rest = await mem.list(limit=2, cursor=page.next_cursor)
            listed = [r.id for r in page.items + rest.items]  # oldest first; one batch shares its created_at
            assert listed[0] == first.id and sorted(listed[1:]) == sorted(ids) and rest.next_cursor is None
            assert [r.id for r in (await mem.list(filter={"topic": "travel"})).items] == [ids[1]]
            assert [r.id for r in (await mem.list(contains="Lisbon")).items] == [ids[0]]

            updated = await mem.update(ids[1], metadata={"seat": "window"})
            assert updated.metadata == {"topic": "travel", "seat": "window"} and updated.version == 2
            with pytest.raises(VersionConflict):
                await mem.update(ids[1], content="Alice prefers aisle seats", expected_version=1)
            edited = await mem.edit(ids[0], "3 March", "4 March")
            assert edited.content == "Alice flies to Lisbon on 4 March" and edited.version == 2
            with pytest.raises(NeedleNotFound):
                await mem.edit(ids[0], "Porto", "Faro")
            await mem.add("ab ab ab")
            with pytest.raises(AmbiguousEdit) as amb:
                await mem.edit((await mem.list(contains="ab ab")).items[0].id, "ab", "x")
            assert amb.value.count == 3
            assert [e.event for e in await mem.history(ids[0])] == ["ADD", "EDIT"]

            stats = await mem.stats()
            assert stats[0].space == "t64" and stats[0].memories == 4
            assert (await mem.get_space()).dims == 64
            assert await mem.delete(ids[1]) and not await mem.delete(ids[1])
            with pytest.raises(ScopeRequired):
                await mem.delete_all()
            assert await mem.delete_all(session_id="chat") == 2
            assert await mem.delete_all(confirm=True) == 1
            assert (await mem.list()).items == []

    asyncio.run(main())
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0


def test_users_are_isolated(dsn, admin):
    async def main():
        async with amemory(dsn) as alice:
            bob = alice.with_identity(user_id="bob", agent_id="bob-agent")
            secret = (await alice.add("alice's secret plan")).id
            mine = (await bob.add("bob's own note")).id
            assert await bob.get(secret) is None and await alice.get(mine) is None
            assert [h.content for h in await bob.search("secret plan")] == ["bob's own note"]
            assert not await bob.delete(secret)
            assert await bob.delete_all(confirm=True) == 1
            assert (await alice.get(secret)).content == "alice's secret plan"
            assert await bob.whoami() == "bob" and await alice.whoami() == "alice"
            # Concurrent calls of both users on one pool stay apart.
            results = await asyncio.gather(*[(alice if i % 2 else bob).add(f"fact {i}") for i in range(40)])
            assert len({r.id for r in results}) == 40
        return secret

    secret = asyncio.run(main())
    owners = dict(admin.execute("SELECT user_id, count(*) FROM pgmem.memories GROUP BY 1").fetchall())
    assert owners == {"alice": 21, "bob": 20}
    assert admin.execute("SELECT user_id FROM pgmem.memories WHERE id = %s", [secret]).fetchone()[0] == "alice"


def test_same_results_and_errors_as_the_sync_client(make_memory, dsn):
    sync = make_memory("alice", "planner")
    for i, text in enumerate(["the cat sat on the mat", "dogs chase cats", "a bird in the hand", "cats and dogs"]):
        sync.add(text, session_id="s", metadata={"n": i})
    bad_calls = [
        ("add", ("",), {}), ("add", ("x",), {"metadata": {"a": float("inf")}}),
        ("add", ("x",), {"embedding": [1.0] * 3}), ("add", ("x",), {"expires_at": datetime(2030, 1, 1)}),
        ("add_many", ([{"content": "ok"}, {"content": "x", "bogus": 1}],), {}),
        ("search", ("  ",), {}), ("search", ("x",), {"k": 0}), ("search", ("x",), {"mode": "fuzzy"}),
        ("search", ("x",), {"filter": {"n": {"nope": 1}}}), ("list", (), {"cursor": "junk"}),
        ("edit", (uuid.uuid4(), "", "x"), {}), ("update", (uuid.uuid4(),), {"content": ""}),
        ("edit", (uuid.uuid4(), "a", "b"), {}), ("update", (uuid.uuid4(),), {"metadata": {"a": 1}}),
    ]

    def outcome(fn):
        try:
            return "ok", fn()
        except Exception as exc:  # the error class and message are what must agree
            return type(exc).__name__, str(exc)

    async def main():
        async with amemory(dsn) as amem:
            out = {}
            for mode in ("hybrid", "vector", "text"):
                out[mode] = [h.id for h in await amem.search("cats and dogs", mode=mode, k=3)]
            out["filtered"] = [h.id for h in await amem.search("cats", filter={"n": {"gte": 2}}, k=4)]
            errors = []
            for name, args, kw in bad_calls:
                try:
                    await getattr(amem, name)(*args, **kw)
                    errors.append(("ok", None))
                except Exception as exc:
                    errors.append((type(exc).__name__, str(exc)))
            return out, errors

    out, errors = asyncio.run(main())
    for mode in ("hybrid", "vector", "text"):
        assert out[mode] == [h.id for h in sync.search("cats and dogs", mode=mode, k=3)], mode
    assert out["filtered"] == [h.id for h in sync.search("cats", filter={"n": {"gte": 2}}, k=4)]
    expected = [outcome(lambda n=name, a=args, k=kw: getattr(sync, n)(*a, **k)) for name, args, kw in bad_calls]
    assert errors == expected
    kinds = {e[0] for e in errors}
    assert "ok" not in kinds and {"ValidationError", "DimensionMismatch", "InvalidFilter", "NotFound"} <= kinds


def test_calls_share_a_transaction_and_embedding_runs_off_the_loop(dsn, admin):
    class WhereEmbedder(HashEmbedder):
        threads: set = set()

        def embed(self, texts):
            self.threads.add(threading.get_ident())
            return super().embed(texts)

    async def main():
        emb = WhereEmbedder(64)
        async with amemory(dsn, embedder=emb) as mem:
            await mem.space()
            async with mem.pool.connection() as conn:
                async with conn.transaction(force_rollback=True):
                    await mem.add("only inside the transaction", conn=conn)
                    assert len((await mem.list(conn=conn)).items) == 1
                    assert (await mem.list()).items == []  # other connections do not see it yet
            assert (await mem.list()).items == []  # rolled back
            await mem.add("kept")
            return emb.threads, threading.get_ident()

    threads, loop_thread = asyncio.run(main())
    assert threads and loop_thread not in threads
    assert [r[0] for r in admin.execute("SELECT content FROM pgmem.memories")] == ["kept"]


def test_next_call_after_terminated_backends_succeeds(dsn, admin):
    async def main():
        async with amemory(dsn, min_size=3, max_size=3) as mem:
            mid = (await mem.add("survives")).id
            for _ in range(2):
                pids = [r[0] for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND backend_type = 'client backend'")]
                admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::integer[]) AS pid", [pids])
                while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()[0]:
                    await asyncio.sleep(0.05)  # until they are gone, so the test does not race the signals
                assert (await mem.get(mid)).content == "survives"
                assert (await mem.add(f"after {uuid.uuid4()}")).created
            got = await asyncio.gather(*[mem.get(mid) for _ in range(9)])
            assert all(g is not None for g in got)

    asyncio.run(main())


def test_lazy_open_and_clear_errors(dsn):
    async def main():
        mem = amemory(dsn)
        assert mem.pool is None
        assert (await mem.add("opened on first use")).created  # opens the pool
        assert mem.pool is not None
        with pytest.raises(DimensionMismatch):
            await mem.search(embedding=[0.5] * 8)
        with pytest.raises(InvalidFilter):
            await mem.list(filter={"a": {"regex": "x"}})
        with pytest.raises(ValidationError):
            await mem.list(created_after=datetime.now())  # naive datetime
        assert (await mem.list(created_after=datetime.now(timezone.utc) - timedelta(hours=1))).items
        await mem.close()
        with pytest.raises(Exception):
            await AsyncMemory.connect("postgresql://postgres@/no_such_database?host=/nonexistent", user_id="x")

    asyncio.run(main())


def test_async_writer_commits_everything_without_blocking_the_loop(dsn, admin, tmp_path):
    async def main():
        async with amemory(dsn, user_id="alice") as mem:
            writer = await mem.writer(client_name="async-t", journal_dir=tmp_path, batch_size=50,
                                      flush_interval=0.01)
            ticks = 0

            async def ticker():  # the loop keeps running while writes are handed over
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.001)

            t = asyncio.create_task(ticker())
            ids = [await writer.submit(f"async fact {i}", session_id="s") for i in range(300)]
            await writer.flush()
            report = await writer.close()
            t.cancel()
            assert len(set(ids)) == 300 and ticks > 0
            return report

    report = asyncio.run(main())
    assert report.committed == 300 and report.journaled == 0
    rows = admin.execute("SELECT count(*), count(DISTINCT id) FROM pgmem.memories"
                         " WHERE user_id = 'alice' AND content LIKE 'async fact %'").fetchone()
    assert rows == (300, 300)
