"""Import speed without changing what an import does: each distinct text embedded once per batch, content
already stored skipped before anything is embedded (``pgmem.known_hashes``, one statement per user and
batch), the function's isolation, the extra vector kinds a client stores, and an error in the middle of a
file losing nothing.

Texts are invented for these tests; the counting embedder wraps the deterministic test embedder.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from conftest import connect

from pgmem import Memory, importer
from pgmem.validation import content_hash, extra_texts
from pgmem.errors import ValidationError
from pgmem.testing import HashEmbedder


class CountingEmbedder:
    """HashEmbedder(64) that records every text it is asked to embed, and every call."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(64)
        self.model_name, self.dims = self.inner.model_name, self.inner.dims
        self.texts: Counter[str] = Counter()
        self.calls = 0
        self.poison: str | None = None

    def embed(self, texts):
        self.calls += 1
        self.texts.update(texts)
        if self.poison and any(self.poison in t for t in texts):
            raise RuntimeError(f"cannot embed a text holding {self.poison}")
        return self.inner.embed(texts)

    def reset(self) -> None:
        self.texts.clear()
        self.calls = 0


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def snapshot(admin) -> list[tuple]:
    """Every memory (id, user, content, version, updated_at) and the number of extra vectors and history rows."""
    mems = admin.execute("SELECT id, user_id, content, version, updated_at, metadata FROM pgmem.memories"
                         " ORDER BY user_id, content").fetchall()
    return [mems, admin.execute("SELECT count(*) FROM pgmem.memory_vectors").fetchone()[0],
            admin.execute("SELECT count(*) FROM pgmem.history").fetchone()[0]]


# --------------------------------------------------------------------------------------------------------
# One embedding per distinct text
# --------------------------------------------------------------------------------------------------------
def test_add_many_embeds_each_distinct_text_once(make_memory, admin):
    emb = CountingEmbedder()
    alice = make_memory("alice", embedder=emb)
    # "Thanks. See you." splits into two sentences that also occur as contents and as sentences elsewhere.
    items = [{"content": "Thanks. See you.", "session_id": "s1"}, {"content": "Thanks.", "session_id": "s2"},
             {"content": "See you.", "session_id": "s3"}, {"content": "Bye. Thanks.", "session_id": "s4"}]
    emb.reset()
    results = alice.add_many(items)
    assert all(r.created for r in results)
    assert emb.calls == 1  # one batched call for contents and extra texts together
    assert max(emb.texts.values()) == 1, emb.texts  # no text twice
    assert set(emb.texts) == {"Thanks. See you.", "Thanks.", "See you.", "Bye. Thanks.", "Bye."}
    # Every memory still has its vectors: 2 sentences each for the two-sentence memories.
    assert admin.execute("SELECT count(*) FROM pgmem.memory_vectors WHERE kind = 'sentence'").fetchone()[0] == 4
    stored = dict(admin.execute("SELECT content, embedding::text FROM pgmem.memories").fetchall())
    expected = {t: HashEmbedder(64).embed([t])[0] for t in stored}
    for text, vec in stored.items():
        assert json.loads(vec) == pytest.approx(expected[text].tolist(), abs=1e-6)


def test_import_embeds_a_repeated_text_once_per_batch(make_memory, tmp_path):
    emb = CountingEmbedder()
    gateway = make_memory(None, embedder=emb)
    lines = [{"user": u, "content": text, "session": "s"} for u in ("alice", "bob")
             for text in ("I agree. Let us go.", "Let us go.", "I agree.")]
    summary = importer.import_file(gateway, write_jsonl(tmp_path / "a.jsonl", lines), batch_size=100)
    assert (summary.rows, summary.added, summary.duplicates, summary.failures) == (6, 6, 0, [])
    # contents, sentences and contexts of both users in one call; each distinct text once
    assert emb.calls == 1 and max(emb.texts.values()) == 1
    assert "I agree. Let us go.\nLet us go." in emb.texts  # the context of the second line


# --------------------------------------------------------------------------------------------------------
# Stored content skipped before embedding
# --------------------------------------------------------------------------------------------------------
def test_reimport_embeds_nothing_and_changes_nothing(make_memory, admin, tmp_path):
    emb = CountingEmbedder()
    gateway = make_memory(None, embedder=emb)
    lines = [{"user": f"u{i % 3}", "content": f"Note {i}. It has two sentences.", "session": f"s{i % 2}"}
             for i in range(30)]
    path = write_jsonl(tmp_path / "notes.jsonl", lines)
    first = importer.import_file(gateway, path, batch_size=8)
    assert (first.rows, first.added, first.duplicates) == (30, 30, 0)
    before = snapshot(admin)
    emb.reset()

    again = importer.import_file(gateway, path, batch_size=8)
    assert (again.rows, again.added, again.duplicates, again.failures) == (30, 0, 30, [])
    assert emb.calls == 0 and not emb.texts  # nothing embedded for content already stored
    assert snapshot(admin) == before  # same rows, ids, versions; no history event, no vector


