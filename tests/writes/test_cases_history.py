"""Failure cases C16-C24: scoped deletes, injection-shaped filters,
history, timestamps, metadata merge, filter operators, concurrent duplicates and broken connections.
Through the Python client and through the stored functions directly."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from conftest import acting, connect, run
from psycopg.types.json import Jsonb

from pgmem import InvalidFilter, ScopeRequired, ValidationError
from pgmem.testing import HashEmbedder

EMB = HashEmbedder(64)
UTC = timezone.utc


# --------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------
def vec(text: str):
    return EMB.embed([text])[0]


def snapshot(admin: psycopg.Connection, user_id: str) -> tuple[list, list]:
    """Every raw memories and history row of one user (admin bypasses RLS)."""
    mems = admin.execute("SELECT id, space_id, agent_id, session_id, content, embedding::text, metadata, created_at,"
                         " updated_at, version FROM pgmem.memories WHERE user_id = %s ORDER BY id", [user_id]).fetchall()
    hist = admin.execute("SELECT * FROM pgmem.history WHERE user_id = %s ORDER BY event_id", [user_id]).fetchall()
    return mems, hist


@pytest.fixture
def gateway_role(login_role) -> str:
    return login_role("pgmem_gateway")


@pytest.fixture
def gw(admin: psycopg.Connection, gateway_role: str) -> Iterator[psycopg.Connection]:
    """An autocommit connection of a fresh gateway login (RLS applies). The space t64 exists."""
    admin.execute("SELECT pgmem.create_space('t64', %s, 64)", [EMB.model_name])
    with connect(admin, gateway_role) as conn:
        yield conn


def sql_error(conn: psycopg.Connection, sql: str, params=(), user_id: str = "alice") -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        run(conn, sql, params, user_id)
    return info.value


def ids(records) -> set:
    return {r.id for r in records}


# --------------------------------------------------------------------------------------------------------
# C16: deleting all of alice's memories leaves bob's memories and history untouched; no unscoped delete
# --------------------------------------------------------------------------------------------------------
def test_c16_delete_all_is_scoped_to_the_user(alice, bob, admin):
    a_ids = [alice.add("alice likes tea", agent_id="shared-agent", session_id="s1", metadata={"k": "v"}).id,
             alice.add("alice likes chess", agent_id="shared-agent", session_id="s1", metadata={"k": "v"}).id]
    b_ids = [bob.add("alice likes tea", agent_id="shared-agent", session_id="s1", metadata={"k": "v"}).id,
             bob.add("bob likes golf", agent_id="shared-agent", session_id="s1", metadata={"k": "v"}).id]
    bob.update(b_ids[1], metadata={"k": "v", "extra": 1})
    bob_before = snapshot(admin, "bob")
    assert len(bob_before[0]) == 2 and len(bob_before[1]) == 3
    # Scopes shared by name with bob delete only alice's rows.
    assert alice.delete_all(agent_id="shared-agent", filter={"k": "v"}, session_id="s1") == 2
    assert snapshot(admin, "bob") == bob_before
    assert alice.list().items == []
    for mid in a_ids:
        assert [e.event for e in alice.history(mid)] == ["ADD", "DELETE"]
    # Everything, confirmed, across spaces.
    alice.add("alice again")
    assert alice.delete_all(all_spaces=True, confirm=True) == 1
    assert snapshot(admin, "bob") == bob_before
    assert ids(bob.list().items) == set(b_ids)


def test_c16_unscoped_delete_all_needs_confirmation(alice, bob, admin, gw):
    alice.add("alice one")
    alice.add("alice two")
    bob.add("bob one")
    before = snapshot(admin, "alice"), snapshot(admin, "bob")
    for kw in [{}, {"filter": {}}, {"all_spaces": True}, {"filter": None, "agent_id": None}]:
        with pytest.raises(ScopeRequired):
            alice.delete_all(**kw)
    for sql in ["SELECT pgmem.delete_all()", "SELECT pgmem.delete_all('t64')",
                "SELECT pgmem.delete_all('t64', p_filter => '{}')", "SELECT pgmem.delete_all(p_confirm => NULL)"]:
        assert sql_error(gw, sql).sqlstate == "PGM10", sql
    assert (snapshot(admin, "alice"), snapshot(admin, "bob")) == before
    assert run(gw, "SELECT pgmem.delete_all('t64', p_confirm => true)") == [(2,)]
    assert snapshot(admin, "bob") == before[1]


# --------------------------------------------------------------------------------------------------------
# C17: injection-shaped filter keys, operators and values never widen results
# --------------------------------------------------------------------------------------------------------
INJECTION_KEYS = [
    "author' = 'alice' OR '1'='1' --", 'author" = "alice', 'auth"or', "author->>'name'", "author->>", "->>",
    "author%", "%", "_", "author'", "'; DROP TABLE pgmem.memories; --", ") OR (true", "a')) OR true --",
    "author\\", "{author}", "author,name", "user_id", "m.user_id", "$1", "1=1", "author::text", "author$1",
]


def test_c17_injection_keys_are_literal_keys(alice, bob, admin):
    mine = {key: alice.add(f"alice row for key {key!r}", metadata={key: "v", "author": "alice"}).id
            for key in INJECTION_KEYS}
    plain = alice.add("alice plain row", metadata={"author": "alice"}).id
    for key in INJECTION_KEYS:
        bob.add(f"bob row for key {key!r}", metadata={key: "v", "author": "alice"})
    bob_before = snapshot(admin, "bob")
    for key in INJECTION_KEYS:
        if key.startswith("$"):  # a $ key names a logical operator: unknown ones are refused
            for call in [lambda: alice.list(filter={key: "v"}), lambda: alice.delete_all(filter={key: "v"})]:
                with pytest.raises(InvalidFilter):
                    call()
            continue
        for flt in [{key: "v"}, {key: {"eq": "v"}}, {key: {"in": ["v"]}}, {key: {"exists": True}},
                    {"$or": [{key: "v"}, {"author": "nobody"}]}]:
            assert ids(alice.list(filter=flt).items) == {mine[key]}, (key, flt)
            assert ids(alice.search("row for key", k=100, filter=flt)) == {mine[key]}, (key, flt)
        for flt in [{key: "x"}, {key: "' OR '1'='1"}, {key: {"ne": "v"}}]:
            got = ids(alice.list(filter=flt, limit=1000).items)
            assert got <= set(mine.values()) | {plain}, (key, flt)
            assert mine[key] not in got, (key, flt)
    # Deleting by an injection-shaped key deletes only alice's one row.
    assert alice.delete_all(filter={INJECTION_KEYS[0]: "v"}) == 1
    assert snapshot(admin, "bob") == bob_before


@pytest.mark.parametrize("flt", [
    {"$author' OR '1'='1": "x"},  # a $ key is an operator: unknown ones are refused
    {"$or' OR true --": [{"a": 1}]},
    {"author": {"eq') OR true --": "alice"}},
    {"author": {"eq\" OR 1=1": "alice"}},
    {"author": {"gte": "' OR '1'='1"}},
    {"author": {"in": "alice' OR '1'='1"}},
    {"author": {"exists": "true) OR (true"}},
])
def test_c17_injection_operators_are_refused(alice, bob, admin, flt):
    alice.add("alice row", metadata={"author": "alice"})
    bob.add("bob row", metadata={"author": "alice"})
    bob_before = snapshot(admin, "bob")
    for call in [lambda: alice.list(filter=flt), lambda: alice.search("row", filter=flt),
                 lambda: alice.delete_all(filter=flt)]:
        with pytest.raises(InvalidFilter):
            call()
    assert snapshot(admin, "bob") == bob_before


def test_c17_injection_values_match_nothing(alice, bob):
    alice.add("alice row", metadata={"author": "alice"})
    bob.add("bob row", metadata={"author": "bob"})
    for value in ["alice' OR '1'='1", "alice' --", "bob", '"alice"', "%", "_", "alice%", "' OR user_id = 'bob"]:
        assert alice.list(filter={"author": value}).items == [], value
        assert alice.list(filter={"author": {"contains": value}}).items == [], value
    assert len(alice.list(filter={"author": {"ne": "alice' OR '1'='1"}}).items) == 1


def test_c17_sql_filters_never_widen(gw, admin):
    run(gw, "SELECT pgmem.add('t64', 'alice row', %s::vector, p_metadata => '{\"author\": \"alice\"}')", [vec("a")])
    run(gw, "SELECT pgmem.add('t64', 'bob row', %s::vector, p_metadata => '{\"author\": \"alice\"}')", [vec("b")],
        user_id="bob")
    for key in INJECTION_KEYS:
        if key.startswith("$"):
            assert sql_error(gw, "SELECT * FROM pgmem.list('t64', p_filter => %s)", [Jsonb({key: "alice"})]
                             ).sqlstate == "PGM07"
            continue
        for sql in ["SELECT content FROM pgmem.list('t64', p_filter => %s)",
                    "SELECT content FROM pgmem.search('t64', %s::vector, 50, p_filter => %s)"]:
            params = [Jsonb({key: "alice"})] if "list" in sql else [vec("row"), Jsonb({key: "alice"})]
            assert run(gw, sql, params) == [], key
        for flt in [{"$or": [{key: "x"}, {"author": "alice"}]}, {"$not": {key: "x"}}]:
            assert run(gw, "SELECT content FROM pgmem.list('t64', p_filter => %s)", [Jsonb(flt)]) == [("alice row",)]
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 2


# --------------------------------------------------------------------------------------------------------
# C18: history shows ADD, UPDATE, DELETE in order, timestamped, the first without a previous value
# --------------------------------------------------------------------------------------------------------
def test_c18_history_order(alice, gw):
    mid = alice.add("likes tea", metadata={"topic": "drinks"}).id
    alice.update(mid, content="likes coffee")
    assert alice.delete(mid)
    events = alice.history(mid)
    assert [e.event for e in events] == ["ADD", "UPDATE", "DELETE"]
    add, upd, dele = events
    assert (add.old_content, add.old_metadata, add.new_content, add.new_metadata) == (
        None, None, "likes tea", {"topic": "drinks"})
    assert (upd.old_content, upd.new_content) == ("likes tea", "likes coffee")
    assert (dele.old_content, dele.new_content, dele.new_metadata) == ("likes coffee", None, None)
    assert add.event_id < upd.event_id < dele.event_id
    for e in events:
        assert e.created_at.tzinfo is not None and e.memory_id == mid
    assert add.created_at <= upd.created_at <= dele.created_at
    assert all(e.actor_agent_id == "planner" for e in events)
    # The same through SQL, and it stays readable after the delete.
    rows = run(gw, "SELECT event, old_content, new_content, created_at IS NOT NULL FROM pgmem.history(%s)", [mid])
    assert rows == [("ADD", None, "likes tea", True), ("UPDATE", "likes tea", "likes coffee", True),
                    ("DELETE", "likes coffee", None, True)]


def test_c18_history_of_edits_and_many_updates(alice):
    mid = alice.add("v0").id
    for i in range(1, 6):
        alice.update(mid, content=f"v{i}", metadata={"i": i})
    alice.edit(mid, "v5", "v6")
    events = alice.history(mid)
    assert [e.event for e in events] == ["ADD"] + ["UPDATE"] * 5 + ["EDIT"]
    assert [e.new_content for e in events] == [f"v{i}" for i in range(7)]
    assert [e.old_content for e in events] == [None] + [f"v{i}" for i in range(6)]
    assert [e.event_id for e in events] == sorted(e.event_id for e in events)
    assert alice.get(mid).version == 7


# --------------------------------------------------------------------------------------------------------
# C19: timestamptz: the same instant under any session time zone; a UTC-day filter finds it
# --------------------------------------------------------------------------------------------------------
INSTANT = datetime(2025, 7, 25, 2, 0, tzinfo=UTC)
ZONES = ["UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Kiritimati"]


def zone_dsn(dsn: str, zone: str) -> str:
    return f"{dsn}&options=-c%20TimeZone%3D{zone.replace('/', '%2F')}"


def backdate(admin: psycopg.Connection, mid, when: datetime) -> None:
    """Set created_at as the admin, skipping the triggers that keep created_at fixed."""
    with admin.transaction():
        admin.execute("SET LOCAL session_replication_role = replica")
        admin.execute("UPDATE pgmem.memories SET created_at = %s WHERE id = %s", [when, mid])


def test_c19_same_instant_under_every_session_time_zone(make_memory, admin, dsn, gateway_role):
    first = make_memory("alice")
    mid = first.add("written at 02:00 UTC").id
    early = first.add("written at 23:59 UTC the day before").id
    late = first.add("written at 00:00 UTC the next day").id
    backdate(admin, mid, INSTANT)
    backdate(admin, early, datetime(2025, 7, 24, 23, 59, 59, 999999, tzinfo=UTC))
    backdate(admin, late, datetime(2025, 7, 26, tzinfo=UTC))
    texts = set()
    for zone in ZONES:
        m = make_memory("alice", dsn=zone_dsn(dsn, zone))
        rec = m.get(mid)
        assert rec.created_at == INSTANT, zone
        assert rec.created_at.utcoffset() is not None
        day = m.list(created_after=datetime(2025, 7, 25, tzinfo=UTC), created_before=datetime(2025, 7, 26, tzinfo=UTC))
        assert [r.id for r in day.items] == [mid], zone
        assert [h.id for h in m.search("written", k=10, created_after=datetime(2025, 7, 25, tzinfo=UTC),
                                       created_before=datetime(2025, 7, 26, tzinfo=UTC))] == [mid], zone
        # The same UTC day given as local bounds of another zone.
        la = timezone(timedelta(hours=-7))
        assert [r.id for r in m.list(created_after=datetime(2025, 7, 24, 17, tzinfo=la),
                                     created_before=datetime(2025, 7, 25, 17, tzinfo=la)).items] == [mid], zone
        prev = m.list(created_after=datetime(2025, 7, 24, tzinfo=UTC), created_before=datetime(2025, 7, 25, tzinfo=UTC))
        assert [r.id for r in prev.items] == [early], zone
        with connect(admin, gateway_role, options=f"-c TimeZone={zone}") as conn:
            row = run(conn, "SELECT created_at, created_at::text, created_at = '2025-07-25 02:00:00+00'"
                            " FROM pgmem.get(%s)", [mid])[0]
            assert row[0] == INSTANT and row[2] is True, zone
            texts.add(row[1])
            got = run(conn, "SELECT id FROM pgmem.list('t64', p_created_after => '2025-07-25 00:00:00+00',"
                            " p_created_before => '2025-07-26 00:00:00+00')")
            assert got == [(mid,)], zone
    assert "2025-07-24 19:00:00-07" in texts and "2025-07-25 02:00:00+00" in texts


def test_c19_naive_datetimes_do_not_depend_on_the_session_time_zone(make_memory, admin, dsn):
    """A datetime without tzinfo is either refused or read the same way whatever the server's TimeZone."""
    first = make_memory("alice")
    mid = first.add("written at 02:00 UTC").id
    backdate(admin, mid, INSTANT)
    outcomes = []
    for zone in ["UTC", "America/Los_Angeles"]:
        m = make_memory("alice", dsn=zone_dsn(dsn, zone))
        try:
            found = [r.id for r in m.list(created_after=datetime(2025, 7, 25), created_before=datetime(2025, 7, 26)).items]
        except ValidationError:
            found = "refused"
        try:
            added = m.add(f"expires, written under {zone}", expires_at=datetime(2030, 1, 1)).id
            expiry = admin.execute("SELECT expires_at FROM pgmem.memories WHERE id = %s", [added]).fetchone()[0]
        except ValidationError:
            expiry = "refused"
        outcomes.append((found, expiry))
    assert outcomes[0] == outcomes[1]


