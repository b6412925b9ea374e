"""``pgmem backup`` and ``pgmem restore``: a whole pgmem database as a directory, restored and verified.

A backup is a directory of three files (docs/operations.md):

- ``db.dump``: ``pg_dump -Fc`` of the whole database: the pgmem schema with its data, the vector extension,
  and yoyo's migration tables in ``public``;
- ``roles.sql``: idempotent SQL recreating the roles pgmem needs (``pgmem_*``, the schema owner, the logins
  bound in ``pgmem.role_bindings`` and every other member of a ``pgmem_*`` role) and their memberships in
  ``pgmem_*`` roles. Never passwords: a DBA sets them;
- ``manifest.json``: versions, applied migrations, exact row counts of every table in schema ``pgmem``, a
  probe memory (id, user, space, SHA-256 of its content), and the SHA-256 of the two other files.

The counts and the dump come from one snapshot: a REPEATABLE READ transaction exports it
(``pg_export_snapshot()``), counts every table, and stays open while ``pg_dump --snapshot`` reads the same
snapshot. :func:`restore` creates (or takes an empty) target database, applies ``roles.sql``, runs
``pg_restore --single-transaction --exit-on-error`` and then :func:`verify`: migrations current, row counts
equal to the manifest's, the probe memory found by ``pgmem.search`` with its own embedding and its content
hash unchanged.

pg_dump and pg_restore come from ``--bin-dir``, else the embedded server's (``pgmem.server.bin_dir()``),
else ``PATH``; the first whose major version is at least the server's is used. The DSN reaches them with
``--dbname`` and ``--no-password``; a password in the DSN goes through ``PGPASSWORD``, never the command
line. The catalog queries (pg_roles, pg_class, counts) are constant SQL strings in this module: they are
maintenance queries, not the memory API, which :func:`verify` calls through ``queries.sql``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from .doctor import INFRASTRUCTURE, Check
from .errors import DatabaseUnavailable, IdentityError, PermissionDenied, PgmemError, SchemaError, from_psycopg

FORMAT = 1
DUMP_FILE = "db.dump"
ROLES_FILE = "roles.sql"
MANIFEST_FILE = "manifest.json"
PROBE_K = 10


class VerificationFailed(PgmemError):
    """A restored database failed :func:`verify`; ``checks`` holds every check, passed or not."""

    def __init__(self, message: str, *, checks: list[Check], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.checks = checks


@dataclass(frozen=True)
class BackupResult:
    """What :func:`backup` wrote: the directory and its manifest (the parsed ``manifest.json``)."""

    path: Path
    manifest: dict = field(repr=False)


@dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore` did: the target database, whether it created it, and the verification checks."""

    database: str
    created: bool
    checks: list[Check]


# --------------------------------------------------------------------------------------------------------
# Catalog and maintenance queries
# --------------------------------------------------------------------------------------------------------
SQL_PRIVILEGE = """
SELECT current_user AS role, r.rolsuper AS superuser, r.rolbypassrls AS bypassrls
FROM pg_catalog.pg_roles r WHERE r.rolname = current_user
"""
SQL_UNREADABLE = """
SELECT n.nspname || '.' || c.relname AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('pgmem', 'public') AND c.relkind IN ('r', 'p', 'S')
  AND NOT pg_catalog.has_table_privilege(c.oid, 'SELECT')
ORDER BY 1
"""
SQL_TABLES = """
SELECT c.relname AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgmem' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
ORDER BY c.relname
"""
SQL_VERSIONS = """
SELECT current_setting('server_version') AS server_version,
       current_setting('server_version_num')::int AS server_version_num,
       (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vector') AS pgvector_version,
       current_database() AS database,
       pg_catalog.pg_encoding_to_char(d.encoding) AS encoding
FROM pg_catalog.pg_database d WHERE d.datname = current_database()
"""
SQL_MIGRATIONS = "SELECT migration_id FROM public._yoyo_migration ORDER BY applied_at_utc, migration_id"
SQL_HAS_YOYO = "SELECT to_regclass('public._yoyo_migration') IS NOT NULL AS present"
SQL_COLUMNS = """
SELECT c.relname || '.' || a.attname AS col
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgmem' AND c.relname IN ('memories', 'spaces') AND a.attnum > 0 AND NOT a.attisdropped
"""
# The probe: a memory that search finds now and later: currently valid and not expired, preferably one that
# never expires; among those the smallest (user_id, id). {expiry} and {validity} are filled from the
# constant fragments below only, chosen by the columns the schema has (validity and TTLs came with 0003).
SQL_PROBE = """
SELECT m.id, m.user_id, s.name AS space, m.content
FROM pgmem.memories m JOIN pgmem.spaces s USING (space_id)
WHERE {expiry} > now() {validity}
ORDER BY ({expiry} = 'infinity'::timestamptz) DESC, m.user_id, m.id
LIMIT 1
"""
EXPIRY_WITH_TTL = "coalesce(m.expires_at, m.created_at + s.memory_ttl, 'infinity'::timestamptz)"
EXPIRY_OWN = "coalesce(m.expires_at, 'infinity'::timestamptz)"
VALIDITY = {"memories.valid_to": " AND m.valid_to IS NULL", "memories.superseded_by": " AND m.superseded_by IS NULL",
            "memories.valid_from": " AND m.valid_from <= now()"}
