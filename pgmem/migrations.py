"""Applying pgmem's SQL migrations with yoyo-migrations.

The migrations are plain SQL files under ``sql/`` (shipped inside the wheel as ``pgmem/sql``). A DBA can
apply them without Python code of ours: ``yoyo apply --database postgresql+psycopg://... $(pgmem sql-path)``.
"""

from __future__ import annotations

from pathlib import Path

from .errors import PgmemError, SchemaError, from_psycopg


def sql_path() -> Path:
    """Directory holding the migration files: ``pgmem/sql`` in a wheel, the repository's ``sql/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "sql", here.parent / "sql"):
        if candidate.is_dir() and any(candidate.glob("*.sql")):
            return candidate
    raise SchemaError(f"pgmem's migration files are missing (looked in {here / 'sql'} and {here.parent / 'sql'})")


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

    ids = {p.name[:-len(".sql")] for p in sql_path().glob("*.sql") if not p.name.endswith(".rollback.sql")}
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            done = {row[0] for row in conn.execute("SELECT migration_id FROM public._yoyo_migration")}
    except psycopg.Error:
        return False
    return ids <= done


def migrate(dsn: str) -> list[str]:
    """Apply every pending migration under yoyo's lock; returns the ids applied (empty when up to date).

    Raises :class:`SchemaError` with the DBA's command when pgvector is missing and cannot be created.
    """
    def go():
        backend, migrations = _backend_and_migrations(dsn)
        with backend, backend.lock():
            todo = backend.to_apply(migrations)
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