# --------------------------------------------------------------------------------------------------------
# C20: updating text keeps metadata; metadata merges unless replace is asked for; history records both
# --------------------------------------------------------------------------------------------------------
def test_c20_metadata_merge_and_replace(alice):
    mid = alice.add("works on project X", metadata={"category": "work", "priority": 3}).id
    rec = alice.update(mid, content="works on project Y")
    assert (rec.content, rec.metadata) == ("works on project Y", {"category": "work", "priority": 3})
    rec = alice.update(mid, metadata={"priority": 5})
    assert rec.metadata == {"category": "work", "priority": 5}
    rec = alice.update(mid, metadata={})
    assert rec.metadata == {"category": "work", "priority": 5}
    rec = alice.update(mid, metadata={"nested": {"a": 1}})
    rec = alice.update(mid, metadata={"nested": {"b": 2}})  # top-level merge: the nested object is replaced
    assert rec.metadata == {"category": "work", "priority": 5, "nested": {"b": 2}}
    rec = alice.update(mid, content="works on project Z", metadata={"priority": 1})
    assert (rec.content, rec.metadata) == ("works on project Z", {"category": "work", "priority": 1, "nested": {"b": 2}})
    rec = alice.update(mid, metadata={"priority": 7}, replace_metadata=True)
    assert rec.metadata == {"priority": 7}
    rec = alice.update(mid, metadata={}, replace_metadata=True)
    assert rec.metadata == {}
    assert alice.get(mid).metadata == {}
    events = alice.history(mid)
    assert [e.event for e in events] == ["ADD"] + ["UPDATE"] * 7  # the empty merge changed nothing: no event
    work3, work5 = {"category": "work", "priority": 3}, {"category": "work", "priority": 5}
    assert [(e.old_metadata, e.new_metadata) for e in events] == [
        (None, work3),
        (work3, work3),  # text only
        (work3, work5),  # merge
        (work5, {**work5, "nested": {"a": 1}}),
        ({**work5, "nested": {"a": 1}}, {**work5, "nested": {"b": 2}}),
        ({**work5, "nested": {"b": 2}}, {"category": "work", "priority": 1, "nested": {"b": 2}}),
        ({"category": "work", "priority": 1, "nested": {"b": 2}}, {"priority": 7}),  # replace
        ({"priority": 7}, {}),  # replace with nothing
    ]
    assert [(e.old_content, e.new_content) for e in events][:2] == [(None, "works on project X"),
                                                                   ("works on project X", "works on project Y")]


