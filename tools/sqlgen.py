"""Write the next migration's function definitions from sql/current, and its rollback from the migrations.

Usage (from the repository root)::

    python tools/sqlgen.py --pending --version 0.2.0   # the next release's migration (docs/operations.md)
    python tools/sqlgen.py --pending                   # regenerate it after another change
    python tools/sqlgen.py --name pgmem-search-k-cap pgmem.search [pgmem._knn_sql ...]   # one-off, named

With ``--pending`` the functions are every one whose sql/current text differs from the last release
(``sql/releases.toml``); the file's hand-written parts (table DDL and its undoing) are kept.

For every named function (``pgmem.search`` or ``search``; every overload of that name) the forward file gets
its definition as sql/current has it now (``CREATE OR REPLACE``, through ``pgmem._define`` when it names
``@vector@``), its ``COMMENT ON``, and the lines of 99-privileges.sql that ``CREATE OR REPLACE`` resets or
that a new function needs. The rollback gets the last released definition of each, found in the migrations
(the text as that migration wrote it, with the ``ALTER FUNCTION`` statements that followed it), or a
``DROP FUNCTION`` for a function that is new. A changed argument list is a ``DROP`` of the old signature
plus the new function. When a named function takes part in the generated search statements, both files end
by regenerating them (``pgmem._build_knn()``).

Table DDL (columns, indexes, policies, triggers) is not generated: write it by hand into the forward file
and its rollback, and into sql/current. Review both files, then run the schema-source tests
(``python -m pytest tests/schema/test_schema_source.py``). Nothing is written when a file of that number exists.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import schema_source as src  # noqa: E402

_CALL = re.compile(r"\bpgmem\.(\w+)\s*\(")
PINNED = "pg_catalog, pgmem, pg_temp"
LOAD_PGVECTOR = "DO $pgmem$ BEGIN PERFORM '[1]'::vector; END $pgmem$;"
BUILD_KNN = "DO $pgmem$ BEGIN PERFORM pgmem._build_knn(); END $pgmem$;  -- DO, not SELECT: yoyo prints a SELECT's rows"


def _qualified(name: str) -> str:
    return name if name.startswith("pgmem.") else f"pgmem.{name}"


def generated_from(current: dict) -> set[str]:
    """Names of the functions that pgmem._build_knn() calls, directly or not: a change to any of them
    changes the generated statements."""
    calls = {}
    for key, d in current.items():
        calls.setdefault(key[0], set()).update("pgmem." + n for n in _CALL.findall(d.text) if "pgmem." + n != key[0])
    seen, todo = set(), ["pgmem._build_knn"]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(calls.get(name, ()))
    return seen


def _comment_on(key, files: list[Path]) -> str | None:
    found = None
    for path in files:
        for st in src.split_statements(path.read_text(encoding="utf-8")):
            text, _ = src.unwrap(st.text)
            if text.upper().startswith("COMMENT ON FUNCTION") and src.function_key(text) == key:
                found = text if text.endswith(";") else text + ";"
            elif text.upper().startswith("DROP FUNCTION") and src.function_key(text) == key:
                found = None
    return found


def _with_create(stmt: str) -> list[str]:
    """An ``OWNER TO pgmem_api`` between granting and revoking CREATE on the schema, as 99-privileges.sql
    does it (the new owner of a function needs CREATE on its schema)."""
    if re.search(r"(?i)\bOWNER\s+TO\s+pgmem_api\b", stmt):
        return ["GRANT CREATE ON SCHEMA pgmem TO pgmem_api;", stmt, "REVOKE CREATE ON SCHEMA pgmem FROM pgmem_api;"]
    return [stmt]


def _block(comment: str, text: str) -> str:
    return (comment.rstrip() + "\n" if comment.strip() else "") + src.wrap(text)


def generate(names: list[str], sql_dir: Path = src.SQL_DIR, current_dir: Path | None = None,
             upto: str | None = None) -> tuple[str, str, str]:
    """``(migration number, forward text, rollback text)`` for the named functions, against the migrations
    up to and including ``upto`` (default: all). Raises ValueError for a name that neither sql/current nor
    those migrations define."""
    current_dir = current_dir or sql_dir / "current"
    migrations = [p for p in src.migration_files(sql_dir) if upto is None or p.name[:-len(".sql")] <= upto]
    released = src.last_definitions(migrations)
    current = src.current_definitions(current_dir)
    current_files = src.current_files(current_dir)
    privileges = [p for p in current_files if p.name.startswith("99-")]
    wanted = [_qualified(n) for n in names]
    for name in wanted:
        if not any(k[0] == name for k in (*released, *current)):
            raise ValueError(f"{name} is defined neither in sql/current nor in the migrations")
    rebuild = any(name in generated_from(current) for name in wanted)

    forward, rollback = [], []
    for name in wanted:
        now = sorted(k for k in current if k[0] == name)
        before = sorted(k for k in released if k[0] == name)
        for key in before:
            if key not in current:  # signature changed or function removed
                forward.append(f"DROP FUNCTION {src.signature(released[key].text)};")
        for key in now:
            d = current[key]
            forward.append(_block(d.comment, d.text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)))
            comment = _comment_on(key, current_files)
            if comment:
                forward.append(src.wrap(comment))
            for stmt in src.privilege_statements(key, privileges):
                # CREATE OR REPLACE keeps owner and grants but resets SECURITY DEFINER and the settings (ALTER
                # FUNCTION ... SET, e.g. lock_timeout); a new function needs all.
                if key not in released or "SECURITY DEFINER" in stmt.upper() or re.search(r"(?i)\)\s+SET\s", stmt):
                    forward.extend(_with_create(src.wrap(stmt)))
            if key not in released:
                # What 99-privileges.sql does to every function in bulk: nothing for PUBLIC, EXECUTE for
                # pgmem_api (its own lines above may revoke that again).
                at = len(forward) - len([s for s in src.privilege_statements(key, privileges)])
                forward[at:at] = [src.wrap(f"REVOKE EXECUTE ON FUNCTION {src.signature(d.text)} FROM PUBLIC;"),
                                  src.wrap(f"GRANT EXECUTE ON FUNCTION {src.signature(d.text)} TO pgmem_api;")]
        for key in now:
            if key not in released:
                rollback.append(f"DROP FUNCTION {src.signature(current[key].text).replace('@vector@.', '')};"
                                if "@vector@" not in current[key].text else
                                src.wrap(f"DROP FUNCTION {src.signature(current[key].text)};"))
        for key in before:
            r = released[key]
            text = r.text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
            rollback.append(src.wrap(text) if r.wrapped or src.names_vector(text) else text.rstrip(";") + ";")
            # (an ALTER FUNCTION naming @vector@, as a generated migration writes it, goes through _define too)
            rollback.extend(src.wrap(a) if "@vector@" in a else a if a.endswith(";") else a + ";"
                            for a in r.altered or [])
            head = src._BODY.split(r.text, 1)[0]
            sig = src.signature(r.text)
            # Migration 0007 pinned the search path of every function (but those it RESET) with ALTER FUNCTION
            # after their texts were released: the released database has it.
            path = re.search(r"(?i)\bSET\s+search_path\s*(?:=|TO)\s*([\w\s,]*?)\s*(?:\n|$)", head)
            reset = any(re.search(r"(?i)RESET\s+search_path", a) for a in r.altered or [])
            if not reset and (not path or " ".join(path.group(1).split()) != PINNED):
                alter = f"ALTER FUNCTION {sig} SET search_path = {PINNED};"
                rollback.append(src.wrap(alter) if "@vector@" in alter else alter)
            # CREATE OR REPLACE resets SECURITY DEFINER: a definer function (sql/current states it in the
            # definition) whose released text does not say so was made definer by a later ALTER (0007's loop).
            if key in current and src.parse_function(current[key].text).definer \
                    and not re.search(r"(?i)SECURITY\s+DEFINER", head):
                alter = f"ALTER FUNCTION {sig} SECURITY DEFINER;"
                rollback.append(src.wrap(alter) if "@vector@" in alter else alter)
            for stmt in src.privilege_statements(key, privileges):
                if ("SECURITY DEFINER" in stmt.upper() and not re.search(r"(?i)SECURITY\s+DEFINER", head)) \
                        or re.search(r"(?i)\)\s+SET\s", stmt) or key not in current:
                    rollback.extend(_with_create(src.wrap(stmt)))
            comment = _comment_on(key, migrations)
            if comment:
                rollback.append(comment)
    if rebuild:
        forward.append(BUILD_KNN)
        rollback.append(BUILD_KNN)

    last = migrations[-1].name[: -len(".sql")]
    number = int(last[:4]) + 1
    return f"{number:04d}", "\n\n".join([LOAD_PGVECTOR, *forward]) + "\n", "\n\n".join([LOAD_PGVECTOR, *rollback]) + "\n"


HAND = "-- Hand-written, before the functions: tables, columns, indexes, policies (kept when tools/sqlgen.py --pending regenerates this file)."
GENERATED = "-- Generated by tools/sqlgen.py --pending from sql/current; do not edit between this line and the next."
HAND_AFTER = "-- Hand-written, after the functions: triggers, backfills, grants on new tables (kept when regenerated)."
HAND_UNDO = "-- Hand-written, run first: what undoes the hand-written parts of the migration (kept when regenerated)."
GENERATED_UNDO = "-- Generated by tools/sqlgen.py --pending: the released definitions; do not edit below this line."


def changed_functions(sql_dir: Path, upto: str) -> list[str]:
    """Names of the functions whose sql/current definition differs from the migrations' up to ``upto`` (changed,
    added or removed), sorted."""
    released = src.last_definitions([p for p in src.migration_files(sql_dir) if p.name[:-len(".sql")] <= upto])
    current = src.current_definitions(sql_dir / "current")
    return sorted({k[0] for k in set(released) | set(current)
                   if k not in released or k not in current
                   or src.normalise(released[k].effective_text()) != src.normalise(current[k].text)})


def _hand_part(text: str, start: str, end: str | None) -> str:
    """The text between the line ``start`` and the line ``end`` (or the end of the file), stripped."""
    if start not in text:
        return ""
    part = text.split(start, 1)[1]
    if end and end in part:
        part = part.split(end, 1)[0]
    return part.strip("\n")


def write_pending(sql_dir: Path, version: str | None, description: str | None) -> tuple[Path, list[str]]:
    """Write (or regenerate) the next release's pending migration: every function that differs from the last
    release, plus the hand-written part the file already has. Returns its path and the functions in it.
    Raises ValueError when there is no pending migration and no ``version`` to name a new one, or when
    nothing differs and nothing is hand-written."""
    sys.path.insert(0, str(src.REPO))
    import tomllib

    releases = tomllib.loads((sql_dir / "releases.toml").read_text(encoding="utf-8"))["release"]
    last = releases[-1]["last_migration"]
    later = [p for p in src.migration_files(sql_dir) if p.name[:-len(".sql")] > last]
    if len(later) > 1:
        raise ValueError(f"more than one migration after release {releases[-1]['version']}: "
                         + ", ".join(p.name for p in later) + " (one migration per release)")
    if later:
        path = later[0]
        old = path.read_text(encoding="utf-8")
        old_undo = path.with_name(path.name[:-len(".sql")] + ".rollback.sql").read_text(encoding="utf-8")
        first_line = old.splitlines()[0]
        if description:
            first_line = f"-- pgmem {path.name[:-len('.sql')].split('.pgmem-', 1)[1]}: {description}"
    else:
        if not version or not re.fullmatch(r"\d+\.\d+\.\d+", version):
            raise ValueError("no pending migration yet: name the release it is for with --version X.Y.Z")
        number = int(last[:4]) + 1
        path = sql_dir / f"{number:04d}.pgmem-{version}.sql"
        old = old_undo = ""
        first_line = f"-- pgmem {version}: {description or 'the changes since release ' + releases[-1]['version']}"
    hand = _hand_part(old, HAND, GENERATED)
    hand_after = _hand_part(old, HAND_AFTER, None)
    hand_undo = _hand_part(old_undo, HAND_UNDO, GENERATED_UNDO)
    names = changed_functions(sql_dir, last)
    if not names and not hand and not hand_after:
        raise ValueError(f"sql/current equals release {releases[-1]['version']}: no pending migration to write")
    body = undo = ""
    if names:
        _, body, undo = generate(names, sql_dir, upto=last)
    forward = (f"{first_line}\n-- depends: {last}\n\n{HAND}\n" + (hand + "\n" if hand else "") +
               f"\n{GENERATED}\n" + body + f"\n{HAND_AFTER}\n" + (hand_after + "\n" if hand_after else ""))
    rollback = (f"-- Undo {path.name[:-len('.sql')]}: back to release {releases[-1]['version']}.\n"
                f"\n{HAND_UNDO}\n" + (hand_undo + "\n" if hand_undo else "")
                + f"\n{GENERATED_UNDO}\n" + undo)
    path.write_text(forward, encoding="utf-8")
    path.with_name(path.name[:-len(".sql")] + ".rollback.sql").write_text(rollback, encoding="utf-8")
    return path, names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("functions", nargs="*", metavar="NAME", help="pgmem.name or name (every overload)")
    parser.add_argument("--pending", action="store_true",
                        help="write or regenerate the next release's one pending migration from every function "
                             "that differs from the last release (the way to change the schema between releases)")
    parser.add_argument("--version", help="with --pending, for a new pending migration: the release it is for (X.Y.Z)")
    parser.add_argument("--name", help="the migration's short name, e.g. pgmem-search-k-cap (without --pending)")
    parser.add_argument("--description", help="the migration's one-line description")
    parser.add_argument("--sql-dir", type=Path, default=src.SQL_DIR, help="the migrations folder (default: sql/)")
    parser.add_argument("--stdout", action="store_true", help="print both files instead of writing them")
    args = parser.parse_args(argv)
    if args.pending:
        if args.functions or args.name or args.stdout:
            parser.error("--pending takes no NAME, --name or --stdout: it finds the changed functions itself")
        try:
            path, names = write_pending(args.sql_dir, args.version, args.description)
        except ValueError as exc:
            parser.error(str(exc))
        print(f"wrote {path} and {path.name[:-4]}.rollback.sql ({len(names)} functions: {', '.join(names) or 'none'}); "
              "review the hand-written parts, then run tests/schema")
        return 0
    if not args.functions or not args.name:
        parser.error("name the functions and --name, or use --pending")
    if not re.fullmatch(r"[a-z0-9-]+", args.name):
        parser.error("--name: lower-case letters, digits and dashes (yoyo ids look like 0008.pgmem-x)")
    try:
        number, forward, rollback = generate(args.functions, args.sql_dir)
    except ValueError as exc:
        parser.error(str(exc))
    migrations = src.migration_files(args.sql_dir)
    depends = migrations[-1].name[: -len(".sql")]
    description = args.description or "pgmem: redefine " + ", ".join(_qualified(n) for n in args.functions)
    forward = f"-- {description}\n-- depends: {depends}\n\n-- Generated by tools/sqlgen.py from sql/current; review before committing.\n" + forward
    rollback = f"-- Generated by tools/sqlgen.py: the definitions released before {number}.{args.name}.\n" + rollback
    path = args.sql_dir / f"{number}.{args.name}.sql"
    if args.stdout:
        sys.stdout.write(f"-- {path.name}\n{forward}\n-- {path.name[:-4]}.rollback.sql\n{rollback}")
        return 0
    if any(args.sql_dir.glob(f"{number}.*")):
        parser.error(f"a migration numbered {number} exists already")
    path.write_text(forward, encoding="utf-8")
    path.with_name(f"{number}.{args.name}.rollback.sql").write_text(rollback, encoding="utf-8")
    print(f"wrote {path} and {path.name[:-4]}.rollback.sql; review them, then run tests/schema/test_schema_source.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
