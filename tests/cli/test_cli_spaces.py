"""The command line and embedding spaces: a mistyped --space never creates a space (only `pgmem space create`
or the default space's first write does), a missing space is a clear error naming the known ones;
`pgmem space list` and `pgmem space delete`. And the help: grouped, plain, -h everywhere."""

from __future__ import annotations

import re

import psycopg
import pytest
import typer.main
from typer.testing import CliRunner

import pgmem.requests
from pgmem.cli import COMMAND_GROUPS, app

from test_cli import _clean_env, cli, doc, failed, ok  # noqa: F401  (fixtures)

runner = CliRunner()


def spaces(admin: psycopg.Connection) -> tuple[list[str], int]:
    """(space names, HNSW indexes) in the database."""
    names = [r[0] for r in admin.execute("SELECT name FROM pgmem.spaces ORDER BY name")]
    indexes = admin.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = 'pgmem' AND indexname ~ '_hnsw$'"
                            ).fetchone()[0]
    return names, indexes


READS = [
    ("list",), ("stats",), ("get", "0000aaaa"), ("search", "tea"), ("search", "tea", "--mode", "text"),
    ("delete", "0000aaaa"), ("history", "0000aaaa"), ("edit", "0000aaaa", "a", "b"),
    ("update", "0000aaaa", "--metadata", "{}"), ("delete-all", "--yes"), ("turns", "s1"), ("context", "tea"),
    ("add", "Alice likes tea"),
]


@pytest.fixture
def no_model(monkeypatch):
    """Any attempt to load the embedding model fails the test: a refused command must not need it."""
    def refuse():
        raise AssertionError("the embedding model was loaded")
    monkeypatch.setattr(pgmem.requests, "default_embedder", refuse)


@pytest.mark.parametrize("argv", READS, ids=lambda a: " ".join(a[:2]))
def test_a_mistyped_space_is_never_created(cli, admin, alice, argv, no_model):
    alice.add("Alice likes tea")  # space t64 exists
    before = spaces(admin)
    err = failed(cli(*argv, "--space", "t46"))
    assert 'embedding space "t46" does not exist; known spaces: t64' in err
    assert "pgmem space create t46" in err
    assert spaces(admin) == before


def test_a_mistyped_space_from_the_environment_or_before_the_command(cli, dsn, admin, alice, monkeypatch, no_model):
    alice.space()
    before = spaces(admin)
    assert "known spaces: t64" in failed(runner.invoke(app, ["--space", "tt", "list", "--dsn", dsn,
                                                             "--role", "pgmem_gateway", "-u", "alice"]))
    monkeypatch.setenv("PGMEM_SPACE", "typo")
    assert 'space "typo" does not exist' in failed(cli("stats"))
    assert 'space "typo" does not exist' in failed(cli("retention", user=None))
    assert spaces(admin) == before


def test_reads_of_the_missing_default_space_fail_and_the_first_add_creates_it(cli, admin):
    assert spaces(admin) == ([], 0)
    err = failed(cli("list"))
    assert 'embedding space "default" does not exist yet' in err and "known spaces: none" in err
    assert "pgmem add" in err
    failed(cli("search", "tea"))
    assert spaces(admin) == ([], 0)
    ok(cli("add", "Alice likes tea"))
    assert spaces(admin) == (["default"], 1)
    assert "Alice likes tea" in ok(cli("list"))


def test_space_list(cli, alice):
    assert "no spaces" in ok(cli("space", "list", user=None))
    alice.space()
    ok(cli("space", "create", "t8", "--model", "m8", "--dims", "8", user=None))
    listed = doc(cli("space", "list", user=None, as_json=True))
    assert [(s["name"], s["model"], s["dims"]) for s in listed] == [("t64", alice.embedder.model_name, 64),
                                                                    ("t8", "m8", 8)]
    out = ok(cli("space", "list", user=None))
    assert re.search(r"t8\s.*m8\s.*8\s.*hnsw_vector", out), out


def test_space_delete_refuses_without_yes_and_is_the_owners_only(cli, admin, alice, make_memory):
    alice.add("Alice likes tea")
    bob = make_memory("bob", space="t64")
    bob.add("Bob likes coffee")
    before = spaces(admin)
    err = failed(cli("space", "delete", "t64", user=None, role=False))
    assert "--yes" in err and "every user's memories" in err
    err = failed(cli("space", "delete", "t64", "--yes", user=None))  # as the gateway role: refused
    assert "only the schema owner" in err or "permission denied" in err
    assert spaces(admin) == before
    err = failed(cli("space", "delete", "t46", "--yes", user=None, role=False))
    assert 'embedding space "t46" does not exist; known spaces: t64' in err
    done = doc(cli("space", "delete", "t64", "--yes", user=None, role=False, as_json=True))
    assert done == {"space": "t64", "memories": 2, "turns": 0, "history": 2}
    assert spaces(admin) == ([], 0)
    assert admin.execute("SELECT count(*) FROM pgmem.memories").fetchone()[0] == 0


