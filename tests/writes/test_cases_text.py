"""Failure cases C01-C09: literal text matching and edits, and text or
JSON the database cannot store. Each case runs over several members of its family, through the Python
client and, where the case is about SQL, through the stored functions directly."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg
import pytest
from conftest import acting, dsn_for
from pgvector.psycopg import register_vector

from pgmem import AmbiguousEdit, NeedleNotFound, ValidationError
from pgmem.testing import HashEmbedder

EMB = HashEmbedder(64)


# --------------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------------
def vec(text: str):
    return EMB.embed([text])[0]


def raw_counts(admin: psycopg.Connection, user_id: str | None = None) -> tuple[int, int]:
    """(memories rows, history rows) in the raw tables (admin bypasses RLS), for one user or for all."""
    m = admin.execute("SELECT count(*) FROM pgmem.memories WHERE %(u)s::text IS NULL OR user_id = %(u)s",
                      {"u": user_id}).fetchone()[0]
    h = admin.execute("SELECT count(*) FROM pgmem.history WHERE %(u)s::text IS NULL OR user_id = %(u)s",
                      {"u": user_id}).fetchone()[0]
    return m, h


@pytest.fixture
def gw(admin: psycopg.Connection, login_role) -> Iterator[psycopg.Connection]:
    """An autocommit connection of a fresh gateway login (RLS applies; it names the user per transaction).
    The space t64 exists."""
    admin.execute("SELECT pgmem.create_space('t64', %s, 64)", [EMB.model_name])
    role = login_role("pgmem_gateway")
    with psycopg.connect(dsn_for(admin.info.dbname, user=role), autocommit=True) as conn:
        register_vector(conn)
        yield conn


def sql_add(conn: psycopg.Connection, user_id: str, content: str, **kw) -> str:
    with acting(conn, user_id):
        return conn.execute(
            "SELECT id FROM pgmem.add(p_space => 't64', p_content => %s, p_embedding => %s::vector,"
            " p_agent_id => %s, p_session_id => %s, p_metadata => %s::jsonb)",
            [content, vec(content), kw.get("agent_id"), kw.get("session_id"), kw.get("metadata", "{}")]).fetchone()[0]


def sql_edit(conn: psycopg.Connection, user_id: str, id, needle, replacement, new_content: str | None = None):
    with acting(conn, user_id):
        return conn.execute(
            "SELECT content, version FROM pgmem.edit(p_id => %s, p_needle => %s, p_replacement => %s,"
            " p_embedding => %s::vector)", [id, needle, replacement, vec(new_content or "x")]).fetchone()


def sql_error(fn, *args, **kw) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as info:
        fn(*args, **kw)
    return info.value


# --------------------------------------------------------------------------------------------------------
# C01: filter and scope values with _, % or \ match only themselves
# --------------------------------------------------------------------------------------------------------
LOOKALIKE_IDS = ["john_doe", "john-doe", "johnXdoe", "john%doe", "john\\doe", "john\\_doe", "john_", "john%",
                 "%", "_", "\\", "JOHN_DOE", "acme", "acme-corp"]


def test_c01_user_ids_are_matched_literally(alice):
    added = {}
    for uid in LOOKALIKE_IDS:
        added[uid] = alice.with_identity(user_id=uid).add(f"the note of tenant {uid}").id
    for uid in LOOKALIKE_IDS:
        m = alice.with_identity(user_id=uid)
        assert [r.id for r in m.list().items] == [added[uid]], uid
        assert [r.id for r in m.search("the note of tenant john_doe", k=50)] == [added[uid]], uid
        assert m.stats()[0].memories == 1, uid
        for other, oid in added.items():
            if other != uid:
                assert m.get(oid) is None, (uid, other)
                assert m.history(oid) == [], (uid, other)


def test_c01_agent_and_session_scopes_are_matched_literally(alice):
    for field in ["agent_id", "session_id"]:
        added = {s: alice.add(f"written under {field} {s}", **{field: s}).id for s in LOOKALIKE_IDS}
        for s, mid in added.items():
            assert [r.id for r in alice.list(**{field: s}).items] == [mid], (field, s)
            assert [r.id for r in alice.search("written under", k=50, **{field: s})] == [mid], (field, s)
        # A scoped delete removes exactly that scope's memory.
        assert alice.delete_all(**{field: "john_doe"}) == 1
        left = {getattr(r, field) for r in alice.list(limit=100).items if getattr(r, field) is not None}
        assert left == set(LOOKALIKE_IDS) - {"john_doe"}
        assert alice.delete_all(confirm=True) == len(LOOKALIKE_IDS) - 1


METADATA_VALUES = ["acme", "acme-corp", "acme_corp", "acmeXcorp", "acme%", "acm_", "a\\cme", "a\\\\cme", "ACME", "acme "]


def test_c01_metadata_values_are_matched_literally(alice):
    added = {val: alice.add(f"customer record for {val!r}", metadata={"org": val}).id for val in METADATA_VALUES}
    for val, mid in added.items():
        assert [r.id for r in alice.list(filter={"org": val}).items] == [mid], val
        assert [r.id for r in alice.list(filter={"org": {"eq": val}}).items] == [mid], val
        assert [r.id for r in alice.search("customer record", k=50, filter={"org": val})] == [mid], val
        assert [r.id for r in alice.list(filter={"org": {"in": [val]}}).items] == [mid], val
        assert {r.id for r in alice.list(filter={"org": {"nin": [val]}}).items} == set(added.values()) - {mid}, val
    assert alice.list(filter={"org": "acm%"}).items == []
    assert alice.list(filter={"org": "acme_"}).items == []
    # The contains operator is a literal substring test too.
    for needle in ["_", "%", "\\", "e_", "e%", "acme", "-", "\\\\", "a\\c", "ACME", "cme "]:
        expected = {mid for val, mid in added.items() if needle in val}
        assert {r.id for r in alice.list(filter={"org": {"contains": needle}}).items} == expected, needle
    # A delete scoped by a filter value removes exactly the matching memory.
    assert alice.delete_all(filter={"org": "acme_corp"}) == 1
    assert {r.metadata["org"] for r in alice.list().items} == set(METADATA_VALUES) - {"acme_corp"}


def test_c01_sql_scope_parameters_are_literal(gw):
    for s in LOOKALIKE_IDS:
        sql_add(gw, "alice", f"sql scope {s}", agent_id=s, session_id=s, metadata=json.dumps({"org": s}))
    for s in LOOKALIKE_IDS:
        with acting(gw, "alice"):
            assert gw.execute("SELECT agent_id, session_id FROM pgmem.list('t64', p_agent_id => %s)",
                              [s]).fetchall() == [(s, s)], s
            assert gw.execute("SELECT agent_id FROM pgmem.list('t64', p_session_id => %s)", [s]).fetchall() == [(s,)]
            hits = gw.execute("SELECT agent_id FROM pgmem.search('t64', %s::vector, 50, p_agent_id => %s)",
                              [vec("sql scope"), s]).fetchall()
            assert hits == [(s,)], s
            assert gw.execute("SELECT agent_id FROM pgmem.list('t64', p_filter => %s::jsonb)",
                              [json.dumps({"org": s})]).fetchall() == [(s,)], s
    # A user id with wildcard characters sees only its own rows.
    sql_add(gw, "john_doe", "john_doe's note")
    sql_add(gw, "john-doe", "john-doe's note")
    with acting(gw, "john_doe"):
        assert gw.execute("SELECT content FROM pgmem.list('t64')").fetchall() == [("john_doe's note",)]


# --------------------------------------------------------------------------------------------------------
# C02: literal substring search and edit
# --------------------------------------------------------------------------------------------------------
C02_CONTENTS = ["file_name", "filename", "file-name", "100% done", "1000 items", "a\\b", "ab", "a\\\\b", "fileXname"]
C02_NEEDLES = [
    ("file_name", 1), ("100%", 1), ("a\\b", 1),  # the case's own expectations
    ("_", 1), ("%", 1), ("\\", 2), ("file", 4), ("100", 2), ("a\\\\b", 1), ("e_n", 1), ("0%", 1), ("%d", 0),
    ("FILE", 0), ("%%", 0), ("__", 0),
]


def test_c02_list_contains_is_a_literal_substring(alice):
    ids = {c: alice.add(c).id for c in C02_CONTENTS}
    for needle, expected_count in C02_NEEDLES:
        found = {r.id for r in alice.list(contains=needle).items}
        assert found == {ids[c] for c in C02_CONTENTS if needle in c}, needle
        assert len(found) == expected_count, needle


EDIT_HAYSTACK = "file_name filename file-name fileXname 100% done 1000 items a\\b ab a\\\\b"
EDIT_NEEDLES = ["file_name", "100%", "a\\b ", "a\\\\b", "e-n", "0%"]


def test_c02_edit_finds_exactly_the_literal_needle(alice):
    for i, needle in enumerate(EDIT_NEEDLES):
        content = f"[{i}] {EDIT_HAYSTACK}"
        assert content.count(needle) == 1
        mid = alice.add(content).id
        rec = alice.edit(mid, needle, "<X>")
        assert rec.content == content.replace(needle, "<X>", 1), needle
        assert alice.get(mid).content == rec.content


def test_c02_sql_contains_edit_and_count_are_literal(gw):
    for c in C02_CONTENTS:
        sql_add(gw, "alice", c)
    for needle, _ in C02_NEEDLES:
        with acting(gw, "alice"):
            got = {r[0] for r in gw.execute("SELECT content FROM pgmem.list('t64', p_contains => %s)", [needle])}
        assert got == {c for c in C02_CONTENTS if needle in c}, needle
    for i, needle in enumerate(EDIT_NEEDLES):
        content = f"[{i}] {EDIT_HAYSTACK}"
        mid = sql_add(gw, "alice", content)
        with acting(gw, "alice"):
            assert gw.execute("SELECT pgmem.count_occurrences(%s, %s)", [content, needle]).fetchone()[0] == 1
        assert sql_edit(gw, "alice", mid, needle, "<X>") == (content.replace(needle, "<X>", 1), 2), needle


# --------------------------------------------------------------------------------------------------------
# C03: an edit changes only its span; history holds the full texts
# --------------------------------------------------------------------------------------------------------
C03_CASES = [
    ("A\ncontent A\n\nB\ncontent B\n\nC\ncontent C", "B\ncontent B", "B\ncontent B2"),
    # Long sections, CRLF, tabs, trailing blanks, non-ASCII: everything outside the span stays byte for byte.
    ("A\r\n" + "línea α\t \r\n" * 3000 + "\n\nB\r\ncontent B\r\n\n" + "C  \u00a0\n" + "终 🙂 \\n\n" * 3000,
     "B\r\ncontent B", "B\r\ncontent B2 \\ $1"),
    ("prefix " * 5000 + "MIDDLE" + " suffix" * 5000, "MIDDLE", ""),
    ("\n\n  leading blank lines, the span at the very end: TAIL", "TAIL", "tail\n"),
    ("HEAD at the very start", "HEAD", ""),
]


def test_c03_edit_changes_only_the_span(alice, admin):
    for before, old, new in C03_CASES:
        mid = alice.add(before).id
        expected = before.replace(old, new, 1)
        assert alice.edit(mid, old, new).content == expected
        stored, raw = admin.execute("SELECT content, convert_to(content, 'UTF8') FROM pgmem.memories WHERE id = %s",
                                    [mid]).fetchone()
        assert bytes(raw) == expected.encode("utf-8")
        pos = before.index(old)
        assert stored[:pos] == before[:pos]
        assert stored[pos + len(new):] == before[pos + len(old):]
        events = alice.history(mid)
        assert [e.event for e in events] == ["ADD", "EDIT"]
        assert (events[1].old_content, events[1].new_content) == (before, expected)


def test_c03_sql_edit_changes_only_the_span(gw):
    for before, old, new in C03_CASES:
        mid = sql_add(gw, "alice", before)
        expected = before.replace(old, new, 1)
        assert sql_edit(gw, "alice", mid, old, new)[0] == expected
        with acting(gw, "alice"):
            rows = gw.execute("SELECT event, old_content, new_content FROM pgmem.history(%s)", [mid]).fetchall()
        assert rows == [("ADD", None, before), ("EDIT", before, expected)]


# --------------------------------------------------------------------------------------------------------
# C04: an ambiguous needle (overlapping occurrences counted) is refused with its count; nothing changes
# --------------------------------------------------------------------------------------------------------
C04_CASES = [("aaa", "aa", 2), ("ababa", "aba", 2), ("aaaa", "aa", 3), ("abab", "ab", 2), ("xx yy xx", "xx", 2),
             ("🙂🙂🙂", "🙂🙂", 2), ("a\\a\\a", "a\\a", 2), ("%%%", "%%", 2), ("_._._", "_._", 2), ("aAaAa", "aAa", 2)]


def test_c04_ambiguous_edit_is_refused_with_count(alice, admin):
    ids = {content: alice.add(content).id for content, _, _ in C04_CASES}
    before = raw_counts(admin)
    for content, needle, count in C04_CASES:
        with pytest.raises(AmbiguousEdit) as info:
            alice.edit(ids[content], needle, "Z")
        assert info.value.count == count, (content, needle)
        assert f"{count} times" in str(info.value)
        rec = alice.get(ids[content])
        assert (rec.content, rec.version) == (content, 1)
        assert [e.event for e in alice.history(ids[content])] == ["ADD"]
    assert raw_counts(admin) == before


def test_c04_sql_ambiguous_edit_is_refused_with_count(gw, admin):
    ids = {content: sql_add(gw, "alice", content) for content, _, _ in C04_CASES}
    before = raw_counts(admin)
    for content, needle, count in C04_CASES:
        with acting(gw, "alice"):
            assert gw.execute("SELECT pgmem.count_occurrences(%s, %s)", [content, needle]).fetchone()[0] == count
        err = sql_error(sql_edit, gw, "alice", ids[content], needle, "Z")
        assert err.sqlstate == "PGM05"
        assert f"occurs {count} times" in err.diag.message_primary
        assert admin.execute("SELECT content, version FROM pgmem.memories WHERE id = %s",
                             [ids[content]]).fetchone() == (content, 1)
    assert raw_counts(admin) == before


def test_c04_absent_needle_is_refused(alice, gw):
    mid = alice.add("likes green tea").id
    with pytest.raises(NeedleNotFound):
        alice.edit(mid, "coffee", "x")
    sid = sql_add(gw, "alice", "likes black tea")
    assert sql_error(sql_edit, gw, "alice", sid, "coffee", "x").sqlstate == "PGM06"
    assert alice.get(mid).version == 1


# --------------------------------------------------------------------------------------------------------
# C05: the replacement is inserted byte for byte; matching is case-sensitive
# --------------------------------------------------------------------------------------------------------
REPLACEMENTS = ["C:\\new\\table", "\\1", "C:\\", "$&", "\\&", "$1", "\\0", "\\g<0>", "${0}", "&", "\\\\", "%", "_",
                "\\n", "'; DROP TABLE pgmem.memories; --", "$$", "\\x00", "🙂\u200d\u0301", "PLACEHOLDER"]


def test_c05_replacement_is_inserted_verbatim(alice):
    for i, replacement in enumerate(REPLACEMENTS):
        mid = alice.add(f"[{i}] path: PLACEHOLDER (end)").id
        expected = f"[{i}] path: {replacement} (end)"
        assert alice.edit(mid, "PLACEHOLDER", replacement).content == expected, replacement
        assert alice.get(mid).content == expected
        assert alice.history(mid)[-1].new_content == expected


def test_c05_sql_replacement_is_inserted_verbatim(gw):
    for i, replacement in enumerate(REPLACEMENTS):
        mid = sql_add(gw, "alice", f"[{i}] path: PLACEHOLDER (end)")
        assert sql_edit(gw, "alice", mid, "PLACEHOLDER", replacement)[0] == f"[{i}] path: {replacement} (end)"


def test_c05_needles_with_special_characters_match_literally(alice, gw):
    for i, needle in enumerate(["$&", "\\1", "C:\\", "(end)", ".*", "[a-z]", "^path", "%_", "\\%"]):
        content = f"[{i}] x {needle} y"
        assert alice.edit(alice.add(content).id, needle, "Z").content == f"[{i}] x Z y", needle
        assert sql_edit(gw, "alice", sql_add(gw, "alice", "sql " + content), needle, "Z")[0] == f"sql [{i}] x Z y"


def test_c05_matching_is_case_sensitive(alice, gw):
    mid = alice.add("Tea, tea and TEA").id
    assert alice.edit(mid, "tea", "coffee").content == "Tea, coffee and TEA"
    for needle in ["tEa", "COFFEE", "Coffee"]:
        with pytest.raises(NeedleNotFound):
            alice.edit(mid, needle, "x")
    sid = alice.add("Straße und STRASSE").id
    for needle in ["strasse", "straße", "STRAßE"]:
        with pytest.raises(NeedleNotFound):
            alice.edit(sid, needle, "x")
    assert {r.id for r in alice.list(contains="TEA").items} == {mid}
    assert alice.list(contains="tEa").items == []
    gid = sql_add(gw, "alice", "Milk, milk and MILK")
    assert sql_edit(gw, "alice", gid, "milk", "oat")[0] == "Milk, oat and MILK"
    assert sql_error(sql_edit, gw, "alice", gid, "mILK", "x").sqlstate == "PGM06"


# --------------------------------------------------------------------------------------------------------
# C06: an empty needle is an error, never "match everything"
# --------------------------------------------------------------------------------------------------------
def test_c06_empty_needle_is_refused(alice, admin):
    mid = alice.add("some memory text").id
    before = raw_counts(admin)
    with pytest.raises(ValidationError) as info:
        alice.edit(mid, "", "x")
    assert info.value.field == "old"
    with pytest.raises(ValidationError):
        alice.list(contains="")
    with pytest.raises(ValidationError):
        alice.list(filter={"tag": {"contains": ""}})
    with pytest.raises(ValidationError):
        alice.delete_all(filter={"tag": {"contains": ""}})
    assert raw_counts(admin) == before
    assert alice.get(mid).version == 1


def test_c06_sql_empty_needle_is_refused(gw, admin):
    mid = sql_add(gw, "alice", "some memory text")
    for needle in ["", None]:
        assert sql_error(sql_edit, gw, "alice", mid, needle, "x").sqlstate == "PGM08"

    def run(q, params):
        with acting(gw, "alice"):
            return gw.execute(q, params).fetchall()

    assert sql_error(run, "SELECT pgmem.count_occurrences('abc', %s)", [""]).sqlstate == "PGM08"
    assert sql_error(run, "SELECT * FROM pgmem.list('t64', p_contains => %s)", [""]).sqlstate == "PGM08"
    assert sql_error(run, "SELECT * FROM pgmem.list('t64', p_filter => %s::jsonb)",
                     ['{"t": {"contains": ""}}']).sqlstate == "PGM07"
    assert admin.execute("SELECT version FROM pgmem.memories WHERE id = %s", [mid]).fetchone()[0] == 1


# --------------------------------------------------------------------------------------------------------
# C07 / C08: NUL characters (also escaped \u0000 in JSON) get a clear validation error before anything is sent
# --------------------------------------------------------------------------------------------------------
NUL_ADD_CASES = [
    (dict(content="o\x00er credits"), "content"),
    (dict(content="\x00"), "content"),
    (dict(content="ok", metadata={"data": "speci\x00al"}), "metadata"),
    (dict(content="ok", metadata={"da\x00ta": "x"}), "metadata"),
    (dict(content="ok", metadata={"outer": {"inner": ["a", "b\x00"]}}), "metadata"),
    (dict(content="ok", metadata={"outer": {"in\x00ner": 1}}), "metadata"),
    (dict(content="ok", agent_id="age\x00nt"), "agent_id"),
    (dict(content="ok", session_id="sess\x00ion"), "session_id"),
]


def test_c07_c08_nul_is_refused_naming_the_field(alice, admin):
    for kwargs, field in NUL_ADD_CASES:
        with pytest.raises(ValidationError) as info:
            alice.add(**kwargs)
        assert info.value.field == field, kwargs
        assert field in str(info.value) and "NUL" in str(info.value), kwargs
        assert info.value.sqlstate is None  # refused by the client, not a database error
    assert raw_counts(admin) == (0, 0)


def test_c07_c08_nul_is_refused_by_every_method(alice, admin, make_memory):
    mid = alice.add("an innocent memory", metadata={"k": "v"}).id
    before = raw_counts(admin)
    calls = [
        lambda: alice.update(mid, content="o\x00er credits"),
        lambda: alice.update(mid, metadata={"data": "speci\x00al"}),
        lambda: alice.update(mid, metadata={"da\x00ta": 1}, replace_metadata=True),
        lambda: alice.edit(mid, "innocent", "in\x00nocent"),
        lambda: alice.edit(mid, "inno\x00cent", "x"),
        lambda: alice.list(contains="a\x00"),
        lambda: alice.list(agent_id="p\x00"),
        lambda: alice.list(session_id="s\x00"),
        lambda: alice.list(filter={"k": "v\x00"}),
        lambda: alice.list(filter={"k\x00": "v"}),
        lambda: alice.search("what\x00 now"),
        lambda: alice.search("tea", filter={"k": {"in": ["v\x00"]}}),
        lambda: alice.search("tea", agent_id="p\x00"),
        lambda: alice.delete_all(filter={"k": "v\x00"}),
        lambda: alice.delete_all(agent_id="p\x00"),
        lambda: alice.with_identity(user_id="ali\x00ce"),
        lambda: make_memory("ali\x00ce"),
        lambda: make_memory("alice", "plan\x00ner"),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(ValidationError) as info:
            call()
        assert "NUL" in str(info.value), i
    assert raw_counts(admin) == before
    rec = alice.get(mid)
    assert (rec.content, rec.metadata, rec.version) == ("an innocent memory", {"k": "v"}, 1)


BAD_BATCH_ITEMS = [
    ("o\x00er credits", "content"),
    ({"content": "second", "metadata": {"data": "speci\x00al"}}, "metadata"),
    ({"content": "second", "metadata": {"k\x00": 1}}, "metadata"),
    ({"content": "second", "agent_id": "a\x00"}, "agent_id"),
    ({"content": "second", "session_id": "s\x00"}, "session_id"),
    ({"content": "bad\ud800"}, "content"),
    ({"content": "second", "metadata": {"x": "\udfff"}}, "metadata"),
]


def test_c07_batch_reports_the_bad_item_and_writes_nothing(alice, admin):
    for bad_item, field in BAD_BATCH_ITEMS:
        with pytest.raises(ValidationError) as info:
            alice.add_many(["first valid memory", bad_item, "third valid memory"])
        assert info.value.index == 1, bad_item
        assert info.value.field == field, bad_item
        assert "item 1" in str(info.value)
        assert raw_counts(admin) == (0, 0), bad_item
    # With the bad item fixed, the whole batch goes in, in order.
    results = alice.add_many(["first valid memory", "second", "third valid memory"])
    assert [r.created for r in results] == [True, True, True]
    assert [alice.get(r.id).content for r in results] == ["first valid memory", "second", "third valid memory"]
    assert raw_counts(admin) == (3, 3)


def test_c08_sql_escaped_nul_in_json_writes_nothing(gw, admin):
    for meta in ['{"data": "speci\\u0000al"}', '{"da\\u0000ta": 1}', '{"a": ["\\u0000"]}']:
        assert sql_error(sql_add, gw, "alice", "sql nul metadata", metadata=meta).sqlstate == "22P05", meta
    assert raw_counts(admin) == (0, 0)


def test_c08_escape_lookalikes_round_trip_as_text(alice):
    """Backslash sequences that merely look like NUL are ordinary text and come back unchanged."""
    for value in ["\\u0000", "\\x00", "\\0", "speci\\u0000al", "\\\\u0000", "%00"]:
        mid = alice.add(f"escape lookalike {value}", metadata={"data": value, value: 1}).id
        rec = alice.get(mid)
        assert rec.content == f"escape lookalike {value}"
        assert rec.metadata == {"data": value, value: 1}
        assert [r.id for r in alice.list(filter={"data": value}).items] == [mid], value


# --------------------------------------------------------------------------------------------------------
# C09: valid Unicode round-trips exactly; a lone surrogate is refused
# --------------------------------------------------------------------------------------------------------
UNICODE_TEXTS = [
    "👨\u200d👩\u200d👧",  # family: ZWJ sequence
    "👩🏽\u200d💻 codes",  # skin tone modifier + ZWJ
    "e\u0301",  # e + combining acute (NFD)
    "\u00e9",  # é precomposed (NFC): a different string, never normalised into the other
    "a\u0308\u0323\u0301 stacked",  # several combining marks
    "\U00020000\U0002a6d6 \U0002f800",  # 4-byte CJK (Extension B, compatibility supplement)
    "שלום עולם",  # Hebrew, right to left
    "مرحبا بالعالم 123",  # Arabic with digits
    "\u202eevil\u202c \u200fmark\u200e",  # bidi controls
    "🇺🇸🇯🇵 ❤\ufe0f",  # regional indicators, variation selector
    "\ufeffBOM first",  # byte order mark kept
    "\U0010fffd \U000e0001",  # plane 16 private use, tag character
]


def test_c09_unicode_round_trips_exactly(alice, admin):
    ids = {}
    for i, text in enumerate(UNICODE_TEXTS):
        r = alice.add(text, metadata={"text": text, text: i}, agent_id=text, session_id=text)
        assert r.created, text
        ids[text] = r.id
    assert len(set(ids.values())) == len(UNICODE_TEXTS)  # NFC and NFD forms are different memories
    for i, text in enumerate(UNICODE_TEXTS):
        rec = alice.get(ids[text])
        assert (rec.content, rec.metadata, rec.agent_id, rec.session_id) == (text, {"text": text, text: i}, text, text)
        assert [r.id for r in alice.list(filter={"text": text}).items] == [ids[text]], text
        assert [r.id for r in alice.list(session_id=text).items] == [ids[text]], text
        assert [r.id for r in alice.list(agent_id=text).items] == [ids[text]], text
        assert ids[text] in {r.id for r in alice.list(contains=text).items}, text
        assert alice.history(ids[text])[0].new_content == text
        raw, chars = admin.execute("SELECT convert_to(content, 'UTF8'), char_length(content) FROM pgmem.memories"
                                   " WHERE id = %s", [ids[text]]).fetchone()
        assert bytes(raw) == text.encode("utf-8")
        assert chars == len(text)
    hits = alice.search(UNICODE_TEXTS[0], k=len(UNICODE_TEXTS))
    assert {h.content for h in hits} == set(UNICODE_TEXTS)
    # The same text again is a duplicate only of the byte-identical string.
    again = alice.add("e\u0301")
    assert (again.id, again.created) == (ids["e\u0301"], False)
    # The precomposed form is found only by itself.
    assert [r.id for r in alice.list(contains="\u00e9").items] == [ids["\u00e9"]]


def test_c09_unicode_edit_is_exact(alice, gw):
    text = "👨\u200d👩\u200d👧 and e\u0301 and 𠀀"
    mid = alice.add(text).id
    assert alice.edit(mid, "e\u0301", "\u00e9").content == "👨\u200d👩\u200d👧 and \u00e9 and 𠀀"
    assert alice.edit(mid, "👩", "🧑").content == "👨\u200d🧑\u200d👧 and \u00e9 and 𠀀"
    assert alice.edit(mid, "𠀀", "\U0002a6d6").content == "👨\u200d🧑\u200d👧 and \u00e9 and \U0002a6d6"
    sid = sql_add(gw, "alice", "sql " + text)
    assert sql_edit(gw, "alice", sid, "👩", "🧑")[0] == "sql 👨\u200d🧑\u200d👧 and e\u0301 and 𠀀"


LONE_SURROGATES = ["\ud800", "a\udfffb", "\udc00\ud800", "ok \ud83d"]


def test_c09_lone_surrogate_is_refused(alice, admin):
    mid = alice.add("a clean memory").id
    before = raw_counts(admin)
    for surrogate in LONE_SURROGATES:
        calls = [
            (lambda: alice.add(surrogate), "content"),
            (lambda: alice.add("x", metadata={"k": surrogate}), "metadata"),
            (lambda: alice.add("x", metadata={surrogate: 1}), "metadata"),
            (lambda: alice.add("x", agent_id=surrogate), "agent_id"),
            (lambda: alice.add("x", session_id=surrogate), "session_id"),
            (lambda: alice.add_many(["x", surrogate]), "content"),
            (lambda: alice.update(mid, content=surrogate), "content"),
            (lambda: alice.update(mid, metadata={"k": [surrogate]}), "metadata"),
            (lambda: alice.edit(mid, "clean", surrogate), "new"),
            (lambda: alice.edit(mid, surrogate, "x"), "old"),
            (lambda: alice.search(surrogate), "query"),
            (lambda: alice.list(contains=surrogate), "contains"),
            (lambda: alice.list(filter={"k": surrogate}), "filter"),
            (lambda: alice.with_identity(user_id=surrogate), "user_id"),
        ]
        for call, field in calls:
            with pytest.raises(ValidationError) as info:
                call()
            assert info.value.field == field, (surrogate, field)
            assert "surrogate" in str(info.value), (surrogate, field)
    assert raw_counts(admin) == before
    assert alice.get(mid).version == 1
