"""Inputs that were silently coerced or dropped (a sweep of 2 December 2026, evening): each is now a
ValidationError naming the argument, and nothing is written."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from pgmem.errors import ValidationError


@pytest.mark.parametrize("limit", ["2", 1.5, True, 0, 1001])
def test_a_list_limit_that_is_not_an_integer_in_range_is_refused(alice, limit):
    """limit="2" came back as 2 rows with next_cursor None (2 == "2" is false): the rest was unreachable."""
    for i in range(3):
        alice.add(f"memory number {i}")
    with pytest.raises(ValidationError, match="limit") as err:
        alice.list(limit=limit)
    assert err.value.field == "limit"


def test_pages_still_reach_every_row(alice):
    for i in range(5):
        alice.add(f"memory number {i}")
    seen, cursor = [], None
    while True:
        page = alice.list(limit=2, cursor=cursor)
        seen += [m.content for m in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == [f"memory number {i}" for i in range(5)]


@pytest.mark.parametrize("cursor", [5, b"x|y", ["a"]])
def test_a_cursor_that_is_not_text_is_a_validation_error_not_an_attribute_error(alice, cursor):
    with pytest.raises(ValidationError, match="cursor"):
        alice.list(cursor=cursor)


@pytest.mark.parametrize("when", ["2020-01-01 12:00", "2020-01-01", "2020-01-01T12:00:00", "yesterday",
                                  date(2020, 1, 1), 1577880000])
def test_a_time_without_an_offset_is_refused_in_every_time_argument(alice, when):
    """A naive ISO string was read in the session's TimeZone (12:00 stored as 17:00Z under New York)."""
    before = alice.stats()
    for call in (lambda: alice.add_many([{"content": "x", "created_at": when}]),
                 lambda: alice.add("y", expires_at=when),
                 lambda: alice.list(created_after=when),
                 lambda: alice.search("x", created_before=when, mode="text"),
                 lambda: alice.list(as_of=when)):
        with pytest.raises(ValidationError):
            call()
    assert alice.stats() == before


@pytest.mark.parametrize("when", ["2020-01-01T12:00:00Z", "2020-01-01T12:00:00+00:00", "2020-01-01 07:00-05:00"])
def test_a_time_with_an_offset_is_the_same_instant_in_any_session_time_zone(alice, when):
    mid = alice.add_many([{"content": f"dated memory {when}", "created_at": when}])[0].id
    assert alice.get(mid).created_at.isoformat() == "2020-01-01T12:00:00+00:00"
    assert [m.id for m in alice.list(created_after=when.replace("12:00", "11:59").replace("07:00", "06:59")).items] == [mid]


def test_an_embedding_in_text_mode_is_refused_not_ignored(alice):
    alice.add("apples and pears")
    dims = alice.space().dims
    with pytest.raises(ValidationError, match="embedding") as err:
        alice.search("apple", embedding=[1.0] + [0.0] * (dims - 1), mode="text")
    assert err.value.field == "embedding"


def test_one_memory_named_twice_in_set_expiry_is_refused(alice):
    mid = alice.add("expires some day").id
    with pytest.raises(ValidationError, match="twice"):
        alice.set_expiry({str(mid): timedelta(days=1), mid: timedelta(days=2)})
    assert alice.get(mid).expires_at is None


def test_a_keyed_delete_with_fields_of_a_write_is_refused(alice):
    """{"key": k, "content": None, "ttl": "junk"} deleted the key and never looked at ttl or metadata."""
    alice.put_keyed([{"key": "k1", "content": "keyed memory"}])
    for extra in ({"ttl": "junk"}, {"metadata": {"a": 1}}, {"session_id": "s"}):
        with pytest.raises(ValidationError, match="delete"):
            alice.put_keyed([{"key": "k1", "content": None, **extra}])
    assert alice.get_keyed(["k1"])["k1"].content == "keyed memory"


@pytest.mark.parametrize("field", ["agent_id", "session_id"])
@pytest.mark.parametrize("blank", [" ", "  \t", "\u3000"])
def test_an_id_of_only_white_space_is_refused(alice, field, blank):
    before = alice.stats()
    with pytest.raises(ValidationError, match="white space") as err:
        alice.add("x", **{field: blank})
    assert err.value.field == field
    assert alice.stats() == before


def test_a_user_id_of_only_white_space_is_refused(alice):
    with pytest.raises(ValidationError, match="white space"):
        alice.with_identity(user_id="  ").list()


def test_expires_at_infinity_still_means_never_whatever_the_space_ttl(alice):
    mid = alice.add("kept for ever", expires_at="infinity").id
    assert alice.get(mid).expires_at is None  # infinity reads back as no expiry
    assert [m.content for m in alice.list().items] == ["kept for ever"]


def test_identity_copies_share_one_lazily_loaded_embedder(alice, monkeypatch):
    """with_identity copied __dict__ while the default embedder was still None, so every copy (the service
    makes one per request) loaded a model of its own, and the service's readiness said "not loaded yet"."""
    import pgmem.requests as requests
    from pgmem import Memory
    from pgmem.testing import HashEmbedder

    made = []
    monkeypatch.setattr(requests, "default_embedder", lambda: made.append(HashEmbedder(64)) or made[-1])
    base = Memory(alice.dsn, user_id="alice", space=alice.space_name)
    try:
        a, b = base.with_identity(user_id="u1"), base.with_identity(user_id="u2")
        c = a.with_identity(agent_id="x")
        assert a.embedder is b.embedder is c.embedder is base.embedder
        assert len(made) == 1 and base._embedder is made[0]
    finally:
        base.close()