def test_c20_sql_metadata_merge_and_replace(gw):
    mid = run(gw, "SELECT id FROM pgmem.add('t64', 'works on project X', %s::vector, p_metadata => %s)",
              [vec("X"), Jsonb({"category": "work", "priority": 3})])[0][0]
    upd = "SELECT metadata FROM pgmem.update(%s, p_metadata => %s, p_replace_metadata => %s)"
    assert run(gw, "SELECT metadata FROM pgmem.update(%s, 'works on project Y', %s::vector)", [mid, vec("Y")]) == [
        ({"category": "work", "priority": 3},)]
    assert run(gw, upd, [mid, Jsonb({"priority": 5}), False]) == [({"category": "work", "priority": 5},)]
    assert run(gw, upd, [mid, Jsonb({"priority": 7}), True]) == [({"priority": 7},)]
    assert sql_error(gw, upd, [mid, Jsonb([1, 2]), False]).sqlstate == "PGM08"
    assert sql_error(gw, upd, [mid, Jsonb("text"), True]).sqlstate == "PGM08"
    rows = run(gw, "SELECT event, old_metadata, new_metadata FROM pgmem.history(%s)", [mid])
    assert rows == [
        ("ADD", None, {"category": "work", "priority": 3}),
        ("UPDATE", {"category": "work", "priority": 3}, {"category": "work", "priority": 3}),
        ("UPDATE", {"category": "work", "priority": 3}, {"category": "work", "priority": 5}),
        ("UPDATE", {"category": "work", "priority": 5}, {"priority": 7}),
    ]


