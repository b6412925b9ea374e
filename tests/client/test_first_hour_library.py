"""A new user's first hour with the library: every search mode fills ``score``; bad input (deep JSON, a NUL
in a space name, a role the login may not assume) gives a clear pgmem error at once, never a Python
exception or a wait; spaces are listed and dropped through the API functions."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from pgmem import AsyncMemory, InvalidFilter, Memory, NotFound, PermissionDenied, ValidationError
from pgmem.errors import PgmemError

from conftest import dsn_for


# --------------------------------------------------------------------------------------------------------
# hit.score in every mode
# --------------------------------------------------------------------------------------------------------
def test_every_search_mode_fills_score(alice):
    alice.add("Alice is vegetarian and allergic to peanuts")
    alice.add("Alice flies to Lisbon on 3 March")
    for mode in ("hybrid", "vector", "text"):
        hits = alice.search("Is Alice allergic to peanuts?", k=2, mode=mode)
        assert len(hits) == 2, mode
        assert all(isinstance(h.score, float) for h in hits), (mode, [h.score for h in hits])
        assert hits[0].score >= hits[1].score, mode
        print(f"{hits[0].score:.3f}")  # the README's loop works in each mode
    vector = alice.search("Is Alice allergic to peanuts?", k=2, mode="vector")
    assert [h.score for h in vector] == [h.similarity for h in vector]
    assert all(-1.0 <= h.score <= 1.0 for h in vector)
    by_embedding = alice.search(embedding=alice.embedder.embed(["peanuts"])[0], k=1)
    assert by_embedding[0].score == by_embedding[0].similarity is not None
    assert alice.search("peanuts", min_similarity=-1.0, k=1)[0].score is not None


def test_async_vector_search_fills_score(dsn, embedder, alice):
    alice.add("Alice drinks green tea")

    async def go():
        async with AsyncMemory(dsn, user_id="alice", space="t64", embedder=embedder, role="pgmem_gateway") as m:
            return await m.search("tea", mode="vector", k=1)

    hits = asyncio.run(go())
    assert hits[0].score == hits[0].similarity is not None


# --------------------------------------------------------------------------------------------------------
# Deeply nested filters and metadata: a pgmem error at every depth, never RecursionError
# --------------------------------------------------------------------------------------------------------
def nested(depth: int, leaf=1) -> dict:
    """{"a": {"a": ... leaf}} with ``depth`` objects, built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_filter(depth: int) -> dict:
    """``depth`` levels of {"$and": [...]} around {"a": 1}, built without recursion."""
    value: dict = {"a": 1}
    for _ in range(depth):
        value = {"$and": [value]}
    return value


def nested_list(depth: int) -> dict:
    """{"a": [[[...]]]}: ``depth`` levels in all, arrays inside one object."""
    value: object = 1
    for _ in range(depth - 1):
        value = [value]
    return {"a": value}


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_deep_filters_are_invalid_filters_at_every_depth(alice, depth):
    alice.add("a fact", metadata={"a": 1})
    for call in (lambda f: alice.search("fact", filter=f), lambda f: alice.search("fact", filter=f, mode="vector"),
                 lambda f: alice.list(filter=f), lambda f: alice.delete_all(filter=f),
                 lambda f: alice.context("fact", filter=f)):
        with pytest.raises(InvalidFilter) as err:
            call(nested_filter(depth))
        assert "nested more than" in err.value.message
    assert len(alice.list().items) == 1  # nothing was deleted


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_metadata_is_a_validation_error_and_nothing_is_stored(alice, depth):
    for meta in (nested(depth), nested_list(depth)):
        with pytest.raises(ValidationError) as err:
            alice.add("a fact", metadata=meta)
        assert "nested more than 100 levels" in err.value.message
        with pytest.raises(ValidationError):
            alice.add_many([{"content": "another fact", "metadata": meta}])
    kept = alice.add("a fact").id
    with pytest.raises(ValidationError):
        alice.update(kept, metadata=nested(depth))
    assert alice.list().items[0].metadata == {} and len(alice.list().items) == 1


def test_metadata_as_deep_as_the_limit_is_stored(alice):
    r = alice.add("deep but allowed", metadata=nested(100))
    assert alice.get(r.id).metadata == nested(100)


# --------------------------------------------------------------------------------------------------------
# Space names: checked before anything is sent
# --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a\x00b", "\x00", "Default", "", "x" * 64, "-lead", "spa ce"])
def test_a_bad_space_name_is_a_clear_validation_error(dsn, embedder, name, alice):
    with pytest.raises(ValidationError) as err:
        Memory(dsn, user_id="alice", space=name, embedder=embedder, role="pgmem_gateway")
    assert "space name" in err.value.message or "NUL" in err.value.message
    for call in (lambda: alice.get_space(name or "\x00"), lambda: alice.create_space(name, "m", 3)):
        with pytest.raises(ValidationError):
            call()


def test_a_nul_in_a_space_name_says_so(dsn, embedder):
    with pytest.raises(ValidationError, match="NUL"):
        Memory(dsn, user_id="alice", space="t\x0064", embedder=embedder, role="pgmem_gateway")


