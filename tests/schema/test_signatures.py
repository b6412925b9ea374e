"""The Python wrapper and the SQL catalogue agree: every named query in pgmem/queries.sql calls one existing
pgmem function with argument names and types it declares, every query the package runs exists and gets
exactly the parameters it uses; every function and table is documented (COMMENT); nothing is executable
by PUBLIC and SECURITY DEFINER functions pin their search_path."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import psycopg
import pytest

import pgmem
from pgmem.queries import DELEGATED, all_queries, statement

PACKAGE = Path(pgmem.__file__).resolve().parent
CALL = re.compile(r"\bpgmem\.([a-z_][a-z0-9_]*)\s*\(")
ARG = re.compile(r"\b(\w+)\s*=>\s*%\((\w+)\)[sb]::([a-z_][a-z0-9_]*(?: [a-z_][a-z0-9_]*)*(?:\[\])?)")
PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")


def parse(name: str, block: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(function name, [(argument name, placeholder, cast type)]) of one named query."""
    calls = CALL.findall(block)
    assert len(calls) == 1, f"query {name!r} must call exactly one pgmem function, calls {calls}"
    assert ";" not in block.rstrip().rstrip(";"), f"query {name!r} holds more than one statement"
    args = ARG.findall(block)
    assert block.count("=>") == len(args), f"query {name!r}: every argument is `p_x => %(y)s::type`"
    assert len(PLACEHOLDER.findall(block)) == len(args), f"query {name!r}: a parameter outside `p_x => %(y)s::type`"
    assert "%s" not in block, f"query {name!r}: positional parameters are not allowed"
    for arg, _, _ in args:
        assert arg.startswith("p_"), f"query {name!r}: argument {arg} is not named p_..."
    assert len({a for a, _, _ in args}) == len(args), f"query {name!r} names an argument twice"
    return calls[0], args


QUERIES = all_queries()


def test_queries_file_is_not_empty():
    assert {"act_as", "add", "search"} <= set(QUERIES)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_query_matches_function_signature(admin: psycopg.Connection, name: str):
    _check_signature(admin, name, QUERIES[name])


# The calls a cluster client makes instead (pgmem.queries.DELEGATED): the *_for twins, user first.
FOR_CALLS = {f"{n}_for": statement(n).delegated for n in DELEGATED}


@pytest.mark.parametrize("name", sorted(FOR_CALLS))
def test_delegated_call_matches_its_twin(admin: psycopg.Connection, name: str):
    """Each *_for call matches its function, which takes the arguments of the call it stands for (same names,
    types and defaults) after p_user_id, and returns the same."""
    assert FOR_CALLS[name] is not None, f"{name.removesuffix('_for')} is not an as_user call of one pgmem function"
    _check_signature(admin, name, FOR_CALLS[name])
    base = name.removesuffix("_for")
    sig = {r[0]: r[1:] for r in admin.execute(
        "SELECT p.proname, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid) FROM pg_proc p "
        "WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = ANY (%s)", ([name, base],)).fetchall()}
    assert sig[name][0] == "p_user_id text, " + sig[base][0]
    assert sig[name][1] == sig[base][1]


def _check_signature(admin: psycopg.Connection, name: str, block: str) -> None:
    fn, args = parse(name, block)
    overloads = admin.execute(
        """
        SELECT p.oid::regprocedure::text,
               array(SELECT a.name FROM unnest(p.proargnames, p.proargmodes) WITH ORDINALITY AS a(name, mode, i)
                     WHERE coalesce(a.mode, 'i') IN ('i', 'b', 'v') ORDER BY a.i),
               array(SELECT format_type(t.oid, NULL) FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS t(oid, i) ORDER BY t.i),
               p.pronargdefaults
        FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace AND p.proname = %s
        """, (fn,)).fetchall()
    assert overloads, f"query {name!r} calls pgmem.{fn}, which does not exist"
    cast_types = {arg: admin.execute("SELECT format_type(%s::regtype, NULL)", (typ,)).fetchone()[0]
                  for arg, _, typ in args}
    problems = {}
    matches = []
    for signature, in_names, in_types, n_defaults in overloads:
        declared = dict(zip(in_names, in_types))
        issues = [f"no argument {a}" for a in cast_types if a not in declared]
        issues += [f"{a} is {declared[a]}, cast to {t}" for a, t in cast_types.items() if a in declared and declared[a] != t]
        required = in_names[: len(in_names) - n_defaults]
        issues += [f"required argument {a} not passed" for a in required if a not in cast_types]
        if issues:
            problems[signature] = issues
        else:
            matches.append(signature)
    assert len(matches) == 1, f"query {name!r}: {len(matches)} matching functions {matches}; mismatches: {problems}"