# roles.sql: the roles pgmem needs, read from pg_roles and pg_auth_members, names quoted by the database
# (quote_ident, quote_literal); the statements are the constant templates below.
SQL_NEEDED_ROLES = """
SELECT r.rolname AS name, quote_ident(r.rolname) AS ident, quote_literal(r.rolname) AS lit, r.rolsuper AS superuser,
       concat_ws(' ', CASE WHEN r.rolcanlogin THEN 'LOGIN' ELSE 'NOLOGIN' END,
                      CASE WHEN r.rolinherit THEN 'INHERIT' ELSE 'NOINHERIT' END,
                      CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' ELSE 'NOBYPASSRLS' END,
                      CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
                      CASE WHEN r.rolcreatedb THEN 'CREATEDB' END) AS attributes
FROM pg_catalog.pg_roles r
WHERE starts_with(r.rolname, 'pgmem_')
   OR r.oid = (SELECT nspowner FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem')
   OR r.rolname IN (SELECT b.role_name FROM pgmem.role_bindings b)
   OR r.oid IN (SELECT m.member FROM pg_catalog.pg_auth_members m
                JOIN pg_catalog.pg_roles g ON g.oid = m.roleid WHERE starts_with(g.rolname, 'pgmem_'))
ORDER BY starts_with(r.rolname, 'pgmem_') DESC, r.rolname
"""
SQL_MEMBERSHIPS = """
SELECT quote_ident(g.rolname) AS role_ident, quote_literal(g.rolname) AS role_lit,
       quote_ident(u.rolname) AS member_ident, quote_literal(u.rolname) AS member_lit,
       bool_or(m.admin_option) AS admin
FROM pg_catalog.pg_auth_members m
JOIN pg_catalog.pg_roles g ON g.oid = m.roleid
JOIN pg_catalog.pg_roles u ON u.oid = m.member
WHERE starts_with(g.rolname, 'pgmem_') AND u.rolname = ANY (%(members)s) AND NOT u.rolsuper
GROUP BY g.rolname, u.rolname
ORDER BY g.rolname, u.rolname
"""
CREATE_ROLE = """DO $pgmem$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = {lit}) THEN
        CREATE ROLE {ident} {attributes};
    END IF;
END
$pgmem$;"""
GRANT_ROLE = """DO $pgmem$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_auth_members m
                   JOIN pg_catalog.pg_roles g ON g.oid = m.roleid JOIN pg_catalog.pg_roles u ON u.oid = m.member
                   WHERE g.rolname = {role_lit} AND u.rolname = {member_lit}) THEN
        GRANT {role_ident} TO {member_ident}{admin};
    END IF;
END
$pgmem$;"""
SQL_TARGET_TABLES = """
SELECT n.nspname || '.' || c.relname AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('pgmem', 'public') AND c.relkind IN ('r', 'p')
ORDER BY 1
"""