# --------------------------------------------------------------------------------------------------------
# C21: numbers compare as numbers; range operators need a number and never match JSON strings
# --------------------------------------------------------------------------------------------------------
C21_VALUES = [9, 10, 100, 9.5, -1, 10.0, 1e2, 0.1 + 0.2, 10**20, -(10**20), 1e-9, "10", "100", "9", "abc", True,
              None, [10], {"v": 10}]


def is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def test_c21_numbers_compare_as_numbers(alice, gw):
    added = {}
    for i, val in enumerate(C21_VALUES):
        added[i] = alice.add(f"numeric value #{i}", metadata={"n": val}).id
    added["missing"] = alice.add("numeric value missing", metadata={"other": 10}).id
    # The case's own example: of 9, 10, 100, 9.5, -1, the filter >= 10 matches 10 and 100.
    got = ids(alice.list(filter={"n": {"gte": 10}}, limit=100).items)
    assert {added[1], added[2]} <= got
    assert not got & {added[0], added[3], added[4], added[11], added[12]}
    ops = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b}
    for op, cmp in ops.items():
        for bound in [10, 9.5, 9, -1, 0, 0.3, 10**19, 100.0, 1e-10, -(10**20)]:
            expected = {added[i] for i, val in enumerate(C21_VALUES) if is_number(val) and cmp(val, bound)}
            assert ids(alice.list(filter={"n": {op: bound}}, limit=100).items) == expected, (op, bound)
            assert ids(alice.search("numeric value", k=100, filter={"n": {op: bound}})) == expected, (op, bound)
    # Equality is numeric for numbers (10 == 10.0) and exact for strings ("10" matches only "10").
    assert ids(alice.list(filter={"n": 10}).items) == {added[1], added[5]}
    assert ids(alice.list(filter={"n": "10"}).items) == {added[11]}
    assert ids(alice.list(filter={"n": {"in": [100, "9"]}}).items) == {added[2], added[6], added[13]}
    # Range operators with a non-number are refused, never compared as text.
    for op in ops:
        for bad in ["10", "abc", True, None, [10], {"v": 10}]:
            with pytest.raises(InvalidFilter) as info:
                alice.list(filter={"n": {op: bad}})
            assert "number" in str(info.value), (op, bad)
            with pytest.raises(InvalidFilter):
                alice.search("numeric value", filter={"n": {op: bad}})
            assert sql_error(gw, "SELECT * FROM pgmem.list('t64', p_filter => %s)",
                             [Jsonb({"n": {op: bad}})]).sqlstate == "PGM07"
    # A delete scoped by a numeric range removes exactly those rows.
    expected = {added[i] for i, val in enumerate(C21_VALUES) if is_number(val) and val >= 100}
    assert alice.delete_all(filter={"n": {"gte": 100}}) == len(expected)
    assert all(alice.get(mid) is None for mid in expected)
    assert len(alice.list(limit=100).items) == len(added) - len(expected)


