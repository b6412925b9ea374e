"""The lifecycle commands of the pgmem CLI (retention, purge, erase, export / import of an export, turns,
context), run in-process with typer's CliRunner against this test's database. The default embedder is replaced
by the deterministic HashEmbedder in space 't64', so no model is loaded; data is set up through Memory."""

from __future__ import annotations

import json
import stat
from datetime import datetime, timedelta, timezone

import pytest
from typer.testing import CliRunner

import pgmem.requests
from pgmem.cli import app
from pgmem.maintenance import vacuum_tables
from pgmem.journal import Journal
from pgmem.testing import HashEmbedder

from conftest import dsn_for
from test_cli import doc, failed, ok  # the same clean-exit checks as the other CLI tests

runner = CliRunner()
PAST = datetime.now(timezone.utc) - timedelta(days=30)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE", "PGMEM_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PGMEM_JOURNAL_DIR", str(tmp_path / "journal"))  # never the real per-user directory
    monkeypatch.setattr(pgmem.requests, "default_embedder", lambda: HashEmbedder(64))


@pytest.fixture
def cli(dsn):
    """cli(*args, user="alice", as_json=False, input=None, role=True) -> Result, with --dsn, --space t64 and
    (role=True) --role pgmem_gateway after the command; role=False runs as the login role (a superuser)."""

    def run(*args: str, user: str | None = "alice", as_json: bool = False, input: str | None = None,
            role: bool = True, space: bool = True):
        argv = list(args) + ["--dsn", dsn] + (["--role", "pgmem_gateway"] if role else [])
        if space:
            argv += ["--space", "t64"]
        if user is not None:
            argv += ["--user", user]
        if as_json:
            argv.append("--json")
        return runner.invoke(app, argv, input=input)

    return run




def user_rows(admin, user: str) -> dict[str, int]:
    """Rows of ``user`` in every pgmem table with a user_id column, read past RLS."""
    tables = [r[0] for r in admin.execute(
        """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
           WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p') ORDER BY 1""").fetchall()]
    return {t: admin.execute(f"SELECT count(*) FROM pgmem.{t} WHERE user_id = %s", [user]).fetchone()[0]
            for t in tables}


def test_retention_shows_sets_and_refuses_bad_durations(cli, alice):
    alice.space()  # the space t64 exists
    shown = doc(cli("retention", user=None, as_json=True))
    assert shown == {"space": "t64", "memory_ttl": "none", "memory_ttl_seconds": None,
                     "turn_ttl": "1w", "turn_ttl_seconds": 7 * 86400}
    set_ = doc(cli("retention", "--memory-ttl", "30d", "--turn-ttl", "12h", user=None, as_json=True))
    assert (set_["memory_ttl"], set_["memory_ttl_seconds"]) == ("30d", 30 * 86400)
    assert (set_["turn_ttl"], set_["turn_ttl_seconds"]) == ("12h", 12 * 3600)
    # one option leaves the other unchanged
    assert doc(cli("retention", "--turn-ttl", "90m", user=None, as_json=True))["memory_ttl"] == "30d"
    out = ok(cli("retention", "--memory-ttl", "none", user=None))
    assert "until deleted" in out and "90m" in out
    assert alice.get_space().memory_ttl is None

    for value in ("30x", "d30", "1.5h", "", "-3d"):
        err = failed(cli("retention", "--memory-ttl", value, user=None))
        assert "is not a duration" in err and "hint:" in err and "none" in err, value
    assert "must be positive" in failed(cli("retention", "--turn-ttl", "0s", user=None))
    assert "is too long: at most 999,999,999 days" in failed(cli("retention", "--memory-ttl", "99999999999d", user=None))
    assert "is not a duration" in failed(cli("retention", "--turn-ttl", "none", user=None))
    assert 'space "nope" does not exist' in failed(cli("retention", "--space", "nope", user=None, space=False))


def test_purge_counts_rounds_and_needs_a_maintainer(cli, alice, bob, admin):
    alice.set_retention(timedelta(days=1))
    alice.add_many([{"content": f"old fact {i}", "created_at": PAST} for i in range(3)])
    alice.add("a fresh fact")
    alice.append_turn("s1", "user", "an old turn", created_at=PAST)
    alice.append_turn("s1", "user", "a new turn")
    bob.add_many([{"content": "bob's old fact", "created_at": PAST}])
    assert [r.content for r in alice.list().items] == ["a fresh fact"]  # expired ones are invisible already

    err = failed(cli("purge", space=False, user=None))  # the gateway role sees one user at a time: refused
    assert "may not purge expired rows" in err and "BYPASSRLS" in err

    once = doc(cli("purge", "--limit", "2", "--once", space=False, user=None, role=False, as_json=True))
    assert once == {"memories": 2, "turns": 1, "history": 2, "rounds": 1}
    rest = doc(cli("purge", "--limit", "2", space=False, user=None, role=False, as_json=True))
    assert rest == {"memories": 2, "turns": 0, "history": 2, "rounds": 2}
    out = ok(cli("purge", space=False, user=None, role=False))
    assert "purged in 1 round" in out and "memories" in out and "history events" in out

    assert admin.execute("SELECT user_id, content FROM pgmem.memories ORDER BY 1").fetchall() == \
        [("alice", "a fresh fact")]
    assert admin.execute("SELECT content FROM pgmem.turns").fetchall() == [("a new turn",)]
    events = admin.execute("SELECT event, count(*) FROM pgmem.history GROUP BY 1 ORDER BY 1").fetchall()
    assert events == [("ADD", 1), ("EXPIRE", 4)]  # tombstones only, no old content