# --------------------------------------------------------------------------------------------------------
# A role the login may not assume: the permission error at once, as a pgmem error
# --------------------------------------------------------------------------------------------------------
def test_a_role_the_login_may_not_assume_fails_at_once(admin, login_role, embedder):
    nobody = login_role()  # a login that is a member of nothing
    dsn = dsn_for(admin.info.dbname, user=nobody)
    with pytest.raises(PermissionDenied) as err:
        Memory(dsn, user_id="alice", space="t64", embedder=embedder, role="pgmem_gateway")
    assert 'permission denied to set role "pgmem_gateway"' in err.value.message
    assert "GRANT pgmem_gateway TO" in err.value.hint
    with pytest.raises(PgmemError) as err:
        Memory(dsn, user_id="alice", space="t64", embedder=embedder, role="no_such_role")
    assert 'role "no_such_role" does not exist' in err.value.message

    async def go():
        await AsyncMemory(dsn, user_id="alice", space="t64", embedder=embedder, role="pgmem_gateway").open()

    with pytest.raises(PermissionDenied):
        asyncio.run(go())


# --------------------------------------------------------------------------------------------------------
# list_spaces / drop_space
# --------------------------------------------------------------------------------------------------------
def test_list_spaces_works_for_agents_and_gateways(alice, admin, login_role):
    alice.space()
    alice.create_space("other", "m", 3)
    assert [s.name for s in alice.list_spaces()] == ["other", "t64"]
    t64 = next(s for s in alice.list_spaces() if s.name == "t64")
    assert (t64.dims, t64.model, t64.index_kind) == (64, alice.embedder.model_name, "hnsw_vector")
    for role in ("pgmem_agent", "pgmem_gateway"):
        with psycopg.connect(dsn_for(admin.info.dbname, user=login_role(role)), autocommit=True) as conn:
            assert [r[0] for r in conn.execute("SELECT name FROM pgmem.list_spaces()")] == ["other", "t64"]


def test_drop_space_removes_everything_of_every_user_in_it_and_nothing_else(make_memory, dsn, admin, embedder):
    a = make_memory("alice", space="t64")
    a.add("alice in t64")
    a.append_turn("s1", "user", "hello")
    keep = make_memory("alice", space="keep")
    keep.add("alice in keep")
    b = make_memory("bob", space="t64")
    doomed = b.add("bob in t64").id
    b.update(doomed, metadata={"x": 1})
    with Memory(dsn, space="keep", embedder=embedder, role=None) as owner:  # the schema owner (superuser here)
        counts = owner.drop_space("t64")
        assert counts == {"memories": 2, "turns": 1, "history": 3}
        assert [s.name for s in owner.list_spaces()] == ["keep"]
        with pytest.raises(NotFound):
            owner.drop_space("t64")
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE memory_id = %s", [doomed]).fetchone()[0] == 0
    assert admin.execute("SELECT count(*) FROM pg_indexes WHERE indexname ~ '^memories_space_.*_hnsw$'"
                         ).fetchone()[0] == 1
    assert [r.content for r in keep.list().items] == ["alice in keep"]
    assert keep.search("alice", mode="vector")[0].content == "alice in keep"
    # the name can be created again, from nothing
    again = make_memory("alice", space="t64")
    assert again.list().items == [] and again.add("alice in t64").created


def test_drop_space_is_the_schema_owners_only(alice, admin, login_role):
    alice.space()
    with pytest.raises(PermissionDenied):
        alice.drop_space("t64")  # a gateway
    with psycopg.connect(dsn_for(admin.info.dbname, user=login_role("pgmem_gateway")), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM pgmem.drop_space('t64')")
    # a role with EXECUTE granted by mistake is still refused by the function itself
    bypass = login_role("pgmem_agent")
    admin.execute(f'ALTER ROLE "{bypass}" BYPASSRLS')
    admin.execute(f'GRANT EXECUTE ON FUNCTION pgmem.drop_space(text) TO "{bypass}"')
    try:
        with psycopg.connect(dsn_for(admin.info.dbname, user=bypass), autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as err:
                conn.execute("SELECT * FROM pgmem.drop_space('t64')")
            assert err.value.sqlstate == "PGM01" and "only the schema owner" in err.value.diag.message_primary
    finally:
        admin.execute(f'REVOKE EXECUTE ON FUNCTION pgmem.drop_space(text) FROM "{bypass}"')
    assert [s.name for s in alice.list_spaces()] == ["t64"]


def test_a_schema_owner_without_bypassrls_cannot_drop_a_space_half_way(admin, login_role, alice):
    """RLS is forced on the tables, for the owner too: an owner that cannot see every user's rows is refused
    before anything is deleted."""
    alice.add("a fact")
    owner = login_role()
    admin.execute(f'GRANT "{admin.execute("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = %s", ["pgmem"]).fetchone()[0]}" TO "{owner}"')
    admin.execute(f'ALTER ROLE "{owner}" NOSUPERUSER NOBYPASSRLS')
    with psycopg.connect(dsn_for(admin.info.dbname, user=owner), autocommit=True) as conn:
        # a member of the owner is neither a superuser nor BYPASSRLS: refused
        with pytest.raises(psycopg.Error) as err:
            conn.execute("SELECT * FROM pgmem.drop_space('t64')")
        assert err.value.sqlstate == "PGM01" and "see every user's rows" in err.value.diag.message_primary
    assert len(alice.list().items) == 1

