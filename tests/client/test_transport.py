"""The route each named statement declares in queries.sql, how the transport plans a call from it, and the
module boundaries around the clients (transport apart from intent, item checks with validation)."""

from __future__ import annotations

import ast
import re
from importlib import resources
from pathlib import Path

import pytest

import pgmem
from pgmem import validation
from pgmem.queries import AS_USER, ROUTES, parse, statement, statements
from pgmem.transport import DelegatedIdentity, IdentityRoute, SyncTransport, TransactionIdentity

PACKAGE = Path(pgmem.__file__).resolve().parent
RAW = resources.files("pgmem").joinpath("queries.sql").read_text(encoding="utf-8")


def test_every_block_declares_one_of_the_routes():
    headers = re.findall(r"(?m)^-- ([a-z_]+) --(.*)$", RAW)
    assert len(headers) == len(statements()) > 50
    assert {route.strip() for _, route in headers} == set(ROUTES)
    assert statement("search").route == "as_user" and statement("current_user_id").route == "act_as"
    assert statement("set_retention").route == "as_login"


def test_statements_run_as_written_in_queries_sql():
    """The statement a gateway runs, identity included, is the text of queries.sql, not one made in Python."""
    for s in statements().values():
        assert s.text in RAW, s.name
        assert (AS_USER in s.text) == (s.route == "as_user"), s.name
    search = statement("search")
    assert "p_space => pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text)," in search.text
    assert search.plain == search.text.replace("pgmem.as_user(%(pgmem_user_id)s::text, %(space)s::text)",
                                               "%(space)s::text")


@pytest.mark.parametrize("text, message", [
    ("-- get --\nSELECT * FROM pgmem.get(p_id => %(id)s::uuid)", "declares no route"),
    ("-- get -- fast\nSELECT * FROM pgmem.get(p_id => %(id)s::uuid)", "not one of"),
    ("-- get -- as_user\nSELECT * FROM pgmem.get(p_id => %(id)s::uuid)", "must wrap exactly one"),
    ("-- get -- as_user\nSELECT * FROM pgmem.get(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid),"
     " p_x => pgmem.as_user(%(pgmem_user_id)s::text, %(x)s::text))", "must wrap exactly one"),
    ("-- get -- act_as\nSELECT * FROM pgmem.get(p_id => pgmem.as_user(%(pgmem_user_id)s::text, %(id)s::uuid))",
     "must not call"),
    ("-- get -- act_as\nSELECT 1\n\n-- get -- act_as\nSELECT 2", "defined twice"),
])
def test_a_block_without_a_clear_route_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_the_identity_route_plans_each_kind_of_call():
    p = {"k": 1}
    search, spaces, retention = statement("search"), statement("list_spaces"), statement("set_retention")
    one = IdentityRoute()
    assert one.plan(search, p, "alice", True) == ("statement", search.text, {"k": 1, "pgmem_user_id": "alice"}, None)
    assert one.plan(search, p, None, True) == ("statement", search.plain, p, None)
    assert one.plan(search, p, "alice", False) == ("transaction", search.plain, p, "alice")
    assert one.plan(spaces, p, "alice", True) == ("transaction", spaces.plain, p, "alice")
    assert one.plan(spaces, p, None, True) == ("statement", spaces.plain, p, None)
    assert one.plan(retention, p, "alice", True) == ("as_login", retention.plain, p, None)
    assert one.plan(retention, p, "alice", False) == ("transaction", retention.plain, p, "alice")
    block = TransactionIdentity()
    assert block.plan(search, p, "alice", True) == ("transaction", search.plain, p, "alice")
    assert block.plan(search, p, None, True) == ("transaction", search.plain, p, None)
    assert block.plan(retention, p, "alice", True) == ("as_login", retention.plain, p, None)


