"""sql/current is written in one layout (tools/sqlfmt.py): what a new install runs is also the text a reader
opens, so it reads the same way in every file. No database needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import schema_source as src
import sqlfmt

CURRENT = src.CURRENT_DIR
FILES = src.current_files(CURRENT)


def statements():
    for path in FILES:
        for st in src.split_statements(path.read_text(encoding="utf-8")):
            yield path, st


def test_every_function_is_in_the_house_layout():
    definers = sqlfmt.definers_assigned(CURRENT / sqlfmt.PRIVILEGES)
    assert not definers, f"SECURITY DEFINER is stated at the definition, not by ALTER FUNCTION: {sorted(definers)}"
    off = []
    for path in FILES:
        _, changed = sqlfmt.format_file(path, set())
        off += [f"{path.name}: {name}" for name in changed]
    assert not off, "not in the layout (run python tools/sqlfmt.py): " + ", ".join(off)


@pytest.mark.parametrize("pattern, why", [
    (r"(?i)^CREATE\s+OR\s+REPLACE\b", "CREATE OR REPLACE belongs to migrations; sql/current says CREATE"),
    (r"(?i)^DO\s+\$pgmem\$\s+BEGIN\s+PERFORM\s+pgmem\._define\(",
     "the _define wrapper belongs to migrations; the loader puts pgvector's schema in itself"),
    (r"(?is)^CREATE\s+FUNCTION\b.*?\bAS\s+\$function\$", "functions are quoted with $$ (or a named tag when the body holds $$)"),
])
def test_no_migration_devices_in_the_current_source(pattern, why):
    """Statements only (a body may generate functions, as _build_knn does, with CREATE OR REPLACE)."""
    found = [f"{path.name}:{st.line}" for path, st in statements() if re.search(pattern, st.text)]
    assert not found, f"{why}: {found}"


def test_function_headers_fit_in_120_characters():
    long = []
    for path, st in statements():
        text, _ = src.unwrap(st.text)
        if not re.match(r"(?i)^CREATE\s+FUNCTION\b", text):
            continue
        header = text[:src._BODY.search(text).start()]
        long += [f"{path.name}:{st.line + i}" for i, line in enumerate(header.splitlines()) if len(line) > 120]
    assert not long, f"function header lines over 120 characters: {long}"


def test_every_function_pins_its_search_path_with_pg_temp_last():
    loose = []
    for path, st in statements():
        text, _ = src.unwrap(st.text)
        if not re.match(r"(?i)^CREATE\s+FUNCTION\b", text):
            continue
        f = src.parse_function(text)
        paths = [v for n, v in f.settings if n.lower() == "search_path"]
        # _expiry: a one-line SQL function the planner inlines into the view and the route statements, which
        # a SET clause would prevent; it names nothing a caller could shadow (docs/security.md).
        if f.name != "pgmem._expiry" and paths != ["pg_catalog, pgmem, pg_temp"]:
            loose.append(f"{path.name}:{st.line} {f.name}: {paths}")
    assert not loose, loose


def test_the_readme_table_names_every_file_and_no_other():
    readme = (CURRENT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `([0-9]{2}-[a-z-]+\.sql)` \|", readme, flags=re.M))
    assert named == {p.name for p in FILES}


def test_the_layout_tool_is_idempotent(tmp_path: Path):
    """Formatting a file already in the layout changes nothing; a function in pg_dump's layout is rewritten."""
    pasted = tmp_path / "10-x.sql"
    original = (
        "CREATE OR REPLACE FUNCTION pgmem.f(p_a text, p_b timestamp with time zone DEFAULT NULL::timestamp with time zone)\n"
        " RETURNS text\n LANGUAGE plpgsql\n SECURITY DEFINER\n SET search_path TO 'pg_catalog', 'pgmem', 'pg_temp'\n"
        "AS $function$\nBEGIN\n    RETURN p_a;\nEND\n$function$;")
    pasted.write_text("-- a helper\n" + original + "\n", encoding="utf-8")
    once, changed = sqlfmt.format_file(pasted, set())
    assert changed == ["pgmem.f"]
    assert once == ("-- a helper\n"
                    "CREATE FUNCTION pgmem.f(p_a text, p_b timestamptz DEFAULT NULL) RETURNS text\n"
                    "LANGUAGE plpgsql VOLATILE SECURITY DEFINER\n"
                    "SET search_path = pg_catalog, pgmem, pg_temp\n"
                    "AS $$\nBEGIN\n    RETURN p_a;\nEND\n$$;\n")
    pasted.write_text(once, encoding="utf-8")
    assert sqlfmt.format_file(pasted, set()) == (once, [])
    assert src.normalise(once.split("\n", 1)[1]) == src.normalise(original)  # the same function