# --------------------------------------------------------------------------------------------------------
# C22: gte, in, nin, ne, contains, $or, $and, $not work; an unknown operator is an error
# --------------------------------------------------------------------------------------------------------
C22_ROWS = {
    "r1": {"tag": "a", "n": 1, "tags": ["x", "y"], "note": "hello world"},
    "r2": {"tag": "b", "n": 5, "tags": ["y"], "note": "Hello"},
    "r3": {"tag": "c", "n": 10, "tags": []},
    "r4": {"n": "5", "tag": ["a"]},
    "r5": {},
    "r6": {"tag": None, "n": None},
}
C22_FILTERS = [
    ({"n": {"gte": 5}}, {"r2", "r3"}),
    ({"n": {"gte": 1, "lt": 10}}, {"r1", "r2"}),
    ({"tag": {"in": ["a", "c"]}}, {"r1", "r3"}),
    ({"tag": {"in": [["a"]]}}, {"r4"}),
    ({"tag": {"nin": ["a", "c"]}}, {"r2", "r4", "r5", "r6"}),
    ({"tag": {"ne": "a"}}, {"r2", "r3", "r4", "r5", "r6"}),
    ({"tag": "a"}, {"r1"}),
    ({"tag": None}, {"r6"}),
    ({"tag": "a", "n": 1}, {"r1"}),
    ({"tags": {"contains": "y"}}, {"r1", "r2"}),
    ({"tag": {"contains": "a"}}, {"r1", "r4"}),
    ({"note": {"contains": "world"}}, {"r1"}),
    ({"note": {"contains": "hello"}}, {"r1"}),
    ({"tag": {"exists": True}}, {"r1", "r2", "r3", "r4", "r6"}),
    ({"tag": {"exists": False}}, {"r5"}),
    ({"$or": [{"tag": "a"}, {"n": {"gte": 10}}]}, {"r1", "r3"}),
    ({"$and": [{"n": {"gte": 1}}, {"n": {"lt": 10}}]}, {"r1", "r2"}),
    ({"$and": [{"tag": {"in": ["a", "b"]}}, {"$or": [{"n": 1}, {"note": {"contains": "ell"}}]}]}, {"r1", "r2"}),
    ({"$not": {"tag": "a"}}, {"r2", "r3", "r4", "r5", "r6"}),
    ({"$not": {"n": {"gte": 5}}}, {"r1", "r4", "r5", "r6"}),
    ({"$not": {"$or": [{"tag": "a"}, {"tag": "b"}]}}, {"r3", "r4", "r5", "r6"}),
    ({"$not": {"$not": {"tag": "a"}}}, {"r1"}),
    ({"$or": [{"$not": {"tag": "a"}}, {"tag": "a"}]}, set(C22_ROWS)),
]