# --------------------------------------------------------------------------------------------------------
# Client programs
# --------------------------------------------------------------------------------------------------------
def _program_major(path: Path) -> int | None:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    return int(m.group(1)) if m else None


def find_program(name: str, *, bin_dir: str | os.PathLike | None = None, min_major: int | None = None) -> Path:
    """The client program ``name`` (``pg_dump`` or ``pg_restore``): from ``bin_dir`` when given, else the
    embedded server's, else ``PATH``; the first of major version >= ``min_major``.

    Raises PgmemError naming what was found and the hint ``--bin-dir``.
    """
    candidates: list[Path] = []
    if bin_dir is not None:
        candidates.append(Path(bin_dir) / name)
    else:
        try:
            from . import server

            candidates.append(server.bin_dir() / name)
        except Exception:  # the embedded server is optional
            pass
        found = shutil.which(name)
        if found:
            candidates.append(Path(found))
    tried = []
    for path in candidates:
        if not path.is_file():
            tried.append(f"{path} (missing)")
            continue
        major = _program_major(path)
        if major is None:
            tried.append(f"{path} (no version)")
        elif min_major is not None and major < min_major:
            tried.append(f"{path} (version {major})")
        else:
            return path
    need = f" of PostgreSQL {min_major} or newer" if min_major else ""
    raise PgmemError(f"no usable {name}{need} found" + (f"; tried {', '.join(tried)}" if tried else ""),
                     hint="pass --bin-dir with the directory of matching PostgreSQL client programs")


