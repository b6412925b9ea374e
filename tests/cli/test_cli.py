"""The pgmem command line, run in-process with typer's CliRunner (so the MiniLM model loads once per session)
against this test's database, acting through the gateway role; plus the installed console script."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import datetime
from uuid import UUID

import psycopg
import pytest
from typer.testing import CliRunner

import pgmem.requests
from pgmem import migrations
from pgmem.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("PGMEM_DSN", "PGMEM_USER", "PGMEM_AGENT", "PGMEM_SPACE", "PGMEM_ROLE", "PGMEM_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # wide tables: one row per memory in readable output


@pytest.fixture
def cli(dsn):
    """cli(*args, user="alice", as_json=False, input=None) -> Result, with --dsn and --role after the command
    (role=False: --dsn only, for commands run as the login role; conn=False: neither)."""

    def run(*args: str, user: str | None = "alice", as_json: bool = False, input: str | None = None,
            conn: bool = True, role: bool = True):
        argv = list(args)
        if conn:
            argv += ["--dsn", dsn] + (["--role", "pgmem_gateway"] if role else [])
        if user is not None:
            argv += ["--user", user]
        if as_json:
            argv.append("--json")
        return runner.invoke(app, argv, input=input)

    return run


def ok(result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr, result.exception)
    return result.stdout


def doc(result):
    """The one JSON document a --json command printed."""
    return json.loads(ok(result))


def failed(result, code: int = 1) -> str:
    """Assert a clean failure: the exit code, an `error:` line on stderr, no traceback; return stderr."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    if code == 1:
        assert result.stderr.startswith("error: "), result.stderr
        assert result.stdout == ""
    return result.stderr


def add(cli, text: str, *extra: str, user: str = "alice") -> str:
    return doc(cli("add", text, *extra, user=user, as_json=True))["id"]


def test_add_then_search_finds_it_with_a_score(cli):
    tea = add(cli, "Alice prefers green tea in the morning", "--agent", "planner", "--metadata", '{"topic": "tea"}')
    laptop = add(cli, "The office printer is on the third floor", "--agent", "coder")
    assert UUID(tea) != UUID(laptop)

    out = ok(cli("search", "what does Alice like to drink", "-k", "5"))
    rows = [line for line in out.splitlines() if tea[:8] in line]
    assert len(rows) == 1 and "planner" in rows[0] and "green tea" in rows[0]
    score = re.search(r"│\s*(-?\d\.\d{3})\s*│", rows[0])
    assert score, rows[0]

    hits = doc(cli("search", "what does Alice like to drink", "-k", "5", as_json=True))
    assert [h["id"] for h in hits] == [tea, laptop]
    assert -1.0 <= hits[1]["similarity"] < hits[0]["similarity"] <= 1.0
    assert hits[1]["score"] < hits[0]["score"]  # hybrid by default: the fused score is what the table shows
    assert float(score.group(1)) == pytest.approx(hits[0]["score"], abs=0.0006)
    vec = doc(cli("search", "what does Alice like to drink", "-k", "5", "--mode", "vector", as_json=True))
    assert [h["id"] for h in vec] == [tea, laptop] and vec[0]["score"] == vec[0]["similarity"]
    assert vec[0]["similarity"] == pytest.approx(hits[0]["similarity"], abs=1e-6)

    # filters and scopes reach the API
    assert [h["id"] for h in doc(cli("search", "drink", "--agent", "coder", as_json=True))] == [laptop]
    assert [h["id"] for h in doc(cli("search", "drink", "--filter", '{"topic": "tea"}', as_json=True))] == [tea]
    assert doc(cli("search", "drink", "--min-similarity", "0.99", as_json=True)) == []
    assert "no matches" in ok(cli("search", "drink", "--min-similarity", "0.99"))