# --------------------------------------------------------------------------------------------------------
# Help
# --------------------------------------------------------------------------------------------------------
def _all_commands():
    root = typer.main.get_command(app)
    out = []
    for name, cmd in root.commands.items():
        out.append((name,))
        for sub in getattr(cmd, "commands", {}):
            out.append((name, sub))
    return out


def test_root_help_groups_every_command_once_and_reads_plainly():
    for flag in ("-h", "--help"):
        res = runner.invoke(app, [flag])
        assert res.exit_code == 0
        text = res.stdout
        titles = [line[:-1] for line in text.splitlines() if line.endswith(":") and not line.startswith(" ")]
        assert titles == ["Options", *COMMAND_GROUPS]  # no "Other commands": every command is grouped
        assert text.index("Memories:") < text.index("Server and administration:")
        assert text.index("  add ") < text.index("  migrate ")
        for (name, *sub) in _all_commands():
            if not sub:
                assert len(re.findall(rf"^  {re.escape(name)}\s{{2,}}\S", text, re.MULTILINE)) == 1, name
        assert "<bool>" not in text and "<str>" not in text and "╭" not in text
        assert len(text.splitlines()) < 75


@pytest.mark.parametrize("argv", _all_commands(), ids=" ".join)
def test_every_command_takes_h_and_shows_no_type_metavars(argv):
    res = runner.invoke(app, [*argv, "-h"])
    assert res.exit_code == 0, (argv, res.output)
    assert res.stdout.startswith("Usage: ")
    for junk in ("<bool>", "<str>", "<int>", "<float>", "<file>", "<path>", "{", "╭"):
        if junk == "{" and '{"' in res.stdout:  # JSON examples in help texts
            assert not re.search(r"\{[A-Z_]+\}", res.stdout), argv
            continue
        assert junk not in res.stdout, (argv, junk, res.stdout)


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_deep_json_options_are_clean_errors(cli, alice, depth):
    alice.add("a fact")
    text = '{"$and": [' * depth + '{"a": 1}' + "]}" * depth
    err = failed(cli("search", "fact", "--space", "t64", "--mode", "text", "--filter", text))
    assert "nested" in err
    err = failed(cli("list", "--space", "t64", "--filter", text))
    assert "nested" in err
    if depth > 100:
        meta = '{"a": ' * depth + "1" + "}" * depth
        err = failed(cli("add", "another fact", "--space", "t64", "--metadata", meta))
        assert "nested" in err


def test_space_list_keeps_the_model_readable_in_80_columns(cli, alice, monkeypatch):
    alice.space()
    ok(cli("space", "create", "default", "--model", "sentence-transformers/all-MiniLM-L6-v2", "--dims", "384",
           user=None))
    monkeypatch.setenv("COLUMNS", "80")
    out = ok(cli("space", "list", user=None))
    assert max(len(line) for line in out.splitlines()) <= 80, out
    # The model keeps at least 20 columns: folded at a word break, its first 26 characters on one line.
    assert "sentence-transformers/all-" in out and "MiniLM-L6-v2" in out, out
    assert "pgmem-testing-hash-64" in out, out
    assert re.search(r"default\s.*384\s.*hnsw_vector", out), out


def test_a_space_of_another_model_says_how_to_go_on(cli, alice, monkeypatch):
    alice.add("Alice likes tea")  # space t64 of pgmem-testing-hash-64
    monkeypatch.setenv("PGMEM_EMBEDDER", "support.recording_embedder:RecordingEmbedder")  # same dims, other model
    err = failed(cli("search", "tea", "--space", "t64"))
    assert err.startswith("error: space 't64' holds embeddings of model 'pgmem-testing-hash-64', "
                          "not 'pgmem-testing-recording-64'"), err
    hint = next(line for line in err.splitlines() if line.startswith("hint: "))
    assert "--space" in hint and "space=" in hint and "pgmem space list" in hint, hint
    assert "create a new space" in hint and "re-embed" in hint, hint
    assert "docs/embedders.md#changing-the-model-of-existing-memories-re-embed" in hint, hint