def test_only_new_contents_of_a_batch_are_embedded(make_memory, admin, tmp_path):
    emb = CountingEmbedder()
    gateway = make_memory(None, embedder=emb)
    gateway.with_identity(user_id="alice").add("Alice keeps bees.")
    gateway.with_identity(user_id="bob").add("Bob sails.")
    emb.reset()
    lines = [{"user": "alice", "content": "Alice keeps bees."},  # stored: skipped
             {"user": "alice", "content": "Bob sails."},  # bob's text, new for alice
             {"user": "bob", "content": "Bob sails."},  # stored: skipped
             {"user": "bob", "content": "Bob sails."},  # earlier in this file
             {"user": "carol", "content": "Carol paints."}]
    summary = importer.import_file(gateway, write_jsonl(tmp_path / "mixed.jsonl", lines))
    assert (summary.rows, summary.added, summary.duplicates, summary.failures) == (5, 2, 3, [])
    assert emb.texts == Counter({"Bob sails.": 1, "Carol paints.": 1})
    assert admin.execute("SELECT user_id, content FROM pgmem.memories ORDER BY 1, 2").fetchall() == [
        ("alice", "Alice keeps bees."), ("alice", "Bob sails."), ("bob", "Bob sails."), ("carol", "Carol paints.")]


def test_known_check_is_one_statement_per_user_and_batch(make_memory, tmp_path, monkeypatch):
    gateway = make_memory(None)
    lines = [{"user": f"u{i % 2}", "content": f"line {i}"} for i in range(10)]
    path = write_jsonl(tmp_path / "x.jsonl", lines)
    importer.import_file(gateway, path, batch_size=5)
    calls = []
    real = Memory._rows

    def counting(self, name, *args, **kw):
        calls.append(name)
        return real(self, name, *args, **kw)

    monkeypatch.setattr(Memory, "_rows", counting)
    again = importer.import_file(gateway, path, batch_size=5)
    assert (again.added, again.duplicates) == (0, 10)
    # 2 batches x 2 users; no add_batch, no per-record list, no session_tail
    assert Counter(calls) == Counter({"known_hashes": 4})


def test_expired_and_superseded_contents_are_not_known(make_memory, admin):
    alice = make_memory("alice")
    old = alice.add("The office is on floor 2.")
    alice.supersede(old.id, "The office is on floor 5.")
    alice.add("Lunch is at noon.")
    gone = alice.add("The fire drill is today.")
    admin.execute("UPDATE pgmem.memories SET created_at = now() - interval '2 days',"
                  " expires_at = now() - interval '1 day' WHERE id = %s", [gone.id])
    asked = ["The office is on floor 2.", "The office is on floor 5.", "Lunch is at noon.",
             "The fire drill is today.", "Never said."]
    assert alice.known_contents(asked) == {"The office is on floor 5.", "Lunch is at noon."}
    # and add agrees: what is not known is stored again
    assert alice.add("The fire drill is today.").created
    assert not alice.add("Lunch is at noon.").created
    assert alice.known_contents([]) == set()
    with pytest.raises(ValidationError) as info:
        alice.known_contents(["fine", ""])
    assert info.value.index == 1
    with pytest.raises(ValidationError):
        alice.known_contents("not a list")


def test_known_contents_async(dsn, embedder):
    import asyncio

    from pgmem.aio import AsyncMemory

    async def main() -> set[str]:
        async with AsyncMemory(dsn, user_id="alice", space="t64", embedder=embedder, role="pgmem_gateway") as m:
            await m.add("Async note.")
            return await m.known_contents(["Async note.", "Other note."])

    assert asyncio.run(main()) == {"Async note."}


