"""AsyncMemory's lifecycle methods (docs/lifecycle.md): the same names and parameters as Memory's, supersede
with an as-of search, a turn in an assembled context, an idempotent consolidation with an async summariser,
export and import. Run with asyncio.run on the real per-test database of tests/conftest.py."""

from __future__ import annotations

import asyncio
import inspect
from datetime import datetime, timezone

import pytest

from pgmem import AsyncMemory, IdentityError, Memory, VersionConflict
from pgmem.testing import HashEmbedder


def amemory(dsn: str, user_id: str | None = "alice", agent_id: str | None = "planner", **kw) -> AsyncMemory:
    kw.setdefault("embedder", HashEmbedder(64))
    kw.setdefault("space", "t64")
    kw.setdefault("role", "pgmem_gateway")
    kw.setdefault("max_size", 2)
    return AsyncMemory(dsn, user_id=user_id, agent_id=agent_id, **kw)


def public_methods(cls) -> list[str]:
    """The public methods of ``cls`` found by inspection (its own and inherited; properties and dunders left out)."""
    return sorted(name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_"))


# Public methods of Memory whose AsyncMemory counterpart is deliberately a plain method, not a coroutine:
# with_identity only copies the client (shared pool, other user or agent) and touches no connection, so it
# returns the new client at once in both.
NOT_COROUTINES = {"with_identity": "copies the client; no I/O"}
MEMORY_METHODS = public_methods(Memory)


def test_the_parity_check_sees_every_public_method():
    """The inspection finds the whole API (more than the 17 a hand list once named) and the exclusions exist."""
    assert {"add", "search", "update", "put_keyed", "whoami", "writer", "close", "space"} <= set(MEMORY_METHODS)
    assert len(MEMORY_METHODS) >= 38
    assert set(NOT_COROUTINES) <= set(MEMORY_METHODS)


@pytest.mark.parametrize("name", MEMORY_METHODS)
def test_async_methods_take_the_same_parameters(name):
    """Every public method of Memory has an AsyncMemory counterpart of the same name, a coroutine function
    (unless listed in NOT_COROUTINES, with its reason), with the same parameters: names, order, kinds and
    defaults (annotations differ: psycopg.Connection against AsyncConnection)."""
    sync = inspect.signature(getattr(Memory, name))
    asyn = getattr(AsyncMemory, name, None)
    assert asyn is not None, f"AsyncMemory has no {name}"
    assert inspect.iscoroutinefunction(asyn) == (name not in NOT_COROUTINES), name
    a = inspect.signature(asyn)
    assert list(a.parameters) == list(sync.parameters), name
    for p in sync.parameters.values():
        q = a.parameters[p.name]
        assert (q.kind, q.default) == (p.kind, p.default), (name, p.name)


def test_supersede_then_search_as_of_and_chain(dsn):
    async def main():
        async with amemory(dsn) as mem:
            old = await mem.add("Alice lives in Lisbon")
            before = datetime.now(timezone.utc)
            await asyncio.sleep(0.01)  # valid_from of the successor is strictly later than `before`
            new = await mem.supersede(old.id, "Alice lives in Porto", metadata={"moved": True})
            assert new.id != old.id and new.content == "Alice lives in Porto" and new.valid_to is None
            assert new.metadata == {"moved": True}

            now = [r.id for r in await mem.search("where does Alice live", k=5)]
            assert now == [new.id]
            then = [r.id for r in await mem.search("where does Alice live", k=5, as_of=before)]
            assert then == [old.id]
            assert [r.id for r in (await mem.list(as_of=before)).items] == [old.id]
            assert [r.id for r in (await mem.list()).items] == [new.id]

            line = await mem.chain(new.id)
            assert [r.id for r in line] == [old.id, new.id] and line[0].superseded_by == new.id
            with pytest.raises(VersionConflict):
                await mem.supersede(old.id, "Alice lives in Faro")
            gone = await mem.invalidate(new.id)
            assert gone.valid_to is not None and await mem.search("where does Alice live", k=5) == []

    asyncio.run(main())


def test_turn_in_context_within_budget(dsn):
    async def main():
        async with amemory(dsn) as mem:
            await mem.add("Alice is allergic to peanuts")
            turn = await mem.append_turn("chat-1", "user", "Can you suggest a snack?")
            assert turn.session_id == "chat-1" and turn.role == "user" and turn.consolidated_at is None
            assert [t.turn_id for t in await mem.recent_turns("chat-1")] == [turn.turn_id]

            ctx = await mem.context("snack ideas for Alice, allergies", session_id="chat-1", budget_tokens=200)
            assert [i.source for i in ctx.items] == ["memory", "turn"]
            assert "[memory " in ctx.render() and "Can you suggest a snack?" in ctx.render()
            assert 0 < ctx.tokens <= 200
            assert ctx.tokens == sum([await mem.token_count(i.line) for i in ctx.items])
            tiny = await mem.context("snack ideas for Alice, allergies", session_id="chat-1", budget_tokens=3)
            assert tiny.items == []

    asyncio.run(main())


def test_consolidate_with_an_async_summariser_is_idempotent(dsn):
    calls = []

    async def summarise(turns):
        calls.append([t.turn_id for t in turns])
        await asyncio.sleep(0)
        return ["Alice wants to visit Kyoto in April"]

    async def main():
        async with amemory(dsn) as mem:
            t1 = await mem.append_turn("trip", "user", "I'd love to see Kyoto")
            t2 = await mem.append_turn("trip", "assistant", "April is cherry blossom season")
            made = await mem.consolidate("trip", summarise)
            assert len(made) == 1 and made[0].created
            assert calls == [[t1.turn_id, t2.turn_id]]
            assert await mem.pending_turns("trip") == []
            assert [s.turn_id for s in await mem.sources(made[0].id)] == [t1.turn_id, t2.turn_id]
            # nothing pending: the summariser is not called again and nothing is stored twice
            assert await mem.consolidate("trip", summarise) == []
            assert len(calls) == 1
            # a plain (sync) summariser works too
            await mem.append_turn("trip", "user", "and Osaka")
            again = await mem.consolidate("trip", lambda turns: [{"content": "Alice may also visit Osaka",
                                                                  "metadata": {"city": "Osaka"}}])
            assert len(again) == 1 and (await mem.get(again[0].id)).metadata == {"city": "Osaka"}

    asyncio.run(main())


def test_export_import_and_maintainer_only_calls(dsn):
    async def main():
        async with amemory(dsn) as mem:
            a = await mem.add("Alice's bike is blue", metadata={"k": 1})
            await mem.append_turn("s", "user", "hello")
            rows = await mem.export()
            kinds = sorted(r["kind"] for r in rows)
            assert kinds == ["history", "memory", "turn"]
            memrow = next(r for r in rows if r["kind"] == "memory")
            assert memrow["id"] == str(a.id) and len(memrow["embedding"]) == 64
            assert all(r["embedding"] is None for r in await mem.export(embeddings=False) if r["kind"] != "history")

            carol = mem.with_identity(user_id="carol")
            counts = await carol.import_rows(rows)
            assert counts == {"memory": {"imported": 1, "skipped": 0}, "turn": {"imported": 1, "skipped": 0},
                              "history": {"imported": 0, "skipped": 1}}
            assert [r.content for r in (await carol.list()).items] == ["Alice's bike is blue"]

            # the gateway role may not purge or erase (superuser or BYPASSRLS only)
            with pytest.raises(IdentityError):
                await mem.purge()
            with pytest.raises(IdentityError):
                await mem.erase_user("carol")
        async with amemory(dsn, user_id=None, role=None) as owner:  # the test login is a superuser
            assert (await owner.purge()).memories == 0
            erased = await owner.erase_user("carol")
            assert erased["memories"] == 1 and erased["turns"] == 1
        async with amemory(dsn, user_id="carol") as carol:
            assert (await carol.list()).items == []

    asyncio.run(main())