def test_json_output_has_the_fields(cli):
    res = doc(cli("add", "Bob's laptop is a ThinkPad", "--agent", "planner", "--session", "s1",
                  "--metadata", '{"category": "hardware", "priority": 3}', as_json=True))
    assert set(res) == {"id", "created"} and res["created"] is True
    again = doc(cli("add", "Bob's laptop is a ThinkPad", as_json=True))
    assert again == {"id": res["id"], "created": False}

    rec = doc(cli("get", res["id"], as_json=True))
    assert rec["id"] == res["id"] and rec["user_id"] == "alice" and rec["space"] == "default"
    assert rec["agent_id"] == "planner" and rec["session_id"] == "s1"
    assert rec["content"] == "Bob's laptop is a ThinkPad"
    assert rec["metadata"] == {"category": "hardware", "priority": 3}
    assert rec["version"] == 1 and rec["similarity"] is None
    assert datetime.fromisoformat(rec["created_at"]).tzinfo is not None

    page = doc(cli("list", as_json=True))
    assert set(page) == {"items", "next_cursor"} and page["next_cursor"] is None
    assert [r["id"] for r in page["items"]] == [res["id"]]

    piped = doc(cli("add", "-", input="line one\n  line two\n\n", as_json=True))
    assert doc(cli("get", piped["id"], as_json=True))["content"] == "line one\n  line two"

    [st] = doc(cli("stats", as_json=True))
    assert st["space"] == "default" and (st["memories"], st["agents"], st["sessions"]) == (2, 1, 1)
    datetime.fromisoformat(st["oldest"])


def test_get_list_history_edit_delete_stats(cli):
    ids = [add(cli, f"note {i}: the build server is named atlas-{i}", "--metadata", json.dumps({"n": i}))
           for i in range(3)]

    out = ok(cli("get", ids[1]))
    assert ids[1] in out and "atlas-1" in out
    # the short id of the tables is accepted wherever an id is
    assert doc(cli("get", ids[1][:8], as_json=True))["id"] == ids[1]

    page = doc(cli("list", "--limit", "2", as_json=True))
    assert [r["id"] for r in page["items"]] == ids[:2] and page["next_cursor"]
    rest = doc(cli("list", "--limit", "2", "--cursor", page["next_cursor"], as_json=True))
    assert [r["id"] for r in rest["items"]] == ids[2:]
    assert [r["id"] for r in doc(cli("list", "--contains", "atlas-2", as_json=True))["items"]] == [ids[2]]
    assert [r["id"] for r in doc(cli("list", "--filter", '{"n": {"gte": 1}}', as_json=True))["items"]] == ids[1:]
    table = ok(cli("list"))
    assert all(i[:8] in table for i in ids) and "next page" not in table

    edited = doc(cli("edit", ids[0], "atlas-0", "zeus-0", "--agent", "fixer", as_json=True))
    assert edited["content"] == "note 0: the build server is named zeus-0" and edited["version"] == 2
    err = failed(cli("edit", ids[0], "e", "E"))
    assert "occurs" in err and "times" in err
    assert "does not occur" in failed(cli("edit", ids[0], "atlas-0", "x"))

    upd = doc(cli("update", ids[0], "--metadata", '{"owner": "ops"}', as_json=True))
    assert upd["metadata"] == {"n": 0, "owner": "ops"}

    out = ok(cli("delete", ids[0]))
    assert ids[0] in out
    assert "not found" in failed(cli("get", ids[0]))
    assert "not found" in failed(cli("delete", ids[0]))

    events = doc(cli("history", ids[0], as_json=True))
    assert [e["event"] for e in events] == ["ADD", "EDIT", "UPDATE", "DELETE"]
    assert events[1]["old_content"].endswith("atlas-0") and events[1]["new_content"].endswith("zeus-0")
    assert events[1]["actor_agent_id"] == "fixer"
    hist = ok(cli("history", ids[0]))
    assert all(word in hist for word in ("ADD", "EDIT", "UPDATE", "DELETE"))

    [st] = doc(cli("stats", as_json=True))
    assert st["memories"] == 2
    assert re.search(r"default\s*│\s*2\s*│", ok(cli("stats")))


def test_second_user_sees_nothing(cli):
    mid = add(cli, "Alice's locker code is 4711")
    assert doc(cli("search", "locker code", user="bob", as_json=True)) == []
    assert doc(cli("list", user="bob", as_json=True))["items"] == []
    assert "not found" in failed(cli("get", mid, user="bob"))
    assert "not found" in failed(cli("delete", mid, user="bob"))
    assert "no history" in failed(cli("history", mid, user="bob"))
    assert doc(cli("delete-all", "--yes", user="bob", as_json=True)) == {"deleted": 0}
    assert doc(cli("stats", user="bob", as_json=True))[0]["memories"] == 0
    assert doc(cli("get", mid, as_json=True))["content"] == "Alice's locker code is 4711"


def test_missing_user_is_a_clear_error(cli):
    for args in (("list",), ("search", "anything"), ("add", "x"), ("stats",)):
        err = failed(cli(*args, user=None))
        assert "no pgmem user" in err and "--user" in err and "PGMEM_USER" in err


