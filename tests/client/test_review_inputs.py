"""Bad input found by a new user's sweep (2 December 2026): each gets a pgmem error and writes nothing; a
DSN's password never reaches a message."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from pgmem import Memory
from pgmem.errors import DatabaseUnavailable, ValidationError, redact_dsn


@pytest.mark.parametrize("dsn, shown, hidden", [
    ("host=127.0.0.1 port=1 password=SECRETPW2 user=u", "host=127.0.0.1 port=1", ["SECRETPW2", "user=u"]),
    ("postgresql://u:SECRETPW2@h:5/db?password=SECRET3&sslmode=require", "h:5/db?sslmode=require", ["SECRETPW2", "SECRET3", "u:"]),
    ("postgresql://postgres@/pgmem?host=/tmp/x", "/pgmem?host=/tmp/x", ["postgres@"]),
    ("password=' unclosed", "does not parse", ["unclosed"]),
])
def test_a_dsn_in_a_message_carries_no_user_or_password(dsn, shown, hidden):
    out = redact_dsn(dsn)
    assert shown in out
    for secret in hidden:
        assert secret not in out


def test_a_keyword_dsn_that_cannot_connect_names_no_password():
    with pytest.raises(DatabaseUnavailable) as err:
        Memory("host=127.0.0.1 port=1 password=SECRETPW2 user=u connect_timeout=2", user_id="a").list()
    assert "SECRETPW2" not in str(err.value) and "127.0.0.1" in str(err.value)


def test_add_many_of_a_string_is_refused_not_split_into_characters(alice):
    before = alice.stats()
    with pytest.raises(ValidationError, match="list"):
        alice.add_many("abc")
    assert alice.stats() == before


@pytest.mark.parametrize("ttl", [math.nan, math.inf, -math.inf, 1e300])
def test_a_retention_that_is_no_duration_is_a_validation_error(alice, ttl):
    with pytest.raises(ValidationError, match="memory_ttl"):
        alice.set_retention(ttl)


@pytest.mark.parametrize("call", [
    lambda m: m.get(5),
    lambda m: m.add("x", expires_at="notadate"),
    lambda m: m.search("x", created_after="garbage"),
    lambda m: m.create_space("zz2", "m", 3, text_config="klingon"),
])
def test_values_of_the_wrong_kind_are_validation_errors(alice, call):
    with pytest.raises(ValidationError):
        call(alice)


def test_an_expiry_past_9999_in_any_time_zone_is_refused_and_the_user_stays_readable(alice):
    alice.add("normal memory")
    late = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-10)))  # 10000-01-01 UTC
    with pytest.raises(ValidationError, match="between"):
        alice.add("poison", expires_at=late)
    mid = alice.add("kept").id
    with pytest.raises(ValidationError, match="between"):
        alice.set_expiry({mid: timedelta(days=3_000_000)})
    assert sorted(m.content for m in alice.list().items) == ["kept", "normal memory"]
    assert alice.get(mid).expires_at is None


def test_an_update_that_changes_nothing_writes_nothing(alice):
    """PATCH {} and update(id) bumped the version and wrote an UPDATE event, so another writer holding the
    version got a spurious VersionConflict."""
    mid = alice.add("Alice keeps bees", metadata={"a": 1}).id
    for kw in ({}, {"metadata": {"a": 1}}, {"content": "Alice keeps bees"}, {"metadata": {"a": 1}, "replace_metadata": True}):
        assert alice.update(mid, **kw).version == 1, kw
    assert [e.event for e in alice.history(mid)] == ["ADD"]
    assert alice.update(mid, metadata={"a": 2}, expected_version=1).version == 2  # a real change still counts
    assert alice.update(mid, content="Alice keeps bees", metadata={"a": 3}).version == 3  # same text, new metadata
    assert [e.event for e in alice.history(mid)] == ["ADD", "UPDATE", "UPDATE"]
