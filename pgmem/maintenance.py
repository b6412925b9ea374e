"""Maintenance statements that are not API calls: ``VACUUM`` of pgmem's tables after an erasure (so no dead
row version of an erased user's rows stays in the table files until autovacuum comes by)."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import from_psycopg


def vacuum_tables(dsn: str, role: str | None, tables: Iterable[str]) -> tuple[list[str], list[str]]:
    """``VACUUM`` the named ``pgmem`` tables on an autocommit connection (as ``role`` when given) so the dead
    row versions of deleted rows are removed. Returns (tables vacuumed, notes on what was skipped and why);
    a table the role may not vacuum (not its owner, no MAINTAIN) is skipped, never an error."""
    import psycopg
    from psycopg import sql

    done: list[str] = []
    notes: list[str] = []
    warnings: list[str] = []
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            if role:
                conn.execute("SELECT set_config('role', %s, false)", (role,))
            conn.add_notice_handler(lambda d: warnings.append(d.message_primary or "")
                                    if d.severity_nonlocalized == "WARNING" else None)
            allowed = {r[0] for r in conn.execute(
                """SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'pgmem' AND c.relname = ANY (%s)
                     AND (pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE')
                          OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)
                          OR CASE WHEN current_setting('server_version_num')::integer >= 170000
                                  THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)""",
                (list(tables),)).fetchall()}
            for t in tables:
                if t not in allowed:
                    notes.append(f"VACUUM of pgmem.{t} skipped: role {role or 'of the login'} may not vacuum it "
                                 "(run VACUUM as its owner or a superuser)")
                    continue
                warnings.clear()
                conn.execute(sql.SQL("VACUUM {}.{}").format(sql.Identifier("pgmem"), sql.Identifier(t)))
                if warnings:
                    notes.append(f"VACUUM of pgmem.{t}: {'; '.join(warnings)}")
                else:
                    done.append(t)
    except psycopg.Error as exc:
        notes.append(f"VACUUM not run: {from_psycopg(exc)}")
    return done, notes


__all__ = ["vacuum_tables"]