def test_bad_json_and_unknown_filter_operator(cli):
    add(cli, "something to filter", "--metadata", '{"a": 1}')
    err = failed(cli("list", "--filter", "{a: 1"))
    assert "--filter is not valid JSON" in err
    assert "--filter must be a JSON object" in failed(cli("search", "x", "--filter", "[1, 2]"))
    err = failed(cli("search", "something", "--filter", '{"a": {"regex": "x"}}'))
    assert 'unknown operator "regex"' in err and "hint:" in err
    assert 'unknown operator "regex"' in failed(cli("list", "--filter", '{"a": {"regex": "x"}}'))
    assert "--metadata is not valid JSON" in failed(cli("add", "y", "--metadata", "{'a': 1}"))
    # an escaped NUL in metadata and a NUL in content (from stdin) are refused clearly (C07, C08)
    assert "NUL" in failed(cli("add", "z", "--metadata", '{"data": "speci\\u0000al"}'))
    assert "NUL" in failed(cli("add", "-", input="o\x00er credits"))
    assert "empty" in failed(cli("search", "   "))
    # usage errors are click's, exit 2
    failed(cli("list", "--no-such-option"), code=2)
    failed(cli("search", "x", "-k", "many"), code=2)


def test_delete_all_needs_a_scope_or_yes(cli):
    add(cli, "planner fact one", "--agent", "planner")
    add(cli, "coder fact two", "--agent", "coder")
    add(cli, "bob's own fact", user="bob")
    err = failed(cli("delete-all"))
    assert "without a scope" in err and "--yes" in err
    assert len(doc(cli("list", as_json=True))["items"]) == 2

    assert doc(cli("delete-all", "--agent", "planner", as_json=True)) == {"deleted": 1}
    assert [r["agent_id"] for r in doc(cli("list", as_json=True))["items"]] == ["coder"]
    assert "deleted 1 memory" in ok(cli("delete-all", "--yes"))
    assert doc(cli("list", as_json=True))["items"] == []
    assert len(doc(cli("list", user="bob", as_json=True))["items"]) == 1


def test_commands_without_text_never_load_the_model(cli, monkeypatch):
    mid = add(cli, "a memory to look at")

    def no_model():
        raise AssertionError("the embedding model was loaded")

    monkeypatch.setattr(pgmem.requests, "default_embedder", no_model)
    for args in (("get", mid), ("list",), ("history", mid), ("stats",), ("delete", mid[:8]),
                 ("delete-all", "--yes")):
        ok(cli(*args))
    ok(cli("space", "show", "default", user=None))
    # ... while a command that embeds does need it
    result = cli("add", "another memory")
    assert isinstance(result.exception, AssertionError)


def test_options_before_the_command_and_from_the_environment(cli, dsn, monkeypatch):
    mid = add(cli, "placement of options")
    page = doc(runner.invoke(app, ["--dsn", dsn, "--role", "pgmem_gateway", "--user", "alice", "--json", "list"]))
    assert [r["id"] for r in page["items"]] == [mid]
    monkeypatch.setenv("PGMEM_DSN", dsn)
    monkeypatch.setenv("PGMEM_ROLE", "pgmem_gateway")
    monkeypatch.setenv("PGMEM_USER", "bob")
    assert doc(runner.invoke(app, ["list", "--json"]))["items"] == []
    # after the command beats before it, which beats the environment
    assert len(doc(runner.invoke(app, ["--user", "alice", "list", "--json"]))["items"]) == 1
    assert doc(runner.invoke(app, ["--user", "alice", "list", "--user", "bob", "--json"]))["items"] == []


def test_content_is_printed_literally(cli):
    add(cli, "[bold]not markup[/bold] and [link=x]y[/link]")
    assert "[bold]not markup[/bold] and [link=x]y[/link]" in ok(cli("list"))


def test_spaces(cli):
    s = doc(cli("space", "create", "t8", "--model", "m8", "--dims", "8", user=None, as_json=True))
    assert (s["name"], s["model"], s["dims"], s["index_kind"]) == ("t8", "m8", 8, "hnsw_vector")
    assert doc(cli("space", "show", "t8", user=None, as_json=True)) == s
    assert "m8" in ok(cli("space", "show", "t8", user=None))
    assert "bound to model" in failed(cli("space", "create", "t8", "--model", "m9", "--dims", "8", user=None))
    err = failed(cli("space", "show", "nope", user=None))
    assert 'space "nope" does not exist' in err
    # a data verb in a space whose model is not the embedder's is refused before any write
    assert "expected 8 dimensions, got 384 (space 't8'" in failed(cli("add", "x", "--space", "t8"))