# --------------------------------------------------------------------------------------------------------
# pgmem.known_hashes: isolation and privileges
# --------------------------------------------------------------------------------------------------------
def test_known_hashes_reports_only_the_callers_hashes(admin, login_role, make_memory):
    make_memory("alice").add_many(["alice one", "shared text"])
    make_memory("bob").add_many(["bob secret", "shared text"])
    hashes = [content_hash(t) for t in ("alice one", "shared text", "bob secret", "nobody")]
    assert content_hash("alice one") == bytes(admin.execute("SELECT pgmem.content_hash('alice one')").fetchone()[0])

    agent = login_role("pgmem_agent")
    admin.execute("SELECT pgmem.bind_role(%s, 'alice')", [agent])
    with connect(admin, agent) as conn:
        got = {bytes(r[0]) for r in conn.execute("SELECT * FROM pgmem.known_hashes('t64', %s)", [hashes])}
        assert got == {content_hash("alice one"), content_hash("shared text")}  # never bob's "bob secret"
        # an agent login executes the function but cannot read the table behind it
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT content_hash FROM pgmem.memories")
    with connect(admin, login_role("pgmem_gateway")) as gw:
        with gw.transaction():
            gw.execute("SELECT pgmem.act_as('bob')")
            got = {bytes(r[0]) for r in gw.execute("SELECT * FROM pgmem.known_hashes('t64', %s)", [hashes])}
        assert got == {content_hash("bob secret"), content_hash("shared text")}
        with pytest.raises(psycopg.Error) as info:  # no identity: refused, not every user's hashes
            gw.execute("SELECT * FROM pgmem.known_hashes('t64', %s)", [hashes])
        assert info.value.sqlstate.startswith("PGM")
    # too many hashes: a clear error
    with connect(admin, agent) as conn, pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT * FROM pgmem.known_hashes('t64', %s)", [[b"x" * 32] * 10001])
    assert info.value.sqlstate == "PGM08"


# --------------------------------------------------------------------------------------------------------
# Which extra vectors a client stores
# --------------------------------------------------------------------------------------------------------
def test_vector_kinds_option(make_memory, admin):
    text = "First sentence. Second sentence."
    for kinds, expect in [(True, {"sentence": 2, "context": 1}), (("context",), {"context": 1}),
                          (["sentence"], {"sentence": 2}), (False, {})]:
        user = f"user-{'-'.join(sorted(expect)) or 'none'}"
        m = make_memory(user, contextual=kinds)
        m.add_many([{"content": "Opening line.", "session_id": "s"}, {"content": text, "session_id": "s"}])
        got = dict(admin.execute("SELECT kind, count(*) FROM pgmem.memory_vectors WHERE user_id = %s GROUP BY 1",
                                 [user]).fetchall())
        assert got == expect, kinds
        hits = m.search("second sentence", k=2)  # hybrid search works whichever kinds are stored
        assert hits and hits[0].content == text
    with pytest.raises(ValidationError):
        make_memory("x", contextual=("paragraph",))
    assert extra_texts("A. B.", None, "prev", kinds=("context",)) == [("context", "prev\nA. B.")]


# --------------------------------------------------------------------------------------------------------
# An error mid-file loses nothing
# --------------------------------------------------------------------------------------------------------
def test_error_in_the_middle_of_a_file_loses_nothing(make_memory, admin, tmp_path):
    emb = CountingEmbedder()
    emb.poison = "POISON"  # the embedder fails on any text holding it: a batch fails in the middle of a file
    gateway = make_memory(None, embedder=emb)
    lines: list = [{"user": "alice", "content": f"good line {i}", "session": "s"} for i in range(12)]
    lines[5] = {"user": "alice", "content": "a POISON line", "session": "s"}
    lines[7] = {"user": "alice", "content": "good line 3"}  # a duplicate within the file
    lines[9] = {"user": "alice", "content": "x" * 100_001}  # too long: refused
    path = tmp_path / "mid.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines[:10]) + "{broken\n"
                    + "".join(json.dumps(x) + "\n" for x in lines[10:]), encoding="utf-8")
    summary = importer.import_file(gateway, path, batch_size=4)
    assert summary.rows == 13 and summary.duplicates == 1
    reasons = {int(f.where.split()[1]): f.reason for f in summary.failures}
    assert sorted(reasons) == [6, 10, 11] and "POISON" in reasons[6]
    stored = {r[0] for r in admin.execute("SELECT content FROM pgmem.memories WHERE user_id = 'alice'")}
    assert stored == {f"good line {i}" for i in range(12) if i not in (5, 7, 9)}
    assert summary.added == len(stored) == 9
    # a second run finds all of them stored and embeds only the line that failed
    emb.reset()
    again = importer.import_file(gateway, path, batch_size=4)
    assert (again.added, again.duplicates) == (0, 10)
    assert emb.texts and all("POISON" in t for t in emb.texts)  # its content and its context only
    assert sorted(int(f.where.split()[1]) for f in again.failures) == [6, 10, 11]