def _libpq_args(dsn: str) -> tuple[str, dict[str, str]]:
    """``dsn`` as a conninfo for ``--dbname`` without its password, and the environment carrying it."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise PgmemError(f"not a valid DSN: {exc}") from None
    env = dict(os.environ)
    password = params.pop("password", None)
    if password:
        env["PGPASSWORD"] = str(password)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}), env


def _run_program(args: list[str], env: dict[str, str], what: str) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        detail = " / ".join(lines[-4:]) or f"exit code {proc.returncode}"
        raise PgmemError(f"{what} failed: {detail}")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _connect(dsn: str, **kw: Any) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, connect_timeout=10, row_factory=dict_row, **kw)
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"could not connect to {dsn.split('@')[-1]}: {exc}") from exc


# --------------------------------------------------------------------------------------------------------
# Reading a database
# --------------------------------------------------------------------------------------------------------
def table_counts(conn: psycopg.Connection) -> dict[str, int]:
    """Exact row counts of every table in schema pgmem (partitions counted in their parent), keyed
    ``pgmem.<table>``. Counts every row only for a role that bypasses row-level security."""
    out: dict[str, int] = {}
    for row in conn.execute(SQL_TABLES).fetchall():
        q = sql.SQL("SELECT count(*) AS n FROM {}.{}").format(sql.Identifier("pgmem"), sql.Identifier(row["name"]))
        out[f"pgmem.{row['name']}"] = conn.execute(q).fetchone()["n"]
    return out


def _applied_ids(conn: psycopg.Connection) -> list[str]:
    if not conn.execute(SQL_HAS_YOYO).fetchone()["present"]:
        return []
    return [r["migration_id"] for r in conn.execute(SQL_MIGRATIONS).fetchall()]


def _probe(conn: psycopg.Connection) -> dict | None:
    columns = {r["col"] for r in conn.execute(SQL_COLUMNS).fetchall()}
    expiry = EXPIRY_WITH_TTL if "spaces.memory_ttl" in columns else EXPIRY_OWN
    validity = "".join(frag for col, frag in VALIDITY.items() if col in columns)
    row = conn.execute(SQL_PROBE.format(expiry=expiry, validity=validity)).fetchone()
    if row is None:
        return None
    return {"id": str(row["id"]), "user_id": row["user_id"], "space": row["space"],
            "content_sha256": hashlib.sha256(row["content"].encode("utf-8")).hexdigest()}


def roles_script(conn: psycopg.Connection) -> tuple[str, list[str]]:
    """The text of ``roles.sql`` for the database of ``conn``, and the names of its roles: idempotent DO
    blocks creating each role pgmem needs when it is missing (no password; LOGIN, INHERIT, BYPASSRLS,
    CREATEROLE, CREATEDB as in the source, never SUPERUSER) and granting its memberships in ``pgmem_*``
    roles. The roles: ``pgmem_*``, the schema owner, the logins in ``pgmem.role_bindings`` and every other
    member of a ``pgmem_*`` role. Needs read access to ``pgmem.role_bindings``."""
    with conn.cursor(row_factory=dict_row) as cur:
        roles = cur.execute(SQL_NEEDED_ROLES).fetchall()
        grants = cur.execute(SQL_MEMBERSHIPS, {"members": [r["name"] for r in roles]}).fetchall()
    parts = [("-- pgmem roles: run as a role with CREATEROLE (a superuser for BYPASSRLS roles) before pg_restore.\n"
              "-- Idempotent: existing roles and memberships are left as they are.\n"
              "-- No passwords are stored: set them with ALTER ROLE name PASSWORD '...' (a DBA's job).")]
    for r in roles:
        note = (f"-- {r['ident']} is a superuser in the source cluster; it is recreated without SUPERUSER.\n"
                if r["superuser"] else "")
        parts.append(note + CREATE_ROLE.format(lit=r["lit"], ident=r["ident"], attributes=r["attributes"]))
    for g in grants:
        admin = " WITH ADMIN OPTION" if g["admin"] else ""
        parts.append(GRANT_ROLE.format(role_lit=g["role_lit"], member_lit=g["member_lit"], role_ident=g["role_ident"],
                                       member_ident=g["member_ident"], admin=admin))
    return "\n\n".join(parts) + "\n", [r["name"] for r in roles]


def _check_backup_role(conn: psycopg.Connection) -> None:
    row = conn.execute(SQL_PRIVILEGE).fetchone()
    if not (row["superuser"] or row["bypassrls"]):
        raise IdentityError(
            f"role {row['role']!r} cannot back up pgmem: row-level security hides other users' rows from it",
            hint="run the backup as a superuser or as a role with BYPASSRLS that can read every table "
                 "(e.g. the schema owner after ALTER ROLE ... BYPASSRLS)")
    unreadable = [r["name"] for r in conn.execute(SQL_UNREADABLE).fetchall()]
    if unreadable:
        raise PermissionDenied(f"role {row['role']!r} may not read {', '.join(unreadable[:5])}",
                               hint="run the backup as a superuser or as the schema owner")
    if conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'").fetchone() is None:
        raise SchemaError("this database has no pgmem schema: nothing to back up", hint="check --dsn")


# --------------------------------------------------------------------------------------------------------
# Backup
# --------------------------------------------------------------------------------------------------------
def backup(dsn: str, path: str | os.PathLike, *, bin_dir: str | os.PathLike | None = None) -> BackupResult:
    """Back up the whole database at ``dsn`` into the directory ``path`` (created; it must not exist or be
    empty): ``db.dump``, ``roles.sql``, ``manifest.json`` (see the module docstring).

    The row counts of the manifest and the dump come from one exported snapshot, so they agree exactly even
    while agents write. Needs a superuser or a role with BYPASSRLS that can read every table.

    Raises IdentityError (the role cannot read every row), PermissionDenied, SchemaError (no pgmem schema),
    DatabaseUnavailable, and PgmemError when pg_dump fails or no suitable pg_dump is found; a failed backup
    removes the directory it created.
    """
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PgmemError(f"{out} exists and is not an empty directory", hint="give a new directory for the backup")
    conninfo, env = _libpq_args(dsn)
    created = not out.exists()
    try:
        return _backup(dsn, out, conninfo, env, bin_dir)
    except BaseException:
        if created:  # a failed backup leaves no directory that could be mistaken for one
            shutil.rmtree(out, ignore_errors=True)
        raise


def _backup(dsn: str, out: Path, conninfo: str, env: dict[str, str], bin_dir: Any) -> BackupResult:
    from . import __version__

    with _connect(dsn) as conn:
        try:
            _check_backup_role(conn)
            versions = conn.execute(SQL_VERSIONS).fetchone()
            pg_dump = find_program("pg_dump", bin_dir=bin_dir, min_major=versions["server_version_num"] // 10000)
            conn.commit()
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            with conn.transaction():
                snapshot = conn.execute("SELECT pg_catalog.pg_export_snapshot() AS s").fetchone()["s"]
                counts = table_counts(conn)
                applied = _applied_ids(conn)
                probe = _probe(conn)
                roles, role_names = roles_script(conn)
                out.mkdir(parents=True, exist_ok=True)
                _run_program([str(pg_dump), "--no-password", "--format=custom", f"--snapshot={snapshot}",
                              f"--file={out / DUMP_FILE}", f"--dbname={conninfo}"], env, "pg_dump")
        except psycopg.Error as exc:
            raise from_psycopg(exc) from exc
    (out / ROLES_FILE).write_text(roles, encoding="utf-8")
    manifest = {
        "format": FORMAT,
        "pgmem_version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "database": versions["database"],
        "encoding": versions["encoding"],
        "server_version": versions["server_version"],
        "server_version_num": versions["server_version_num"],
        "pgvector_version": versions["pgvector_version"],
        "pg_dump_major": _program_major(pg_dump),
        "migrations": applied,
        "tables": counts,
        "probe": probe,
        "roles": role_names,
        "files": {name: {"sha256": _sha256_file(out / name), "bytes": (out / name).stat().st_size}
                  for name in (DUMP_FILE, ROLES_FILE)},
    }
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return BackupResult(out, manifest)


def read_manifest(path: str | os.PathLike, *, check_files: bool = True) -> dict:
    """The manifest of the backup directory ``path``; with ``check_files`` the SHA-256 of ``db.dump`` and
    ``roles.sql`` are checked too. Raises PgmemError when the backup is incomplete or damaged."""
    p = Path(path)
    try:
        manifest = json.loads((p / MANIFEST_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PgmemError(f"{p} is not a pgmem backup: {MANIFEST_FILE} is missing",
                         hint="a backup that stopped before its manifest was written is incomplete") from None
    except json.JSONDecodeError as exc:
        raise PgmemError(f"{p / MANIFEST_FILE} is not valid JSON: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise PgmemError(f"unknown backup format {manifest.get('format')!r} in {p}",
                         hint="restore it with the pgmem version that wrote it")
    if check_files:
        for name, meta in manifest["files"].items():
            f = p / name
            if not f.is_file():
                raise PgmemError(f"the backup in {p} lacks {name}")
            if _sha256_file(f) != meta["sha256"]:
                raise PgmemError(f"{f} does not match the SHA-256 in the manifest: the backup is damaged")
    return manifest


# --------------------------------------------------------------------------------------------------------
# Restore
# --------------------------------------------------------------------------------------------------------
def _prepare_target(dsn: str) -> tuple[str, bool, bool]:
    """Make sure the target database exists and is empty: (name, created, has_vector_extension)."""
    params = conninfo_to_dict(dsn)
    dbname = params.get("dbname")
    if not dbname:
        raise PgmemError("the restore target DSN names no database",
                         hint="e.g. postgresql://postgres@host/pgmem_restored")
    created = False
    try:
        conn = psycopg.connect(dsn, connect_timeout=10, autocommit=True, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            raise DatabaseUnavailable(f"could not connect to {dsn.split('@')[-1]}: {exc}") from exc
        maintenance = make_conninfo(dsn, dbname="postgres")
        with _connect(maintenance, autocommit=True) as admin:
            try:
                admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(dbname)))
            except psycopg.Error as exc2:
                err = from_psycopg(exc2)
                raise type(err)(f"could not create database {dbname!r}: {err.message}",
                                hint="create it (empty) first, or restore as a role with CREATEDB") from exc2
        created = True
        conn = _connect(dsn, autocommit=True)
    with conn:
        tables = [r["name"] for r in conn.execute(SQL_TARGET_TABLES).fetchall()]
        schema = conn.execute("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pgmem'").fetchone()
        if tables or schema:
            what = ", ".join(tables[:5]) if tables else "schema pgmem"
            if len(tables) > 5:
                what += f", and {len(tables) - 5} more"
            raise PgmemError(f"database {dbname!r} is not empty ({what}): restore goes into a new or empty database",
                             hint="give a new database name in --dsn; pgmem restore creates it")
        has_vector = conn.execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'vector'").fetchone()
    return dbname, created, has_vector is not None


def restore(path: str | os.PathLike, dsn: str, *, bin_dir: str | os.PathLike | None = None,
            no_owner: bool = False) -> RestoreResult:
    """Restore the backup directory ``path`` into the database at ``dsn`` and verify it.

    The database is created (from ``template0``, through the maintenance database ``postgres`` of the same
    server) when it does not exist; an existing one must have no table in schema ``pgmem`` or ``public``.
    Then ``roles.sql`` is applied, ``pg_restore --single-transaction --exit-on-error`` loads ``db.dump``
    (``no_owner``: objects owned by the restoring role instead of the original owner), and :func:`verify`
    runs. Run it as a superuser (the vector extension and BYPASSRLS roles need one).

    Returns a RestoreResult; raises VerificationFailed (with ``checks``) when a check fails, PgmemError when
    the backup is damaged, the target is not empty, or roles.sql or pg_restore fail.
    """
    src = Path(path)
    manifest = read_manifest(src)
    dbname, created, has_vector = _prepare_target(dsn)
    roles = (src / ROLES_FILE).read_text(encoding="utf-8")
    with _connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(roles)
        except psycopg.Error as exc:
            err = from_psycopg(exc)
            raise type(err)(f"applying {src / ROLES_FILE} failed: {err.message}",
                            hint="restore as a role with CREATEROLE (a superuser for BYPASSRLS roles), or have a "
                                 "DBA run roles.sql first") from exc
        server_major = conn.execute("SELECT current_setting('server_version_num')::int / 10000 AS m").fetchone()["m"]
    pg_restore = find_program("pg_restore", bin_dir=bin_dir,
                              min_major=max(server_major, manifest.get("pg_dump_major") or 0))
    conninfo, env = _libpq_args(dsn)
    args = [str(pg_restore), "--no-password", "--exit-on-error", "--single-transaction", f"--dbname={conninfo}"]
    if no_owner:
        args.append("--no-owner")
    list_file = None
    if has_vector:  # a DBA created the extension already: skip pg_dump's CREATE and COMMENT of it
        listing = subprocess.run([str(pg_restore), "--list", str(src / DUMP_FILE)], capture_output=True, text=True,
                                 env=env)
        if listing.returncode != 0:
            raise PgmemError(f"pg_restore --list failed: {listing.stderr.strip()}")
        keep = [ln for ln in listing.stdout.splitlines()
                if not re.search(r"\b(EXTENSION - vector|COMMENT - EXTENSION vector)\b", ln)]
        list_file = src / f".restore-list-{os.getpid()}"
        list_file.write_text("\n".join(keep) + "\n", encoding="utf-8")
        args.append(f"--use-list={list_file}")
    try:
        _run_program(args + [str(src / DUMP_FILE)], env, "pg_restore")
    finally:
        if list_file is not None:
            list_file.unlink(missing_ok=True)
    _rekey_bindings(dsn)
    checks = verify(src, dsn, manifest=manifest)
    failed = [c for c in checks if not c.ok]
    if failed:
        raise VerificationFailed("the restored database failed verification: "
                                 + "; ".join(f"{c.name}: {c.detail}" for c in failed), checks=checks)
    return RestoreResult(dbname, created, checks)


def _rekey_bindings(dsn: str) -> None:
    """Since migration 0007 a binding names its role by OID, and the roles of this cluster were created by
    the restore with OIDs of their own: bind each restored binding's role name again (``pgmem.bind_role``),
    so a bound login acts as its user here too. A binding whose role does not exist here is left unbound."""
    with _connect(dsn, autocommit=True) as conn:
        has_oid = conn.execute("SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = 'pgmem.role_bindings'::regclass"
                               " AND attname = 'role_oid' AND NOT attisdropped").fetchone()
        if has_oid is None:
            return
        with conn.transaction():
            stale = conn.execute("SELECT b.role_name, b.user_id FROM pgmem.role_bindings b"
                                 " WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r"
                                 " WHERE r.oid = b.role_oid AND r.rolname = b.role_name)").fetchall()
            for row in stale:
                conn.execute("DELETE FROM pgmem.role_bindings WHERE role_name = %s", [row["role_name"]])
                if conn.execute("SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = %s", [row["role_name"]]).fetchone():
                    conn.execute("SELECT pgmem.bind_role(p_role => %s, p_user_id => %s)", [row["role_name"], row["user_id"]])


# --------------------------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------------------------
def verify(path: str | os.PathLike, dsn: str, *, manifest: dict | None = None) -> list[Check]:
    """Compare the database at ``dsn`` with the backup in ``path`` and return three checks (never raises for
    a mismatch; raises DatabaseUnavailable when it cannot connect):

    - ``migrations``: no migration of this pgmem is pending, and every migration of the backup is applied;
    - ``row counts``: the exact count of every table in schema pgmem equals the manifest's (needs a role that
      bypasses row-level security, as restore runs);
    - ``probe``: acting as the probe memory's user (``pgmem.act_as``, so a superuser or a pgmem_gateway
      member), its own embedding searched in its space with k=10 returns it, and its content's SHA-256 is
      the manifest's.
    """
    from pgvector.psycopg import register_vector

    from .doctor import migration_state, named

    manifest = manifest or read_manifest(path, check_files=False)
    checks: list[Check] = []
    with _connect(dsn, autocommit=True) as conn:
        try:
            _, todo = migration_state(conn)
            applied = _applied_ids(conn)
        except PgmemError as exc:
            checks.append(Check("migrations", False, f"cannot read the migration state: {exc.message}"))
        else:
            missing = [m for m in manifest["migrations"] if m not in applied]
            problems = ([f"pending: {', '.join(todo)} (pgmem migrate)"] if todo else []) + \
                ([f"applied in the backup but not here: {', '.join(missing)}"] if missing else [])
            checks.append(Check("migrations", not problems,
                                "; ".join(problems) if problems else f"{len(applied)} applied, none pending"))

    with _connect(dsn, autocommit=True) as conn:
        counts = table_counts(conn)
        expected = manifest["tables"]
        diffs = [f"{t}: {expected.get(t, 'absent')} in the backup, {counts.get(t, 'absent')} restored"
                 for t in sorted(set(expected) | set(counts)) if expected.get(t) != counts.get(t)]
        total = sum(counts.values())
        checks.append(Check("row counts", not diffs, "; ".join(diffs) if diffs else
                            f"{len(counts)} tables, {total} rows, equal to the manifest"))

        probe = manifest.get("probe")
        if probe is None:
            checks.append(Check("probe", True, "the backup holds no memory to search for"))
            return checks
        try:
            register_vector(conn)
            with conn.transaction(force_rollback=True):
                conn.execute(*named("act_as", user_id=probe["user_id"]))
                row = conn.execute("SELECT embedding, content FROM pgmem.memories WHERE user_id = %s AND id = %s",
                                   (probe["user_id"], probe["id"])).fetchone()
                if row is None:
                    checks.append(Check("probe", False,
                                        f"memory {probe['id']} of user {probe['user_id']!r} is missing"))
                    return checks
                hits = conn.execute(*named("search", space=probe["space"], embedding=row["embedding"],
                                           k=PROBE_K)).fetchall()
        except psycopg.Error as exc:
            checks.append(Check("probe", False, f"search failed: {from_psycopg(exc).message}"))
            return checks
        found = any(str(h["id"]) == probe["id"] for h in hits)
        same = hashlib.sha256(row["content"].encode("utf-8")).hexdigest() == probe["content_sha256"]
        problems = ([] if found else [f"not among the {len(hits)} hits of its own embedding"]) + \
            ([] if same else ["its content's SHA-256 differs from the manifest's"])
        checks.append(Check("probe", not problems,
                            "; ".join(problems) if problems else
                            f"memory {probe['id'][:8]} of user {probe['user_id']!r} found by search in space "
                            f"{probe['space']!r}, content hash equal"))
    return checks


__all__ = ["backup", "restore", "verify", "read_manifest", "roles_script", "table_counts", "find_program",
           "BackupResult", "RestoreResult", "VerificationFailed", "INFRASTRUCTURE"]