def _calls_in_package() -> list[tuple[str, int, str, str, set[str] | None]]:
    """(file, line, callee, query name, keys of the literal params dict or None) for every `_rows("name", ...)`,
    `_params("name", {...})` (the parameter builders of pgmem.client.MemoryBase) and `query("name")` call in
    the package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if callee not in ("_rows", "query", "_params"):
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue  # query(name) inside _rows itself
            keys = None
            if len(node.args) > 1 and isinstance(node.args[1], ast.Dict) and all(
                    isinstance(k, ast.Constant) for k in node.args[1].keys):
                keys = {k.value for k in node.args[1].keys}
            found.append((path.name, node.lineno, callee, first.value, keys))
    return found


def test_every_query_the_package_runs_exists_with_its_parameters():
    calls = _calls_in_package()
    assert any(f == "client.py" and c == "_rows" for f, _, c, _, _ in calls)
    for file, line, _, name, keys in calls:
        assert name in QUERIES, f"{file}:{line} runs query {name!r}, which pgmem/queries.sql does not define"
        if keys is not None:
            used = set(PLACEHOLDER.findall(QUERIES[name]))
            assert keys == used, (f"{file}:{line} passes {sorted(keys)} to query {name!r}, which uses {sorted(used)}"
                                  f" (missing: {sorted(used - keys)}, unused: {sorted(keys - used)})")


def test_every_query_is_used():
    used = {name for _, _, _, name, _ in _calls_in_package()}
    assert set(QUERIES) - used == set(), "queries no Python code runs"


def test_every_public_memory_method_that_runs_sql_names_a_query():
    """Each public method of Memory that calls the database does so through a named query (``_rows("name",
    ...)``), never with SQL text of its own."""
    tree = ast.parse((PACKAGE / "client.py").read_text(encoding="utf-8"))
    memory = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Memory")
    talking = []
    for method in memory.body:
        if not isinstance(method, ast.FunctionDef) or method.name.startswith("_"):
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr not in ("execute", "executemany", "copy"), \
                    f"Memory.{method.name} (line {node.lineno}) runs SQL text of its own; use a named query"
                if node.func.attr == "_rows":
                    first = node.args[0] if node.args else None
                    assert isinstance(first, ast.Constant) and first.value in QUERIES, \
                        f"Memory.{method.name} (line {node.lineno}) runs a query that queries.sql does not define"
                    talking.append(method.name)
    assert {"add", "search", "update", "delete"} <= set(talking)


def test_every_function_type_and_table_has_a_comment(admin: psycopg.Connection):
    functions = [r[0] for r in admin.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pgmem'::regnamespace"
        " AND obj_description(p.oid, 'pg_proc') IS NULL ORDER BY 1")]
    assert functions == [], "functions without COMMENT ON FUNCTION"
    relations = [r[0] for r in admin.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'pgmem'::regnamespace"
        " AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND obj_description(c.oid, 'pg_class') IS NULL ORDER BY 1")]
    assert relations == [], "tables or views without COMMENT ON"
    types = [r[0] for r in admin.execute(
        "SELECT t.oid::regtype::text FROM pg_type t LEFT JOIN pg_class c ON c.oid = t.typrelid"
        " WHERE t.typnamespace = 'pgmem'::regnamespace AND t.typtype IN ('c', 'd', 'e') AND coalesce(c.relkind, 'c') = 'c'"
        " AND obj_description(t.oid, 'pg_type') IS NULL ORDER BY 1")]
    assert types == [], "types without COMMENT ON TYPE"
    assert admin.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgmem'::regnamespace").fetchone()[0] > 10


def test_no_function_is_executable_by_public(admin: psycopg.Connection):
    public = [r[0] for r in admin.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p,"
        " aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
        " WHERE p.pronamespace = 'pgmem'::regnamespace AND a.grantee = 0 AND a.privilege_type = 'EXECUTE' ORDER BY 1")]
    assert public == [], "functions PUBLIC may execute"


def test_security_definer_functions_pin_search_path(admin: psycopg.Connection):
    rows = admin.execute(
        "SELECT p.oid::regprocedure::text, coalesce(p.proconfig, '{}') FROM pg_proc p"
        " WHERE p.pronamespace = 'pgmem'::regnamespace AND p.prosecdef ORDER BY 1").fetchall()
    assert rows, "expected SECURITY DEFINER functions (pgmem.current_user_id, pgmem.act_as, ...)"
    for signature, config in rows:
        paths = [c.split("=", 1)[1] for c in config if c.startswith("search_path=")]
        assert paths, f"SECURITY DEFINER {signature} has no fixed search_path"
        first = paths[0].replace('"', "").split(",")[0].strip()
        assert first == "pg_catalog", f"SECURITY DEFINER {signature}: search_path {paths[0]} should start with pg_catalog"
