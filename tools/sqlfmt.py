"""Write every function of sql/current in the house layout, in place (developer tool; idempotent).

    python tools/sqlfmt.py            # rewrite sql/current
    python tools/sqlfmt.py --check    # exit 1 and name the functions not in the layout

The layout (held by tests/schema/test_sql_style.py):

    -- what it does and why (the developer's comment)
    CREATE FUNCTION pgmem.name(p_a text, p_b integer DEFAULT 10) RETURNS SETOF pgmem.memory
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pgmem, pg_temp
    AS $$
    ...
    $$;
    COMMENT ON FUNCTION ...;

- ``CREATE FUNCTION``, never ``CREATE OR REPLACE`` (that belongs to migrations), and never inside the
  migrations' ``pgmem._define`` wrapper (the loader puts pgvector's schema in place of ``@vector@`` itself);
- the signature on one line when it fits in 120 characters, else one argument a line;
- ``LANGUAGE``, volatility, ``STRICT``, ``PARALLEL`` and ``SECURITY DEFINER`` on one line: how a function runs
  is part of what it does, so the definer is stated at the definition (owners and grants stay in
  99-privileges.sql); then its ``SET`` lines; then ``AS $$``.

``SECURITY DEFINER`` assigned by an ``ALTER FUNCTION`` line in 99-privileges.sql is moved into the definition
and the line removed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import schema_source as src  # noqa: E402

WIDTH = 120
PRIVILEGES = "99-privileges.sql"
_ALTER_DEFINER = re.compile(r"(?is)^ALTER\s+FUNCTION\s+.*\)\s+SECURITY\s+DEFINER\s*;?$")


def definers_assigned(privileges: Path) -> set[tuple[str, int]]:
    """Function keys made SECURITY DEFINER by an ALTER FUNCTION line of ``privileges``."""
    keys = set()
    for st in src.split_statements(privileges.read_text(encoding="utf-8")):
        if _ALTER_DEFINER.match(st.text):
            keys.add(src.function_key(st.text.rstrip(";")))
    return keys


def layout(text: str, definer: bool = False) -> str:
    """The CREATE FUNCTION statement ``text`` (unwrapped, with or without its ``;``) in the house layout."""
    f = src.parse_function(text)
    returns = f" RETURNS {f.returns}" if f.returns else ""
    head = f"CREATE FUNCTION {f.name}({', '.join(f.args)}){returns}"
    if len(head) > WIDTH and not f.args:
        m = re.match(r"(?is)^TABLE\s*\((.*)\)$", f.returns)
        if m:
            cols, _ = src._args("(" + m.group(1) + ")", 0)
            head = f"CREATE FUNCTION {f.name}() RETURNS TABLE (\n" + ",\n".join("    " + c for c in cols) + "\n)"
    elif len(head) > WIDTH:
        m = re.match(r"(?is)^TABLE\s*\((.*)\)$", f.returns)
        if m and len(f") RETURNS {f.returns}") > WIDTH:
            cols, _ = src._args("(" + m.group(1) + ")", 0)
            returns = " RETURNS TABLE (\n" + ",\n".join("    " + c for c in cols) + "\n)"
        head = f"CREATE FUNCTION {f.name}(\n" + ",\n".join("    " + a for a in f.args) + f"\n){returns}"
    attrs = f"LANGUAGE {f.language} {f.volatility}"
    if f.strict:
        attrs += " STRICT"
    if f.parallel:
        attrs += f" PARALLEL {f.parallel}"
    if f.definer or definer:
        attrs += " SECURITY DEFINER"
    for extra in f.extra:
        attrs += " " + extra
    lines = [head, attrs]
    lines += [f"SET {name} = {value}" for name, value in f.settings]
    tag = "$$" if "$$" not in f.body else "$fn$"
    # The body byte for byte: it is the function's prosrc, which pg_dump and \\sf show as written.
    return "\n".join(lines) + f"\nAS {tag}{f.body}{tag};"


def format_file(path: Path, definers: set[tuple[str, int]]) -> tuple[str, list[str]]:
    """``path``'s text with every function in the layout, and the names of the functions changed."""
    text = path.read_text(encoding="utf-8")
    out, pos, changed = [], 0, []
    for start, end, _ in src.migrations.split_statements(text):
        chunk = text[start:end]
        # The statement proper starts after the comment lines and blank lines before it.
        lead = re.match(r"(?s)((?:[ \t]*(?:--[^\n]*)?\n)*)", chunk).group(1)
        stmt = chunk[len(lead):]
        inner, wrapped = src.unwrap(stmt)
        if not re.match(r"(?is)^CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b", inner):
            continue
        new = layout(inner, src.function_key(inner) in definers)
        if new != stmt.strip():
            changed.append(src.function_key(inner)[0])
            out.append(text[pos:start + len(lead)])
            out.append(new)
            pos = end
    out.append(text[pos:])
    return "".join(out), changed


def drop_definer_lines(path: Path) -> str:
    """``path`` (99-privileges.sql) without its ALTER FUNCTION ... SECURITY DEFINER lines."""
    kept = [ln for ln in path.read_text(encoding="utf-8").splitlines(keepends=True)
            if not _ALTER_DEFINER.match(ln.strip())]
    return "".join(kept)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    current = src.CURRENT_DIR
    definers = definers_assigned(current / PRIVILEGES)
    bad = []
    for path in src.current_files(current):
        new, changed = format_file(path, definers)
        if path.name == PRIVILEGES:
            new = drop_definer_lines(path) if definers else new
            changed += ["ALTER FUNCTION ... SECURITY DEFINER"] if definers else []
        if changed:
            bad += [f"{path.name}: {name}" for name in changed]
            if not check:
                path.write_text(new, encoding="utf-8")
    for line in bad:
        print(("not in the layout: " if check else "formatted: ") + line)
    return 1 if (check and bad) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