def test_identity_in_a_transaction_block_gives_the_same_answers(make_memory):
    """The seam a cluster mode uses: the same client with every call as a transaction naming the user first
    answers as the one-statement route does, and still sees only its user's rows."""
    seen: list[str] = []

    class Recording(TransactionIdentity):
        def plan(self, *args):
            call = super().plan(*args)
            seen.append(call.how)
            return call

    alice, bob = make_memory("alice", "planner"), make_memory("bob", "b")
    alice.add_many([f"memory {i} of alice about topic {i % 5}" for i in range(30)])
    bob.add("bob's memory about topic 3")
    block = make_memory("alice", "planner")
    block._transport.identity = Recording()
    assert block.whoami() == "alice"
    for query in ("topic 3", "memory 7"):
        want = [(r.id, round(r.score, 6)) for r in alice.search(query, k=8)]
        assert [(r.id, round(r.score, 6)) for r in block.search(query, k=8)] == want
    assert [r.id for r in block.list(limit=100).items] == [r.id for r in alice.list(limit=100).items]
    added = block.add("a memory written acting for alice in a transaction block")
    assert alice.get(added.id).user_id == "alice" and bob.get(added.id) is None
    assert seen and set(seen) == {"transaction"}


def test_delegated_calls_give_the_same_answers(make_memory):
    """Cluster mode's route (DelegatedIdentity): the *_for twins, one statement with the user first, answer as
    the one-statement route does on a single server, for every delegated call, and see only their user's rows."""
    seen: list[str] = []

    class Recording(DelegatedIdentity):
        def plan(self, stmt, *args):
            call = super().plan(stmt, *args)
            seen.append(stmt.name if "_for(" in call.sql else "")
            return call

    alice, bob = make_memory("alice", "planner"), make_memory("bob", "b")
    alice.add_many([f"memory {i} of alice about topic {i % 5}" for i in range(30)])
    bob.add("bob's memory about topic 3")
    d = make_memory("alice", "planner")
    d._transport.identity = Recording()
    for query in ("topic 3", "memory 7"):
        assert [(r.id, round(r.score, 6)) for r in d.search(query, k=8)] == \
            [(r.id, round(r.score, 6)) for r in alice.search(query, k=8)]
        emb = d._embedder.embed([query])[0]
        assert [r.id for r in d.search(embedding=emb, k=5, mode="vector")] == \
            [r.id for r in alice.search(embedding=emb, k=5, mode="vector")]
    assert [r.id for r in d.list(limit=100).items] == [r.id for r in alice.list(limit=100).items]
    added = d.add("a memory written by the delegated route. It has two sentences.")
    made = d.add_many(["two more memories", "from the delegated route"])
    assert d.get(added.id).user_id == "alice" and bob.get(added.id) is None
    assert "route" in d.edit(added.id, "delegated", "single-server").content
    assert all(alice.get(m.id) for m in made)
    assert {"search", "search_hybrid", "list", "add", "add_batch", "get", "edit"} <= set(seen)
    # Another user's memory is out of reach through the twins as through the calls they stand for.
    other = bob.add("bob's private note").id
    assert d.get(other) is None and all(r.user_id == "alice" for r in d.search("private note"))