def test_erase_with_export_and_journal(cli, alice, bob, admin, tmp_path):
    old = alice.add("Alice lives in Lisbon", metadata={"k": 1})
    alice.supersede(old.id, "Alice lives in Porto")
    alice.append_turn("s1", "user", "remember that I moved")
    alice.consolidate("s1", lambda turns: ["Alice moved to Porto"])
    bob.add("Bob lives in Faro")
    jdir = tmp_path / "journal"
    j = Journal("w", jdir)
    j.append([{"id": "1", "user_id": "alice", "content": "pending of alice"},
              {"id": "2", "user_id": "bob", "content": "pending of bob"}])
    j.close()
    before = user_rows(admin, "alice")
    assert before["memories"] == 3 and before["turns"] == 1 and before["memory_sources"] == 1

    # no --yes: asks, and a no erases nothing
    no = cli("erase", "alice", space=False, user=None, role=False, input="n\n")
    assert no.exit_code == 1 and no.stdout.strip() == "n", (no.stdout, no.stderr)  # CliRunner echoes the input
    assert no.stderr.startswith("Erase everything pgmem holds of user 'alice'?")  # the prompt, on stderr
    assert "error: nothing erased: not confirmed" in no.stderr and "Traceback" not in no.output
    assert user_rows(admin, "alice") == before
    # the gateway role may not erase
    assert "may not erase a user" in failed(cli("erase", "alice", "--yes", space=False, user=None))

    export = tmp_path / "alice.jsonl"
    res = doc(cli("erase", "alice", "--yes", "--export", str(export), "--journal-dir", str(jdir),
                  space=False, user=None, role=False, as_json=True))
    assert res["user"] == "alice" and res["tables"]["memories"] == 3 and res["tables"]["turns"] == 1
    assert res["export"]["path"] == str(export) and res["export"]["memory"] == 3 and res["export"]["turn"] == 1
    assert res["journals"] == {str(jdir / "w.jsonl"): 1}
    assert "memories" in res["vacuumed"] and res["notes"] == []

    assert set(user_rows(admin, "alice").values()) == {0}
    assert user_rows(admin, "bob")["memories"] == 1
    assert b"alice" not in (jdir / "w.jsonl").read_bytes() and b"pending of bob" in (jdir / "w.jsonl").read_bytes()
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    assert len(lines) == res["export"]["rows"] and {r["user_id"] for r in lines} == {"alice"}
    assert "Alice lives in Lisbon" in {r.get("content") for r in lines}
    assert stat.S_IMODE(export.stat().st_mode) == 0o600
    assert alice.list().items == [] and alice.search("where does Alice live") == []

    # readable output, and erasing again is harmless
    out = ok(cli("erase", "alice", "--no-journal", space=False, user=None, role=False, input="y\n"))
    assert "erased user alice" in out and "memories" in out and "journals" not in out


def test_export_then_import_round_trip(cli, alice, tmp_path):
    a = alice.add("Alice's bike is blue", metadata={"colour": "blue"})
    alice.supersede(a.id, "Alice's bike is red")
    alice.append_turn("s1", "user", "my bike is red now")

    out = ok(cli("export", space=False))
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted({r["kind"] for r in rows}) == ["history", "memory", "turn"]
    assert all(len(r["embedding"]) == 64 for r in rows if r["kind"] == "memory")
    assert "exported" in cli("export", space=False).stderr
    path = tmp_path / "export.jsonl"
    assert "to " + str(path) in ok(cli("export", "--out", str(path), space=False))
    assert [json.loads(line) for line in path.read_text().splitlines()] == rows

    counts = doc(cli("import", str(path), user="carol", as_json=True))
    assert counts == {"user": "carol", "memory": {"imported": 2, "skipped": 0},
                      "turn": {"imported": 1, "skipped": 0}, "history": {"imported": 0, "skipped": 3}}
    carol = alice.with_identity(user_id="carol")
    assert [r.content for r in carol.list().items] == ["Alice's bike is red"]
    assert [r.content for r in carol.chain(a.id)] == ["Alice's bike is blue", "Alice's bike is red"]
    assert [t.content for t in carol.recent_turns("s1")] == ["my bike is red now"]

    # without --user: the user the export names; everything is there already, so it is skipped
    again = ok(cli("import", str(path), user=None))
    assert "imported into user alice" in again
    assert doc(cli("import", str(path), user=None, as_json=True))["memory"] == {"imported": 0, "skipped": 2}

    bare = tmp_path / "bare.jsonl"
    bare.write_text(ok(cli("export", "--no-embeddings", space=False)))
    assert "has no embedding" in failed(cli("import", str(bare), user="dave"))
    assert carol.with_identity(user_id="dave").list().items == []
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(path.read_text() + "{oops\n")
    assert "line " in failed(cli("import", str(damaged), user="erin"))


