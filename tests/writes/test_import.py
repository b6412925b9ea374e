"""Bulk import (pgmem.importer, ``pgmem import``): JSONL and LoCoMo-shaped files written here, the summary
counts, failures named by line (or dia_id) with reasons, timestamps, duplicates on re-import, the context
vectors of imported conversations, and the command line run in-process.

The LoCoMo-shaped file below only has the shape of the LoCoMo dataset (Maharana et al., ACL 2024); its
people and turns were invented for this test.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from pgmem import importer
from pgmem.cli import app
from pgmem.errors import ValidationError

UTC = timezone.utc
runner = CliRunner()


def write_jsonl(path: Path, lines: list[object]) -> Path:
    """One line per item: a dict is dumped as JSON, a str is written as it is (bad lines, blank lines)."""
    path.write_text("\n".join(item if isinstance(item, str) else json.dumps(item) for item in lines) + "\n",
                    encoding="utf-8")
    return path


JSONL_LINES: list[object] = [
    {"user": "alice", "content": "Alice likes green tea.", "agent": "planner", "session": "s1",
     "metadata": {"topic": "tea", "n": 1}, "timestamp": "2024-03-01T10:00:00+02:00"},  # 1
    {"user_id": "alice", "content": "Alice walks at dawn.", "agent_id": "coach", "session_id": "s1",
     "timestamp": "2024-03-02T07:30:00"},  # 2: no zone, read as UTC
    "",  # 3: blank, skipped
    {"user": "alice", "content": "Alice likes green tea.", "agent": "planner", "session": "s1"},  # 4: duplicate of 1
    '{"user": "alice", "content": "broken',  # 5: not JSON
    {"user": "alice", "content": "o\u0000er credits"},  # 6: NUL in content
    {"content": "A memory that names no user."},  # 7: no user
    {"user": "bob", "content": "Bob's note.", "timestamp": "yesterday"},  # 8: bad timestamp
    {"user": "bob", "content": "Bob likes chess.", "timestamp": "2024-03-03T12:00:00Z"},  # 9
    "[1, 2]",  # 10: JSON, but not an object
    {"user": "alice", "content": "Metadata must be an object.", "metadata": ["x"]},  # 11
    {"user": "bob", "content": "Alice likes green tea."},  # 12: same text, another user: not a duplicate
]
BAD_LINES = {5: "not JSON", 6: "NUL", 7: "no user", 8: "ISO 8601", 10: "JSON object", 11: "metadata"}


def failures(summary) -> dict[int, str]:
    out = {}
    for f in summary.failures:
        assert f.where.startswith("line "), f
        out[int(f.where.split()[1])] = f.reason
    return out


@pytest.mark.parametrize("batch_size", [1, 256])
def test_jsonl_counts_failures_timestamps_and_fields(make_memory, tmp_path, batch_size):
    path = write_jsonl(tmp_path / "memories.jsonl", JSONL_LINES)
    gateway = make_memory(None)

    summary = importer.import_file(gateway, path, batch_size=batch_size)
    assert (summary.rows, summary.added, summary.duplicates) == (11, 4, 1)  # 12 lines, one blank
    reasons = failures(summary)
    assert set(reasons) == set(BAD_LINES)
    for line, word in BAD_LINES.items():
        assert word in reasons[line], (line, reasons[line])
    assert summary.seconds > 0 and summary.rows_per_second > 0

    alice = {r.content: r for r in gateway.with_identity(user_id="alice").list(limit=100).items}
    bob = {r.content: r for r in gateway.with_identity(user_id="bob").list(limit=100).items}
    assert set(alice) == {"Alice likes green tea.", "Alice walks at dawn."}
    assert set(bob) == {"Bob likes chess.", "Alice likes green tea."}
    tea, walk = alice["Alice likes green tea."], alice["Alice walks at dawn."]
    assert (tea.agent_id, tea.session_id, tea.metadata) == ("planner", "s1", {"topic": "tea", "n": 1})
    assert tea.created_at == datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
    assert (walk.agent_id, walk.session_id, walk.metadata) == ("coach", "s1", {})
    assert walk.created_at == datetime(2024, 3, 2, 7, 30, tzinfo=UTC)
    assert bob["Bob likes chess."].created_at == datetime(2024, 3, 3, 12, 0, tzinfo=UTC)
    assert bob["Bob likes chess."].agent_id is None and bob["Bob likes chess."].session_id is None

    # Again with a default user: the line without a user now goes to carol; the rest are duplicates.
    again = importer.import_file(gateway, path, default_user="carol", batch_size=batch_size)
    assert (again.rows, again.added, again.duplicates) == (11, 1, 5)
    assert set(failures(again)) == set(BAD_LINES) - {7}
    carol = gateway.with_identity(user_id="carol").list().items
    assert [r.content for r in carol] == ["A memory that names no user."]
    assert len(gateway.with_identity(user_id="alice").list().items) == 2


def test_jsonl_batches_span_users(make_memory, tmp_path, monkeypatch):
    """Records of many users share a batch: one add_batch statement for a batch, whatever users its records name
    (each written acting as its user, migration 0004), not one per run of records of the same user."""
    from pgmem import Memory

    lines = [{"user": f"user{i % 3}", "content": f"note {i} of user{i % 3}", "session": "s"} for i in range(12)]
    path = write_jsonl(tmp_path / "mixed.jsonl", lines)
    gateway = make_memory(None)
    calls = []
    real = Memory._rows

    def counting(self, name, *args, **kw):
        calls.append(name)
        return real(self, name, *args, **kw)

    monkeypatch.setattr(Memory, "_rows", counting)
    summary = importer.import_file(gateway, path, batch_size=5)
    assert (summary.rows, summary.added, summary.duplicates, summary.failures) == (12, 12, 0, [])
    assert calls.count("add_batch") == 3  # 12 records in batches of 5 (was 12: the users alternate)
    monkeypatch.undo()
    for u in range(3):
        got = gateway.with_identity(user_id=f"user{u}").list(limit=100).items
        assert sorted(r.content for r in got) == sorted(f"note {i} of user{u}" for i in range(u, 12, 3))
        assert all(r.user_id == f"user{u}" and r.session_id == "s" for r in got)


def test_conflicting_aliases_fail_their_line_naming_both(make_memory, admin, tmp_path):
    """Two names of one field (user/user_id, agent/agent_id, session/session_id, a conversation's
    session/session_id/conversation_id/id, timestamp/created_at) with different values fail the line, naming
    both keys and values; the same value under both is accepted."""
    msg = {"role": "user", "content": "a message"}
    path = write_jsonl(tmp_path / "aliases.jsonl", [
        {"user": "alice", "user_id": "bob", "content": "Line one."},  # 1
        {"user": "alice", "agent": "planner", "agent_id": "coach", "content": "Line two."},  # 2
        {"user": "alice", "session": "s1", "session_id": "s2", "content": "Line three."},  # 3
        {"user": "alice", "timestamp": "2024-03-01T10:00:00Z", "created_at": "2024-03-02T10:00:00Z",
         "content": "Line four."},  # 4
        {"user": "alice", "session": "s1", "conversation_id": "c9", "messages": [msg]},  # 5
        {"user": "alice", "messages": [{**msg, "timestamp": "2024-03-01T10:00:00Z",
                                        "created_at": "2024-03-05T10:00:00Z"}]},  # 6
        {"user": "alice", "user_id": "alice", "agent": "planner", "agent_id": "planner", "session": "s1",
         "session_id": "s1", "timestamp": "2024-03-01T10:00:00Z", "created_at": "2024-03-01T12:00:00+02:00",
         "content": "Line seven: the same values twice."},  # 7
        {"user_id": None, "user": "alice", "id": 8, "conversation_id": "8", "messages": [msg]},  # 8: null is absent
    ])
    summary = importer.import_file(make_memory(None), path)
    assert {f.where: f.reason for f in summary.failures} == {
        "line 1": "'user' is 'alice' but 'user_id' is 'bob': give one of them",
        "line 2": "'agent' is 'planner' but 'agent_id' is 'coach': give one of them",
        "line 3": "'session' is 's1' but 'session_id' is 's2': give one of them",
        "line 4": "'timestamp' is '2024-03-01T10:00:00Z' but 'created_at' is '2024-03-02T10:00:00Z': give one of them",
        "line 5": "'session' is 's1' but 'conversation_id' is 'c9': give one of them",
        "line 6 message 1": "'timestamp' is '2024-03-01T10:00:00Z' but 'created_at' is '2024-03-05T10:00:00Z': "
                            "give one of them",
    }
    assert (summary.rows, summary.added) == (8, 2)
    assert admin.execute("SELECT content, agent_id, session_id, created_at FROM pgmem.memories "
                         "ORDER BY created_at").fetchall()[:1] == [
        ("Line seven: the same values twice.", "planner", "s1", datetime(2024, 3, 1, 10, 0, tzinfo=UTC))]
    assert admin.execute("SELECT session_id FROM pgmem.memories WHERE content = 'a message'").fetchall() == [("8",)]


# --------------------------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------------------------
def turn(speaker: str, dia_id: str, text: str, **extra) -> dict:
    return {"speaker": speaker, "dia_id": dia_id, "text": text, **extra}


LOCOMO = [
    {"sample_id": "conv-x1",
     "conversation": {
         "speaker_a": "Iris", "speaker_b": "Tomas",
         "session_1_date_time": "1:56 pm on 8 May, 2023",
         "session_1": [
             turn("Iris", "D1:1", "I started pottery classes last week."),
             turn("Tomas", "D1:2", "That sounds fun! What did you make?"),
             turn("Iris", "D1:3", "A lopsided bowl. Look at it!", img_url=["https://example.invalid/bowl.jpg"],
                  blip_caption="a photo of a clay bowl on a wooden table"),
         ],
         "session_2_date_time": "10:05 am on 17 June, 2023",
         "session_2": [
             turn("Tomas", "D2:1", "How is the pottery going?"),
             turn("Iris", "D2:2", "Better, I glazed a mug in blue."),
             turn("Tomas", "D2:3", "A broken \u0000 turn."),  # cannot be stored: reported, not dropped silently
         ]},
     "qa": [{"question": "What did Iris make first?", "answer": "a bowl", "evidence": ["D1:3"], "category": 1}],
     "event_summary": {}, "observation": {}, "session_summary": {}},
    {"sample_id": "conv-x2",
     "conversation": {
         "speaker_a": "Noor", "speaker_b": "Pavel",
         "session_1_date_time": "12:30 am on 1 January, 2024",
         "session_1": [
             turn("Noor", "D1:1", "Happy new year! The fireworks were loud."),
             turn("Pavel", "D1:2", "My dog hid under the bed all night."),
         ],
         "session_2_date_time": "12:05 pm on 29 February, 2024",
         "session_2": [
             turn("Noor", "D2:1", "A leap day hike sounds good to me."),
             turn("Pavel", "D2:2", "Count me in, I will bring snacks."),
             turn("Noor", "D2:3", "Great, see you at the trailhead."),
         ]}},
]
STORED = {"conv-x1": 5, "conv-x2": 5}  # turns that can be stored, per user
SESSIONS = {"conv-x1": 2, "conv-x2": 2}


def context_vectors(admin, user: str) -> list[tuple[str, np.ndarray]]:
    """(content, context vector) of each memory of ``user`` that has one."""
    rows = admin.execute("SELECT m.content, v.embedding::real[] FROM pgmem.memory_vectors v"
                         " JOIN pgmem.memories m ON m.user_id = v.user_id AND m.id = v.memory_id"
                         " WHERE v.user_id = %s AND v.kind = 'context'", [user]).fetchall()
    return [(c, np.asarray(e, dtype=np.float32)) for c, e in rows]


def test_locomo_one_memory_per_turn_with_context_and_idempotent(make_memory, admin, embedder, tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(LOCOMO), encoding="utf-8")
    assert importer.detect_format(path) == "locomo"
    assert importer.count_records(path) == 11
    gateway = make_memory(None)

    summary = importer.import_file(gateway, path)
    assert (summary.rows, summary.added, summary.duplicates) == (11, 10, 0)
    assert [(f.where, "NUL" in f.reason) for f in summary.failures] == [("conv-x1 D2:3", True)]

    x1 = {r.metadata["dia_id"]: r for r in gateway.with_identity(user_id="conv-x1").list(limit=100).items}
    x2 = {r.metadata["dia_id"]: r for r in gateway.with_identity(user_id="conv-x2").list(limit=100).items}
    assert set(x1) == {"D1:1", "D1:2", "D1:3", "D2:1", "D2:2"}
    assert set(x2) == {"D1:1", "D1:2", "D2:1", "D2:2", "D2:3"}
    first = x1["D1:1"]
    assert first.content == "Iris: I started pottery classes last week."
    assert first.session_id == "session_1" and first.agent_id == "locomo-import"
    assert first.metadata == {"speaker": "Iris", "dia_id": "D1:1", "turn": 0, "session_date": "1:56 pm on 8 May, 2023"}
    assert first.created_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert x1["D1:3"].content == ("Iris: A lopsided bowl. Look at it! "
                                  "[shares a photo: a photo of a clay bowl on a wooden table]")
    assert x1["D1:3"].metadata["turn"] == 2
    assert x1["D2:2"].session_id == "session_2" and x1["D2:2"].created_at == datetime(2023, 6, 17, 10, 5, tzinfo=UTC)
    assert x2["D1:2"].created_at == datetime(2024, 1, 1, 0, 30, tzinfo=UTC)  # 12:30 am
    assert x2["D2:3"].created_at == datetime(2024, 2, 29, 12, 5, tzinfo=UTC)  # 12:05 pm
    assert x2["D2:3"].metadata["turn"] == 2 and x2["D2:3"].content == "Noor: Great, see you at the trailhead."

    # One context vector per turn that follows another turn of its session, of the previous turn + this one.
    for user in STORED:
        assert len(context_vectors(admin, user)) == STORED[user] - SESSIONS[user]
    ctx = dict(context_vectors(admin, "conv-x1"))
    expected = embedder.embed(["Iris: I started pottery classes last week.\nTomas: That sounds fun! What did you make?"])[0]
    assert np.allclose(ctx[x1["D1:2"].content], expected, atol=1e-6)
    assert x1["D2:1"].content not in ctx and x2["D1:1"].content not in ctx  # first turns of their sessions
    assert np.allclose(dict(context_vectors(admin, "conv-x2"))[x2["D2:2"].content], embedder.embed(
        ["Noor: A leap day hike sounds good to me.\nPavel: Count me in, I will bring snacks."])[0], atol=1e-6)
    vectors_before = admin.execute("SELECT count(*) FROM pgmem.memory_vectors").fetchone()[0]

    again = importer.import_file(gateway, path)
    assert (again.rows, again.added, again.duplicates) == (11, 0, 10)
    assert [f.where for f in again.failures] == ["conv-x1 D2:3"]
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 10
    assert admin.execute("SELECT count(*) FROM pgmem.memory_vectors").fetchone()[0] == vectors_before


def test_locomo_turns_that_are_not_objects_are_reported(make_memory, tmp_path):
    data = [{"sample_id": "conv-y", "conversation": {
        "session_1_date_time": "3:00 pm on 2 March, 2023",
        "session_1": [turn("Ada", "D1:1", "A fine turn."), "just a string", turn("Bo", "D1:3", "Another fine turn.")]}}]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    gateway = make_memory(None)
    summary = importer.import_file(gateway, path)
    assert (summary.rows, summary.added) == (3, 2)
    assert [f.where for f in summary.failures] == ["conv-y session_1[1]"]


def test_locomo_session_without_a_readable_date_is_refused_turn_by_turn(make_memory, admin, tmp_path):
    """A session whose date cannot be read fails each of its turns, naming the session and the value (was:
    stored with created_at = the time of the import); the other sessions are imported."""
    data = [{"sample_id": "conv-z", "conversation": {
        "session_1_date_time": "not a date",
        "session_1": [turn("Ada", "D1:1", "A turn of an undated session."), turn("Bo", "D1:2", "Another one.")],
        "session_2": [turn("Ada", "D2:1", "A session with no date at all.")],
        "session_3_date_time": "3:00 pm on 2 March, 2023",
        "session_3": [turn("Bo", "D3:1", "A dated turn.")]}}]
    path = tmp_path / "undated.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    summary = importer.import_file(make_memory(None), path)
    assert (summary.rows, summary.added) == (4, 1)
    bad = "session_1_date_time 'not a date' is not a LoCoMo date and time such as '1:56 pm on 8 May, 2023'"
    assert {f.where: f.reason for f in summary.failures} == {
        "conv-z D1:1": bad, "conv-z D1:2": bad,
        "conv-z D2:1": "session_2 has no session_2_date_time (a LoCoMo date and time such as '1:56 pm on 8 May, 2023')"}
    assert admin.execute("SELECT content, created_at FROM pgmem.memories").fetchall() == [
        ("Bo: A dated turn.", datetime(2023, 3, 2, 15, 0, tzinfo=UTC))]


def test_locomo_turn_needs_a_speaker_and_text_or_a_photo(make_memory, admin, tmp_path):
    """A turn with a photo caption but no text is stored (the caption is what it says); a turn with neither
    text nor caption, with text that is not a string, or with no speaker fails, named by its dia_id (was:
    stored as "Ada:", "Ada: 42" or ": text")."""
    data = [{"sample_id": "conv-p", "conversation": {
        "session_1_date_time": "3:00 pm on 2 March, 2023",
        "session_1": [
            turn("Ada", "D1:1", "", img_url=["https://example.invalid/cat.jpg"], blip_caption="a cat on a sofa"),
            {"speaker": "Bo", "dia_id": "D1:2", "blip_caption": "a red bicycle"},  # no text key at all
            turn("Ada", "D1:3", ""),
            turn("Bo", "D1:4", "   ", blip_caption=""),
            {"speaker": "Ada", "dia_id": "D1:5"},
            turn("Bo", "D1:6", 42),
            turn("", "D1:7", "Who said this?"),
            {"dia_id": "D1:8", "text": "Nobody said this."},
        ]}}]
    path = tmp_path / "photos.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    summary = importer.import_file(make_memory(None), path)
    assert (summary.rows, summary.added) == (8, 2)
    nothing = "the turn has no text and no photo caption: nothing to store"
    assert {f.where: f.reason for f in summary.failures} == {
        "conv-p D1:3": nothing, "conv-p D1:4": nothing, "conv-p D1:5": nothing,
        "conv-p D1:6": "the turn's text must be a string, got int",
        "conv-p D1:7": "the turn has no speaker", "conv-p D1:8": "the turn has no speaker"}
    assert sorted(r[0] for r in admin.execute("SELECT content FROM pgmem.memories").fetchall()) == [
        "Ada: [shares a photo: a cat on a sofa]", "Bo: [shares a photo: a red bicycle]"]


@pytest.mark.parametrize("text, expected", [
    ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
    ("12:00 am on 1 January, 2024", datetime(2024, 1, 1, 0, 0, tzinfo=UTC)),
    ("12:30 pm on 1 January, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
    ("  9:05 AM on 17 June 2023 ", datetime(2023, 6, 17, 9, 5, tzinfo=UTC)),
    ("", None), (None, None), (123, None), ("8 May, 2023", None), ("1:56 pm", None),
    ("1:56 pm on 8 Mayo, 2023", None), ("1:56 pm on 8 Sept, 2023", None),
    ("1:56 pm on 31 February, 2023", None), ("1:56 pm on 29 February, 2023", None), ("1:61 pm on 8 May, 2023", None),
    ("13:56 pm on 8 May, 2023", None), ("0:30 am on 8 May, 2023", None), ("1:56 on 8 May, 2023", None),
    ("1:56 pm on 8 May, 2023 extra", None),
])
def test_parse_locomo_date(text, expected):
    assert importer.parse_locomo_date(text) == expected


# --------------------------------------------------------------------------------------------------------
# The command line, in-process, with the default embedder (MiniLM)
# --------------------------------------------------------------------------------------------------------
@pytest.fixture
def cli(dsn, monkeypatch):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str):
        return runner.invoke(app, ["import", *args, "--dsn", dsn, "--role", "pgmem_gateway"])

    return run


def test_cli_import_clean_file_then_bad_lines(cli, tmp_path, make_memory):
    clean = write_jsonl(tmp_path / "clean.jsonl", [
        {"user": "alice", "content": "Alice likes green tea.", "timestamp": "2024-03-01T10:00:00Z"},
        {"user": "bob", "content": "Bob plays chess on Sundays."},
        {"content": "Carol's line names no user."},
    ])
    result = cli(str(clean), "--json", "--user", "carol")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)
    assert set(doc) == {"rows", "added", "duplicates", "failures", "ignored", "seconds", "rows_per_second"}
    assert doc["ignored"] == {}
    assert (doc["rows"], doc["added"], doc["duplicates"], doc["failures"]) == (3, 3, 0, [])
    assert doc["seconds"] > 0 and doc["rows_per_second"] > 0

    bad = write_jsonl(tmp_path / "bad.jsonl", [
        {"user": "alice", "content": "Alice likes green tea."},  # a duplicate now
        "not json at all",
        {"user": "alice", "content": "Alice also likes oolong."},
        {"content": "no user and no default"},
    ])
    result = cli(str(bad), "--json")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    doc = json.loads(result.stdout)
    assert (doc["rows"], doc["added"], doc["duplicates"]) == (4, 1, 1)
    assert [f["where"] for f in doc["failures"]] == ["line 2", "line 4"]
    assert "not JSON" in doc["failures"][0]["reason"] and "no user" in doc["failures"][1]["reason"]

    result = cli(str(bad))  # readable: the summary and each failure with its reason
    assert result.exit_code == 1
    assert "4 rows in" in result.stdout and "0 added, 2 duplicates skipped, 2 failed" in result.stdout
    assert "failed line 2: not JSON" in result.stdout and "failed line 4: no user" in result.stdout

    found = make_memory("alice", embedder=None, space="default").search("oolong tea", k=5, mode="text")
    assert [r.content for r in found][:1] == ["Alice also likes oolong."]


# --------------------------------------------------------------------------------------------------------
# Files of the wrong format: refused whole, before anything is written, with `error:` and no traceback
# --------------------------------------------------------------------------------------------------------
def refused(result) -> str:
    """A clean refusal: exit 1, `error:` first on stderr, no traceback, no progress bar; returns stderr."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output and "importing" not in result.output
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr


