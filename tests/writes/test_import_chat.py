"""`pgmem import` as a new user meets it: chat exports (role/content messages, one per line or a
conversation per line), keys that are not imported reported, a misspelled content key named with its line,
content already stored skipped before anything is embedded, and a progress bar that moves while a batch
is embedded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pgmem import importer
from pgmem.cli import app
from pgmem.testing import HashEmbedder

runner = CliRunner()


class CountingEmbedder(HashEmbedder):
    """The test embedder, counting the texts it embeds."""

    def __init__(self, dims: int = 64) -> None:
        super().__init__(dims)
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


def write(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def rows(admin, user="alice"):
    return admin.execute("SELECT content, session_id, metadata FROM pgmem.memories WHERE user_id = %s "
                         "ORDER BY created_at, seq", [user]).fetchall()


def test_chat_messages_one_per_line_keep_their_role(make_memory, admin, tmp_path):
    m = make_memory(None)
    f = write(tmp_path / "chat.jsonl", [
        {"role": "user", "content": "I moved to Berlin last week"},
        {"role": "assistant", "content": "Congratulations on the move to Berlin!"},
        {"role": "user", "content": [{"type": "text", "text": "My sister lives there"},
                                     {"type": "image_url", "image_url": {"url": "x"}}]},
    ])
    s = importer.import_file(m, f, default_user="alice")
    assert (s.rows, s.added, s.failures, s.ignored) == (3, 3, [], {})
    assert [(c, meta) for c, _, meta in rows(admin)] == [
        ("I moved to Berlin last week", {"role": "user"}),
        ("Congratulations on the move to Berlin!", {"role": "assistant"}),
        ("My sister lives there", {"role": "user"})]


def test_a_conversation_per_line(make_memory, admin, tmp_path):
    m = make_memory(None)
    f = write(tmp_path / "convs.jsonl", [
        {"id": "conv-1", "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "I moved to Berlin"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "t1"}]},
            {"role": "assistant", "content": "Welcome to Berlin!"}]},
        {"user": "bob", "messages": [{"role": "user", "content": "Bob plays chess"}]},
    ])
    assert importer.count_records(f) == 5
    s = importer.import_file(m, f, default_user="alice")
    assert (s.rows, s.added, s.failures) == (4, 4, [])
    assert s.ignored == {"messages[].tool_calls": 1}  # a message's other keys: reported, not refused
    assert rows(admin) == [("You are helpful.", "conv-1", {"role": "system"}),
                           ("I moved to Berlin", "conv-1", {"role": "user"}),
                           ("Welcome to Berlin!", "conv-1", {"role": "assistant"})]
    assert rows(admin, "bob") == [("Bob plays chess", "convs.jsonl:2", {"role": "user"})]


ACCEPTED_LINE = ("content, user, user_id, agent, agent_id, session, session_id, metadata, timestamp, "
                 "created_at, role")
ACCEPTED_CHAT = ("messages, user, user_id, agent, agent_id, session, session_id, conversation_id, id, metadata, "
                 "timestamp, created_at")


def test_unknown_keys_refuse_their_line_naming_key_and_accepted_keys(make_memory, admin, tmp_path):
    """A misspelt or unknown key fails its line (nothing of it written), naming the key, a close accepted key
    and every accepted key: a line is imported whole or not at all."""
    m = make_memory(None)
    f = write(tmp_path / "m.jsonl", [
        {"content": "Alice likes tea", "sesion_id": "s1"},
        {"content": "Alice likes coffee", "metdata": {"topic": "coffee"}},
        {"content": "Alice likes juice", "topic": "drinks", "score": 3},
        {"contnet": "Alice likes coffee"},
        {"text": "Alice likes water"},
        {"metadata": {"a": 1}},
        {"content": "Alice likes milk", "session_id": "s2", "metadata": {"topic": "milk"}},
        {"session": "chat-1", "title": "Tea", "messages": [{"role": "user", "content": "I like tea"}]},
    ])
    s = importer.import_file(m, f, default_user="alice")
    assert (s.rows, s.added, s.ignored) == (8, 1, {})
    reasons = {f.where: f.reason for f in s.failures}
    assert reasons == {
        "line 1": f"unknown key 'sesion_id' (did you mean 'session_id'?); a line's keys are {ACCEPTED_LINE} "
                  "(other fields go in 'metadata')",
        "line 2": f"unknown key 'metdata' (did you mean 'metadata'?); a line's keys are {ACCEPTED_LINE} "
                  "(other fields go in 'metadata')",
        "line 3": f"unknown keys 'topic', 'score'; a line's keys are {ACCEPTED_LINE} (other fields go in 'metadata')",
        "line 4": "no 'content' key; found 'contnet': did you mean 'content'?",
        "line 5": "no 'content' key; found 'text': did you mean 'content'?",
        "line 6": "no 'content' key (keys: 'metadata')",
        "line 8": f"unknown key 'title'; a conversation line's keys are {ACCEPTED_CHAT} "
                  "(other fields go in 'metadata')",
    }
    assert rows(admin) == [("Alice likes milk", "s2", {"topic": "milk"})]


@pytest.fixture
def cli_home(monkeypatch):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")


def test_cli_reports_unknown_keys_as_failed_lines(dsn, cli_home, tmp_path, make_memory):
    make_memory("alice").space()
    f = write(tmp_path / "m.jsonl", [{"content": "Alice likes tea", "role": "user", "mood": "happy"},
                                     {"contnet": "typo"},
                                     {"content": "Alice likes figs", "role": "user"},
                                     {"messages": [{"role": "user", "content": "Hi", "name": "Al"}]}])
    res = runner.invoke(app, ["import", str(f), "--dsn", dsn, "--role", "pgmem_gateway", "--user", "alice",
                              "--space", "t64"])
    assert res.exit_code == 1, res.output  # lines 1 and 2 failed (the others meet a space of another model)
    assert "failed line 1: unknown key 'mood'; a line's keys are content, user, " in res.stdout
    assert "failed line 2: no 'content' key; found 'contnet': did you mean 'content'?" in res.stdout
    assert "ignored keys (not imported): messages[].name (1 line)" in res.stdout
    res = runner.invoke(app, ["import", str(f), "--dsn", dsn, "--role", "pgmem_gateway", "--user", "alice",
                              "--space", "t64", "--json"])
    doc = json.loads(res.stdout)
    assert doc["ignored"] == {"messages[].name": 1}
    assert [x["where"] for x in doc["failures"]][:2] == ["line 1", "line 2"]
    assert doc["failures"][0]["reason"].startswith("unknown key 'mood'; a line's keys are ")


def test_known_content_is_skipped_before_embedding(make_memory, tmp_path):
    emb = CountingEmbedder()
    m = make_memory(None, embedder=emb, contextual=False)
    lines = [{"user": u, "content": f"fact {i} of {u}"} for u in ("alice", "bob") for i in range(30)]
    f = write(tmp_path / "facts.jsonl", lines + lines[:5])  # five repeated inside the file
    first = importer.import_file(m, f)
    assert (first.added, first.duplicates) == (60, 5)
    assert emb.texts == 60  # the in-file repeats were not embedded
    emb.texts = 0
    again = importer.import_file(m, f)
    assert (again.added, again.duplicates, again.failures) == (0, 65, [])
    assert emb.texts == 0  # nothing embedded: every line was known
    more = write(tmp_path / "more.jsonl", lines[:3] + [{"user": "carol", "content": "fact of carol"}])
    third = importer.import_file(m, more)
    assert (third.added, third.duplicates) == (1, 3) and emb.texts == 1


def test_progress_moves_while_a_batch_is_embedded(make_memory, tmp_path):
    m = make_memory(None, embedder=CountingEmbedder())
    f = write(tmp_path / "many.jsonl", [{"user": "alice", "content": f"memory number {i}"} for i in range(100)])
    steps: list[float] = []
    s = importer.import_file(m, f, batch_size=256, progress=steps.append)
    assert s.added == 100
    assert sum(steps) == pytest.approx(100)
    assert len(steps) >= 5 and max(steps) <= 20  # many small steps, not one per batch of 256