def test_migrate_on_an_up_to_date_database(cli, dsn):
    assert ok(cli("migrate", user=None, role=False)).strip() == "up to date"
    assert doc(cli("migrate", user=None, role=False, as_json=True)) == {"applied": []}
    assert ok(cli("pending", user=None, role=False)).strip() == "up to date"
    assert doc(cli("pending", user=None, role=False, as_json=True)) == {"pending": []}
    wrong = re.sub(r"@/[^?]+\?", "@/no_such_db?", dsn)
    assert wrong != dsn
    # rollback refuses before connecting (pointed at no database, so a failed refusal harms nothing)
    err = failed(runner.invoke(app, ["rollback", "--count", "2", "--dsn", wrong]))
    assert "--yes" in err and "no_such_db" not in err
    err = failed(runner.invoke(app, ["migrate", "--dsn", wrong]))
    assert "no_such_db" in err and "does not exist" in err


def test_the_rollback_refusal_says_what_that_count_rolls_back():
    shipped = sorted(f.name[:-4] for f in migrations.sql_path().glob("*.sql") if not f.name.endswith(".rollback.sql"))
    core = len(shipped) - shipped.index("0002.pgmem-core")  # the count that reaches the core
    nowhere = "postgresql://postgres@/no_such_db?host=/nonexistent"  # refused before connecting
    err = failed(runner.invoke(app, ["rollback", "--count", "1", "--dsn", nowhere]))
    assert f"the newest applied migration ({shipped[-1]}" in err, err
    assert "every memory in it" not in err and "drops no stored memories, turns or keys" in err, err
    assert "--yes" in err
    err = failed(runner.invoke(app, ["rollback", "--count", "2", "--dsn", nowhere]))
    assert f"{shipped[-1]}, {shipped[-2]}" in err, err
    err = failed(runner.invoke(app, ["rollback", "--count", str(core), "--dsn", nowhere]))
    assert "0002.pgmem-core drops the pgmem schema and every memory in it" in err, err
    assert "0010.pgmem-service drops the service's API keys" in err, err


def test_server_start_status_url_stop(tmp_path):
    data = str(tmp_path / "pg")
    st = doc(runner.invoke(app, ["server", "status", "--data-dir", data, "--json"]))
    assert st["running"] is False and st["pid"] is None and st["url"] is None
    assert "not running" in ok(runner.invoke(app, ["server", "status", "--data-dir", data]))
    assert "not running" in failed(runner.invoke(app, ["server", "url", "--data-dir", data]))
    try:
        started = doc(runner.invoke(app, ["server", "start", "--data-dir", data, "--json"]))
        shipped = sorted(f.name[:-4] for f in migrations.sql_path().glob("*.sql") if not f.name.endswith(".rollback.sql"))
        assert started["running"] is True and started["applied"] == shipped and len(shipped) >= 3
        url = ok(runner.invoke(app, ["server", "url", "--data-dir", data]))
        assert url.count("\n") == 1 and url.strip() == started["url"]
        with psycopg.connect(url.strip()) as conn:
            assert conn.execute("SELECT to_regnamespace('pgmem') IS NOT NULL").fetchone()[0]
        st = doc(runner.invoke(app, ["server", "status", "--data-dir", data, "--json"]))
        assert st["running"] is True and isinstance(st["pid"], int) and st["data_dir"] == data
        out = ok(runner.invoke(app, ["server", "status", "--data-dir", data]))
        assert f"running (pid {st['pid']})" in out and data in out
    finally:
        stopped = runner.invoke(app, ["server", "stop", "--data-dir", data])
    assert "stopped" in ok(stopped)
    assert doc(runner.invoke(app, ["server", "status", "--data-dir", data, "--json"]))["running"] is False
    assert "not running" in ok(runner.invoke(app, ["server", "stop", "--data-dir", data]))


def test_console_script():
    exe = shutil.which("pgmem")
    assert exe, "the pgmem console script is not installed"
    out = subprocess.run([exe, "sql-path"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == str(migrations.sql_path())
    help_ = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=120, check=True).stdout
    for command in ("migrate", "search", "delete-all", "server", "space"):
        assert command in help_