def test_c22_operators(alice):
    names = {alice.add(f"operator row {name}", metadata=meta).id: name for name, meta in C22_ROWS.items()}
    for flt, expected in C22_FILTERS:
        assert {names[r.id] for r in alice.list(filter=flt).items} == expected, flt
        assert {names[r.id] for r in alice.search("operator row", k=50, filter=flt)} == expected, flt
    # NOT is the complement of its filter (rows without the key included), for every filter above.
    for flt, expected in C22_FILTERS:
        assert {names[r.id] for r in alice.list(filter={"$not": flt}).items} == set(C22_ROWS) - expected, flt


def test_c22_sql_operators(gw):
    names = {}
    for name, meta in C22_ROWS.items():
        names[run(gw, "SELECT id FROM pgmem.add('t64', %s, %s::vector, p_metadata => %s)",
                  [f"operator row {name}", vec(name), Jsonb(meta)])[0][0]] = name
    for flt, expected in C22_FILTERS:
        got = run(gw, "SELECT id FROM pgmem.list('t64', p_filter => %s)", [Jsonb(flt)])
        assert {names[r[0]] for r in got} == expected, flt


UNKNOWN_FILTERS = [
    {"n": {"$gte": 5}}, {"n": {"like": "%"}}, {"n": {"regex": ".*"}}, {"n": {"GTE": 5}}, {"n": {"eq ": 5}},
    {"n": {"between": [1, 2]}}, {"$nor": [{"n": 1}]}, {"$xor": [{"n": 1}]}, {"$exists": {"n": True}},
    {"n": {}}, {"$or": []}, {"$and": []}, {"$or": {"n": 1}}, {"$not": []}, {"$not": 5},
    {"n": {"in": 5}}, {"n": {"nin": "a"}}, {"n": {"exists": "yes"}}, {"n": {"contains": ""}},
    {"n": {"gte": 5, "bogus": 1}}, {"$or": [{"n": {"bogus": 1}}]}, {"$not": {"n": {"bogus": 1}}},
]