def memory_count(admin) -> int:
    return admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0]


def test_jsonl_refuses_a_pgmem_export_before_writing(make_memory, admin, cli, tmp_path):
    alice = make_memory("alice")
    old = alice.add("Alice lives in Lisbon")
    alice.supersede(old.id, "Alice lives in Porto")
    alice.append_turn("s1", "user", "I moved to Porto")
    export = tmp_path / "alice-export.jsonl"
    export.write_text("".join(json.dumps(row, default=str) + "\n" for row in alice.export()), encoding="utf-8")
    before = (memory_count(admin), admin.execute("SELECT count(*) FROM pgmem.turns").fetchone()[0])
    expected = (f'{export} is a pgmem export (line 1 has "kind"); import it without --format, '
                "or with --format export")

    with pytest.raises(ValidationError) as info:
        importer.import_file(make_memory(None), export, fmt="jsonl", default_user="carol")
    assert str(info.value) == expected
    err = refused(cli(str(export), "--format", "jsonl", "--user", "carol"))
    assert err == f"error: {expected}\n"
    assert (memory_count(admin), admin.execute("SELECT count(*) FROM pgmem.turns").fetchone()[0]) == before

    # a "kind" line after valid ones: found before the first batch is written, even one record per batch
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [
        {"user": "dave", "content": "Dave likes figs."}, "", {"user": "dave", "content": "Dave likes dates."},
        {"kind": "memory", "user_id": "alice", "content": "Alice lives in Porto"}])
    with pytest.raises(ValidationError, match=r'\(line 4 has "kind"\)'):
        importer.import_file(make_memory(None), mixed, batch_size=1)
    assert 'line 4 has "kind"' in refused(cli(str(mixed), "--user", "dave"))
    assert memory_count(admin) == before[0]


