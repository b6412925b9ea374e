"""Installing and upgrading pgmem's schema.

Two paths give the same schema (``tests/schema`` compares their pg_dumps, owners and privileges included):

- **A new install** (a database where no pgmem migration was applied and no schema ``pgmem`` exists) loads
  ``sql/current/`` — the schema as it stands, one file per feature, the text a reader opens — in one
  transaction, and records every migration as applied in yoyo's tables (procrastinate's ``schema.sql`` and
  pgmq's ``pgmq.sql`` install the same way).
- **An existing database** is upgraded by the migrations it has not applied yet: plain SQL files under ``sql/``
  (shipped inside the wheel as ``pgmem/sql``), applied by yoyo-migrations. A DBA can apply them without Python
  code of ours: ``yoyo apply --database postgresql+psycopg://... $(pgmem sql-path)`` (from empty too: the
  migrations alone build the same schema).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import PgmemError, SchemaError, from_psycopg


def sql_path() -> Path:
    """Directory holding the migration files: ``pgmem/sql`` in a wheel, the repository's ``sql/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql", here.parent / "sql"):
        if candidate.is_dir() and any(candidate.glob("*.sql")):
            return candidate
    raise SchemaError(f"pgmem's migration files are missing (looked in {here / 'sql'} and {here.parent / 'sql'})")


def current_path() -> Path:
    """Directory of the current schema source (``sql/current``), what a new install loads."""
    return sql_path() / "current"


# --------------------------------------------------------------------------------------------------------
# Reading SQL text: statements, and the @vector@ placeholder of pgvector's schema
# --------------------------------------------------------------------------------------------------------
VECTOR_REF = re.compile(r"@vector@\.(?=[^\s'])")  # a use: @vector@.vector, OPERATOR(@vector@.<=>)
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z_0-9]*)?\$")