def test_c22_unknown_operators_raise(alice, gw, admin):
    alice.add("a row", metadata={"n": 1})
    for flt in UNKNOWN_FILTERS:
        for call in [lambda: alice.list(filter=flt), lambda: alice.search("a row", filter=flt),
                     lambda: alice.delete_all(filter=flt)]:
            with pytest.raises(InvalidFilter):
                call()
        assert sql_error(gw, "SELECT * FROM pgmem.list('t64', p_filter => %s)", [Jsonb(flt)]).sqlstate == "PGM07", flt
    for bad in [[{"n": 1}], "n = 1", 5]:
        with pytest.raises(ValidationError):
            alice.list(filter=bad)
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 1


# --------------------------------------------------------------------------------------------------------
# C23: concurrent adds of the same text for one user give one row; different users never block
# --------------------------------------------------------------------------------------------------------
def test_c23_concurrent_duplicate_adds_give_one_row(make_memory, admin):
    one = make_memory("alice", "one", max_size=1)
    two = make_memory("alice", "two", max_size=1)
    one.space()
    rounds = 50
    barrier = threading.Barrier(2)

    def add(client, text):
        barrier.wait(timeout=30)
        return client.add(text)

    with ThreadPoolExecutor(2) as pool:
        for i in range(rounds):
            text = f"the same fact, round {i}"
            results = [f.result() for f in [pool.submit(add, one, text), pool.submit(add, two, text)]]
            assert results[0].id == results[1].id, i
            assert sorted(r.created for r in results) == [False, True], i
    counts = admin.execute("SELECT count(*), count(DISTINCT content) FROM pgmem.memories WHERE user_id = 'alice'"
                           ).fetchone()
    assert counts == (rounds, rounds)
    assert admin.execute("SELECT count(*) FROM pgmem.history WHERE user_id = 'alice'").fetchone()[0] == rounds


def test_c23_concurrent_overlapping_batches_do_not_deadlock(make_memory, admin):
    one = make_memory("alice", "one", max_size=1)
    two = make_memory("alice", "two", max_size=1)
    one.space()
    barrier = threading.Barrier(2)

    def add(client, texts):
        barrier.wait(timeout=30)
        return client.add_many(texts)

    with ThreadPoolExecutor(2) as pool:
        for i in range(10):
            texts = [f"batch fact {i}.{j}" for j in range(8)]
            forward = pool.submit(add, one, texts)
            backward = pool.submit(add, two, texts[::-1])
            a, b = forward.result(), backward.result()[::-1]
            for x, y in zip(a, b):
                assert x.id == y.id, i
                assert sorted([x.created, y.created]) == [False, True], i
    assert admin.execute("SELECT count(*), count(DISTINCT content) FROM pgmem.memories").fetchone() == (80, 80)


def wait_until_blocked(admin: psycopg.Connection, pid: int) -> None:
    """Wait (at most 30 s) until backend ``pid`` waits for a lock."""
    for _ in range(300):
        row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
        if row and row[0] == "Lock":
            return
        threading.Event().wait(0.1)
    raise AssertionError(f"backend {pid} never waited for a lock")


class Rollback(Exception):
    pass


@pytest.mark.parametrize("first_commits", [True, False])
def test_c23_second_writer_waits_for_the_first(gw, admin, gateway_role, first_commits):
    add = "SELECT id, created FROM pgmem.add('t64', 'the contested fact', %s::vector)"
    with connect(admin, gateway_role) as other, ThreadPoolExecutor(1) as pool:
        try:
            with acting(gw) as conn:
                first_id, created = conn.execute(add, [vec("fact")]).fetchone()
                assert created
                second = pool.submit(run, other, add, [vec("fact")])
                wait_until_blocked(admin, other.info.backend_pid)
                if not first_commits:
                    raise Rollback
        except Rollback:
            pass
        second_id, second_created = second.result(timeout=30)[0]
    if first_commits:
        assert (second_id, second_created) == (first_id, False)
    else:
        assert second_created and second_id != first_id
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 1