def test_unknown_format_is_refused_before_counting(make_memory, cli, tmp_path):
    path = write_jsonl(tmp_path / "m.csv", [{"user": "alice", "content": "Alice likes tea."}])
    with pytest.raises(ValidationError, match="unknown format 'csv': use 'jsonl', 'locomo' or 'export'"):
        importer.import_file(make_memory(None), path, fmt="csv")
    with pytest.raises(ValidationError, match="unknown format 'csv'"):
        importer.count_records(path, "csv")
    err = refused(cli(str(path), "--format", "csv"))
    assert "unknown format 'csv': use 'jsonl', 'locomo' or 'export'" in err
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe" * 10)
    assert "unknown format 'csv'" in refused(cli(str(binary), "--format", "csv"))  # the format, not the bytes


@pytest.mark.parametrize("text, fmt, reason", [
    ('{"user": "alice", "content": "a JSONL line"}\n{"user": "alice", "content": "another"}\n', "locomo",
     "is not a LoCoMo JSON file: not JSON: Extra data at line 2 column 1"),
    ("", "locomo", "is not a LoCoMo JSON file: the file is empty"),
    ('{"sample_id": "conv-1"}', "locomo", "is not a LoCoMo JSON file: not a JSON list of samples"),
    ("[1, 2]", None, "is not a LoCoMo JSON file: sample 1 is not an object with sample_id and conversation"),
    ('[{"sample_id": "c1", "conversation": {}}, {"conversation": {}}]', None,
     "is not a LoCoMo JSON file: sample 2 is not an object with sample_id and conversation"),
    ("[1, 2", None, "is not a LoCoMo JSON file: not JSON: Expecting"),
])
def test_locomo_format_errors_are_clean(make_memory, cli, tmp_path, text, fmt, reason):
    path = tmp_path / "data.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValidationError) as info:
        importer.import_file(make_memory(None), path, fmt=fmt)
    assert str(path) + " " + reason in info.value.message
    with pytest.raises(ValidationError):
        importer.count_records(path, fmt)
    err = refused(cli(str(path), *(["--format", fmt] if fmt else [])))
    assert f"error: {path} {reason}" in err
    # the hint suits the way the format was chosen
    if fmt:
        assert "hint: omit --format to detect the format" in err
    else:
        assert "hint:" in err and "--format" not in err


def test_undecodable_and_empty_files(make_memory, cli, tmp_path):
    binary = tmp_path / "memories.jsonl"
    binary.write_bytes(b'{"user": "alice", "content": "fine"}\n' + b"\xff\xfe\x00 not utf-8\n")
    gateway = make_memory(None)
    for fmt in (None, "jsonl", "locomo", "export"):
        args = ["--format", fmt] if fmt else []
        assert "is not UTF-8 text" in refused(cli(str(binary), "--user", "alice", *args)), fmt
    with pytest.raises(ValidationError, match="is not UTF-8 text"):
        importer.import_file(gateway, binary)
    assert gateway.with_identity(user_id="alice").list().items == []  # the good first line was not written

    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    result = cli(str(empty), "--json", "--user", "alice")  # nothing to import is not an error
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert json.loads(result.stdout)["rows"] == 0
    assert "holds no rows" in refused(cli(str(empty), "--format", "export", "--user", "alice"))
