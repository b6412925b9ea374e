"""Reading pgmem's SQL: the migrations under ``sql/`` and the current definitions under ``sql/current/``.

Developer tooling (not part of the installed package), shared by ``tools/sqlgen.py`` and the schema-source
tests. Everything here works on text, without a database, except :func:`load_current` (builds the schema
from sql/current) and :func:`dump_schema` (pg_dump of a database, for comparing two builds).

A *function key* is ``(name, number of input arguments)``, e.g. ``("pgmem.search", 11)``: enough to tell
apart the overloads pgmem has (``_scope_sql`` with 2 and 3 inputs) and to follow ``DROP FUNCTION``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pgmem import migrations

REPO = Path(__file__).resolve().parents[1]
SQL_DIR = REPO / "sql"
CURRENT_DIR = SQL_DIR / "current"

# What pgmem._define puts around a definition that names pgvector's schema as @vector@ (migration 0007).
DEFINE_OPEN = "DO $pgmem$ BEGIN PERFORM pgmem._define($def$\n"
DEFINE_CLOSE = "\n$def$); END $pgmem$;"
_DEFINE = re.compile(r"^DO \$pgmem\$ BEGIN PERFORM pgmem\._define\(\$def\$\s*(.*?)\s*\$def\$\); END \$pgmem\$;?$", re.S)
_CREATE_FN = re.compile(r"^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(pgmem\.\w+)\s*\(", re.I)
_DROP_FN = re.compile(r"^DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?(pgmem\.\w+)\s*\(", re.I)
_COMMENT_FN = re.compile(r"^COMMENT\s+ON\s+FUNCTION\s+(pgmem\.\w+)\s*\(", re.I)
VECTOR_REF = migrations.VECTOR_REF  # a use: @vector@.vector, OPERATOR(@vector@.<=>)
_ALTER_FN = re.compile(r"^ALTER\s+FUNCTION\s+(pgmem\.\w+)\s*\(", re.I)
_VOLATILITY = re.compile(r"\b(IMMUTABLE|STABLE|VOLATILE)\b", re.I)
_BODY = re.compile(r"\bAS\s+\$\w*\$")


@dataclass
class Statement:
    """One SQL statement of a file: its text (ending with ``;``), the ``--`` comment lines right above it
    (without the dashes' indentation changed), and where it starts (1-based line)."""

    text: str
    comment: str
    line: int


def split_statements(sql: str) -> list[Statement]:
    """Split SQL text at top-level semicolons, honouring quotes, dollar quotes and comments (the installer's
    own splitter, :func:`pgmem.migrations.split_statements`).

    Returns the statements in order; text between statements that is only comments and blank lines becomes
    the ``comment`` of the next statement when it touches it (no blank line in between)."""
    return [_statement(sql, start, end) for start, end, _ in migrations.split_statements(sql)]


def _statement(sql: str, start: int, end: int) -> Statement:
    chunk = sql[start:end]
    lines = chunk.split("\n")
    # Leading lines: comments and blanks; the comment is the last contiguous block of '--' lines.
    k = 0
    while k < len(lines) and (not lines[k].strip() or lines[k].lstrip().startswith("--")):
        k += 1
    head, body = lines[:k], lines[k:]
    block: list[str] = []
    for ln in reversed(head):
        if not ln.strip():
            break
        block.insert(0, ln)
    line = sql.count("\n", 0, start) + k + 1
    return Statement("\n".join(body).strip(), "\n".join(block), line)


def unwrap(text: str) -> tuple[str, bool]:
    """A statement without pgmem._define's wrapping: ``(inner text, True)``, or ``(text, False)``."""
    m = _DEFINE.match(text.strip())
    return (m.group(1).strip(), True) if m else (text.strip(), False)


names_vector = migrations.names_vector


def wrap(text: str) -> str:
    """The statement to put in a migration, ending with ``;``: through pgmem._define when it names
    ``@vector@.`` (see :func:`names_vector`), as written otherwise."""
    text = text.strip().rstrip(";").rstrip()
    if names_vector(text):
        return DEFINE_OPEN + text + DEFINE_CLOSE
    return text + ";"


def _args(text: str, open_paren: int) -> tuple[list[str], int]:
    """The top-level comma-separated items between the parenthesis at ``open_paren`` and its match."""
    depth, i, items, cur = 0, open_paren, [], []
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
            if depth > 1:
                cur.append(c)
        elif c == ")":
            depth -= 1
            if depth == 0:
                items.append("".join(cur))
                return [a.strip() for a in items if a.strip()], i
            cur.append(c)
        elif c == "," and depth == 1:
            items.append("".join(cur))
            cur = []
        elif c == "'":
            j = text.find("'", i + 1)
            cur.append(text[i:j + 1])
            i = j
        else:
            cur.append(c)
        i += 1
    raise ValueError(f"unbalanced parentheses in: {text[:200]}")


def _inputs(args: list[str]) -> list[str]:
    return [a for a in args if not re.match(r"(?i)^OUT\s", a)]


def function_key(text: str) -> tuple[str, int] | None:
    """``(name, input count)`` of a CREATE/DROP/COMMENT ON FUNCTION statement, else None."""
    for pattern in (_CREATE_FN, _DROP_FN, _COMMENT_FN, _ALTER_FN):
        m = pattern.match(text)
        if m:
            args, _ = _args(text, m.end() - 1)
            return m.group(1), len(_inputs(args))
    return None


def signature(text: str) -> str:
    """``pgmem.name(arg, ...)`` of a CREATE FUNCTION statement as ALTER, COMMENT ON, GRANT and DROP accept
    it: input arguments only, names kept, defaults dropped."""
    m = _CREATE_FN.match(text)
    args, _ = _args(text, m.end() - 1)
    plain = [re.sub(r"(?is)\s+(DEFAULT\s|=).*$", "", a) for a in _inputs(args)]
    return f"{m.group(1)}({', '.join(plain)})"


_PRIV = re.compile(r"(?is)^(GRANT\s+.*?\s+ON\s+FUNCTION\s+|REVOKE\s+.*?\s+ON\s+FUNCTION\s+)(.*?)(\s+(?:TO|FROM)\s+[^;]*)$")


def privilege_statements(key: tuple[str, int], files: list[Path]) -> list[str]:
    """The statements of ``files`` that name the function ``key`` in ALTER FUNCTION, or in a GRANT or
    REVOKE ON FUNCTION list (cut down to that one function). Bulk statements (``ON ALL FUNCTIONS IN
    SCHEMA``) are not included: they name no function."""
    out = []
    for path in files:
        for st in split_statements(path.read_text(encoding="utf-8")):
            text = st.text.rstrip(";").strip()
            if _ALTER_FN.match(text) and function_key(text) == key:
                out.append(text + ";")
                continue
            m = _PRIV.match(text)
            if not m:
                continue
            items = _args("(" + re.sub(r"--[^\n]*", "", m.group(2)) + ")", 0)[0]
            for item in items:
                fm = re.match(r"(pgmem\.\w+)\s*\(", item)
                if fm and (fm.group(1), len(_args(item, fm.end() - 1)[0])) == key:
                    out.append(f"{' '.join(m.group(1).split())} {item} {' '.join(m.group(3).split())};")
    return out


@dataclass
class Definition:
    """The text of one function's CREATE statement (unwrapped), as a file has it."""

    key: tuple[str, int]
    text: str
    comment: str       # the '--' lines above it
    wrapped: bool      # written through pgmem._define
    file: str
    line: int
    altered: list[str] | None = None  # later ALTER FUNCTION statements of the migrations that change it

    def effective_text(self) -> str:
        """The text with later ``ALTER FUNCTION ... IMMUTABLE | STABLE | VOLATILE`` applied."""
        text = self.text
        for alter in self.altered or []:
            m = _VOLATILITY.search(alter)
            if m:
                body = _BODY.search(text)
                head = _VOLATILITY.sub(m.group(1), text[:body.start()], count=1)
                text = head + text[body.start():]
        return text


def migration_files(sql_dir: Path = SQL_DIR) -> list[Path]:
    """The forward migrations, in yoyo's order (file name)."""
    return sorted(p for p in sql_dir.glob("*.sql") if not p.name.endswith(".rollback.sql"))


def last_definitions(files: list[Path]) -> dict[tuple[str, int], Definition]:
    """For every function that the files (applied in order) leave defined: its last CREATE statement."""
    found: dict[tuple[str, int], Definition] = {}
    for path in files:
        for st in split_statements(path.read_text(encoding="utf-8")):
            text, wrapped = unwrap(st.text)
            if _CREATE_FN.match(text):
                key = function_key(text)
                found[key] = Definition(key, text, st.comment, wrapped, path.name, st.line)
            elif _DROP_FN.match(text):
                found.pop(function_key(text), None)
            elif _ALTER_FN.match(text) and function_key(text) in found:
                d = found[function_key(text)]
                d.altered = (d.altered or []) + [text]
    return found


def current_files(current_dir: Path = CURRENT_DIR) -> list[Path]:
    """The files of the current source, in the order they are loaded (file name)."""
    return sorted(current_dir.glob("*.sql"))


def current_definitions(current_dir: Path = CURRENT_DIR) -> dict[tuple[str, int], Definition]:
    """Every function of the current source (a function defined twice there is an error)."""
    found: dict[tuple[str, int], Definition] = {}
    for path in current_files(current_dir):
        for st in split_statements(path.read_text(encoding="utf-8")):
            text, wrapped = unwrap(st.text)
            if _CREATE_FN.match(text):
                key = function_key(text)
                if key in found:
                    raise ValueError(f"{key[0]} ({key[1]} inputs) is defined twice in sql/current: "
                                     f"{found[key].file}:{found[key].line} and {path.name}:{st.line}")
                found[key] = Definition(key, text, st.comment, wrapped, path.name, st.line)
    return found


_ATTR_WORDS = ("LANGUAGE", "IMMUTABLE", "STABLE", "VOLATILE", "STRICT", "CALLED", "PARALLEL", "SECURITY", "SET",
               "COST", "ROWS", "LEAKPROOF", "NOT", "EXTERNAL", "RETURNS NULL", "WINDOW", "SUPPORT")
_ATTR_START = re.compile(r"(?i)\b(" + "|".join(w.replace(" ", r"\s+") for w in _ATTR_WORDS) + r")\b")


@dataclass
class Function:
    """A CREATE FUNCTION statement taken apart: what :func:`parse_function` returns. ``args``: each input and
    output argument as written (white space collapsed); ``settings``: ``(name, value)`` of its SET clauses,
    ``search_path`` written ``pg_catalog, pgmem, pg_temp`` whichever way the text quoted it; ``extra``: any
    other clause (COST, ROWS, LEAKPROOF ...), as written."""

    name: str
    args: list[str]
    returns: str
    language: str
    volatility: str
    strict: bool
    parallel: str | None
    definer: bool
    settings: list[tuple[str, str]]
    extra: list[str]
    body: str


def _clauses(text: str) -> list[str]:
    """The attribute clauses of a function header (the text after RETURNS ...), split where a clause's first
    word starts outside parentheses and quotes."""
    cuts, depth, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "'":
            j = text.find("'", i + 1)
            i = len(text) if j < 0 else j
        elif depth == 0 and (m := _ATTR_START.match(text, i)) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            cuts.append(i)
            i = m.end()
            continue
        i += 1
    return [text[a:b].strip() for a, b in zip(cuts, cuts[1:] + [len(text)]) if text[a:b].strip()]


def canonical_type_text(text: str) -> str:
    """An argument or result as a person writes it, not as pg_dump does: ``timestamptz`` for ``timestamp with
    time zone``, and a default without the cast pg_dump adds to its parameter's own type (``DEFAULT NULL``,
    ``DEFAULT 'cosine'``). The meaning is the same (the database comparison checks it)."""
    text = re.sub(r"(?i)\btimestamp with time zone\b", "timestamptz", " ".join(text.split()))
    m = re.fullmatch(r"(?is)((?:(?:IN|OUT|INOUT|VARIADIC)\s+)?\w+\s+(.+?)\s+DEFAULT\s+(?:NULL|'(?:[^']|'')*'))::(.+)", text)
    if m and m.group(3).strip() == m.group(2).strip():
        return m.group(1)
    return text


def parse_function(text: str) -> Function:
    """Take a CREATE [OR REPLACE] FUNCTION statement apart (unwrapped; with or without its final ``;``).
    Raises ValueError for a clause it does not know."""
    text = text.strip().rstrip(";").rstrip()
    m = _CREATE_FN.match(text)
    if not m:
        raise ValueError(f"not a CREATE FUNCTION statement: {text[:80]}")
    args, close = _args(text, m.end() - 1)
    body_m = _BODY.search(text, close)
    tag = re.search(r"\$\w*\$", text[body_m.start():]).group(0)
    body_start = body_m.end()
    body_end = text.index(tag, body_start)
    header = text[close + 1:body_m.start()] + " " + text[body_end + len(tag):]
    header = re.sub(r"--[^\n]*", " ", header)  # a comment between clauses (its quotes are not SQL's)
    rm = re.match(r"(?is)^\s*RETURNS\s+", header)  # none with OUT arguments only
    rest = header[rm.end():] if rm else header
    first = _clauses(rest)
    cut = rest.find(first[0]) if first else len(rest)
    returns = " ".join(rest[:cut].split()) if rm else ""
    f = Function(m.group(1), [canonical_type_text(a) for a in args], canonical_type_text(returns), "", "VOLATILE",
                 False, None, False, [], [],
                 text[body_start:body_end])
    for clause in _clauses(rest[cut:]):
        words = clause.split()
        head = words[0].upper()
        if head == "LANGUAGE":
            f.language = words[1].lower()
        elif head in ("IMMUTABLE", "STABLE", "VOLATILE"):
            f.volatility = head
        elif head == "STRICT" or clause.upper().startswith("RETURNS NULL"):
            f.strict = True
        elif head == "CALLED":
            pass
        elif head == "PARALLEL":
            f.parallel = words[1].upper()
        elif head == "SECURITY":
            f.definer = words[1].upper() == "DEFINER"
        elif head == "SET":
            sm = re.match(r"(?is)^SET\s+(\"[^\"]+\"|[\w.]+)\s*(?:=|\bTO\b)\s*(.*)$", clause)
            if not sm:
                raise ValueError(f"{f.name}: cannot read the clause {clause!r}")
            name, value = sm.group(1).strip('"'), " ".join(sm.group(2).split())
            # A simple value is written bare: pg_dump quotes every one ('100', 'pg_catalog', 'pgmem', 'pg_temp').
            value = ", ".join(v.strip()[1:-1] if re.fullmatch(r"'[\w.]+'", v.strip()) else v.strip()
                              for v in value.split(","))
            f.settings.append((name, value))
        else:
            f.extra.append(" ".join(words))
    if not f.language:
        raise ValueError(f"{f.name}: no LANGUAGE clause")
    return f


def normalise(text: str) -> str:
    """A function's meaning for comparison, whatever its layout: name, arguments, result, language,
    volatility, STRICT, PARALLEL, other clauses and SET clauses other than search_path, then the body; white
    space collapsed, ``@vector@.`` removed. ``CREATE`` and ``CREATE OR REPLACE`` alike.

    Not compared: the ``search_path`` and ``SECURITY DEFINER`` clauses. Migration 0007 pinned the search path of
    every earlier function and made the API definer with ``ALTER FUNCTION`` (a loop, not text this module
    follows); sql/current writes both in each definition. The database comparison (a pg_dump of each build)
    checks both."""
    f = parse_function(text.replace("@vector@.", ""))
    settings = [f"SET {n} = {v}" for n, v in f.settings if n.lower() != "search_path"]
    parts = [f"FUNCTION {f.name}({', '.join(f.args)})", f"RETURNS {f.returns}" if f.returns else "", f"LANGUAGE {f.language}", f.volatility,
             "STRICT" if f.strict else "", f"PARALLEL {f.parallel}" if f.parallel else "", *f.extra, *settings,
             "AS", f.body]
    flat = " ".join(" ".join(p for p in parts if p).split())
    return re.sub(r"\s+\)", ")", re.sub(r"\(\s+", "(", flat))


def load_current(conn, current_dir: Path = CURRENT_DIR) -> None:
    """Build the schema from the current source on ``conn``: what a new install runs
    (:func:`pgmem.migrations.load_current`), here for any folder laid out like sql/current."""
    migrations.load_current(conn, current_dir)


def mismatches(sql_dir: Path = SQL_DIR, current_dir: Path | None = None) -> list[str]:
    """Every difference between the functions the migrations leave and those of the current source, as
    messages naming the function and where each text is (empty when they agree). Compares
    :func:`normalise`'d texts, the migrations' with later ``ALTER FUNCTION`` volatility changes applied."""
    released = last_definitions(migration_files(sql_dir))
    current = current_definitions(current_dir or sql_dir / "current")
    out = []
    for key in sorted(set(released) | set(current)):
        name = f"{key[0]} ({key[1]} inputs)"
        if key not in current:
            out.append(f"{name}: defined by {released[key].file}:{released[key].line}, missing from sql/current")
        elif key not in released:
            out.append(f"{name}: in sql/current ({current[key].file}:{current[key].line}) but no migration defines it")
        elif normalise(released[key].effective_text()) != normalise(current[key].text):
            a, b = normalise(released[key].effective_text()), normalise(current[key].text)
            i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            out.append(f"{name}: {released[key].file}:{released[key].line} differs from "
                       f"{current[key].file}:{current[key].line} at ...{a[max(0, i - 60):i + 60]!r}... "
                       f"against ...{b[max(0, i - 60):i + 60]!r}...")
    return out


_DUMP_NOISE = re.compile(r"^(--|SET |SELECT pg_catalog\.set_config|\\restrict |\\unrestrict )")


def normalise_dump(dump: str) -> str:
    """A pg_dump text without what varies between runs or carries no schema: ``--`` lines, ``SET`` lines,
    the ``\\restrict``/``\\unrestrict`` lines with random keys that pg_dump 18 writes; runs of blank lines
    collapsed, trailing white space stripped."""
    out: list[str] = []
    for line in dump.splitlines():
        line = line.rstrip()
        if _DUMP_NOISE.match(line):
            continue
        if not line and (not out or not out[-1]):
            continue
        out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def dump_schema(dsn: str, privileges: bool = True) -> str:
    """The normalised schema-only pg_dump of schema pgmem at ``dsn`` (yoyo's tables, in public, are not in
    it), with owners and privileges unless ``privileges`` is false; "" when there is no schema pgmem.
    Uses the embedded server's pg_dump (pgmem.embedded)."""
    import subprocess

    import psycopg

    from pgmem import embedded

    with psycopg.connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'").fetchone()[0] == 0:
            return ""  # pg_dump refuses a pattern that matches nothing
    extra = [] if privileges else ["--no-owner", "--no-privileges"]
    proc = subprocess.run([str(embedded.bin_dir() / "pg_dump"), "--schema-only", "--schema=pgmem", *extra, f"--dbname={dsn}"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"pg_dump failed ({proc.returncode}): {proc.stderr.strip()}")
    return normalise_dump(proc.stdout)