@pytest.mark.parametrize("delete_commits", [True, False])
def test_c23_add_racing_a_delete_of_the_same_text(gw, admin, gateway_role, delete_commits):
    add = "SELECT id, created FROM pgmem.add('t64', 'the contested fact', %s::vector)"
    old_id = run(gw, add, [vec("fact")])[0][0]
    with connect(admin, gateway_role) as other, ThreadPoolExecutor(1) as pool:
        try:
            with acting(gw) as conn:
                assert conn.execute("SELECT pgmem.delete(%s)", [old_id]).fetchone()[0]
                second = pool.submit(run, other, add, [vec("fact")])
                wait_until_blocked(admin, other.info.backend_pid)
                if not delete_commits:
                    raise Rollback
        except Rollback:
            pass
        new_id, created = second.result(timeout=30)[0]
    if delete_commits:
        assert created and new_id != old_id
    else:
        assert (new_id, created) == (old_id, False)
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 1


def test_c23_different_users_never_block_each_other(gw, admin, gateway_role):
    add = "SELECT id, created FROM pgmem.add('t64', %s, %s::vector)"
    with connect(admin, gateway_role) as other:
        other.execute("SET lock_timeout = '20s'")  # a wait would surface as an error, not a hang
        with acting(gw, "alice") as conn:
            conn.execute(add, ["the same fact", vec("fact")])
            # alice's transaction is still open: bob's writes of the same text go through at once.
            bob_id, created = run(other, add, ["the same fact", vec("fact")], user_id="bob")[0]
            assert created
            assert run(other, "SELECT count(*) FROM pgmem.add_batch('t64', ARRAY['the same fact', 'more'],"
                              " ARRAY[%s, %s]::vector[])", [vec("fact"), vec("more")], user_id="bob") == [(2,)]
            assert run(other, "SELECT pgmem.delete_all('t64', p_confirm => true)", user_id="carol") == [(0,)]
            # alice's other connection reads without waiting (her uncommitted row is not visible yet).
            assert run(other, "SELECT count(*) FROM pgmem.list('t64')", user_id="alice") == [(0,)]
    assert admin.execute("SELECT user_id, count(*) FROM pgmem.memories GROUP BY 1 ORDER BY 1").fetchall() == [
        ("alice", 1), ("bob", 2)]
    assert bob_id is not None


# --------------------------------------------------------------------------------------------------------
# C24: after the backends behind pooled connections are terminated, the next call succeeds
# --------------------------------------------------------------------------------------------------------
def terminate_all_other_backends(admin: psycopg.Connection) -> int:
    pids = [r[0] for r in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                  " WHERE datname = current_database() AND pid <> pg_backend_pid()")
    for _ in range(300):  # wait until they are gone, so the test does not depend on signal delivery timing
        if not admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]).fetchone()[0]:
            return len(pids)
        threading.Event().wait(0.1)
    raise AssertionError("backends did not terminate")


@pytest.mark.parametrize("size", [1, 3, 8])
def test_c24_next_call_after_terminated_backends_succeeds(make_memory, admin, size):
    alice = make_memory("alice", "planner", min_size=size, max_size=size)
    bob = alice.with_identity(user_id="bob")
    mid = alice.add("alice survives restarts").id
    bob_id = bob.add("bob's private note").id
    calls = [
        lambda: alice.get(mid),
        lambda: alice.add("added after a terminate"),
        lambda: alice.list(),
        lambda: alice.search("survives"),
        lambda: bob.stats(),
        lambda: alice.history(mid),
        lambda: alice.update(mid, metadata={"seen": True}),
    ]
    for call in calls:
        assert terminate_all_other_backends(admin) >= 1
        call()  # must not raise
        # Fresh connections still act through the gateway role, under row-level security.
        assert alice.get(bob_id) is None
        assert [r.content for r in bob.list().items] == ["bob's private note"]
        assert alice.whoami() == "alice"
    with ThreadPoolExecutor(size) as pool:
        terminate_all_other_backends(admin)
        assert all(r is not None for r in pool.map(lambda _: alice.get(mid), range(size * 3)))