def split_statements(sql: str) -> list[tuple[str, int, int]]:
    """Split SQL text at top-level semicolons, honouring quotes, dollar quotes and comments.

    Returns ``(start, end, line)`` for each statement: its character offsets in ``sql`` (``sql[start:end]``,
    ending with the ``;``, with the comments and blank lines before it) and the 1-based line where that slice
    starts; a trailing statement without ``;`` counts when it holds more than comments."""
    out: list[tuple[int, int, int]] = []
    i, n, start = 0, len(sql), 0
    while i < n:
        c = sql[i]
        if c == "-" and sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
        elif c == "/" and sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c in "'\"":
            j = i + 1
            while j < n:
                if sql[j] == c:
                    if j + 1 < n and sql[j + 1] == c:
                        j += 2
                        continue
                    break
                j += 1
            i = j + 1
        elif c == "$" and (m := _DOLLAR.match(sql, i)) and not (i > 0 and (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            tag = m.group(0)
            j = sql.find(tag, m.end())
            i = n if j < 0 else j + len(tag)
        elif c == ";":
            out.append((start, i + 1, sql.count("\n", 0, start) + 1))
            i += 1
            start = i
        else:
            i += 1
    rest = sql[start:]
    if rest.strip() and any(not ln.strip().startswith("--") for ln in rest.splitlines() if ln.strip()):
        out.append((start, n, sql.count("\n", 0, start) + 1))
    return out


def names_vector(text: str) -> bool:
    """Whether a statement writes ``@vector@.`` for pgvector's schema (always followed by a dot:
    ``@vector@.vector``, ``OPERATOR(@vector@.<=>)``); the bare word in comments is the placeholder's name."""
    return bool(VECTOR_REF.search(text))


def load_current(conn, current_dir: Path | None = None) -> None:
    """Build the schema from the current source on ``conn`` (psycopg 3), in one transaction: every file of
    ``current_dir`` (default :func:`current_path`) in name order, statement by statement, each that names
    ``@vector@`` with pgvector's schema (quoted) in its place, as ``pgmem._define`` does in migrations.

    Function bodies are not checked while loading (``check_function_bodies = off``, as pg_dump's output sets
    it): a function may call one defined in a later file. The first file checks the prerequisites (pgvector,
    the roles) before anything is created, and raises PGM00 with the DBA's command when one is missing.
    Raises ``psycopg.Error`` as the failing statement raised it, with a note naming the file and line."""
    import psycopg

    current_dir = current_dir or current_path()
    with conn.transaction():
        conn.execute("SET LOCAL check_function_bodies = off")
        schema = None
        for path in sorted(current_dir.glob("*.sql")):
            text = path.read_text(encoding="utf-8")
            for start, end, line in split_statements(text):
                stmt = text[start:end]
                if names_vector(stmt):
                    if schema is None:
                        row = conn.execute("SELECT quote_ident(n.nspname) FROM pg_catalog.pg_extension e "
                                           "JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace "
                                           "WHERE e.extname = 'vector'").fetchone()
                        if row is None:
                            raise SchemaError(f"{path.name}:{line} names @vector@ but pgvector is not installed")
                        schema = row[0]
                    stmt = VECTOR_REF.sub(schema + ".", stmt)
                try:
                    conn.execute(stmt)
                except psycopg.Error as exc:
                    exc.add_note(f"while loading sql/current/{path.name}:{line}")
                    raise


# --------------------------------------------------------------------------------------------------------
# Releases, and what each migration's rollback drops
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Release:
    """A tagged release (``sql/releases.toml``): its version and the id of the last migration it ships."""

    version: str
    last_migration: str


def migration_ids() -> list[str]:
    """Ids of the shipped migrations in yoyo's order (file name), read from the files without yoyo."""
    return sorted(p.name[:-len(".sql")] for p in sql_path().glob("*.sql") if not p.name.endswith(".rollback.sql"))


def releases() -> list[Release]:
    """The releases of ``sql/releases.toml``, oldest first."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    data = tomllib.loads((sql_path() / "releases.toml").read_text(encoding="utf-8"))
    return [Release(r["version"], r["last_migration"]) for r in data.get("release", [])]


def pending_release() -> str | None:
    """The id of the migration after the last release's, the next release's pending one (regenerated until
    that release is tagged), or None. At most one such migration ships."""
    last = releases()[-1].last_migration
    later = [i for i in migration_ids() if i > last]
    return later[-1] if later else None


def release_of(applied: list[str]) -> str | None:
    """The newest release whose migrations are all in ``applied`` (ids), e.g. ``"0.1.0"``; None before the
    first release's last migration."""
    done = set(applied)
    found = None
    for r in releases():
        if r.last_migration in done:
            found = r.version
    return found


_DROPS = re.compile(r"^-- drops: (.+)$", re.M)


def rollback_drops() -> dict[str, str]:
    """``{migration id: what its rollback drops}`` for the rollbacks that drop stored data, read from the
    ``-- drops:`` line of each ``.rollback.sql`` (the one place this is written; the others replace
    functions, or drop caches that are rebuilt)."""
    out = {}
    for path in sorted(sql_path().glob("*.rollback.sql")):
        m = _DROPS.search(path.read_text(encoding="utf-8"))
        if m:
            out[path.name[:-len(".rollback.sql")]] = m.group(1).strip()
    return out


def describe_rollback(count: int) -> str:
    """What rolling back the ``count`` newest migrations undoes on a database migrated by this version of pgmem,
    and what of it drops stored data (from the shipped files: no connection)."""
    drops_by_id = rollback_drops()
    shipped = migration_ids()
    undone = shipped[::-1][:count]
    if count == 1:
        what = f"rolling back 1 migration undoes the newest applied migration ({undone[0]}"
    else:
        names = ", ".join(undone) if len(undone) <= 4 else f"{', '.join(undone[:2])}, ..., {undone[-1]}"
        what = f"rolling back {count} migrations undoes the {count} newest applied migrations ({names}"
    what += " on a database migrated by this pgmem)"
    drops = [f"{m} drops {drops_by_id[m]}" for m in undone if m in drops_by_id]
    if drops:
        return f"{what}: {'; '.join(drops)}"
    first = next((i + 1 for i, m in enumerate(shipped[::-1]) if m in drops_by_id), None)
    return (f"{what}; it drops no stored memories, turns or keys" +
            (f" (--count {first} or more does)" if first else ""))


def yoyo_url(dsn: str) -> str:
    """A libpq URL as yoyo wants it: ``postgresql+psycopg://`` selects psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if dsn.startswith(prefix):
            return "postgresql+psycopg://" + dsn[len(prefix):]
    if dsn.startswith("postgresql+psycopg://"):
        return dsn
    raise SchemaError(f"pgmem migrate needs a postgresql:// URL, got {dsn.split('://')[0]}://...")


def _backend_and_migrations(dsn: str):
    from yoyo import get_backend, read_migrations

    return get_backend(yoyo_url(dsn)), read_migrations(str(sql_path()))


def _run(fn):
    import psycopg

    try:
        return fn()
    except PgmemError:
        raise
    except psycopg.Error as exc:
        raise from_psycopg(exc) from exc


def pending(dsn: str) -> list[str]:
    """Ids of the migrations not yet applied to the database at ``dsn``."""
    def go():
        backend, migrations = _backend_and_migrations(dsn)
        with backend:  # closes yoyo's connection: an open one blocks DROP DATABASE and CREATE DATABASE ... TEMPLATE
            return [m.id for m in backend.to_apply(migrations)]
    return _run(go)


def applied(dsn: str) -> list[str]:
    """Ids of the migrations applied to the database at ``dsn``, in order."""
    def go():
        backend, migrations = _backend_and_migrations(dsn)
        with backend:
            done = backend.get_applied_migration_hashes()
        return [m.id for m in migrations if m.hash in done]
    return _run(go)


def is_current(dsn: str) -> bool:
    """Whether every migration file has been applied at ``dsn``, read from yoyo's own table with one query and
    without loading yoyo (what a command pays on each start against the embedded server). False when that
    cannot be told (no table yet, no permission): :func:`migrate` then decides, under yoyo's lock."""
    import psycopg

    ids = set(migration_ids())
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            done = {row[0] for row in conn.execute("SELECT migration_id FROM public._yoyo_migration")}
    except psycopg.Error:
        return False
    return ids <= done


def _is_new(backend) -> bool:
    """Whether the database of ``backend`` holds nothing of pgmem: no migration recorded, no schema pgmem."""
    if backend.get_applied_migration_hashes():
        return False
    cursor = backend.execute("SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'")
    return cursor.fetchone()[0] == 0


def migrate(dsn: str) -> list[str]:
    """Bring the database at ``dsn`` to the current schema under yoyo's lock; returns the ids of the migrations
    applied or, on a new install, recorded as applied (empty when up to date).

    A new install (:func:`_is_new`) loads ``sql/current`` (:func:`load_current`) and records every migration in
    yoyo's tables, in one transaction; a database that has pgmem is upgraded by its pending migrations.
    Raises :class:`SchemaError` with the DBA's command when pgvector or a role is missing and cannot be
    created (nothing is left behind but yoyo's own bookkeeping tables).
    """
    def go():
        backend, migrations = _backend_and_migrations(dsn)
        with backend, backend.lock():
            todo = backend.to_apply(migrations)
            if todo and len(todo) == len(migrations) and _is_new(backend):
                with backend.transaction():
                    load_current(backend.connection)
                    for m in todo:
                        backend.mark_one(m, log=True)
            else:
                backend.apply_migrations(todo)
            return [m.id for m in todo]
    applied = _run(go)
    if applied:
        _redistribute(dsn)
    return applied


def _redistribute(dsn: str) -> None:
    """On a Citus coordinator already distributed (cluster mode recorded), apply the distribution plan's
    idempotent steps again after migrations: a redefined search function forces generic plans again, which
    Citus cannot route (docs/scaling.md); a rollback restores such a definition too. Nothing on a single
    PostgreSQL, nor when the schema is gone (a rollback of every migration)."""
    import psycopg

    from . import citus

    def recorded() -> bool:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            row = conn.execute("SELECT current_setting('pgmem.cluster', true), "
                               "to_regclass('pgmem.memories') IS NOT NULL").fetchone()
            return row is not None and row[0] == citus.CLUSTER_VALUE and row[1]

    if _run(recorded):
        citus.distribute(dsn)


def rollback(dsn: str, count: int | None = None) -> list[str]:
    """Roll back the last ``count`` applied migrations (all when None); returns the ids rolled back."""
    def go():
        backend, migrations = _backend_and_migrations(dsn)
        with backend, backend.lock():
            todo = backend.to_rollback(migrations)
            if count is not None:
                todo = todo[:count]
            backend.rollback_migrations(todo)
            return [m.id for m in todo]
    undone = _run(go)
    if undone:
        # The definitions restored force generic plans again (search, search_hybrid), which Citus cannot
        # route ("could not create distributed plan", 0A000) until distribute's steps run again.
        _redistribute(dsn)
    return undone