def test_a_refused_route_is_changed_once():
    """A one-statement call refused with PGM11 (pgmem.as_user on a distributed schema; a *_for call Citus did not
    delegate) or a *_for twin the schema lacks: the transport changes route (single server -> cluster mode ->
    transactions) and calls again; a route set by its user stays."""
    class Refused(Exception):
        def __init__(self, sqlstate, msg=""):
            super().__init__(msg)
            self.sqlstate = sqlstate

    grouped = SyncTransport(pool=None, role="pgmem_gateway")  # a NOLOGIN role the workers refuse: no delegation
    grouped._set_cluster(True)
    assert type(grouped.identity) is TransactionIdentity
    t = SyncTransport(pool=None)
    t._set_cluster(False)
    assert not t._reroute(Refused("PGM11"), "transaction") and t.cluster is False
    assert t._reroute(Refused("PGM11"), "statement") and t.cluster is True
    assert isinstance(t.identity, DelegatedIdentity)
    # A shard group that moved on the way (rebalancing): once more by the same route, then transactions.
    assert t._reroute(Refused("08006", "connection to the remote node pgmem_api@10.0.0.3:5432 failed"), "statement")
    assert isinstance(t.identity, DelegatedIdentity)
    assert t._reroute(Refused("PGM11"), "statement") and isinstance(t.identity, DelegatedIdentity)
    assert t._reroute(Refused("PGM11"), "statement", 1) and type(t.identity) is TransactionIdentity
    assert not t._reroute(Refused("PGM11"), "statement", 1)
    u = SyncTransport(pool=None)
    u._set_cluster(True)
    assert not u._reroute(Refused("42883", "function pgmem.list(...) does not exist"), "statement")
    assert u._reroute(Refused("42883", "function pgmem.list_for(...) does not exist"), "statement")
    assert type(u.identity) is TransactionIdentity
    mine = SyncTransport(pool=None)
    mine.identity = IdentityRoute()
    mine._set_cluster(False)
    assert not mine._reroute(Refused("PGM11"), "statement") and type(mine.identity) is IdentityRoute


def imports_of(path: Path) -> set[str]:
    """The pgmem modules ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pgmem."):
            found.add(node.module.removeprefix("pgmem."))
    return found


def test_no_import_circle_between_the_client_and_the_writer():
    """The writer and validation need nothing of the client: the item checks live in pgmem.validation, the
    connection code in pgmem.transport (which knows no client either)."""
    for module in ("writer", "validation", "transport", "queries"):
        assert "client" not in imports_of(PACKAGE / f"{module}.py"), module
        assert "aio" not in imports_of(PACKAGE / f"{module}.py"), module
    from pgmem import client

    assert client.check_item is validation.check_item and client.count_occurrences is validation.count_occurrences


def test_the_cli_keeps_argument_handling_and_printing():
    """File writes, export files and VACUUM are library code (pgmem.files, pgmem.exports, pgmem.maintenance):
    the CLI opens no database connection and writes no file of its own."""
    modules = sorted((PACKAGE / "cli").glob("*.py"))
    assert {"__init__.py", "app.py", "memories.py"} <= {m.name for m in modules}
    for module in modules:
        tree = ast.parse(module.read_text(encoding="utf-8"))
        calls = {(ast.unparse(n.func.value), n.func.attr) for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)}
        assert not {c for c in calls if c[0] in ("psycopg", "os") and c[1] in ("connect", "open", "replace", "link",
                                                                                "fsync", "write")}, module.name
        assert not [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "open"], \
            module.name
    from pgmem import exports, files, maintenance

    assert callable(files.write_output_file) and callable(exports.read_export) and callable(maintenance.vacuum_tables)


def test_export_files_are_written_private_and_read_back(tmp_path):
    import os
    from uuid import uuid4

    from pgmem import exports, files
    from pgmem.errors import ValidationError

    rows = [{"kind": "memory", "id": uuid4(), "content": "Alice likes figs"}, {"kind": "turn", "content": "hi"}]
    path = tmp_path / "alice.jsonl"
    files.write_output_file(path, exports.jsonl_lines(rows))
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert exports.is_export_file(path)
    back = exports.read_export(path)
    assert [r["content"] for r in back] == ["Alice likes figs", "hi"] and back[0]["id"] == str(rows[0]["id"])
    assert exports.kind_counts(back) == {"memory": 1, "turn": 1, "history": 0}
    with pytest.raises(ValidationError, match="exists already"):
        files.write_output_file(path, ["x\n"])
    path.write_text('{"kind": "memory"}\nnot json\n')
    with pytest.raises(ValidationError, match="line 2 is not JSON"):
        exports.read_export(path)