def test_turns_and_context_within_budget(cli, alice):
    alice.add("Alice is allergic to peanuts")
    alice.add("Alice's favourite colour is green")
    for i in range(6):
        alice.append_turn("s1", "user" if i % 2 == 0 else "assistant", f"turn number {i} about snacks and lunch")

    table = ok(cli("turns", "s1", "-n", "3"))
    assert "turn number 5" in table and "turn number 3" in table and "turn number 2" not in table
    listed = doc(cli("turns", "s1", as_json=True))
    assert [t["content"] for t in listed] == [f"turn number {i} about snacks and lunch" for i in range(6)]
    assert "no turns" in ok(cli("turns", "other"))

    result = cli("context", "what is Alice allergic to", "--session", "s1", "--budget", "60")
    text = ok(result)
    used, budget = map(int, result.stderr.split(" tokens")[0].split(" of "))
    assert budget == 60 and 0 < used <= 60
    assert used == sum(alice.token_count(line) for line in text.splitlines())
    assert "[memory " in text and "peanuts" in text and "[turn " in text and "turn number 5" in text
    assert "tokens" not in text  # the footer is on stderr, stdout is the prompt text only

    full = doc(cli("context", "what is Alice allergic to", "--session", "s1", as_json=True))
    assert full["tokens"] <= full["budget_tokens"] == 2000
    assert full["tokens"] == sum(i["tokens"] for i in full["items"])
    assert [i["source"] for i in full["items"]].count("turn") == 6
    assert full["text"] == "\n".join(i["line"] for i in full["items"])
    tiny = cli("context", "snacks", "--session", "s1", "--budget", "2")
    assert ok(tiny) == "" and tiny.stderr.startswith("0 of 2 tokens")


def test_vacuum_is_skipped_with_a_note_when_not_permitted(dsn, admin, login_role):
    role = login_role()
    done, notes = vacuum_tables(dsn_for(admin.info.dbname, user=role), None, ["memories", "turns"])
    assert done == [] and len(notes) == 2 and all("skipped" in n for n in notes)
    done, notes = vacuum_tables(dsn, None, ["memories"])
    assert (done, notes) == (["memories"], [])


def test_export_and_erase_never_overwrite_a_file_without_force(cli, alice, admin, tmp_path):
    alice.add("Alice likes figs")
    alice.append_turn("s1", "user", "I like figs")
    kept = tmp_path / "kept.jsonl"
    kept.write_text("keep me\n")

    err = failed(cli("export", "--out", str(kept), space=False))
    assert f"{kept} exists already" in err and "hint:" in err and "--force" in err
    assert kept.read_text() == "keep me\n"
    assert "to " + str(kept) in ok(cli("export", "--out", str(kept), "--force", space=False))
    assert {json.loads(line)["kind"] for line in kept.read_text().splitlines()} == {"memory", "turn", "history"}

    # erase refuses before asking and before erasing anything
    kept.write_text("keep me\n")
    before = user_rows(admin, "alice")
    err = failed(cli("erase", "alice", "--yes", "--export", str(kept), "--no-journal", space=False, user=None,
                     role=False))
    assert f"nothing erased: {kept} exists already" in err and "--force" in err
    assert kept.read_text() == "keep me\n" and user_rows(admin, "alice") == before
    asked = cli("erase", "alice", "--export", str(kept), "--no-journal", space=False, user=None, role=False,
                input="y\n")
    assert asked.exit_code == 1 and "Erase everything" not in asked.stderr and "exists already" in asked.stderr

    # a missing directory: the message names the path given, never the temporary file
    for argv in (["export", "--out", str(tmp_path / "nodir" / "bob.jsonl")],
                 ["erase", "alice", "--yes", "--no-journal", "--export", str(tmp_path / "nodir" / "bob.jsonl")]):
        err = failed(cli(*argv, space=False, user="alice" if argv[0] == "export" else None,
                         role=argv[0] == "export"))
        assert str(tmp_path / "nodir" / "bob.jsonl") in err and ".tmp" not in err, err
        assert "does not exist" in err
    assert user_rows(admin, "alice") == before and not (tmp_path / "nodir").exists()

    res = doc(cli("erase", "alice", "--yes", "--export", str(kept), "--force", "--no-journal", space=False,
                  user=None, role=False, as_json=True))
    assert res["export"]["memory"] == 1 and res["tables"]["memories"] == 1
    assert "Alice likes figs" in {json.loads(line).get("content") for line in kept.read_text().splitlines()}
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
